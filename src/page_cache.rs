//! Recently served pages of the domain lists, reused while the database is unchanged.
//!
//! Products that enforce a domain list poll its first pages over and over; between two changes
//! every answer is the same. An entry is the page's `data` array as JSON text, stored with the
//! database's data version (`Store::data_version`) read *before* the page was: any commit since,
//! by this server or by another process (a key revoked, an organization deleted, a domain added,
//! deleted or seen again), changes the version, and the entry is no longer used. An entry
//! stored from a snapshot newer than its version is merely never used. The key lookup is part of
//! the entry, so a revoked key stops working at once, as without the cache.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;

/// Entries kept; past this, stale entries are dropped, then all of them.
const MAX_ENTRIES: usize = 256;

/// One cached page.
#[derive(Clone)]
pub struct CachedPage {
    /// The `data` array of the response, serialised.
    pub data: Bytes,
    /// Whether a further page exists.
    pub more: bool,
}

/// Per customer key (canonical form), the pages stored by (page, limit) with their data version.
/// Keyed by the key first so that a look-up borrows the request's key instead of copying it.
type Pages = HashMap<(u64, u64), (i64, CachedPage)>;

#[derive(Default)]
pub struct PageCache {
    entries: Mutex<HashMap<String, Pages>>,
}

impl PageCache {
    /// The page stored for this key, page and limit at data version `version`, if any.
    pub fn get(&self, key: &str, page: u64, limit: u64, version: i64) -> Option<CachedPage> {
        let entries = self.entries.lock().ok()?;
        match entries.get(key)?.get(&(page, limit)) {
            Some((v, cached)) if *v == version => Some(cached.clone()),
            _ => None,
        }
    }

    /// Stores a page read after data version `version` was observed.
    pub fn put(&self, key: &str, page: u64, limit: u64, version: i64, cached: CachedPage) {
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if entries.values().map(HashMap::len).sum::<usize>() >= MAX_ENTRIES {
            for pages in entries.values_mut() {
                pages.retain(|_, (v, _)| *v == version);
            }
            entries.retain(|_, pages| !pages.is_empty());
            if entries.values().map(HashMap::len).sum::<usize>() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries
            .entry(key.to_string())
            .or_default()
            .insert((page, limit), (version, cached));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(marker: &'static [u8]) -> CachedPage {
        CachedPage {
            data: Bytes::from_static(marker),
            more: false,
        }
    }

    fn len(c: &PageCache) -> usize {
        c.entries.lock().unwrap().values().map(HashMap::len).sum()
    }

    #[test]
    fn entries_serve_only_their_key_page_limit_and_version() {
        let c = PageCache::default();
        c.put("k", 1, 200, 7, page(b"[1]"));
        assert_eq!(
            c.get("k", 1, 200, 7).map(|p| p.data),
            Some(Bytes::from_static(b"[1]"))
        );
        assert!(c.get("k", 1, 200, 8).is_none(), "another data version");
        assert!(c.get("k", 2, 200, 7).is_none(), "another page");
        assert!(c.get("k", 1, 100, 7).is_none(), "another limit");
        assert!(c.get("other", 1, 200, 7).is_none(), "another key");
    }

    #[test]
    fn stays_bounded() {
        let c = PageCache::default();
        for i in 0..(3 * MAX_ENTRIES as u64) {
            c.put("k", i + 1, 200, (i / 10) as i64, page(b"[]"));
            assert!(len(&c) <= MAX_ENTRIES);
        }
        let last = 3 * MAX_ENTRIES as u64;
        assert!(c.get("k", last, 200, ((last - 1) / 10) as i64).is_some());
    }
}
