//! The store's operations on PostgreSQL: the same semantics as `sqlite::ops` (each operation's
//! checks inside its own transaction, the same errors), with the row locks that make a check
//! hold against other nodes' concurrent writes (see the module's documentation).

use std::time::Instant;

use super::{classify, Db, Postgres};
use crate::names::self_and_parents;
use crate::store::rules::allow::{Allow, List};
use crate::store::*;

/// Levels of the paging counts: (level, log2 of the ids per block). See `schema-postgres.sql`.
const LEVEL_SUPER: (i16, u32) = (0, 16);
const LEVEL_BUCKET: (i16, u32) = (1, 10);

/// Key of the advisory lock of the paging counts' folding (one node at a time does it).
const FOLD_LOCK: i64 = 0x7061_7261_736f_6c03;

/// Base of the advisory lock keys of organizations (`ORG_LOCK + id`): ingest holds its
/// organization's shared, deletion exclusive.
pub(super) const ORG_LOCK: i64 = 0x5041_0000_0000_0000;

/// Request ids one purge step looks at (as on SQLite).
const PURGE_STEP_IDS: i64 = 4096;

/// Times an ingest is tried again after the database refused it for a deadlock (two batches
/// refreshing the same names in another order) or a name listed meanwhile by another request,
/// before it is answered 503.
const INGEST_RETRIES: u32 = 3;

async fn organization_exists(db: &Db, org: i64) -> Result<bool> {
    Ok(db
        .opt("SELECT 1 FROM organizations WHERE id = $1", &[&org])
        .await?
        .is_some())
}

async fn record_list_change(db: &Db, org: i64) -> Result<()> {
    db.exec(
        "INSERT INTO list_changes (organization_id) VALUES ($1) ON CONFLICT DO NOTHING",
        &[&org],
    )
    .await?;
    Ok(())
}

// ------------------------------------------------------------------ events and the domain list

/// The organization of a live key held for an ingest: a shared advisory lock on it, which its
/// deletion (`ORG_LOCK`, exclusive) waits for. Lighter than a row lock, which writes the row (and
/// the WAL) once per request: this is taken by every request. Sent with `INGEST` in one round
/// trip; `INGEST` starts after it has the lock, in a fresh snapshot (READ COMMITTED), so an
/// organization deleted while it waited is seen as gone there.
const INGEST_LOCK: &str = "SELECT pg_advisory_xact_lock_shared($2::bigint + organization_id)
    FROM customer_keys WHERE key = $1 AND revoked_at IS NULL";

/// How an ingest's transaction starts. The ingest statements are planned once per connection,
/// generically, and often when a table is new or still small: then a scan of the table (or of
/// the organization's rows) looks cheapest, and a plan made so is kept for the connection's life
/// and takes seconds a request once the list has grown. With scans priced out for these
/// transactions (the settings end with them), every step is planned as probes of an index or of
/// the rows already found, whatever the statistics say.
const INGEST_BEGIN: &str =
    "BEGIN; SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off";

/// `INGEST` and `INGEST_ONE`: the statement around the look-up, refresh and insert of names.
macro_rules! ingest_sql {
    ($names:literal) => {
        concat!(
            "WITH k AS (
        SELECT o.id AS org FROM customer_keys c JOIN organizations o ON o.id = c.organization_id
        WHERE c.key = $1 AND c.revoked_at IS NULL
    ),
    req AS (
        INSERT INTO event_batches (organization_id, uuid, received_at, event_count, domains,
            listed, events)
        SELECT org, $2, $3, $4, $5, $6, $7 FROM k
        RETURNING id
    ),
",
            $names,
            "    counted AS (
        INSERT INTO domain_count_deltas
            (organization_id, level, block, count, residue_sum, square_sum)
        SELECT (SELECT org FROM k), 0, id >> 16, ",
            crate::store::residue_sums_sql!(),
            " FROM added GROUP BY id >> 16
        UNION ALL
        SELECT (SELECT org FROM k), 1, id >> 10, ",
            crate::store::residue_sums_sql!(),
            " FROM added GROUP BY id >> 10
    )
    SELECT (SELECT org FROM k), (SELECT id FROM req), (SELECT count(*) FROM added),
           (SELECT count(*) FROM touched)"
        )
    };
}

