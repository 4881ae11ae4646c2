//! The enforcement data: events and each organization's domain list.
//!
//! Paging without OFFSET scans: every entry has a per-organization position `seq` (growing with
//! `id`); `domain_superbuckets` counts the live entries in each block of 65536 positions and
//! `domain_buckets` in each block of 1024. Finding page N walks the super-bucket counts (one row
//! per 65536 entries), then at most 64 bucket counts, then skips fewer than 1024 index entries, so
//! a deep page costs about as much as the first.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use super::{Result, WriterCache};

/// Requests listing at most this many names read and record them through the writer's cache.
/// Larger batches bypass it: recording thousands of mostly new names would cost them more than
/// the cache saves (and push out the names of the small requests it is for). The names such a
/// batch refreshes may then be remembered with an older `lastSeenAt`, which only costs a later
/// request one needless refresh.
const CACHED_NAMES_PER_REQUEST: usize = 64;

/// log2 of the positions per bucket.
const BUCKET_SHIFT: u32 = 10;
/// log2 of the positions per super-bucket.
const SUPER_SHIFT: u32 = 16;

/// Adds `delta` to the live count of one bucket (`domain_buckets` or `domain_superbuckets`),
/// dropping the row when it reaches zero.
fn bump(conn: &Connection, table: Level, org: i64, bucket: i64, delta: i64) -> Result<()> {
    // Static statement texts: the statement cache is keyed by them.
    let (add, drop_empty, sub) = match table {
        Level::Bucket => (
            "INSERT INTO domain_buckets (organization_id, bucket, count) VALUES (?1, ?2, ?3)
             ON CONFLICT (organization_id, bucket) DO UPDATE SET count = count + excluded.count",
            "DELETE FROM domain_buckets WHERE organization_id = ?1 AND bucket = ?2 AND count + ?3 <= 0",
            "UPDATE domain_buckets SET count = count + ?3 WHERE organization_id = ?1 AND bucket = ?2",
        ),
        Level::Super => (
            "INSERT INTO domain_superbuckets (organization_id, bucket, count) VALUES (?1, ?2, ?3)
             ON CONFLICT (organization_id, bucket) DO UPDATE SET count = count + excluded.count",
            "DELETE FROM domain_superbuckets WHERE organization_id = ?1 AND bucket = ?2 AND count + ?3 <= 0",
            "UPDATE domain_superbuckets SET count = count + ?3 WHERE organization_id = ?1 AND bucket = ?2",
        ),
    };
    let sql = if delta > 0 {
        add
    } else {
        // A decrement that empties the bucket drops its row; otherwise it updates the count.
        let removed = conn
            .prepare_cached(drop_empty)?
            .execute(params![org, bucket, delta])?;
        if removed > 0 {
            return Ok(());
        }
        sub
    };
    conn.prepare_cached(sql)?
        .execute(params![org, bucket, delta])?;
    Ok(())
}

#[derive(Clone, Copy)]
enum Level {
    Bucket,
    Super,
}

/// An event that passed validation, ready to store.
#[derive(Debug, Clone)]
pub struct PreparedEvent {
    /// Normalised dstDomain.
    pub domain: String,
    /// Whether the acceptance checks put the domain on the list.
    pub listed: bool,
}

/// One request's events in the form they are stored: the row of `event_batches` (its JSON
/// arrays are built here, off the writer thread) and the names to list.
#[derive(Debug, Clone)]
pub struct PreparedBatch {
    /// Each name the acceptance checks listed, once, in the order of its first event.
    to_list: Vec<String>,
    event_count: usize,
    /// JSON array of the events as sent.
    events_json: String,
    /// JSON array of each event's normalised dstDomain.
    domains_json: String,
    /// JSON array of 1 (listed) or 0 per event.
    listed_json: String,
}

