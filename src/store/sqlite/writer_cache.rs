//! What the writer remembers between event writes: which organization a live customer key
//! belongs to, where each organization's list ends (its last position and open block of counts),
//! the last domain id given, and the id and `lastSeenAt` of names recently written. A single
//! event whose name was already seen this second then costs the writer one statement (its
//! request row) instead of four (key, position, name look-up, row).
//!
//! The cache belongs to the writer's connection and moves with it (the bulk write thread borrows
//! both). It is only ever a copy of what that connection's own transactions read or wrote, and
//! is emptied whenever that may no longer hold:
//! - another connection or process committed (`PRAGMA data_version` changed; checked at the start
//!   of every write transaction, once the write lock is held, so nothing can change under it);
//! - a write that does not keep the cache up to date runs in this connection's transaction (every
//!   management write, a domain deletion: see `Store::write` and `Store::write_events`);
//! - a write failed (its savepoint, or its whole transaction, was rolled back), or a commit did.

use std::collections::HashMap;

use rusqlite::Connection;

use crate::store::Result;

/// Entries kept of each kind before the kind is emptied and filled again. A few MiB at most.
const MAX_KEYS: usize = 4096;
const MAX_ORGS: usize = 4096;
const MAX_NAMES: usize = 16384;

#[derive(Default)]
pub struct WriterCache {
    /// The connection's `PRAGMA data_version` when the cache was last known to be current.
    version: Option<i64>,
    /// Live customer key -> organization id.
    keys: HashMap<Box<str>, i64>,
    /// Organization id -> (last position taken, open block): see `domains::ListEnd`.
    list_ends: HashMap<i64, (i64, i64)>,
    /// The highest domain id given, in any organization's list.
    last_id: Option<i64>,
    /// Organization id -> listed name -> (domain id, last_seen_at).
    names: HashMap<i64, HashMap<Box<str>, (i64, i64)>>,
    names_len: usize,
    /// Times the cache was emptied, for the writer's log.
    clears: u64,
}

impl WriterCache {
    pub fn new() -> WriterCache {
        WriterCache::default()
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        if self.keys.is_empty()
            && self.list_ends.is_empty()
            && self.last_id.is_none()
            && self.names_len == 0
        {
            return;
        }
        self.keys.clear();
        self.list_ends.clear();
        self.last_id = None;
        self.names.clear();
        self.names_len = 0;
        self.clears += 1;
    }

    /// How many times the cache has been emptied.
    pub fn clears(&self) -> u64 {
        self.clears
    }

    /// Empties the cache if another connection has committed since the last call. Called inside
    /// a write transaction.
    pub fn revalidate(&mut self, conn: &Connection) -> Result<()> {
        let version: i64 = conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        if self.version != Some(version) {
            self.clear();
            self.version = Some(version);
        }
        Ok(())
    }

    /// The organization of a live customer key (`tenants::resolve_customer_key`).
    pub fn organization_of_key(&mut self, conn: &Connection, key: &str) -> Result<Option<i64>> {
        if let Some(&org) = self.keys.get(key) {
            return Ok(Some(org));
        }
        let org = super::tenants::resolve_customer_key(conn, key)?;
        if let Some(org) = org {
            if self.keys.len() >= MAX_KEYS {
                self.keys.clear();
            }
            self.keys.insert(key.into(), org);
        }
        Ok(org)
    }

    /// Where the organization's list ends (last position, open block), if known.
    pub(crate) fn list_end(&self, org: i64) -> Option<(i64, i64)> {
        self.list_ends.get(&org).copied()
    }

    /// Records where the organization's list ends, as just read or written.
    pub(crate) fn set_list_end(&mut self, org: i64, last_seq: i64, open_block: i64) {
        if self.list_ends.len() >= MAX_ORGS && !self.list_ends.contains_key(&org) {
            self.list_ends.clear();
        }
        self.list_ends.insert(org, (last_seq, open_block));
    }