/// One request's events stored and its names listed or refreshed, in one statement: the key is
/// resolved (an organization deleted meanwhile makes `k` empty and the statement stores
/// nothing; see `INGEST_LOCK`), the request's row
/// inserted, the names already listed looked up once and those not seen this second refreshed
/// through what that found (`lastSeenAt` only ever moves forward, whichever node's clock), and
/// the new ones inserted in the order sent, with ids from
/// the shared sequence, their paging counts added as delta rows. A name another request listed
/// after this one's snapshot makes the insert fail on the unique index: nothing is stored and the
/// ingest is tried again (rare; cheaper than an upsert's check of every name). Returns the
/// organization (null for an unknown key), the request's id and the names added.
///
/// Every step is written as probes (see `INGEST_BEGIN`): the look-up is one probe of the name
/// index per name sent (a lateral subquery with a limit, which the planner cannot turn into a
/// scan of the organization's rows), the refresh goes straight to the rows found (by their row
/// address), and the new names are told from the found ones through a hashed set of at most one
/// batch. A row refreshed meanwhile by another request keeps that request's time (the same
/// moment, give or take the requests' own duration).
///
/// `$8` holds the names in the order sent (the order of their ids), `$9` the same names sorted
/// by their bytes, the order of the name index (`COLLATE "C"`): probed in that order, each probe
/// walks pages next to the ones the probe before it walked, still in the CPU's caches (measured
/// on a list of a million names: the statement of a 1 MiB batch of new names took about a tenth
/// less of its backend's CPU time than with the probes in the order sent).
const INGEST: &str = ingest_sql!(
    "    listed AS MATERIALIZED (
        SELECT d.ctid AS loc, n.name, d.last_seen_at FROM unnest($9::text[]) AS n(name)
        CROSS JOIN LATERAL (
            SELECT x.ctid, x.last_seen_at FROM domains x
            WHERE x.organization_id = (SELECT org FROM k) AND x.name = n.name
            LIMIT 1
        ) d
    ),
    touched AS (
        UPDATE domains d SET last_seen_at = $3
        WHERE d.ctid = ANY(ARRAY(SELECT loc FROM listed WHERE last_seen_at < $3))
          AND d.last_seen_at < $3
        RETURNING 1
    ),
    added AS (
        INSERT INTO domains (id, organization_id, name, created_at, last_seen_at)
        SELECT nextval('domain_ids'), (SELECT org FROM k), n.name, $3, $3
        FROM unnest($8::text[]) WITH ORDINALITY AS n(name, ord)
        WHERE (SELECT org FROM k) IS NOT NULL
          AND n.name NOT IN (SELECT name FROM listed)
        ORDER BY n.ord
        RETURNING id
    ),
"
);

/// `INGEST` for a request with one name to list (every single event that lists one): the same
/// steps by the name itself, which every plan answers with one probe of the name index.
const INGEST_ONE: &str = ingest_sql!(
    "    listed AS MATERIALIZED (
        SELECT d.last_seen_at FROM domains d
        WHERE d.organization_id = (SELECT org FROM k) AND d.name = ($8::text[])[1]
    ),
    touched AS (
        UPDATE domains d SET last_seen_at = $3
        WHERE d.organization_id = (SELECT org FROM k) AND d.name = ($8::text[])[1]
          AND d.last_seen_at < $3
        RETURNING 1
    ),
    added AS (
        INSERT INTO domains (id, organization_id, name, created_at, last_seen_at)
        SELECT nextval('domain_ids'), (SELECT org FROM k), ($8::text[])[1], $3, $3
        WHERE (SELECT org FROM k) IS NOT NULL AND NOT EXISTS (SELECT 1 FROM listed)
        RETURNING id
    ),
"
);

/// A lost ingest's request row claimed again (`Postgres::stored`): the settle's own row has an
/// empty UUID.
const SETTLE_BATCH: &str = "INSERT INTO event_batches (id, organization_id, uuid, received_at,
        event_count, domains, listed, events)
    VALUES ($1, 0, '', 0, 1, '', '', '')
    ON CONFLICT (id) DO UPDATE SET id = excluded.id RETURNING uuid";