impl PreparedBatch {
    /// `events_json` is the JSON array of the events as sent, one element per entry of `events`.
    pub fn new(events: Vec<PreparedEvent>, events_json: String) -> PreparedBatch {
        let domains: Vec<&str> = events.iter().map(|e| e.domain.as_str()).collect();
        // Serialized straight from the slices (a `serde_json::Value` in between cost as much as
        // the rest of the request's validation). Strings and integers always serialize.
        let domains_json = serde_json::to_string(&domains).unwrap_or_default();
        let mut listed_json = String::with_capacity(2 * events.len() + 1);
        listed_json.push('[');
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                listed_json.push(',');
            }
            listed_json.push(if e.listed { '1' } else { '0' });
        }
        listed_json.push(']');
        let event_count = events.len();
        // A batch that names a domain many times costs the writer one look-up for it.
        // A few events (a single event above all) are compared in place, nothing hashed; the
        // set allocates only when used.
        let few = events.len() <= 8;
        let mut seen = std::collections::HashSet::new();
        let mut to_list: Vec<String> = Vec::new();
        for e in events.into_iter().filter(|e| e.listed) {
            let first = if few {
                !to_list.contains(&e.domain)
            } else {
                seen.insert(e.domain.clone())
            };
            if first {
                to_list.push(e.domain);
            }
        }
        PreparedBatch {
            to_list,
            event_count,
            events_json,
            domains_json,
            listed_json,
        }
    }

    /// Number of events in the request.
    pub fn len(&self) -> usize {
        self.event_count
    }

    pub fn is_empty(&self) -> bool {
        self.event_count == 0
    }
}

/// A statement taken from the connection's statement cache the first time it is used.
struct Lazy<'c> {
    conn: &'c Connection,
    sql: &'static str,
    stmt: Option<rusqlite::CachedStatement<'c>>,
}

impl<'c> Lazy<'c> {
    fn new(conn: &'c Connection, sql: &'static str) -> Lazy<'c> {
        Lazy {
            conn,
            sql,
            stmt: None,
        }
    }

    fn get(&mut self) -> Result<&mut rusqlite::CachedStatement<'c>> {
        let stmt = match self.stmt.take() {
            Some(stmt) => stmt,
            None => self.conn.prepare_cached(self.sql)?,
        };
        Ok(self.stmt.insert(stmt))
    }
}

/// One entry of the domain list as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainEntry {
    pub id: i64,
    pub name: String,
    pub last_seen_at: i64,
}

