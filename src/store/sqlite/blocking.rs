//! Enforcement on the appliance: each customer's allow list, the effective block list (domain
//! list minus what the allow list covers) and the answer to "is this name blocked for X".
//!
//! A name is blocked when it or one of its parents is on the domain list, unless it or one of its
//! parents is on the allow list (decisions.md: the allow list wins at enforcement time).

use rusqlite::{params, Connection, OptionalExtension};

use crate::names::self_and_parents;
use crate::store::rules::allow::{Allow, List};
use crate::store::rules::Rows;
use crate::store::{entry_check, list_check, ListCursor, ListRead, Result};

impl Allow for Connection {
    async fn insert_allowed(&self, org: i64, name: &str, now: i64) -> Result<bool> {
        Ok(self.execute(
            "INSERT OR IGNORE INTO allow_list (organization_id, name, created_at)
             VALUES (?1, ?2, ?3)",
            params![org, name, now],
        )? > 0)
    }

    async fn delete_allowed(&self, org: i64, name: &str) -> Result<bool> {
        Ok(self.execute(
            "DELETE FROM allow_list WHERE organization_id = ?1 AND name = ?2",
            params![org, name],
        )? > 0)
    }

    async fn allowed(&self, org: i64) -> Result<Vec<String>> {
        allow_list(self, org)
    }

    async fn record_list_change(&self, org: i64) -> Result<()> {
        super::tenants::record_list_change(self, org)
    }

    async fn present(&self, org: i64, list: List, names: &[&str]) -> Rows<String> {
        let table = match list {
            List::Listed => "domains",
            List::Allowed => "allow_list",
        };
        let sql = format!("SELECT 1 FROM {table} WHERE organization_id = ?1 AND name = ?2");
        let mut stmt = self.prepare_cached(&sql)?;
        let mut hits = Vec::new();
        for name in names {
            if stmt
                .query_row(params![org, name], |_| Ok(()))
                .optional()?
                .is_some()
            {
                hits.push(name.to_string());
            }
        }
        Ok(hits)
    }
}