/// What one try of an ingest ended with.
enum Try {
    Done(Ingested),
    /// The database refused it in a way worth trying again (a deadlock): nothing was stored.
    Again(StoreError),
}

impl Postgres {
    /// One try of an ingest: BEGIN and the statement sent together (one round trip), then the
    /// commit. A commit whose answer was lost is settled through the request's row (`stored`):
    /// a 202 always means stored (on the synchronous standby too), a 503 not stored, unless it
    /// says that the outcome is unknown.
    async fn ingest_once(
        &self,
        request: &Ingest,
        (names, sorted): (&[&str], &[&str]),
        batch_id: &str,
    ) -> Result<Try> {
        let db = self.db().await?;
        let st = db
            .stmt(if names.len() == 1 { INGEST_ONE } else { INGEST })
            .await?;
        let lock = db.stmt(INGEST_LOCK).await?;
        let b = &request.batch;
        let count = b.event_count as i64;
        let key: &str = &request.key;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] = [
            &key,
            &batch_id,
            &request.now,
            &count,
            &b.domains_json,
            &b.listed_json,
            &b.events_json,
            &names,
            &sorted,
        ];
        // `INGEST_ONE` takes no `$9`.
        let params = &params[..if names.len() == 1 { 8 } else { 9 }];
        // Sent together: BEGIN first (each request is written to the connection when first
        // polled, in this order), the lock, then the statement; one round trip.
        let lock_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&key, &ORG_LOCK];
        let (begin, locked, row) = tokio::join!(
            db.client().batch_execute(INGEST_BEGIN),
            db.client().query(&lock, &lock_params),
            db.client().query_one(&st, params)
        );
        if let Err(e) = begin {
            return Err(classify(e));
        }
        if let Err(e) = locked {
            db.rollback().await;
            return Err(classify(e));
        }
        let row = match row {
            Ok(r) => r,
            Err(e) => {
                // A deadlock (two batches refreshing the same names in another order) or a name
                // listed meanwhile by another request: nothing was stored; worth another try.
                let deadlock = matches!(super::sqlstate(&e), Some("40P01" | "40001" | "23505"));
                let e = classify(e);
                db.rollback().await;
                return if deadlock { Ok(Try::Again(e)) } else { Err(e) };
            }
        };
        let org: Option<i64> = row.get(0);
        let Some(org) = org else {
            db.rollback().await;
            return Ok(Try::Done(Ingested::UnknownKey));
        };
        let request_id: i64 = row.get(1);
        let added = row.get::<_, i64>(2) as u64;
        if let Some(max) = request.new_domain_budget {
            if added > max {
                db.rollback().await;
                return Ok(Try::Done(Ingested::OverBudget { would_add: added }));
            }
        }
        if self.tracking_list_changes() && added > 0 {
            if let Err(e) = record_list_change(&db, org).await {
                db.rollback().await;
                return Err(e);
            }
        }
        let committing = Instant::now();
        let committed = db.client().batch_execute("COMMIT").await;
        self.inner
            .metrics
            .commit
            .observe(super::nanos(committing.elapsed()));
        match committed {
            Ok(()) => Ok(Try::Done(Ingested::Stored { added })),
            Err(e) => {
                let e = classify(e);
                if !e.is_unavailable() {
                    return Err(e);
                }
                db.discard();
                if self.stored(request_id, batch_id).await? {
                    Ok(Try::Done(Ingested::Stored { added }))
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Whether request row `id`, of batch `batch_id`, whose commit's answer was lost, was
    /// stored (on the synchronous standby too, if there is one): settled through the row itself
    /// (see `Postgres::settle`). The batch's UUID tells its row from another's: a standby
    /// promoted without the row may hand its id out again.
    async fn stored(&self, id: i64, batch_id: &str) -> Result<bool> {
        self.settle(SETTLE_BATCH, &[&id], |row| {
            row.get::<_, &str>(0) == batch_id
        })
        .await
    }

    /// Reads the database's size for `storage_stats` (which cannot wait for the database), when
    /// it is due (see `DATABASE_SIZE_EVERY`).
    pub(super) async fn refresh_database_size(&self) -> Result<()> {
        if !self.database_size_due() {
            return Ok(());
        }
        let bytes: i64 = self
            .read(|db| {
                Box::pin(async move {
                    Ok(db
                        .one("SELECT pg_database_size(current_database())", &[])
                        .await?
                        .get(0))
                })
            })
            .await?;
        self.note_database_size(u64::try_from(bytes).unwrap_or(0));
        Ok(())
    }

    /// Folds the paging counts' delta rows into one count per block, if any are waiting (one
    /// node at a time; the others skip).
    async fn fold_counts(&self) -> Result<()> {
        let waiting = self
            .read(|db| {
                Box::pin(async move {
                    Ok(db
                        .opt("SELECT 1 FROM domain_count_deltas LIMIT 1", &[])
                        .await?
                        .is_some())
                })
            })
            .await?;
        if !waiting {
            return Ok(());
        }
        self.write(|db| {
            Box::pin(async move {
                let mine: bool = db
                    .one("SELECT pg_try_advisory_xact_lock($1)", &[&FOLD_LOCK])
                    .await?
                    .get(0);
                if !mine {
                    return Ok(());
                }
                let zero = db
                    .rows(
                        "WITH moved AS (
                             DELETE FROM domain_count_deltas
                             RETURNING organization_id, level, block, count, residue_sum,
                                 square_sum
                         )
                         INSERT INTO domain_counts
                             (organization_id, level, block, count, residue_sum, square_sum)
                         SELECT organization_id, level, block, sum(count)::bigint,
                             sum(residue_sum)::bigint, sum(square_sum)::bigint
                         FROM moved
                         GROUP BY organization_id, level, block
                         ON CONFLICT (organization_id, level, block)
                             DO UPDATE SET count = domain_counts.count + excluded.count,
                                 residue_sum = domain_counts.residue_sum + excluded.residue_sum,
                                 square_sum = domain_counts.square_sum + excluded.square_sum
                         RETURNING organization_id, level, block, count",
                        &[],
                    )
                    .await?;
                for r in zero.iter().filter(|r| r.get::<_, i64>(3) == 0) {
                    db.exec(
                        "DELETE FROM domain_counts
                         WHERE organization_id = $1 AND level = $2 AND block = $3 AND count = 0",
                        &[
                            &r.get::<_, i64>(0),
                            &r.get::<_, i16>(1),
                            &r.get::<_, i64>(2),
                        ],
                    )
                    .await?;
                }
                Ok(())
            })
        })
        .await
    }
}

/// Deletes one entry (`by`: `id` or `name` is `$2`) of organization `$1`, takes it off the
/// paging counts and records the list change, in one statement. Returns 1 if it was there.
fn delete_domain_sql(by: &str) -> String {
    format!(
        "WITH gone AS (
             DELETE FROM domains WHERE organization_id = $1 AND {by} = $2 RETURNING id
         ),
         uncounted AS (
             INSERT INTO domain_count_deltas
                 (organization_id, level, block, count, residue_sum, square_sum)
             SELECT $1, l.level, g.id >> l.shift, -g.n, -g.x, -g.square
             FROM (SELECT max(id) AS id, {sums} FROM gone) g
             CROSS JOIN (VALUES (0::smallint, 16), (1::smallint, 10)) AS l(level, shift)
             WHERE g.n > 0
         ),
         noted AS (
             INSERT INTO list_changes (organization_id) SELECT $1 FROM gone
             ON CONFLICT DO NOTHING
         )
         SELECT count(*) FROM gone",
        sums = crate::store::residue_sums_sql!()
    )
}

