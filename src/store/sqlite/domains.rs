//! The enforcement data: events and each organization's domain list.
//!
//! Paging without OFFSET scans: every entry has a per-organization position `seq` (growing with
//! `id`); `domain_counts` counts the live entries in each closed block of 65536 positions (level
//! 0) and of 1024 (level 1). Finding page N walks the level-0 counts (one row per 65536 entries),
//! then at most 64 level-1 counts, then skips fewer than 1024 index entries, so a deep page costs
//! about as much as the first. The open block (where new entries go: the list's end) has no count
//! until new entries move past it, so listing a name rarely writes a count (see `schema.sql`).

use rusqlite::{params, Connection, OptionalExtension};

use super::writer_cache::{Sql, Statements};
use super::WriterCache;
use crate::store::model::*;
use crate::store::{Result, StoreError};

/// Requests listing at most this many names read and record them through the writer's cache.
/// Larger batches bypass it: recording thousands of mostly new names would cost them more than
/// the cache saves (and push out the names of the small requests it is for). The names such a
/// batch refreshes may then be remembered with an older `lastSeenAt`, which only costs a later
/// request one needless refresh.
const CACHED_NAMES_PER_REQUEST: usize = 64;

/// log2 of the positions per block of level 1.
const BUCKET_SHIFT: u32 = 10;
/// log2 of the positions per block of level 0.
const SUPER_SHIFT: u32 = 16;
/// `domain_counts.level` of the blocks of 65536 and of 1024 positions.
const LEVEL_SUPER: i64 = 0;
const LEVEL_BUCKET: i64 = 1;

/// Takes the entry `id` at position `seq` off the counts. An entry of the open block has none:
/// only a counted block of 1024 (and then its block of 65536) is decremented, its residues taken
/// off its sums, a row that reaches zero dropped.
fn uncount(conn: &Connection, org: i64, seq: i64, id: i64) -> Result<()> {
    let residues = crate::store::entry_residues(id);
    if decrement(conn, org, LEVEL_BUCKET, seq >> BUCKET_SHIFT, residues)? {
        decrement(conn, org, LEVEL_SUPER, seq >> SUPER_SHIFT, residues)?;
    }
    Ok(())
}

/// Takes one entry, of residues `(x, square)`, off a block's count and sums, dropping its row at
/// zero. False if it has no row.
fn decrement(
    conn: &Connection,
    org: i64,
    level: i64,
    block: i64,
    (x, square): (i64, i64),
) -> Result<bool> {
    let dropped = conn
        .prepare_cached(
            "DELETE FROM domain_counts
             WHERE organization_id = ?1 AND level = ?2 AND block = ?3 AND count <= 1",
        )?
        .execute(params![org, level, block])?;
    if dropped > 0 {
        return Ok(true);
    }
    let updated = conn
        .prepare_cached(
            "UPDATE domain_counts
             SET count = count - 1, residue_sum = residue_sum - ?4, square_sum = square_sum - ?5
             WHERE organization_id = ?1 AND level = ?2 AND block = ?3",
        )?
        .execute(params![org, level, block, x, square])?;
    Ok(updated > 0)
}

