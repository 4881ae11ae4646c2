//! Forward-only schema migrations keyed on `PRAGMA user_version`. A new database gets
//! `schema.sql`, the current schema, whole; a database of an earlier version runs the upgrade
//! scripts from its version on. Upgrades are appended and never edited once released.

use rusqlite::Connection;

use crate::store::Result;

/// The current schema, for a new database.
const SCHEMA: &str = include_str!("../../../schema.sql");

/// Entry `i` brings a database from version `i + 1` to `i + 2`.
const UPGRADES: &[&str] = &[
    include_str!("upgrades/2-events-per-request.sql"),
    include_str!("upgrades/3-list-counters.sql"),
    include_str!("upgrades/4-event-purges.sql"),
    include_str!("upgrades/5-list-changes.sql"),
    include_str!("upgrades/6-commit-tokens.sql"),
    include_str!("upgrades/7-list-check-sums.sql"),
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = UPGRADES.len() as i64 + 1;

/// Applies the missing migrations in one transaction; refuses a database from a newer binary.
pub fn migrate(conn: &mut Connection) -> Result<()> {
    let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if !crate::store::behind(found, SCHEMA_VERSION)? {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
    // Re-read under the lock: another process may have migrated meanwhile.
    let found: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found <= 0 {
        tx.execute_batch(SCHEMA)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        log::info!("database created with schema version {SCHEMA_VERSION}");
    } else {
        for (i, sql) in UPGRADES.iter().enumerate().skip(found as usize - 1) {
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", i as i64 + 2)?;
            log::info!("database upgraded to schema version {}", i + 2);
        }
    }
    tx.commit()?;
    Ok(())
}

/// A migrated in-memory database with foreign keys on, for unit tests.
#[cfg(test)]
pub(crate) fn memory_db() -> Connection {
    let mut c = Connection::open_in_memory().expect("in-memory database");
    c.execute_batch("PRAGMA foreign_keys = ON")
        .expect("foreign keys");
    migrate(&mut c).expect("migration");
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn fresh_database_reaches_current_version_and_is_idempotent() {
        let mut c = Connection::open_in_memory().unwrap();
        migrate(&mut c).unwrap();
        migrate(&mut c).unwrap();
        assert_eq!(user_version(&c), SCHEMA_VERSION);
        let roles: i64 = c
            .query_row("SELECT count(*) FROM roles", [], |r| r.get(0))
            .unwrap();
        assert_eq!(roles, 6);
    }

    #[test]
    fn newer_database_is_refused() {
        let mut c = Connection::open_in_memory().unwrap();
        c.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        match migrate(&mut c) {
            Err(StoreError::NewerSchema { found, supported }) => {
                assert_eq!(found, SCHEMA_VERSION + 1);
                assert_eq!(supported, SCHEMA_VERSION);
            }
            other => panic!("expected NewerSchema, got {other:?}"),
        }
    }

    /// Every table's columns, indexes, foreign keys and whether it is AUTOINCREMENT, and the
    /// triggers: two databases of the same schema give the same list, however their CREATE
    /// statements were worded.
    fn shape(c: &Connection) -> Vec<String> {
        let strings = |sql: &str, arg: &str| -> Vec<String> {
            let mut st = c.prepare(sql).unwrap();
            let n = st.column_count();
            st.query_map([arg], |r| {
                (0..n)
                    .map(|i| {
                        r.get::<_, rusqlite::types::Value>(i)
                            .map(|v| format!("{v:?}"))
                    })
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map(|v| v.join(" "))
            })
            .unwrap()
            .collect::<rusqlite::Result<Vec<_>>>()
            .unwrap()
        };
        let names = |sql: &str, arg: &str| -> Vec<String> {
            c.prepare(sql)
                .unwrap()
                .query_map([arg], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        let mut out = Vec::new();
        let tables = names(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name != ?1 ORDER BY name",
            "",
        );
        for t in &tables {
            for sql in [
                "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)",
                "SELECT name, \"unique\", origin, partial FROM pragma_index_list(?1) ORDER BY name",
                "SELECT \"table\", \"from\", \"to\", on_delete FROM pragma_foreign_key_list(?1)",
            ] {
                out.extend(strings(sql, t).into_iter().map(|row| format!("{t}: {row}")));
            }
            let autoincrement = names(
                "SELECT CASE WHEN instr(upper(sql), 'AUTOINCREMENT') > 0 THEN 'yes' ELSE 'no' END
                 FROM sqlite_master WHERE name = ?1",
                t,
            );
            out.push(format!("{t}: autoincrement {}", autoincrement.join("")));
            let indexes = names(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1 ORDER BY name",
                t,
            );
            for i in &indexes {
                out.extend(
                    strings("SELECT seqno, name FROM pragma_index_info(?1)", i)
                        .into_iter()
                        .map(|row| format!("{t}/{i}: {row}")),
                );
            }
        }
        out.extend(names(
            "SELECT name || ' on ' || tbl_name FROM sqlite_master WHERE type = 'trigger' AND name != ?1
             ORDER BY name",
            "",
        ));
        out
    }

    /// The shape of a new database.
    fn new_shape() -> Vec<String> {
        let mut fresh = Connection::open_in_memory().unwrap();
        migrate(&mut fresh).unwrap();
        shape(&fresh)
    }

    fn user_version(c: &Connection) -> i64 {
        c.query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    }

    /// An in-memory database of an earlier `version`, made by that version's whole `schema`.
    fn database_of_version(version: i64, schema: &str) -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("PRAGMA foreign_keys = ON").unwrap();
        c.execute_batch(schema).unwrap();
        c.pragma_update(None, "user_version", version).unwrap();
        c
    }

    #[test]
    fn version_1_database_is_upgraded_with_its_events() {
        let mut c = database_of_version(1, include_str!("upgrades/schema-1.sql"));
        c.execute_batch(
            r#"INSERT INTO organizations (id, name, created_at, modified_at) VALUES (7, 'o', 0, 0);
               INSERT INTO event_batches (id, organization_id, uuid, received_at)
                   VALUES (1, 7, 'u1', 100), (2, 7, 'u2', 200);
               INSERT INTO events (batch_id, idx, domain, listed, body) VALUES
                   (1, 1, 'b.example', 0, '{"dstDomain":"b.example"}'),
                   (1, 0, 'a.example', 1, '{"dstDomain":"a.example","x":[1,"é"]}'),
                   (2, 0, 'c.example', 1, '{"dstDomain":"c.example"}');"#,
        )
        .unwrap();

        migrate(&mut c).unwrap();

        assert_eq!(user_version(&c), SCHEMA_VERSION);
        let rows: Vec<(i64, String, i64, i64, String, String, String)> = c
            .prepare(
                "SELECT id, uuid, received_at, event_count, domains, listed, events
                 FROM event_batches ORDER BY id",
            )
            .unwrap()
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            rows,
            vec![
                (
                    1,
                    "u1".into(),
                    100,
                    2,
                    r#"["a.example","b.example"]"#.into(),
                    "[1,0]".into(),
                    r#"[{"dstDomain":"a.example","x":[1,"é"]},{"dstDomain":"b.example"}]"#.into()
                ),
                (
                    2,
                    "u2".into(),
                    200,
                    1,
                    r#"["c.example"]"#.into(),
                    "[1]".into(),
                    r#"[{"dstDomain":"c.example"}]"#.into()
                ),
            ]
        );
        assert_eq!(super::super::domains::event_count(&c, 7).unwrap(), 3);
        let fk: i64 = c
            .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(fk, 0);

        // The upgraded database has exactly the schema of a new one.
        let (upgraded, new) = (shape(&c), new_shape());
        assert!(new.iter().any(|l| l.starts_with("event_batches: ")));
        assert!(!new.iter().any(|l| l.starts_with("event_batches/")));
        assert!(new
            .iter()
            .any(|l| l == "organizations_event_purges on organizations"));
        assert!(new.iter().any(|l| l == "domains_id_floor on domains"));
        assert!(new.iter().any(|l| l == "sites: autoincrement yes"));
        assert_eq!(upgraded, new);
    }

    /// Version 2 -> 3: the list keeps its entries, ids, positions and counts (the last block's
    /// count included, which the new writer then treats as closed), AUTOINCREMENT's counter
    /// becomes the id floor, and the list works on: pages, new names, deletions.
    #[test]
    fn version_2_database_is_upgraded_with_its_list() {
        let mut c = database_of_version(2, include_str!("upgrades/schema-2.sql"));
        // Entries at positions 1..=1500 with ids 1..=1500, of which id 1500 (the last) was
        // deleted: AUTOINCREMENT's counter says 1500, the table's highest id is 1499.
        c.execute_batch(
            "INSERT INTO organizations (id, name, created_at, modified_at, domain_seq)
                 VALUES (7, 'o', 0, 0, 1500);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1500)
             INSERT INTO domains (id, organization_id, name, seq, created_at, last_seen_at)
                 SELECT i, 7, 'd' || i || '.example', i, 5, 5 FROM n;
             DELETE FROM domains WHERE id = 1500;
             INSERT INTO domain_buckets VALUES (7, 0, 1023), (7, 1, 476);
             INSERT INTO domain_superbuckets VALUES (7, 0, 1499);",
        )
        .unwrap();

        migrate(&mut c).unwrap();

        assert_eq!(user_version(&c), SCHEMA_VERSION);
        let one = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(one("SELECT floor FROM domain_id_floor"), 1500);
        assert_eq!(
            one("SELECT count(*) FROM domains WHERE id = seq AND last_seen_at = 5"),
            1499
        );
        let counts: String = c
            .query_row(
                "SELECT group_concat(level || ':' || block || ':' || count, ' ')
                 FROM (SELECT * FROM domain_counts ORDER BY level, block)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(counts, "0:0:1499 1:0:1023 1:1:476");
        let (page, more) = super::super::domains::list_page(&c, 7, 8, 200).unwrap();
        assert_eq!(page.first().map(|e| e.id), Some(1401));
        assert_eq!(page.len(), 99);
        assert!(!more);

        let batch = crate::store::PreparedBatch::new(
            vec![crate::store::PreparedEvent {
                domain: "new.example".into(),
                listed: true,
            }],
            "[{}]".into(),
        );
        let mut cache = super::super::WriterCache::new();
        super::super::domains::ingest(
            &c,
            &mut cache,
            &mut super::super::Statements::new(&c),
            7,
            "u",
            9,
            &batch,
        )
        .unwrap();
        let (id, seq): (i64, i64) = c
            .query_row(
                "SELECT id, seq FROM domains WHERE name = 'new.example'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(id, 1501, "above the deleted 1500");
        assert!(seq > 1499);
        let (page, _) = super::super::domains::list_page(&c, 7, 8, 200).unwrap();
        assert_eq!(page.last().map(|e| e.id), Some(1501));
        assert!(super::super::domains::delete_by_id(&c, 7, 3).unwrap());
        let (page, _) = super::super::domains::list_page(&c, 7, 1, 200).unwrap();
        assert_eq!(page[2].id, 4);

        assert_eq!(shape(&c), new_shape());
    }

    /// Version 3 -> 4: the stored requests keep their ids and contents, lose the index and the
    /// foreign key, and a deleted organization's requests wait for the purge (a cascade from
    /// the service provider included) instead of going with it.
    #[test]
    fn version_3_database_is_upgraded_with_its_events() {
        let mut c = database_of_version(3, include_str!("upgrades/schema-3.sql"));
        c.execute_batch(
            "INSERT INTO service_providers (id, name, package_id, seats_total, created_at)
                 VALUES (1, 'sp', 1, 10, 0);
             INSERT INTO organizations (id, name, service_provider_id, created_at, modified_at)
                 VALUES (7, 'o7', 1, 0, 0), (9, 'o9', NULL, 0, 0);
             INSERT INTO event_batches
                 (id, organization_id, uuid, received_at, event_count, domains, listed, events)
             VALUES (3, 9, 'a', 1, 1, '[\"a.example\"]', '[1]', '[{}]'),
                    (4, 7, 'b', 2, 2, '[\"b.example\",\"c.example\"]', '[1,0]', '[{},{}]'),
                    (8, 9, 'c', 3, 1, '[\"d.example\"]', '[0]', '[{}]');",
        )
        .unwrap();

        migrate(&mut c).unwrap();

        assert_eq!(user_version(&c), SCHEMA_VERSION);
        let rows = |c: &Connection| -> Vec<(i64, i64, String, i64, String)> {
            c.prepare(
                "SELECT id, organization_id, uuid, event_count, domains FROM event_batches
                 ORDER BY id",
            )
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
        };
        assert_eq!(
            rows(&c),
            vec![
                (3, 9, "a".into(), 1, r#"["a.example"]"#.into()),
                (4, 7, "b".into(), 2, r#"["b.example","c.example"]"#.into()),
                (8, 9, "c".into(), 1, r#"["d.example"]"#.into()),
            ]
        );
        let (upgraded, new) = (shape(&c), new_shape());
        assert!(!new.iter().any(|l| l.starts_with("event_batches/")));
        assert!(!new
            .iter()
            .any(|l| l.starts_with("event_batches: ") && l.contains("organizations")));
        assert_eq!(upgraded, new);

        // The service provider's cascade deletes organization 7; its request waits for the
        // purge, which then deletes it and nothing else.
        c.execute("DELETE FROM service_providers WHERE id = 1", [])
            .unwrap();
        assert_eq!(super::super::domains::event_count(&c, 7).unwrap(), 2);
        let step = super::super::purge::step(&c, 100).unwrap().unwrap();
        assert_eq!((step.organization_id, step.deleted), (7, 1));
        assert!(step.finished);
        assert_eq!(super::super::purge::step(&c, 100).unwrap(), None);
        assert_eq!(rows(&c).iter().map(|r| r.0).collect::<Vec<_>>(), vec![3, 8]);
    }

    /// A version 4 database gets the list-change records, and an organization deleted from then
    /// on is recorded for the exporter.
    #[test]
    fn version_4_database_is_upgraded_with_list_changes() {
        let mut c = database_of_version(4, include_str!("upgrades/schema-4.sql"));
        c.execute_batch(
            "INSERT INTO organizations (id, name, created_at, modified_at) VALUES (7, 'o7', 0, 0);",
        )
        .unwrap();
        migrate(&mut c).unwrap();
        assert_eq!(user_version(&c), SCHEMA_VERSION);
        assert_eq!(shape(&c), new_shape());
        c.execute("DELETE FROM organizations WHERE id = 7", [])
            .unwrap();
        let changed: i64 = c
            .query_row("SELECT organization_id FROM list_changes", [], |r| r.get(0))
            .unwrap();
        assert_eq!(changed, 7);
    }

    /// Version 6 -> 7: the paging counts get their blocks' residue sums, level 1 from the entries
    /// and level 0 from the level-1 rows, so that the list's length and check summed from the
    /// blocks are those of its live entries.
    #[test]
    fn version_6_counts_get_the_sums_of_their_blocks() {
        let mut c = database_of_version(4, include_str!("upgrades/schema-4.sql"));
        // Positions 1..=2600 (ids the same), some removed: blocks 0 and 1 of 1024 closed and
        // counted, block 2 open.
        c.execute_batch(
            "INSERT INTO organizations (id, name, created_at, modified_at) VALUES (7, 'o', 0, 0);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2600)
             INSERT INTO domains (id, organization_id, name, seq, created_at, last_seen_at)
                 SELECT i, 7, 'd' || i || '.example', i, 5, 5 FROM n;
             DELETE FROM domains WHERE id IN (10, 1500, 2590);
             INSERT INTO domain_counts VALUES (7, 1, 0, 1022), (7, 1, 1, 1023), (7, 0, 0, 2045);",
        )
        .unwrap();
        migrate(&mut c).unwrap();
        assert_eq!(user_version(&c), SCHEMA_VERSION);
        assert_eq!(shape(&c), new_shape());
        let live = (1..=2600i64).filter(|i| ![10, 1500, 2590].contains(i));
        let (x, square) = live.fold((0i64, 0i64), |(x, q), id| {
            let (a, b) = crate::store::entry_residues(id);
            (x + a, q + b)
        });
        assert_eq!(
            super::super::domains::list_totals(&c, 7).unwrap(),
            (2597, x, square)
        );
        // The level-0 row sums its level-1 rows.
        let sums = |level: i64| -> (i64, i64) {
            c.query_row(
                "SELECT sum(residue_sum), sum(square_sum) FROM domain_counts WHERE level = ?1",
                [level],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
        };
        assert_eq!(sums(0), sums(1));
        assert_ne!(sums(0), (0, 0));
    }
}