/// The block sums of one level of an organization's paging counts, with their running total,
/// blocks `$lo <= block < $hi` (counts and waiting deltas together).
fn level_sums(level: (i16, u32), org: &str, lo: &str, hi: &str) -> String {
    format!(
        "SELECT block, n, (sum(n) OVER (ORDER BY block))::bigint AS upto FROM (
             SELECT block, sum(count)::bigint AS n FROM (
                 SELECT block, count FROM domain_counts
                 WHERE organization_id = {org} AND level = {l} AND block >= {lo} AND block < {hi}
                 UNION ALL
                 SELECT block, count FROM domain_count_deltas
                 WHERE organization_id = {org} AND level = {l} AND block >= {lo} AND block < {hi}
             ) u GROUP BY block
         ) g",
        l = level.0
    )
}

/// Page `$2` entries deep (the offset), `$3` entries, of key `$1`'s list, in one statement and
/// so one snapshot: the key, the block of 65536 ids holding the offset, the block of 1024 inside
/// it, and fewer than 1024 index entries skipped. Returns the organization (null for a key that
/// is not live) and the page's entries, if any.
fn page_sql() -> String {
    let (_, s0) = LEVEL_SUPER;
    let (_, s1) = LEVEL_BUCKET;
    let per = 1i64 << (s0 - s1);
    let org = "(SELECT org FROM k)";
    let l0 = level_sums(LEVEL_SUPER, org, "-1", "9223372036854775807");
    let l1 = level_sums(
        LEVEL_BUCKET,
        org,
        &format!("(SELECT block FROM b0) * {per}"),
        &format!("(SELECT block FROM b0) * {per} + {per}"),
    );
    format!(
        "WITH k AS (
             SELECT organization_id AS org FROM customer_keys
             WHERE key = $1 AND revoked_at IS NULL
         ),
         b0 AS (
             SELECT block, upto - n AS before FROM ({l0}) w
             WHERE upto > $2 ORDER BY block LIMIT 1
         ),
         b1 AS (
             SELECT block, (SELECT before FROM b0) + upto - n AS before FROM ({l1}) w
             WHERE upto > $2 - (SELECT before FROM b0) ORDER BY block LIMIT 1
         )
         SELECT {org}, d.id, d.name, d.last_seen_at
         FROM (SELECT 1) one LEFT JOIN LATERAL (
             SELECT id, name, last_seen_at FROM domains
             WHERE organization_id = {org} AND id >= (SELECT block FROM b1) << {s1}
             ORDER BY id OFFSET $2 - (SELECT before FROM b1) LIMIT $3
         ) d ON true"
    )
}

