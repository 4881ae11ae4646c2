//! The background deletion of deleted organizations' stored requests. A deleted organization is
//! recorded in `event_purges` by a trigger (schema.sql: `event_batches` has no index on its
//! organization, which would be written with every request); each step here deletes its rows
//! within one range of request ids, in a write transaction of its own, so that deleting a large
//! customer never holds the writer for long.

use rusqlite::{params, Connection, OptionalExtension};

use crate::store::model::*;
use crate::store::Result;

/// Request ids one step looks at: a few milliseconds of the writer's time.
pub const STEP_IDS: i64 = 4096;

/// Whether a deleted organization's requests are still waiting to be deleted.
pub fn pending(conn: &Connection) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM event_purges LIMIT 1")?
        .query_row([], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Deletes the requests of the first pending organization within its next `ids` request ids.
/// `None` when no purge is pending. Runs inside the caller's write transaction.
pub fn step(conn: &Connection, ids: i64) -> Result<Option<PurgeStep>> {
    let next: Option<(i64, i64, i64)> = conn
        .prepare_cached(
            "SELECT organization_id, up_to, done FROM event_purges
             ORDER BY organization_id LIMIT 1",
        )?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((org, up_to, done)) = next else {
        return Ok(None);
    };
    let to = done.saturating_add(ids.max(1)).min(up_to);
    let deleted = conn
        .prepare_cached(
            "DELETE FROM event_batches WHERE id > ?1 AND id <= ?2 AND organization_id = ?3",
        )?
        .execute(params![done, to, org])?;
    let finished = to >= up_to;
    if finished {
        conn.prepare_cached("DELETE FROM event_purges WHERE organization_id = ?1")?
            .execute(params![org])?;
    } else {
        conn.prepare_cached("UPDATE event_purges SET done = ?2 WHERE organization_id = ?1")?
            .execute(params![org, to])?;
    }
    Ok(Some(PurgeStep {
        organization_id: org,
        deleted,
        finished,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::migrate::memory_db;

    fn org(c: &Connection, name: &str) -> i64 {
        c.execute(
            "INSERT INTO organizations (name, created_at, modified_at) VALUES (?1, 0, 0)",
            [name],
        )
        .unwrap();
        c.last_insert_rowid()
    }

    fn request(c: &Connection, org: i64) {
        c.execute(
            "INSERT INTO event_batches
                 (organization_id, uuid, received_at, event_count, domains, listed, events)
             VALUES (?1, 'u', 0, 1, '[\"a.example\"]', '[1]', '[{}]')",
            [org],
        )
        .unwrap();
    }

    fn requests_of(c: &Connection, org: i64) -> i64 {
        c.query_row(
            "SELECT count(*) FROM event_batches WHERE organization_id = ?1",
            [org],
            |r| r.get(0),
        )
        .unwrap()
    }

    /// A deleted organization's requests go, a range at a time, and only its; requests stored
    /// after it went are not looked at; the record goes with its last range.
    #[test]
    fn deletes_a_deleted_organizations_requests_in_ranges() {
        let c = memory_db();
        let (a, b, gone) = (org(&c, "a"), org(&c, "b"), org(&c, "gone"));
        for i in 0..25 {
            request(&c, [a, gone, b, gone][i % 4]);
        }
        assert!(!pending(&c).unwrap());
        assert_eq!(step(&c, 10).unwrap(), None);

        c.execute("DELETE FROM organizations WHERE id = ?1", [gone])
            .unwrap();
        assert!(pending(&c).unwrap());
        // Requests stored later (by the others) lie beyond the purge's range.
        request(&c, a);
        let up_to: i64 = c
            .query_row("SELECT up_to FROM event_purges", [], |r| r.get(0))
            .unwrap();
        assert_eq!(up_to, 25);

        let mut steps = Vec::new();
        while let Some(s) = step(&c, 10).unwrap() {
            assert_eq!(s.organization_id, gone);
            steps.push((s.deleted, s.finished));
        }
        // Ids 1..=25, `gone` at 2, 4, 6, ...: 5 of them in 1..=10, 5 in 11..=20, 2 in 21..=25.
        assert_eq!(steps, vec![(5, false), (5, false), (2, true)]);
        assert!(!pending(&c).unwrap());
        assert_eq!(requests_of(&c, gone), 0);
        assert_eq!(requests_of(&c, a), 8);
        assert_eq!(requests_of(&c, b), 6);
    }

    /// Organizations deleted by their service provider's cascade are purged too, one after the
    /// other; an organization without requests finishes in one step.
    #[test]
    fn purges_organizations_deleted_by_a_cascade() {
        let c = memory_db();
        c.execute_batch(
            "INSERT INTO service_providers (id, name, package_id, seats_total, created_at)
                 VALUES (1, 'sp', 1, 10, 0);",
        )
        .unwrap();
        let owned = |name: &str| {
            c.execute(
                "INSERT INTO organizations (name, service_provider_id, created_at, modified_at)
                 VALUES (?1, 1, 0, 0)",
                [name],
            )
            .unwrap();
            c.last_insert_rowid()
        };
        let (x, y, z) = (owned("x"), owned("y"), org(&c, "z"));
        for o in [x, y, z, x] {
            request(&c, o);
        }
        let empty = org(&c, "empty");
        c.execute("DELETE FROM service_providers WHERE id = 1", [])
            .unwrap();
        c.execute("DELETE FROM organizations WHERE id = ?1", [empty])
            .unwrap();
        let mut done = Vec::new();
        while let Some(s) = step(&c, 1000).unwrap() {
            assert!(s.finished);
            done.push((s.organization_id, s.deleted));
        }
        assert_eq!(done, vec![(x, 2), (y, 1), (empty, 0)]);
        assert_eq!(requests_of(&c, z), 1);
        let left: i64 = c
            .query_row("SELECT count(*) FROM event_batches", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 1);
    }
}