/// Stores one request's events for `org` (one row, whatever the number of events) and adds the
/// listed domains (or refreshes their `lastSeenAt`). Runs inside the caller's transaction, and
/// reads through and records in `cache` what it can (a name already written this second costs
/// no statement at all). Returns how many names were new to the list.
pub fn ingest(
    conn: &Connection,
    cache: &mut WriterCache,
    org: i64,
    batch_uuid: &str,
    now: i64,
    batch: &PreparedBatch,
) -> Result<u64> {
    conn.prepare_cached(
        "INSERT INTO event_batches
             (organization_id, uuid, received_at, event_count, domains, listed, events)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        org,
        batch_uuid,
        now,
        batch.event_count as i64,
        batch.domains_json,
        batch.listed_json,
        batch.events_json
    ])?;

    // Each listed name is looked up first: most events name a domain already on the list, and
    // often one already seen this second, for which nothing is written. (An upsert with
    // RETURNING did the same in one statement but cost 4-5 times an event's insert, mostly for
    // the ephemeral table SQLite builds for the returned row each time.)
    // Each statement is taken from the connection's cache only once it is needed (a look-up there
    // hashes the statement's text): a single event naming a name seen this second needs none.
    let mut find = Lazy::new(
        conn,
        "SELECT id, last_seen_at FROM domains WHERE organization_id = ?1 AND name = ?2",
    );
    let mut touch = Lazy::new(conn, "UPDATE domains SET last_seen_at = ?2 WHERE id = ?1");
    let mut insert = Lazy::new(
        conn,
        "INSERT INTO domains (organization_id, name, seq, created_at, last_seen_at)
         VALUES (?1, ?2, ?3, ?4, ?4)",
    );
    // After two new names in a row, the next is tried as an insert straight away: in a batch of
    // new names that is one search of the name index each instead of a look-up and then the
    // insert's own. A name already listed then costs a refused insert and the look-up, and the
    // batch goes back to looking up first (in a batch that mostly repeats names, two new ones
    // in a row are rare).
    let mut insert_new = Lazy::new(
        conn,
        "INSERT INTO domains (organization_id, name, seq, created_at, last_seen_at)
         VALUES (?1, ?2, ?3, ?4, ?4)
         ON CONFLICT (organization_id, name) DO NOTHING",
    );
    let mut new_in_a_row = 0u32;
    // The list position counter when the request began (read when the first new name needs
    // it), and the last position taken.
    let mut start_seq: Option<i64> = None;
    let mut seq = 0;
    let mut bucket_adds: BTreeMap<i64, i64> = BTreeMap::new();

    let cached = batch.to_list.len() <= CACHED_NAMES_PER_REQUEST;
    // Each listed name once, in the order of its first event (new entries get their positions,
    // and ids, in the order the client sent them).
    for name in &batch.to_list {
        let known = if cached { cache.name(org, name) } else { None };
        let mut new = known.is_none()
            && new_in_a_row >= 2
            && insert_new
                .get()?
                .execute(params![org, name, seq + 1, now])?
                == 1;
        let id = if new {
            conn.last_insert_rowid()
        } else {
            let listed: Option<(i64, i64)> = match known {
                Some(known) => Some(known),
                None => find
                    .get()?
                    .query_row(params![org, name], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?,
            };
            match listed {
                Some((id, seen)) => {
                    new_in_a_row = 0;
                    if seen != now {
                        touch.get()?.execute(params![id, now])?;
                    }
                    id
                }
                None => {
                    if start_seq.is_none() {
                        seq = list_position(conn, cache, org)?;
                        start_seq = Some(seq);
                    }
                    insert.get()?.execute(params![org, name, seq + 1, now])?;
                    new = true;
                    conn.last_insert_rowid()
                }
            }
        };
        if new {
            seq += 1;
            *bucket_adds.entry(seq >> BUCKET_SHIFT).or_default() += 1;
            new_in_a_row += 1;
        }
        if cached && known != Some((id, now)) {
            cache.set_name(org, name, id, now);
        }
    }
    let Some(start_seq) = start_seq else {
        return Ok(0);
    };
    cache.set_seq(org, seq);
    conn.prepare_cached("UPDATE organizations SET domain_seq = ?2 WHERE id = ?1")?
        .execute(params![org, seq])?;
    let mut super_adds: BTreeMap<i64, i64> = BTreeMap::new();
    for (bucket, n) in bucket_adds {
        bump(conn, Level::Bucket, org, bucket, n)?;
        *super_adds
            .entry(bucket >> (SUPER_SHIFT - BUCKET_SHIFT))
            .or_default() += n;
    }
    for (bucket, n) in super_adds {
        bump(conn, Level::Super, org, bucket, n)?;
    }
    Ok((seq - start_seq) as u64)
}

/// The organization's list position counter (`organizations.domain_seq`), from the writer's
/// cache when it holds it.
fn list_position(conn: &Connection, cache: &WriterCache, org: i64) -> Result<i64> {
    match cache.seq(org) {
        Some(seq) => Ok(seq),
        None => Ok(conn
            .prepare_cached("SELECT domain_seq FROM organizations WHERE id = ?1")?
            .query_row(params![org], |r| r.get(0))?),
    }
}

/// Reads page `page` (1-based) of `limit` entries, ordered by id. Returns the entries and whether
/// a further page exists.
pub fn list_page(
    conn: &Connection,
    org: i64,
    page: u64,
    limit: u64,
) -> Result<(Vec<DomainEntry>, bool)> {
    let Some(offset) = page.checked_sub(1).and_then(|p| p.checked_mul(limit)) else {
        return Ok((Vec::new(), false));
    };
    let (start_seq, skip) = if offset == 0 {
        (0i64, 0u64)
    } else {
        // Super-buckets first, then the buckets inside the one that holds the offset.
        let Some((sb, before)) = find_block(
            conn,
            "SELECT bucket, count FROM domain_superbuckets WHERE organization_id = ?1
             AND bucket >= ?2 AND bucket < ?3 ORDER BY bucket",
            org,
            (0, i64::MAX),
            offset,
        )?
        else {
            return Ok((Vec::new(), false));
        };
        let per = 1i64 << (SUPER_SHIFT - BUCKET_SHIFT);
        let Some((bucket, before_bucket)) = find_block(
            conn,
            "SELECT bucket, count FROM domain_buckets WHERE organization_id = ?1
             AND bucket >= ?2 AND bucket < ?3 ORDER BY bucket",
            org,
            (sb * per, (sb + 1) * per),
            offset - before,
        )?
        else {
            return Ok((Vec::new(), false));
        };
        (bucket << BUCKET_SHIFT, offset - before - before_bucket)
    };
    let mut stmt = conn.prepare_cached(
        "SELECT id, name, last_seen_at FROM domains
         WHERE organization_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3 OFFSET ?4",
    )?;
    let rows = stmt.query_map(
        params![org, start_seq, (limit + 1) as i64, skip as i64],
        |r| {
            Ok(DomainEntry {
                id: r.get(0)?,
                name: r.get(1)?,
                last_seen_at: r.get(2)?,
            })
        },
    )?;
    let mut entries = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    let more = entries.len() as u64 > limit;
    entries.truncate(limit as usize);
    Ok((entries, more))
}