/// The first page: no counts needed.
const FIRST_PAGE: &str = "SELECT k.organization_id, d.id, d.name, d.last_seen_at
    FROM customer_keys k LEFT JOIN LATERAL (
        SELECT id, name, last_seen_at FROM domains
        WHERE organization_id = k.organization_id ORDER BY id LIMIT $2
    ) d ON true
    WHERE k.key = $1 AND k.revoked_at IS NULL";

/// `page_sql`, built once.
static PAGE: std::sync::LazyLock<String> = std::sync::LazyLock::new(page_sql);

impl Backend for Postgres {
    // ------------------------------------------------------------ enforcement

    async fn resolve_customer_key(&self, key: CustomerKey) -> Result<Option<i64>> {
        self.read(move |db| {
            Box::pin(async move {
                Ok(db
                    .opt(
                        "SELECT organization_id FROM customer_keys
                         WHERE key = $1 AND revoked_at IS NULL",
                        &[&&*key],
                    )
                    .await?
                    .map(|r| r.get(0)))
            })
        })
        .await
    }

    async fn ingest(&self, request: Ingest) -> Result<Ingested> {
        let pg = self.clone();
        // A task of its own: a request cancelled halfway still ends its transaction cleanly.
        let r = tokio::spawn(async move {
            let names: Vec<&str> = request.batch.to_list.iter().map(String::as_str).collect();
            // Byte order, the name index's (see `INGEST`).
            let mut sorted = if names.len() > 1 {
                names.clone()
            } else {
                Vec::new()
            };
            sorted.sort_unstable();
            let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
            let batch_id = request
                .batch_id
                .hyphenated()
                .encode_lower(&mut text)
                .to_string();
            let mut tries = 0;
            loop {
                tries += 1;
                pg.inner
                    .writes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let started = Instant::now();
                let outcome = pg.ingest_once(&request, (&names, &sorted), &batch_id).await;
                let m = &pg.inner.metrics;
                m.transaction.observe(super::nanos(started.elapsed()));
                match outcome? {
                    Try::Done(outcome) => {
                        if matches!(outcome, Ingested::Stored { .. }) {
                            pg.inner
                                .commits
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            m.group_size.observe(1);
                        }
                        return Ok(outcome);
                    }
                    Try::Again(e) if tries > INGEST_RETRIES => return Err(e),
                    Try::Again(_) => continue,
                }
            }
        })
        .await
        .unwrap_or_else(|e| Err(StoreError::Internal(format!("a database task failed: {e}"))));
        self.noted(r)
    }