/// The allow list, by name.
pub fn allow_list(conn: &Connection, org: i64) -> Result<Vec<String>> {
    let mut stmt =
        conn.prepare("SELECT name FROM allow_list WHERE organization_id = ?1 ORDER BY name")?;
    let rows = stmt.query_map(params![org], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The effective block list: listed names not covered by the allow list, in list order, and the
/// allow-list names that lie under a listed name (exceptions a resolver must let through).
///
/// Only the blocked names are held in memory (a domain list may hold millions): whether an
/// allow-listed name has a listed parent is looked up name by name (allow lists are short).
pub fn effective(conn: &Connection, org: i64) -> Result<(Vec<String>, Vec<String>)> {
    let allowed: std::collections::HashSet<String> = allow_list(conn, org)?.into_iter().collect();
    let covered =
        |name: &str| !allowed.is_empty() && self_and_parents(name).any(|n| allowed.contains(n));
    let mut stmt =
        conn.prepare("SELECT name FROM domains WHERE organization_id = ?1 ORDER BY seq")?;
    let mut rows = stmt.query(params![org])?;
    let mut blocked = Vec::new();
    while let Some(r) = rows.next()? {
        let name: String = r.get(0)?;
        if !covered(&name) {
            blocked.push(name);
        }
    }
    let exceptions = exceptions(conn, org, allowed.iter())?;
    Ok((blocked, exceptions))
}

/// The allow-listed names (of `allowed`) under a listed name, sorted: looked up name by name
/// (allow lists are short).
fn exceptions<'a>(
    conn: &Connection,
    org: i64,
    allowed: impl Iterator<Item = &'a String>,
) -> Result<Vec<String>> {
    let mut listed =
        conn.prepare_cached("SELECT 1 FROM domains WHERE organization_id = ?1 AND name = ?2")?;
    let mut exceptions = Vec::new();
    for a in allowed {
        for parent in self_and_parents(a).skip(1) {
            if listed
                .query_row(params![org, parent], |_| Ok(()))
                .optional()?
                .is_some()
            {
                exceptions.push(a.clone());
                break;
            }
        }
    }
    exceptions.sort();
    Ok(exceptions)
}

/// `Store::block_list_since`, inside the caller's read transaction. Positions are `seq`, which
/// the last entry's successor may take again once that entry is removed: the cursor holds only
/// while the entry at its position is still the one with its id.
pub fn list_since(conn: &Connection, org: i64, after: Option<ListCursor>) -> Result<ListRead> {
    let from = match after {
        Some(c) => conn
            .prepare_cached("SELECT id FROM domains WHERE organization_id = ?1 AND seq = ?2")?
            .query_row(params![org, c.position], |r| r.get::<_, i64>(0))
            .optional()?
            .filter(|id| *id == c.id)
            .map(|_| c.position),
        None => None,
    };
    let mut read = ListRead {
        whole: from.is_none(),
        ..ListRead::default()
    };
    let mut stmt = conn.prepare_cached(
        "SELECT seq, id, name FROM domains WHERE organization_id = ?1 AND seq > ?2 ORDER BY seq",
    )?;
    let mut rows = stmt.query(params![org, from.unwrap_or(i64::MIN)])?;
    while let Some(r) = rows.next()? {
        let (position, id) = (r.get(0)?, r.get(1)?);
        read.names.push(r.get(2)?);
        read.names_check = read.names_check.wrapping_add(entry_check(id));
        read.last = Some(ListCursor { position, id });
    }
    drop(rows);
    let (count, x, square) = super::domains::list_totals(conn, org)?;
    (read.count, read.check) = (count, list_check(x, square));
    if read.last.is_none() {
        read.last = after.filter(|_| from.is_some());
    }
    read.allowed = allow_list(conn, org)?;
    read.exceptions = exceptions(conn, org, read.allowed.iter())?;
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::super::tenants::create_organization;
    use super::*;
    use crate::store::rules::allow;
    use crate::store::sqlite::settle;
    use crate::store::{OrgFields, Parent};

    #[test]
    fn allow_list_wins_for_the_name_and_below() {
        let mut c = Connection::open_in_memory().unwrap();
        crate::store::sqlite::migrate::migrate(&mut c).unwrap();
        let f = OrgFields {
            name: "o".into(),
            seats: 1,
            ..Default::default()
        };
        let org = create_organization(&c, Parent::None, &f, 0).unwrap().id;
        let other = create_organization(&c, Parent::None, &f, 0).unwrap().id;
        let names = ["bad.example", "evil.test", "x.safe.test"];
        for (i, n) in names.iter().enumerate() {
            c.execute(
                "INSERT INTO domains (organization_id, name, seq, created_at, last_seen_at)
                 VALUES (?1, ?2, ?3, 0, 0)",
                params![org, n, i as i64],
            )
            .unwrap();
        }
        assert!(settle(allow::add(&c, org, "good.bad.example".into(), 0)).unwrap());
        assert!(!settle(allow::add(&c, org, "good.bad.example".into(), 0)).unwrap());
        assert!(settle(allow::add(&c, org, "safe.test".into(), 0)).unwrap());

        let v = settle(allow::verdict(&c, org, "www.bad.example".into())).unwrap();
        assert!(v.blocked);
        assert_eq!(v.listed_as.as_deref(), Some("bad.example"));
        let v = settle(allow::verdict(&c, org, "a.good.bad.example".into())).unwrap();
        assert!(!v.blocked);
        assert_eq!(v.allowed_by.as_deref(), Some("good.bad.example"));
        assert!(
            !settle(allow::verdict(&c, org, "x.safe.test".into()))
                .unwrap()
                .blocked
        );
        assert!(
            !settle(allow::verdict(&c, org, "unlisted.example".into()))
                .unwrap()
                .blocked
        );
        // Another organization's lists play no part.
        assert!(
            !settle(allow::verdict(&c, other, "bad.example".into()))
                .unwrap()
                .blocked
        );

        let (blocked, exceptions) = effective(&c, org).unwrap();
        assert_eq!(blocked, vec!["bad.example", "evil.test"]);
        assert_eq!(exceptions, vec!["good.bad.example"]);
        assert!(settle(allow::remove(&c, org, "safe.test".into())).unwrap());
        assert!(!settle(allow::remove(&c, org, "safe.test".into())).unwrap());
        assert_eq!(allow_list(&c, org).unwrap(), vec!["good.bad.example"]);
        assert!(
            settle(allow::verdict(&c, org, "x.safe.test".into()))
                .unwrap()
                .blocked
        );
    }
}
