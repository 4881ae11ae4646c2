//! The enforcement data: events and each organization's domain list.
//!
//! Paging without OFFSET scans: every entry has a per-organization position `seq` (growing with
//! `id`), and `domain_buckets` counts the live entries in each block of 1024 positions. Finding
//! page N walks the bucket counts (about one row per 1024 entries) and then skips fewer than 1024
//! index entries, so a deep page costs about as much as the first.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use super::Result;

/// log2 of the positions per bucket.
const BUCKET_SHIFT: u32 = 10;

/// An event that passed validation, ready to store.
#[derive(Debug, Clone)]
pub struct PreparedEvent {
    /// Normalised dstDomain.
    pub domain: String,
    /// Whether the acceptance checks put the domain on the list.
    pub listed: bool,
    /// The event as sent, as JSON text.
    pub body: String,
}

/// One entry of the domain list as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainEntry {
    pub id: i64,
    pub name: String,
    pub last_seen_at: i64,
}

/// Stores one request's events for `org` and adds the listed domains (or refreshes their
/// `lastSeenAt`). Runs inside the caller's transaction. Returns how many names were new to the
/// list.
pub fn ingest(
    conn: &Connection,
    org: i64,
    batch_uuid: &str,
    now: i64,
    events: &[PreparedEvent],
) -> Result<u64> {
    conn.prepare_cached(
        "INSERT INTO event_batches (organization_id, uuid, received_at) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![org, batch_uuid, now])?;
    let batch_id = conn.last_insert_rowid();

    let mut insert_event = conn.prepare_cached(
        "INSERT INTO events (batch_id, idx, domain, listed, body) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut touch = conn.prepare_cached(
        "UPDATE domains SET last_seen_at = ?3 WHERE organization_id = ?1 AND name = ?2",
    )?;
    let mut insert_domain = conn.prepare_cached(
        "INSERT INTO domains (organization_id, name, seq, created_at, last_seen_at)
         VALUES (?1, ?2, ?3, ?4, ?4)",
    )?;
    let start_seq: i64 = conn
        .prepare_cached("SELECT domain_seq FROM organizations WHERE id = ?1")?
        .query_row(params![org], |r| r.get(0))?;
    let mut seq = start_seq;
    let mut bucket_adds: BTreeMap<i64, i64> = BTreeMap::new();

    for (idx, e) in events.iter().enumerate() {
        insert_event.execute(params![batch_id, idx as i64, e.domain, e.listed, e.body])?;
        if e.listed && touch.execute(params![org, e.domain, now])? == 0 {
            seq += 1;
            insert_domain.execute(params![org, e.domain, seq, now])?;
            *bucket_adds.entry(seq >> BUCKET_SHIFT).or_default() += 1;
        }
    }
    if seq != start_seq {
        conn.prepare_cached("UPDATE organizations SET domain_seq = ?2 WHERE id = ?1")?
            .execute(params![org, seq])?;
        let mut add = conn.prepare_cached(
            "INSERT INTO domain_buckets (organization_id, bucket, count) VALUES (?1, ?2, ?3)
             ON CONFLICT (organization_id, bucket) DO UPDATE SET count = count + excluded.count",
        )?;
        for (bucket, n) in bucket_adds {
            add.execute(params![org, bucket, n])?;
        }
    }
    Ok((seq - start_seq) as u64)
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
        let mut stmt = conn.prepare_cached(
            "SELECT bucket, count FROM domain_buckets WHERE organization_id = ?1 ORDER BY bucket",
        )?;
        let mut rows = stmt.query(params![org])?;
        let mut before = 0u64;
        let mut found = None;
        while let Some(row) = rows.next()? {
            let bucket: i64 = row.get(0)?;
            let count: i64 = row.get(1)?;
            let count = count.max(0) as u64;
            if before + count > offset {
                found = Some((bucket << BUCKET_SHIFT, offset - before));
                break;
            }
            before += count;
        }
        match found {
            Some(f) => f,
            None => return Ok((Vec::new(), false)),
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

fn forget_position(conn: &Connection, org: i64, seq: Option<i64>) -> Result<bool> {
    let Some(seq) = seq else { return Ok(false) };
    let bucket = seq >> BUCKET_SHIFT;
    let removed = conn
        .prepare_cached(
            "DELETE FROM domain_buckets WHERE organization_id = ?1 AND bucket = ?2 AND count <= 1",
        )?
        .execute(params![org, bucket])?;
    if removed == 0 {
        conn.prepare_cached(
            "UPDATE domain_buckets SET count = count - 1 WHERE organization_id = ?1 AND bucket = ?2",
        )?
        .execute(params![org, bucket])?;
    }
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
        "SELECT count(*) FROM events JOIN event_batches b ON b.id = events.batch_id
         WHERE b.organization_id = ?1",
        params![org],
        |r| r.get(0),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tenants::{create_organization, OrgFields, Parent};

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
            body: "{}".into(),
        }
    }

    #[test]
    fn pages_match_a_plain_scan_after_deletes() {
        let (c, org) = db();
        let names: Vec<PreparedEvent> = (0..5000).map(|i| ev(&format!("d{i}.example"))).collect();
        ingest(&c, org, "b", 1, &names).unwrap();
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
    }

    #[test]
    fn repeated_name_keeps_id_and_refreshes_last_seen() {
        let (c, org) = db();
        ingest(&c, org, "a", 10, &[ev("x.example")]).unwrap();
        ingest(&c, org, "b", 20, &[ev("x.example"), ev("x.example")]).unwrap();
        let (entries, _) = list_page(&c, org, 1, 200).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].last_seen_at, 20);
        assert_eq!(event_count(&c, org).unwrap(), 3);
    }
}