/// Removes the entry with this id from the organization's list. False if there is none.
pub fn delete_by_id(conn: &Connection, org: i64, id: i64) -> Result<bool> {
    let seq: Option<i64> = conn
        .prepare_cached("DELETE FROM domains WHERE organization_id = ?1 AND id = ?2 RETURNING seq")?
        .query_row(params![org, id], |r| r.get(0))
        .optional()?;
    forget_position(conn, org, seq)
}

/// Removes the entry with this (normalised) name. False if there is none.
pub fn delete_by_name(conn: &Connection, org: i64, name: &str) -> Result<bool> {
    let seq: Option<i64> = conn
        .prepare_cached(
            "DELETE FROM domains WHERE organization_id = ?1 AND name = ?2 RETURNING seq",
        )?
        .query_row(params![org, name], |r| r.get(0))
        .optional()?;
    forget_position(conn, org, seq)
}

/// Walks `(bucket, count)` rows in `range` until the running count passes `offset`; returns the
/// bucket holding it and how many live entries lie before that bucket.
fn find_block(
    conn: &Connection,
    sql: &str,
    org: i64,
    range: (i64, i64),
    offset: u64,
) -> Result<Option<(i64, u64)>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params![org, range.0, range.1])?;
    let mut before = 0u64;
    while let Some(row) = rows.next()? {
        let bucket: i64 = row.get(0)?;
        let count = row.get::<_, i64>(1)?.max(0) as u64;
        if before + count > offset {
            return Ok(Some((bucket, before)));
        }
        before += count;
    }
    Ok(None)
}

fn forget_position(conn: &Connection, org: i64, seq: Option<i64>) -> Result<bool> {
    let Some(seq) = seq else { return Ok(false) };
    bump(conn, Level::Bucket, org, seq >> BUCKET_SHIFT, -1)?;
    bump(conn, Level::Super, org, seq >> SUPER_SHIFT, -1)?;
    Ok(true)
}

/// Every listed name of the organization, for export.
pub fn all_names(conn: &Connection, org: i64) -> Result<Vec<String>> {
    let mut stmt =
        conn.prepare("SELECT name FROM domains WHERE organization_id = ?1 ORDER BY seq")?;
    let rows = stmt.query_map(params![org], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<Vec<String>>>()?)
}