/// Closes the open block of 1024 positions `block`: counts its live entries, and sums their
/// residues, into its own row and its block of 65536. Called when a new entry's position is past
/// it.
fn close_block(conn: &Connection, org: i64, block: i64) -> Result<()> {
    // The ids from the index on positions (which holds them), the residues summed here: SQLite
    // evaluating the residues' arithmetic costs about three times as much a row.
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM domains WHERE organization_id = ?1 AND seq >= ?2 AND seq < ?3",
    )?;
    let mut rows = stmt.query(params![
        org,
        block << BUCKET_SHIFT,
        (block + 1) << BUCKET_SHIFT
    ])?;
    let (mut n, mut x, mut square) = (0i64, 0i64, 0i64);
    while let Some(r) = rows.next()? {
        let (a, b) = crate::store::entry_residues(r.get(0)?);
        (n, x, square) = (n + 1, x + a, square + b);
    }
    drop(rows);
    if n == 0 {
        return Ok(());
    }
    let add = "INSERT INTO domain_counts
                   (organization_id, level, block, count, residue_sum, square_sum)
               VALUES (?1, ?2, ?3, ?4, ?5, ?6)
               ON CONFLICT (organization_id, level, block) DO UPDATE
               SET count = count + excluded.count,
                   residue_sum = residue_sum + excluded.residue_sum,
                   square_sum = square_sum + excluded.square_sum";
    conn.prepare_cached(add)?
        .execute(params![org, LEVEL_BUCKET, block, n, x, square])?;
    let in_super = block >> (SUPER_SHIFT - BUCKET_SHIFT);
    conn.prepare_cached(add)?
        .execute(params![org, LEVEL_SUPER, in_super, n, x, square])?;
    Ok(())
}

/// The event writes' statements (slots of `Statements`).
const INSERT_REQUEST: Sql = Sql(
    0,
    "INSERT INTO event_batches
         (organization_id, uuid, received_at, event_count, domains, listed, events)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
);
const FIND_NAME: Sql = Sql(
    1,
    "SELECT id, last_seen_at FROM domains WHERE organization_id = ?1 AND name = ?2",
);
const TOUCH_NAME: Sql = Sql(2, "UPDATE domains SET last_seen_at = ?2 WHERE id = ?1");
// Ids and positions are given here (see `schema.sql`): `?1` the id, `?4` the position.
const INSERT_NAME: Sql = Sql(
    3,
    "INSERT INTO domains (id, organization_id, name, seq, created_at, last_seen_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
);
const INSERT_NEW_NAME: Sql = Sql(
    4,
    "INSERT INTO domains (id, organization_id, name, seq, created_at, last_seen_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?5)
     ON CONFLICT (organization_id, name) DO NOTHING",
);