    async fn list_domains(
        &self,
        key: CustomerKey,
        page: u64,
        limit: u64,
    ) -> Result<Option<(Vec<DomainEntry>, bool)>> {
        let Some(offset) = page.checked_sub(1).and_then(|p| p.checked_mul(limit)) else {
            return self
                .resolve_customer_key(key)
                .await
                .map(|o| o.map(|_| (Vec::new(), false)));
        };
        let Ok(offset) = i64::try_from(offset) else {
            return self
                .resolve_customer_key(key)
                .await
                .map(|o| o.map(|_| (Vec::new(), false)));
        };
        let take = (limit as i64).saturating_add(1);
        let rows = self
            .read(move |db| {
                Box::pin(async move {
                    if offset == 0 {
                        db.rows(FIRST_PAGE, &[&&*key, &take]).await
                    } else {
                        db.rows(&PAGE, &[&&*key, &offset, &take]).await
                    }
                })
            })
            .await?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        if first.get::<_, Option<i64>>(0).is_none() {
            return Ok(None);
        }
        let mut entries: Vec<DomainEntry> = rows
            .iter()
            .filter_map(|r| {
                Some(DomainEntry {
                    id: r.get::<_, Option<i64>>(1)?,
                    name: r.get(2),
                    last_seen_at: r.get(3),
                })
            })
            .collect();
        let more = entries.len() as u64 > limit;
        entries.truncate(limit as usize);
        Ok(Some((entries, more)))
    }

    async fn delete_domain_by_id(&self, org: i64, id: i64) -> Result<bool> {
        let n: i64 = self
            .write(move |db| {
                Box::pin(
                    async move { Ok(db.one(&delete_domain_sql("id"), &[&org, &id]).await?.get(0)) },
                )
            })
            .await?;
        Ok(n > 0)
    }

    async fn delete_domain_by_name(&self, org: i64, name: String) -> Result<bool> {
        let n: i64 = self
            .write(move |db| {
                Box::pin(async move {
                    Ok(db
                        .one(&delete_domain_sql("name"), &[&org, &name])
                        .await?
                        .get(0))
                })
            })
            .await?;
        Ok(n > 0)
    }

    async fn domain_counts(&self, limit: i64) -> Result<(i64, Vec<(i64, i64)>)> {
        self.snapshot(move |db| {
            Box::pin(async move {
                let total: i64 = db
                    .one("SELECT count(*) FROM organizations", &[])
                    .await?
                    .get(0);
                // Every live entry is counted once at level 0: a block's row plus its deltas.
                let rows = db
                    .rows(
                        "SELECT o.id,
                                (coalesce((SELECT sum(count) FROM domain_counts
                                            WHERE organization_id = o.id AND level = 0), 0)
                               + coalesce((SELECT sum(count) FROM domain_count_deltas
                                            WHERE organization_id = o.id AND level = 0), 0)
                                )::bigint
                           FROM organizations o ORDER BY o.id LIMIT $1",
                        &[&limit],
                    )
                    .await?;
                Ok((total, rows.iter().map(|r| (r.get(0), r.get(1))).collect()))
            })
        })
        .await
    }