/// Number of stored events of the organization (tests and operators).
pub fn event_count(conn: &Connection, org: i64) -> Result<i64> {
    Ok(conn.query_row(
        "SELECT coalesce(sum(event_count), 0) FROM event_batches WHERE organization_id = ?1",
        params![org],
        |r| r.get(0),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tenants::{create_organization, OrgFields, Parent};

    #[test]
    fn stored_arrays_are_json_arrays_of_names_and_verdicts() {
        let names = [
            "a.example",
            "b\"q\\.example",
            "\u{e9}t\u{e9}.example",
            "a.example",
        ];
        let events: Vec<PreparedEvent> = names
            .iter()
            .enumerate()
            .map(|(i, n)| PreparedEvent {
                domain: n.to_string(),
                listed: i != 1,
            })
            .collect();
        let b = PreparedBatch::new(events, "[]".into());
        let domains: serde_json::Value = serde_json::from_str(&b.domains_json).unwrap();
        assert_eq!(domains, serde_json::json!(names));
        assert_eq!(b.listed_json, "[1,0,1,1]");
        assert_eq!(b.to_list, ["a.example", "\u{e9}t\u{e9}.example"]);
        assert_eq!(
            PreparedBatch::new(Vec::new(), "[]".into()).listed_json,
            "[]"
        );
    }

    fn db() -> (Connection, i64) {
        let mut c = Connection::open_in_memory().unwrap();
        c.pragma_update(None, "foreign_keys", "ON").unwrap();
        crate::store::migrate::migrate(&mut c).unwrap();
        let f = OrgFields {
            name: "t".into(),
            seats: 1,
            ..Default::default()
        };
        let org = create_organization(&c, Parent::None, &f, 0).unwrap().id;
        (c, org)
    }

    fn ev(name: &str) -> PreparedEvent {
        PreparedEvent {
            domain: name.into(),
            listed: true,
        }
    }

    /// The events with a `{}` body each.
    fn batch(events: Vec<PreparedEvent>) -> PreparedBatch {
        let json = format!("[{}]", vec!["{}"; events.len()].join(","));
        PreparedBatch::new(events, json)
    }

    #[test]
    fn pages_match_a_plain_scan_after_deletes() {
        let (c, org) = db();
        let names: Vec<PreparedEvent> = (0..5000).map(|i| ev(&format!("d{i}.example"))).collect();
        ingest(&c, &mut WriterCache::new(), org, "b", 1, &batch(names)).unwrap();
        // Punch holes, including a whole bucket.
        for id in (1..=5000).filter(|i| i % 7 == 0 || (1100..2200).contains(i)) {
            assert!(delete_by_id(&c, org, id).unwrap());
        }
        let all: Vec<i64> = {
            let mut s = c.prepare("SELECT id FROM domains ORDER BY id").unwrap();
            s.query_map([], |r| r.get(0))
                .unwrap()
                .map(|r| r.unwrap())
                .collect()
        };
        for limit in [1u64, 7, 200] {
            let mut seen = Vec::new();
            let mut page = 1;
            loop {
                let (entries, more) = list_page(&c, org, page, limit).unwrap();
                seen.extend(entries.iter().map(|e| e.id));
                if !more {
                    break;
                }
                page += 1;
            }
            assert_eq!(seen, all, "limit {limit}");
        }
        let (past, more) = list_page(&c, org, 10_000, 200).unwrap();
        assert!(past.is_empty() && !more);
        let (huge, _) = list_page(&c, org, u64::MAX, 200).unwrap();
        assert!(huge.is_empty());
        assert_counts_consistent(&c, org);
    }

    /// Both count levels agree with the rows they count.
    fn assert_counts_consistent(c: &Connection, org: i64) {
        for (table, shift) in [
            ("domain_buckets", BUCKET_SHIFT),
            ("domain_superbuckets", SUPER_SHIFT),
        ] {
            let bad: i64 = c
                .query_row(
                    &format!(
                        "SELECT count(*) FROM (SELECT seq >> {shift} AS b, count(*) AS n FROM domains
                         WHERE organization_id = ?1 GROUP BY b) d
                         FULL OUTER JOIN (SELECT bucket, count FROM {table} WHERE organization_id = ?1) k
                         ON k.bucket = d.b WHERE k.count IS NOT d.n"
                    ),
                    [org],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(bad, 0, "{table} disagrees with the list");
        }
    }

    #[test]
    fn pages_across_super_buckets() {
        let (c, org) = db();
        // Start positions near the end of the first super-bucket so pages straddle it.
        c.execute(
            "UPDATE organizations SET domain_seq = 65000 WHERE id = ?1",
            [org],
        )
        .unwrap();
        let names: Vec<PreparedEvent> = (0..3000).map(|i| ev(&format!("s{i}.example"))).collect();
        ingest(&c, &mut WriterCache::new(), org, "b", 1, &batch(names)).unwrap();
        for id in (1..=3000).filter(|i| i % 5 == 0 || (400..1500).contains(i)) {
            assert!(delete_by_id(&c, org, id).unwrap());
        }
        assert_counts_consistent(&c, org);
        let all: Vec<i64> = {
            let mut s = c.prepare("SELECT id FROM domains ORDER BY id").unwrap();
            s.query_map([], |r| r.get(0))
                .unwrap()
                .map(|r| r.unwrap())
                .collect()
        };
        for limit in [3u64, 200] {
            let mut seen = Vec::new();
            for page in 1.. {
                let (entries, more) = list_page(&c, org, page, limit).unwrap();
                seen.extend(entries.iter().map(|e| e.id));
                if !more {
                    break;
                }
            }
            assert_eq!(seen, all, "limit {limit}");
        }
    }

    #[test]
    fn repeated_name_keeps_id_and_refreshes_last_seen() {
        let (c, org) = db();
        // The same cache throughout, as the writer keeps it: what it remembers of x.example
        // (seen at 10) must not stop the refresh at 20.
        let cache = &mut WriterCache::new();
        ingest(&c, cache, org, "a", 10, &batch(vec![ev("x.example")])).unwrap();
        ingest(
            &c,
            cache,
            org,
            "b",
            20,
            &batch(vec![ev("x.example"), ev("x.example")]),
        )
        .unwrap();
        let (entries, _) = list_page(&c, org, 1, 200).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].last_seen_at, 20);
        assert_eq!(event_count(&c, org).unwrap(), 3);
        // New names after cached ones take the next positions and ids, in order.
        ingest(
            &c,
            cache,
            org,
            "c",
            20,
            &batch(vec![ev("y.example"), ev("x.example")]),
        )
        .unwrap();
        ingest(&c, cache, org, "d", 30, &batch(vec![ev("z.example")])).unwrap();
        let (entries, _) = list_page(&c, org, 1, 200).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["x.example", "y.example", "z.example"]);
        assert!(entries.windows(2).all(|w| w[0].id < w[1].id));
        let seq: i64 = c
            .query_row(
                "SELECT domain_seq FROM organizations WHERE id = ?1",
                [org],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(seq, 3);
    }

    #[test]
    fn listed_names_among_runs_of_new_ones_keep_their_entries() {
        // Runs of new names switch to inserting straight away; a listed name inside a run must
        // keep its id and get its lastSeenAt refreshed, and take no position. Both the small
        // (cached) and the large (uncached) request paths.
        for (size, fresh_cache) in [(12usize, false), (12, true), (300, false)] {
            let (c, org) = db();
            let cache = &mut WriterCache::new();
            let old: Vec<String> = (0..size)
                .step_by(4)
                .map(|i| format!("n{i}.example"))
                .collect();
            let first = batch(old.iter().map(|n| ev(n)).collect());
            ingest(&c, cache, org, "a", 10, &first).unwrap();
            let before: std::collections::HashMap<String, i64> = {
                let mut st = c.prepare("SELECT name, id FROM domains").unwrap();
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .unwrap()
                    .map(|r| r.unwrap())
                    .collect()
            };
            let names: Vec<String> = (0..size).map(|i| format!("n{i}.example")).collect();
            if fresh_cache {
                // The writer's cache forgot the listed names: they are found by inserting.
                cache.clear();
            }
            let added = ingest(
                &c,
                cache,
                org,
                "b",
                20,
                &batch(names.iter().map(|n| ev(n)).collect()),
            )
            .unwrap();
            assert_eq!(added as usize, size - old.len(), "size {size}");
            let rows: Vec<(String, i64, i64, i64)> = {
                let mut st = c
                    .prepare("SELECT name, id, seq, last_seen_at FROM domains ORDER BY seq")
                    .unwrap();
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .unwrap()
                    .map(|r| r.unwrap())
                    .collect()
            };
            assert_eq!(rows.len(), size);
            // Positions 1..=size without gaps, ids in position order, everything seen at 20.
            for (i, (name, id, seq, seen)) in rows.iter().enumerate() {
                assert_eq!(*seq, i as i64 + 1, "{name}");
                assert_eq!(*seen, 20, "{name}");
                if let Some(old_id) = before.get(name) {
                    assert_eq!(id, old_id, "{name} kept its id");
                }
            }
            assert!(rows.windows(2).all(|w| w[0].1 < w[1].1));
            // The new names come after the old ones, in the order sent.
            let new_order: Vec<&str> = rows[old.len()..].iter().map(|r| r.0.as_str()).collect();
            let expected: Vec<&str> = names
                .iter()
                .filter(|n| !before.contains_key(*n))
                .map(String::as_str)
                .collect();
            assert_eq!(new_order, expected);
            assert_counts_consistent(&c, org);
        }
    }
}