/// Stores one request's events for `org` (one row, whatever the number of events) and adds the
/// listed domains (or refreshes their `lastSeenAt`). Runs inside the caller's transaction, and
/// reads through and records in `cache` what it can (a name already written this second costs
/// no statement at all). Returns how many names were new to the list.
pub fn ingest(
    conn: &Connection,
    cache: &mut WriterCache,
    statements: &mut Statements<'_>,
    org: i64,
    batch_uuid: &str,
    now: i64,
    batch: &PreparedBatch,
) -> Result<u64> {
    statements.get(INSERT_REQUEST)?.execute(params![
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
    // After two new names in a row, the next is tried as an insert straight away
    // (`INSERT_NEW_NAME`): in a batch of new names that is one search of the name index each
    // instead of a look-up and then the insert's own. A name already listed then costs a
    // refused insert and the look-up, and the batch goes back to looking up first (in a batch
    // that mostly repeats names, two new ones in a row are rare).
    let mut new_in_a_row = 0u32;
    // Where the list ends (read when the first new name needs it) and how many were added.
    let mut end: Option<ListEnd> = None;
    let mut added = 0u64;

    let cached = batch.to_list.len() <= CACHED_NAMES_PER_REQUEST;
    // Each listed name once, in the order of its first event (new entries get their positions,
    // and ids, in the order the client sent them).
    for name in &batch.to_list {
        let known = if cached { cache.name(org, name) } else { None };
        let mut new = None;
        if known.is_none() && new_in_a_row >= 2 {
            let e = list_end(conn, cache, org, &mut end)?;
            new = e.append(conn, statements.get(INSERT_NEW_NAME)?, org, name, now)?;
        }
        let id = match new {
            Some(id) => id,
            None => {
                let listed: Option<(i64, i64)> = match known {
                    Some(known) => Some(known),
                    None => statements
                        .get(FIND_NAME)?
                        .query_row(params![org, name], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()?,
                };
                match listed {
                    Some((id, seen)) => {
                        new_in_a_row = 0;
                        if seen != now {
                            statements.get(TOUCH_NAME)?.execute(params![id, now])?;
                        }
                        id
                    }
                    None => {
                        // A plain insert adds its row or fails.
                        let e = list_end(conn, cache, org, &mut end)?;
                        let id = e
                            .append(conn, statements.get(INSERT_NAME)?, org, name, now)?
                            .ok_or_else(|| StoreError::Internal("an insert added no row".into()))?;
                        new = Some(id);
                        id
                    }
                }
            }
        };
        if new.is_some() {
            new_in_a_row += 1;
            added += 1;
        }
        if cached && known != Some((id, now)) {
            cache.set_name(org, name, id, now);
        }
    }
    if let Some(e) = end {
        cache.set_list_end(org, e.last_seq, e.open_block);
        cache.set_last_id(e.last_id);
    }
    Ok(added)
}

/// Where an organization's list ends, as the writer gives out ids and positions: the highest id
/// given (in any organization's list), the last position taken in this one, and its open block
/// of 1024 positions (the one new entries go into; it has no count yet).
struct ListEnd {
    last_id: i64,
    last_seq: i64,
    open_block: i64,
}

impl ListEnd {
    /// Inserts `name` as the list's next entry with `insert` (parameters: id, organization,
    /// name, position, time), closing the open block first when the position is past it.
    /// Returns the new entry's id, or none if the statement inserted nothing.
    fn append(
        &mut self,
        conn: &Connection,
        insert: &mut rusqlite::Statement<'_>,
        org: i64,
        name: &str,
        now: i64,
    ) -> Result<Option<i64>> {
        let (id, seq) = (self.last_id + 1, self.last_seq + 1);
        let block = seq >> BUCKET_SHIFT;
        if block > self.open_block {
            close_block(conn, org, self.open_block)?;
            self.open_block = block;
        }
        if insert.execute(params![id, org, name, seq, now])? == 0 {
            return Ok(None);
        }
        (self.last_id, self.last_seq) = (id, seq);
        Ok(Some(id))
    }
}

/// The list's end for `org`, read once a request (from the writer's cache when it holds it).
fn list_end<'e>(
    conn: &Connection,
    cache: &WriterCache,
    org: i64,
    end: &'e mut Option<ListEnd>,
) -> Result<&'e mut ListEnd> {
    if let Some(e) = end {
        return Ok(e);
    }
    let last_id = match cache.last_id() {
        Some(id) => id,
        // Above every id in the table and every id ever deleted.
        None => conn
            .prepare_cached(
                "SELECT max(coalesce((SELECT max(id) FROM domains), 0),
                            coalesce((SELECT max(floor) FROM domain_id_floor), 0))",
            )?
            .query_row([], |r| r.get(0))?,
    };
    let (last_seq, open_block) = match cache.list_end(org) {
        Some(known) => known,
        None => {
            let (max_seq, counted): (i64, Option<i64>) = conn
                .prepare_cached(
                    "SELECT coalesce((SELECT max(seq) FROM domains WHERE organization_id = ?1), 0),
                            (SELECT max(block) FROM domain_counts
                             WHERE organization_id = ?1 AND level = 1)",
                )?
                .query_row(params![org], |r| Ok((r.get(0)?, r.get(1)?)))?;
            // New entries go past the last entry and past every counted block: the open block is
            // the last entry's, unless that one is counted (its entries may all have been
            // deleted), then the block after the counted ones.
            let open = (max_seq >> BUCKET_SHIFT).max(counted.map_or(0, |b| b + 1));
            (max_seq.max((open << BUCKET_SHIFT) - 1), open)
        }
    };
    Ok(end.insert(ListEnd {
        last_id,
        last_seq,
        open_block,
    }))
}