    async fn purge_step(&self) -> Result<Option<PurgeStep>> {
        self.refresh_database_size().await?;
        self.fold_counts().await?;
        let pending = self
            .read(|db| {
                Box::pin(async move {
                    Ok(db
                        .opt("SELECT 1 FROM event_purges LIMIT 1", &[])
                        .await?
                        .is_some())
                })
            })
            .await?;
        if !pending {
            return Ok(None);
        }
        self.write(|db| {
            Box::pin(async move {
                // Another node may be purging the first one: take the next.
                let Some(r) = db
                    .opt(
                        "SELECT organization_id, up_to, done FROM event_purges
                         ORDER BY organization_id LIMIT 1 FOR UPDATE SKIP LOCKED",
                        &[],
                    )
                    .await?
                else {
                    return Ok(None);
                };
                let (org, up_to, done): (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
                let to = done.saturating_add(PURGE_STEP_IDS).min(up_to);
                let deleted = db
                    .exec(
                        "DELETE FROM event_batches
                         WHERE id > $1 AND id <= $2 AND organization_id = $3",
                        &[&done, &to, &org],
                    )
                    .await?;
                let finished = to >= up_to;
                if finished {
                    db.exec(
                        "DELETE FROM event_purges WHERE organization_id = $1",
                        &[&org],
                    )
                    .await?;
                } else {
                    db.exec(
                        "UPDATE event_purges SET done = $2 WHERE organization_id = $1",
                        &[&org, &to],
                    )
                    .await?;
                }
                Ok(Some(PurgeStep {
                    organization_id: org,
                    deleted: deleted as usize,
                    finished,
                }))
            })
        })
        .await
    }

    async fn event_count(&self, org: i64) -> Result<i64> {
        self.read(move |db| {
            Box::pin(async move {
                Ok(db
                    .one(
                        "SELECT coalesce(sum(event_count), 0)::bigint FROM event_batches
                         WHERE organization_id = $1",
                        &[&org],
                    )
                    .await?
                    .get(0))
            })
        })
        .await
    }

    async fn listed_names(&self, org: i64) -> Result<Vec<String>> {
        self.read(move |db| {
            Box::pin(async move {
                Ok(db
                    .rows(
                        "SELECT name FROM domains WHERE organization_id = $1 ORDER BY id",
                        &[&org],
                    )
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect())
            })
        })
        .await
    }

    async fn search_domains(
        &self,
        org: i64,
        prefix: String,
        after: String,
        limit: i64,
    ) -> Result<Vec<DomainEntry>> {
        self.read(move |db| {
            Box::pin(async move {
                let (start, after, end, limit) =
                    crate::store::search_domains_params(&prefix, &after, limit);
                Ok(db
                    .rows(
                        &crate::store::search_domains_query('$'),
                        &[&org, &start, &after, &end, &limit],
                    )
                    .await?
                    .iter()
                    .map(|r| DomainEntry {
                        id: r.get(0),
                        name: r.get(1),
                        last_seen_at: r.get(2),
                    })
                    .collect())
            })
        })
        .await
    }

    // ------------------------------------------------------------ enforcement on the appliance

    async fn effective_block_list(&self, org: i64) -> Result<(Vec<String>, Vec<String>)> {
        self.snapshot(move |db| {
            Box::pin(async move {
                if !organization_exists(db, org).await? {
                    return Err(StoreError::NotFound);
                }
                let allowed: std::collections::HashSet<String> =
                    db.allowed(org).await?.into_iter().collect();
                let covered = |name: &str| self_and_parents(name).any(|n| allowed.contains(n));
                let rows = db
                    .rows(
                        "SELECT name FROM domains WHERE organization_id = $1 ORDER BY id",
                        &[&org],
                    )
                    .await?;
                let mut blocked = Vec::new();
                let mut listed = std::collections::HashSet::new();
                for r in &rows {
                    let name: String = r.get(0);
                    if !covered(&name) {
                        blocked.push(name.clone());
                    }
                    listed.insert(name);
                }
                let mut exceptions: Vec<String> = allowed
                    .iter()
                    .filter(|a| self_and_parents(a).skip(1).any(|p| listed.contains(p)))
                    .cloned()
                    .collect();
                exceptions.sort();
                Ok((blocked, exceptions))
            })
        })
        .await
    }

    async fn block_list_since(&self, org: i64, after: Option<ListCursor>) -> Result<ListRead> {
        // Positions are ids here (never given again): the cursor holds while its entry exists.
        self.snapshot(move |db| {
            Box::pin(async move {
                if !organization_exists(db, org).await? {
                    return Err(StoreError::NotFound);
                }
                let from = match after {
                    Some(c) => db
                        .opt(
                            "SELECT id FROM domains WHERE organization_id = $1 AND id = $2",
                            &[&org, &c.id],
                        )
                        .await?
                        .map(|_| c.id),
                    None => None,
                };
                let mut read = ListRead {
                    whole: from.is_none(),
                    ..ListRead::default()
                };
                let rows = db
                    .rows(
                        "SELECT id, name FROM domains WHERE organization_id = $1 AND id > $2 \
                         ORDER BY id",
                        &[&org, &from.unwrap_or(i64::MIN)],
                    )
                    .await?;
                for r in &rows {
                    let id: i64 = r.get(0);
                    read.names.push(r.get(1));
                    read.names_check = read.names_check.wrapping_add(entry_check(id));
                    read.last = Some(ListCursor { position: id, id });
                }
                drop(rows);
                // Every live entry is counted once at level 0: a block's row plus its deltas.
                let totals = db
                    .one(
                        "SELECT coalesce(sum(count), 0)::bigint,
                                coalesce(sum(residue_sum), 0)::bigint,
                                coalesce(sum(square_sum), 0)::bigint
                         FROM (SELECT count, residue_sum, square_sum FROM domain_counts
                               WHERE organization_id = $1 AND level = 0
                               UNION ALL
                               SELECT count, residue_sum, square_sum FROM domain_count_deltas
                               WHERE organization_id = $1 AND level = 0) AS blocks",
                        &[&org],
                    )
                    .await?;
                (read.count, read.check) =
                    (totals.get(0), list_check(totals.get(1), totals.get(2)));
                if read.last.is_none() {
                    read.last = after.filter(|_| from.is_some());
                }
                read.allowed = db.allowed(org).await?;
                for a in &read.allowed {
                    let parents: Vec<&str> = self_and_parents(a).skip(1).collect();
                    if !db.present(org, List::Listed, &parents).await?.is_empty() {
                        read.exceptions.push(a.clone());
                    }
                }
                read.exceptions.sort();
                Ok(read)
            })
        })
        .await
    }

    async fn take_list_changes(&self) -> Result<Vec<i64>> {
        self.write(|db| {
            Box::pin(async move {
                let mut ids: Vec<i64> = db
                    .rows("DELETE FROM list_changes RETURNING organization_id", &[])
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                ids.sort_unstable();
                Ok(ids)
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs on PostgreSQL only (`PARASOL_TEST_POSTGRES`, as `.ci/run` sets it): the generic plans
    /// of the ingest statements, the ones every connection keeps, never scan an organization's
    /// list, whatever the statistics say. Planned here on new, never analyzed tables: the state in
    /// which a node first plans them, and in which a plan that filtered the organization's rows
    /// by name looked cheapest (and then took seconds a request once the list had grown).
    #[test]
    fn ingest_plans_probe_the_name_index_and_never_scan_the_list() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let Some(fresh) = crate::store::suite::FreshDatabase::new("plans").await else {
                eprintln!("runs on PostgreSQL only: PARASOL_TEST_POSTGRES is not set");
                return;
            };
            let pg = Postgres::open(&fresh.url, OpenRole::Server).await.unwrap();
            let db = pg.db().await.unwrap();
            db.batch("SET plan_cache_mode = force_generic_plan")
                .await
                .unwrap();
            db.batch(INGEST_BEGIN).await.unwrap();
            for (label, sql) in [("INGEST", INGEST), ("INGEST_ONE", INGEST_ONE)] {
                db.batch(&format!(
                    "PREPARE p (text, text, bigint, bigint, text, text, text, text[], text[]) \
                     AS {sql}"
                ))
                .await
                .unwrap();
                let plan: Vec<String> = db
                    .client()
                    .simple_query(
                        "EXPLAIN EXECUTE p ('k', 'u', 0, 1, '[]', '[]', '[]',
                                            ARRAY['b.example', 'a.example'],
                                            ARRAY['a.example', 'b.example'])",
                    )
                    .await
                    .unwrap()
                    .into_iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                        _ => None,
                    })
                    .collect();
                let plan = plan.join("\n");
                for scan in ["Seq Scan on domains ", "Bitmap Heap Scan on domains "] {
                    assert!(!plan.contains(scan), "{label} scans the list:\n{plan}");
                }
                assert!(
                    plan.contains("domains_organization_id_name_key"),
                    "{label} does not probe the name index:\n{plan}"
                );
                db.batch("DEALLOCATE p").await.unwrap();
            }
            db.batch("ROLLBACK").await.unwrap();
            drop(db);
            pg.close();
            fresh.remove().await;
        });
    }
}