    /// The highest domain id given, if known.
    pub(crate) fn last_id(&self) -> Option<i64> {
        self.last_id
    }

    /// Records the highest domain id given.
    pub(crate) fn set_last_id(&mut self, id: i64) {
        self.last_id = Some(id);
    }

    /// (id, last_seen_at) of a listed name, if known.
    pub(crate) fn name(&self, org: i64, name: &str) -> Option<(i64, i64)> {
        self.names.get(&org)?.get(name).copied()
    }

    /// Records a listed name's id and `last_seen_at` as just read or written.
    pub(crate) fn set_name(&mut self, org: i64, name: &str, id: i64, last_seen_at: i64) {
        if self.names_len >= MAX_NAMES {
            self.names.clear();
            self.names_len = 0;
        }
        let names = self.names.entry(org).or_default();
        if let Some(entry) = names.get_mut(name) {
            *entry = (id, last_seen_at);
        } else {
            names.insert(name.into(), (id, last_seen_at));
            self.names_len += 1;
        }
    }
}

/// A statement of the event writes: its slot in `Statements` and its text.
#[derive(Clone, Copy)]
pub struct Sql(pub usize, pub &'static str);

/// Slots of `Statements`.
const STATEMENTS: usize = 8;

/// The event writes' statements, taken from the connection's statement cache once per write
/// transaction and given back when it ends (by drop). Each look-up in rusqlite's cache hashes the
/// statement's text, and the give-back hashes it again and resets the statement: in callgrind
/// about 1,700 instructions a use, more than executing a single event's request row; a group of
/// single events pays it once a statement instead of once a request.
pub struct Statements<'c> {
    conn: &'c Connection,
    taken: [Option<rusqlite::CachedStatement<'c>>; STATEMENTS],
}

impl<'c> Statements<'c> {
    pub fn new(conn: &'c Connection) -> Statements<'c> {
        Statements {
            conn,
            taken: Default::default(),
        }
    }

    /// The statement `sql`, prepared (or taken from the cache) on first use.
    pub fn get(&mut self, sql: Sql) -> Result<&mut rusqlite::CachedStatement<'c>> {
        let Sql(slot, text) = sql;
        let taken = self
            .taken
            .get_mut(slot)
            .ok_or_else(|| super::StoreError::Internal(format!("no statement slot {slot}")))?;
        Ok(match taken {
            Some(stmt) => stmt,
            None => taken.insert(self.conn.prepare_cached(text)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_is_taken_once_a_transaction_and_reused() {
        use rusqlite::StatementStatus::Run;
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        // Without a statement cache, each look-up there would prepare a new statement.
        conn.set_prepared_statement_cache_capacity(0);
        const INSERT: Sql = Sql(0, "INSERT INTO t (x) VALUES (?1)");
        const COUNT: Sql = Sql(1, "SELECT count(*) FROM t WHERE x >= ?1");
        let mut statements = Statements::new(&conn);
        for x in 0..3 {
            statements.get(INSERT).unwrap().execute([x]).unwrap();
        }
        assert_eq!(statements.get(INSERT).unwrap().get_status(Run), 3);
        let count = |statements: &mut Statements| -> i64 {
            let stmt = statements.get(COUNT).unwrap();
            stmt.query_row([1], |r| r.get(0)).unwrap()
        };
        assert_eq!(count(&mut statements), 2);
        assert_eq!(count(&mut statements), 2);
        assert_eq!(statements.get(COUNT).unwrap().get_status(Run), 2);
        drop(statements);
        // Given back reset: the connection's transactions go on.
        conn.execute_batch("BEGIN; DELETE FROM t; COMMIT").unwrap();
        Statements::new(&conn)
            .get(INSERT)
            .unwrap()
            .execute([7])
            .unwrap();
        let x: i64 = conn.query_row("SELECT x FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(x, 7);
        // A slot past the end is an error, not a panic.
        assert!(Statements::new(&conn)
            .get(Sql(STATEMENTS, "SELECT 1"))
            .is_err());
    }
}