/// Reads page `page` (1-based) of `limit` entries, ordered by id. Returns the entries and whether
/// a further page exists.
pub fn list_page(
    conn: &Connection,
    org: i64,
    page: u64,
    limit: u64,
) -> Result<(Vec<DomainEntry>, bool)> {
    // An offset SQLite cannot take (it reads a negative OFFSET as 0) is past every entry.
    let Some(offset) = page
        .checked_sub(1)
        .and_then(|p| p.checked_mul(limit))
        .filter(|o| i64::try_from(*o).is_ok())
    else {
        return Ok((Vec::new(), false));
    };
    let (start_seq, skip) = if offset == 0 {
        (0i64, 0u64)
    } else {
        // Blocks of 65536 first, then the blocks of 1024 inside the one that holds the offset.
        let per = 1i64 << (SUPER_SHIFT - BUCKET_SHIFT);
        match find_block(conn, org, LEVEL_SUPER, (0, i64::MAX), offset)? {
            (Some(sb), before) => {
                let range = (sb * per, (sb + 1) * per);
                match find_block(conn, org, LEVEL_BUCKET, range, offset - before)? {
                    (Some(bucket), before_bucket) => {
                        (bucket << BUCKET_SHIFT, offset - before - before_bucket)
                    }
                    // A level-0 count is the sum of its level-1 counts.
                    (None, _) => return Err(StoreError::Internal("domain counts disagree".into())),
                }
            }
            // Past every counted entry: in the open block, after the last counted one.
            (None, counted) => {
                let last: Option<i64> = conn
                    .prepare_cached(
                        "SELECT max(block) FROM domain_counts
                         WHERE organization_id = ?1 AND level = ?2",
                    )?
                    .query_row(params![org, LEVEL_BUCKET], |r| r.get(0))?;
                (
                    last.map_or(0, |b| (b + 1) << BUCKET_SHIFT),
                    offset - counted,
                )
            }
        }
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
    let gone = conn
        .prepare_cached(
            "DELETE FROM domains WHERE organization_id = ?1 AND id = ?2 RETURNING seq, id",
        )?
        .query_row(params![org, id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    forget_position(conn, org, gone)
}

/// Removes the entry with this (normalised) name. False if there is none.
pub fn delete_by_name(conn: &Connection, org: i64, name: &str) -> Result<bool> {
    let gone = conn
        .prepare_cached(
            "DELETE FROM domains WHERE organization_id = ?1 AND name = ?2 RETURNING seq, id",
        )?
        .query_row(params![org, name], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    forget_position(conn, org, gone)
}

/// Walks the counts of `level` with blocks in `range` until the running count passes `offset`;
/// returns the block holding it and how many counted entries lie before that block, or no block
/// and how many entries those counts hold in all.
fn find_block(
    conn: &Connection,
    org: i64,
    level: i64,
    range: (i64, i64),
    offset: u64,
) -> Result<(Option<i64>, u64)> {
    let mut stmt = conn.prepare_cached(
        "SELECT block, count FROM domain_counts
         WHERE organization_id = ?1 AND level = ?2 AND block >= ?3 AND block < ?4
         ORDER BY block",
    )?;
    let mut rows = stmt.query(params![org, level, range.0, range.1])?;
    let mut before = 0u64;
    while let Some(row) = rows.next()? {
        let block: i64 = row.get(0)?;
        let count = row.get::<_, i64>(1)?.max(0) as u64;
        if before + count > offset {
            return Ok((Some(block), before));
        }
        before += count;
    }
    Ok((None, before))
}

/// Takes a deleted entry (its position and id, if there was one) off the counts.
fn forget_position(conn: &Connection, org: i64, gone: Option<(i64, i64)>) -> Result<bool> {
    let Some((seq, id)) = gone else {
        return Ok(false);
    };
    uncount(conn, org, seq, id)?;
    Ok(true)
}

/// Every listed name of the organization, for export.
pub fn all_names(conn: &Connection, org: i64) -> Result<Vec<String>> {
    let mut stmt =
        conn.prepare("SELECT name FROM domains WHERE organization_id = ?1 ORDER BY seq")?;
    let rows = stmt.query_map(params![org], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<Vec<String>>>()?)
}

/// The statement of `search`.
static SEARCH: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::store::search_domains_query('?'));

/// A page of a search by name (see `Store::search_domains`): one range of the index on
/// `(organization_id, name)`, bounded as `crate::store::search_domains_params` says.
pub fn search(
    conn: &Connection,
    org: i64,
    prefix: &str,
    after: &str,
    limit: i64,
) -> Result<Vec<DomainEntry>> {
    let mut stmt = conn.prepare_cached(&SEARCH)?;
    let (start, after, end, limit) = crate::store::search_domains_params(prefix, after, limit);
    let rows = stmt.query_map(params![org, start, after, end, limit], |r| {
        Ok(DomainEntry {
            id: r.get(0)?,
            name: r.get(1)?,
            last_seen_at: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// The number of organizations, and the length of the domain list of each of the first `limit`
/// by id, from the counts the paging keeps: per organization, the sum of its level-0 counts (one
/// row per 65536 positions) plus the entries past its highest counted block of 1024 (the open
/// block, fewer than 1024 index entries; see `schema.sql`). A million names cost some 16 rows and
/// at most 1024 index entries, not a million.
pub fn counts_per_organization(conn: &Connection, limit: i64) -> Result<(i64, Vec<(i64, i64)>)> {
    let total: i64 = conn
        .prepare_cached("SELECT count(*) FROM organizations")?
        .query_row([], |r| r.get(0))?;
    let mut stmt = conn.prepare_cached(
        "SELECT o.id,
                (SELECT coalesce(sum(count), 0) FROM domain_counts
                  WHERE organization_id = o.id AND level = ?2)
              + (SELECT count(*) FROM domains
                  WHERE organization_id = o.id
                    AND seq >= coalesce((SELECT max(block) + 1 FROM domain_counts
                                          WHERE organization_id = o.id AND level = ?3), 0) * ?4)
           FROM organizations o ORDER BY o.id LIMIT ?1",
    )?;
    let rows = stmt.query_map(
        params![limit, LEVEL_SUPER, LEVEL_BUCKET, 1i64 << BUCKET_SHIFT],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok((total, rows.collect::<rusqlite::Result<_>>()?))
}

/// The organization's list length and the sums of its entries' residues (`entry_residues`),
/// from the counts the paging keeps, as `counts_per_organization` counts: the level-0 rows'
/// sums plus the entries past the highest counted block of 1024 (the open block). A million
/// names cost some 16 rows and at most 1024 index entries.
pub fn list_totals(conn: &Connection, org: i64) -> Result<(i64, i64, i64)> {
    const TOTALS: &str = concat!(
        "SELECT c.n + o.n, c.x + o.x, c.square + o.square
         FROM (SELECT coalesce(sum(count), 0) AS n, coalesce(sum(residue_sum), 0) AS x,
                      coalesce(sum(square_sum), 0) AS square
               FROM domain_counts WHERE organization_id = ?1 AND level = ?2) AS c,
              (SELECT ",
        crate::store::residue_sums_sql!(),
        " FROM domains
               WHERE organization_id = ?1
                 AND seq >= coalesce((SELECT max(block) + 1 FROM domain_counts
                                      WHERE organization_id = ?1 AND level = ?3), 0) * ?4)
                  AS o"
    );
    Ok(conn.prepare_cached(TOTALS)?.query_row(
        params![org, LEVEL_SUPER, LEVEL_BUCKET, 1i64 << BUCKET_SHIFT],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?)
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
    use std::collections::BTreeMap;

    use super::super::tenants::create_organization;
    use super::*;
    use crate::store::{OrgFields, Parent};

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
        crate::store::sqlite::migrate::migrate(&mut c).unwrap();
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
    /// `ingest` in a transaction's statements of its own.
    fn put(
        c: &Connection,
        cache: &mut WriterCache,
        org: i64,
        uuid: &str,
        now: i64,
        batch: &PreparedBatch,
    ) -> Result<u64> {
        ingest(c, cache, &mut Statements::new(c), org, uuid, now, batch)
    }

    fn batch(events: Vec<PreparedEvent>) -> PreparedBatch {
        let json = format!("[{}]", vec!["{}"; events.len()].join(","));
        PreparedBatch::new(events, json)
    }

    #[test]
    fn pages_match_a_plain_scan_after_deletes() {
        let (c, org) = db();
        let names: Vec<PreparedEvent> = (0..5000).map(|i| ev(&format!("d{i}.example"))).collect();
        put(&c, &mut WriterCache::new(), org, "b", 1, &batch(names)).unwrap();
        // Punch holes, including a whole bucket.
        for id in (1..=5000).filter(|i| i % 7 == 0 || (1100..2200).contains(i)) {
            assert!(delete_by_id(&c, org, id).unwrap());
        }
        for limit in [1u64, 7, 200] {
            assert_pages_match_a_scan(&c, org, limit);
        }
        let (past, more) = list_page(&c, org, 10_000, 200).unwrap();
        assert!(past.is_empty() && !more);
        let (huge, _) = list_page(&c, org, u64::MAX, 200).unwrap();
        assert!(huge.is_empty());
        assert_counts_consistent(&c, org);
    }

    /// The counts agree with the rows they count: a level-1 row for each closed block of 1024
    /// that holds entries (those below the open one, the block of the last entry or the one
    /// after the highest counted block), with its number of entries; none for the open block or
    /// past it; each level-0 row the sum of its level-1 rows; no entry past the open block.
    fn assert_counts_consistent(c: &Connection, org: i64) {
        let q = |sql: &str| -> Vec<(i64, i64)> {
            let mut st = c.prepare(sql).unwrap();
            st.query_map([org], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(|r| r.unwrap())
                .collect()
        };
        let blocks = q("SELECT seq >> 10 AS b, count(*) FROM domains
                        WHERE organization_id = ?1 GROUP BY b ORDER BY b");
        let level1 = q("SELECT block, count FROM domain_counts
                        WHERE organization_id = ?1 AND level = 1 ORDER BY block");
        let level0 = q("SELECT block, count FROM domain_counts
                        WHERE organization_id = ?1 AND level = 0 ORDER BY block");
        let last_entry = blocks.last().map_or(0, |b| b.0);
        let open = last_entry.max(level1.last().map_or(0, |b| b.0 + 1));
        let closed: Vec<(i64, i64)> = blocks.iter().copied().filter(|b| b.0 < open).collect();
        assert_eq!(level1, closed, "level-1 counts disagree with the list");
        assert!(
            blocks.iter().all(|b| b.0 <= open),
            "an entry past the open block"
        );
        let mut sums: BTreeMap<i64, i64> = BTreeMap::new();
        for (b, n) in &level1 {
            *sums.entry(b >> 6).or_default() += n;
        }
        assert_eq!(
            level0,
            sums.into_iter().collect::<Vec<_>>(),
            "level-0 counts"
        );
        // What `/metrics` reports as the list's length, from the counts, is its length.
        let rows: i64 = c
            .query_row(
                "SELECT count(*) FROM domains WHERE organization_id = ?1",
                [org],
                |r| r.get(0),
            )
            .unwrap();
        let (orgs, counted) = counts_per_organization(c, 1_000).unwrap();
        assert!(orgs >= 1);
        assert_eq!(
            counted.iter().find(|(o, _)| *o == org).map(|c| c.1),
            Some(rows),
            "domains per organization"
        );
    }

    /// Every page of `limit`, walked from the first, gives exactly the list in id order.
    fn assert_pages_match_a_scan(c: &Connection, org: i64, limit: u64) {
        let all: Vec<i64> = {
            let mut s = c
                .prepare("SELECT id FROM domains WHERE organization_id = ?1 ORDER BY id")
                .unwrap();
            s.query_map([org], |r| r.get(0))
                .unwrap()
                .map(|r| r.unwrap())
                .collect()
        };
        let mut seen = Vec::new();
        for page in 1.. {
            let (entries, more) = list_page(c, org, page, limit).unwrap();
            seen.extend(entries.iter().map(|e| e.id));
            if !more {
                break;
            }
        }
        assert_eq!(seen, all, "limit {limit}");
    }

    /// The `n` highest ids of the table (all of them for -1), highest first.
    fn last_ids(c: &Connection, n: i64) -> Vec<i64> {
        c.prepare("SELECT id FROM domains ORDER BY id DESC LIMIT ?1")
            .unwrap()
            .query_map([n], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    }

    #[test]
    fn pages_and_counts_hold_through_adds_deletes_and_a_forgetful_writer() {
        // A pseudo-random walk of requests adding names (some already listed), deletions
        // anywhere (the open block and the list's end included) and the writer's cache emptied
        // now and then, as another process's commit does: after each step the counts agree with
        // the list and every page with a plain scan, and no id is ever given twice.
        let (c, org) = db();
        let cache = &mut WriterCache::new();
        let mut ever: std::collections::HashSet<i64> = std::collections::HashSet::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..120 {
            match next() % 6 {
                0..=2 => {
                    let n = 1 + next() % 400;
                    let names: Vec<PreparedEvent> = (0..n)
                        .map(|_| ev(&format!("r{}.example", next() % 6000)))
                        .collect();
                    put(&c, cache, org, "b", step, &batch(names)).unwrap();
                }
                3 => {
                    // Delete a run at the end of the list (the open block and beyond).
                    for id in last_ids(&c, 1 + next() as i64 % 1500) {
                        assert!(delete_by_id(&c, org, id).unwrap());
                    }
                    cache.clear();
                }
                4 => {
                    for id in last_ids(&c, -1).into_iter().filter(|_| next() % 3 == 0) {
                        assert!(delete_by_id(&c, org, id).unwrap());
                    }
                    cache.clear();
                }
                _ => cache.clear(),
            }
            ever.extend(last_ids(&c, -1));
            assert_counts_consistent(&c, org);
            if step % 10 == 9 {
                assert_pages_match_a_scan(&c, org, 200);
                assert_pages_match_a_scan(&c, org, 37);
            }
        }
        // Every id ever seen was given once: a new name after all those deletions gets an id
        // above every one of them.
        put(&c, cache, org, "z", 999, &batch(vec![ev("last.example")])).unwrap();
        let id: i64 = c
            .query_row(
                "SELECT id FROM domains WHERE name = 'last.example'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(ever.iter().all(|&e| e < id));
    }

    #[test]
    fn ids_are_never_reused_after_the_last_entries_go() {
        let (c, org) = db();
        let f = OrgFields {
            name: "u".into(),
            seats: 1,
            ..Default::default()
        };
        let other = create_organization(&c, Parent::None, &f, 0).unwrap().id;
        let names = |p: &str| batch((0..3).map(|i| ev(&format!("{p}{i}.example"))).collect());
        put(&c, &mut WriterCache::new(), org, "a", 1, &names("a")).unwrap();
        put(&c, &mut WriterCache::new(), other, "b", 1, &names("b")).unwrap();
        // The highest id, by name; then, by the organization's deletion, the others' ids.
        assert!(delete_by_name(&c, other, "b2.example").unwrap());
        let fresh = || WriterCache::new();
        put(&c, &mut fresh(), org, "c", 2, &batch(vec![ev("c.example")])).unwrap();
        let id = |name: &str| -> i64 {
            c.query_row("SELECT id FROM domains WHERE name = ?1", [name], |r| {
                r.get(0)
            })
            .unwrap()
        };
        assert_eq!(id("c.example"), 7, "not 6, the deleted b2.example's");
        c.execute("DELETE FROM domains WHERE name = 'c.example'", [])
            .unwrap();
        c.execute("DELETE FROM organizations WHERE id = ?1", [other])
            .unwrap();
        put(&c, &mut fresh(), org, "d", 3, &batch(vec![ev("d.example")])).unwrap();
        assert_eq!(id("d.example"), 8);
        let floor: i64 = c
            .query_row("SELECT floor FROM domain_id_floor", [], |r| r.get(0))
            .unwrap();
        assert_eq!(floor, 7);
    }

    /// A page far into the list is found by seeking the name index to its cursor: the search
    /// steps through the page's entries, not through the names before the cursor (with the
    /// prefix and the cursor given as two lower bounds, SQLite sought to the prefix and stepped
    /// through every name up to the cursor).
    #[test]
    fn a_search_seeks_to_its_cursor_however_deep() {
        let (c, org) = db();
        let names: Vec<PreparedEvent> =
            (0..5000).map(|i| ev(&format!("d{i:04}.example"))).collect();
        put(&c, &mut WriterCache::new(), org, "b", 1, &batch(names)).unwrap();
        let steps = |prefix: &str, after: &str| {
            let page = search(&c, org, prefix, after, 10).unwrap();
            let stmt = c.prepare_cached(&SEARCH).unwrap();
            let steps = stmt.get_status(rusqlite::StatementStatus::VmStep);
            stmt.reset_status(rusqlite::StatementStatus::VmStep);
            (page.first().map(|e| e.name.clone()), page.len(), steps)
        };
        let (first, n, shallow) = steps("", "");
        assert_eq!((first.as_deref(), n), (Some("d0000.example"), 10));
        for (prefix, after, expected) in [
            ("", "d4900.example", "d4901.example"),
            ("d", "d4900.example", "d4901.example"),
            ("d49", "d4900.example", "d4901.example"),
            ("d49", "a", "d4900.example"),
        ] {
            let (first, n, deep) = steps(prefix, after);
            assert_eq!((first.as_deref(), n), (Some(expected), 10));
            assert!(
                deep <= 2 * shallow,
                "{prefix:?} after {after:?}: {deep} steps, page 1 {shallow}"
            );
        }
    }

    #[test]
    fn pages_across_super_buckets() {
        let (c, org) = db();
        // An entry near the end of the first block of 65536 (in the open block: no count), so
        // that the positions that follow, and pages, straddle it.
        c.execute(
            "INSERT INTO domains (id, organization_id, name, seq, created_at, last_seen_at)
             VALUES (1, ?1, 'first.example', 65000, 0, 0)",
            [org],
        )
        .unwrap();
        let names: Vec<PreparedEvent> = (0..3000).map(|i| ev(&format!("s{i}.example"))).collect();
        put(&c, &mut WriterCache::new(), org, "b", 1, &batch(names)).unwrap();
        let top: i64 = c
            .query_row("SELECT max(seq) FROM domains", [], |r| r.get(0))
            .unwrap();
        assert_eq!(top, 68000);
        for id in (1..=3001).filter(|i| i % 5 == 0 || (400..1500).contains(i)) {
            assert!(delete_by_id(&c, org, id).unwrap());
        }
        assert_counts_consistent(&c, org);
        for limit in [3u64, 200] {
            assert_pages_match_a_scan(&c, org, limit);
        }
    }

    #[test]
    fn repeated_name_keeps_id_and_refreshes_last_seen() {
        let (c, org) = db();
        // The same cache throughout, as the writer keeps it: what it remembers of x.example
        // (seen at 10) must not stop the refresh at 20.
        let cache = &mut WriterCache::new();
        put(&c, cache, org, "a", 10, &batch(vec![ev("x.example")])).unwrap();
        put(
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
        put(
            &c,
            cache,
            org,
            "c",
            20,
            &batch(vec![ev("y.example"), ev("x.example")]),
        )
        .unwrap();
        put(&c, cache, org, "d", 30, &batch(vec![ev("z.example")])).unwrap();
        let (entries, _) = list_page(&c, org, 1, 200).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["x.example", "y.example", "z.example"]);
        assert!(entries.windows(2).all(|w| w[0].id < w[1].id));
        let seq: i64 = c
            .query_row("SELECT max(seq) FROM domains", [], |r| r.get(0))
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
            put(&c, cache, org, "a", 10, &first).unwrap();
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
            let added = put(
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
