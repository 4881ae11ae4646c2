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

use super::Result;

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
