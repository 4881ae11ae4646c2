//! The store: the only code that speaks SQL, and the one owner of every storage fault.
//!
//! The rest of Parasol sees `Store`, a cheap handle with one typed async operation per thing it
//! needs (ingest events, list a page of domains, create a customer, delete a site with its
//! conflict rules, ...). Operations take and return the plain types of `model` and fail with
//! `StoreError`, which says what the caller should answer (404, 409, 400, 503 or 500) without
//! any HTTP type: transactions, their checks and their faults stay inside.
//!
//! The store is built in layers (docs/architecture.md tells why):
//! - the operations: `Store`'s methods. The management ones are declared in `managed.rs`,
//!   each with its rule; the enforcement interface's hot path (ingest, the list's pages,
//!   deletes, the purge, the effective block list, list changes) in `operations!` below, which
//!   declares the `Backend` trait each engine implements on its own;
//! - the rules (`rules/<resource>.rs`): every check, conflict rule, derived field and message,
//!   written once over each resource's statement trait;
//! - the statements, per engine and per resource in the same layout on both sides:
//!   `sqlite/<resource>.rs` (inside SQLite's single writer) and `postgres/<resource>.rs` (with
//!   the row and advisory locks that hold a check against other nodes). Beside them each
//!   engine's module holds what only it has: SQLite's connections, writer, checkpointer,
//!   migrations, backup and restore; PostgreSQL's URL and TLS, pool and migrations. Both
//!   modules are private: what the rest of Parasol needs of them is re-exported here.
//!
//! Only this module's files speak to a database crate (a test holds the rest of `src/` to that).

mod copied;
mod error;
mod health;
mod managed;
pub mod metrics;
pub mod model;
mod postgres;
mod rules;
mod sqlite;
#[cfg(test)]
mod suite;
pub mod transfer;

pub(crate) use error::ErrorClass;
pub use error::{Fault, FaultKind, Result, StoreError};
pub use metrics::{StorageStats, StoreMetrics};
pub use model::*;
pub use postgres::{redact, DatabaseUrl};
pub use sqlite::backup::{backup, restore, BackupInfo, RestoreInfo};
pub use sqlite::migrate::SCHEMA_VERSION;
pub use sqlite::DB_PAGE_BYTES;

use std::path::Path;
use std::sync::atomic::AtomicUsize;

/// Declares the operations once: the `Backend` trait every engine implements, and `Store`'s
/// methods, which hand each call to the engine the store was opened on.
macro_rules! operations {
    ($( $(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty; )*) => {
        /// The typed operations of a storage engine. Each runs in one transaction of its own (or
        /// a savepoint of a shared one): it is stored whole or not at all.
        pub trait Backend: Send + Sync + 'static {
            $( $(#[$doc])* fn $name(&self $(, $arg: $ty)*)
                -> impl std::future::Future<Output = Result<$ret>> + Send; )*
        }

        impl Store {
            $( $(#[$doc])* pub async fn $name(&self $(, $arg: $ty)*) -> Result<$ret> {
                match &self.engine {
                    Engine::Sqlite(b) => Backend::$name(b, $($arg),*).await,
                    Engine::Postgres(b) => Backend::$name(b, $($arg),*).await,
                }
            } )*
        }
    };
}

operations! {
    // ------------------------------------------------------------ enforcement

    /// The organization of a live customer key.
    fn resolve_customer_key(&self, key: CustomerKey) -> Option<i64>;
    /// Stores one request's events and adds the names the acceptance checks listed (or refreshes
    /// their `lastSeenAt`), all or nothing; durable when it returns `Stored`.
    fn ingest(&self, request: Ingest) -> Ingested;
    /// Page `page` (1-based) of `limit` entries of the key's domain list, ordered by id, and
    /// whether a further page exists; `None` if the key is not live. Key and page come from one
    /// snapshot.
    fn list_domains(&self, key: CustomerKey, page: u64, limit: u64) -> Option<(Vec<DomainEntry>, bool)>;
    /// Removes the entry with this id from the organization's list; false if it has none.
    fn delete_domain_by_id(&self, org: i64, id: i64) -> bool;
    /// Removes the entry with this (normalised) name; false if there is none.
    fn delete_domain_by_name(&self, org: i64, name: String) -> bool;
    /// Deletes the next range of a deleted organization's stored requests, if any are waiting.
    fn purge_step(&self) -> Option<PurgeStep>;
    /// Events stored for the organization (operators and tests).
    fn event_count(&self, org: i64) -> i64;
    /// Every listed name of the organization, in list order (operators and tests).
    fn listed_names(&self, org: i64) -> Vec<String>;
    /// At most `limit` entries of the organization's list whose names start with `prefix` and
    /// sort after `after` (byte order), in name order: a page of a search by name, found through
    /// the name index however long the list is (the console's domain list).
    fn search_domains(&self, org: i64, prefix: String, after: String, limit: i64) -> Vec<DomainEntry>;

    // ------------------------------------------------------------ enforcement on the appliance

    /// The effective block list (listed names the allow list does not cover, in list order) and
    /// the allow-listed names under a listed one, from one snapshot. A long read no request waits
    /// for: an engine that can runs it at a background priority.
    fn effective_block_list(&self, org: i64) -> (Vec<String>, Vec<String>);
    /// The organization's listed names after `after` (all of them if `None` or if the cursor's
    /// entry is gone), the list's length, ids' sum and last entry, its allow list and exceptions,
    /// from one snapshot: what the exporter needs to follow a list by its changes instead of
    /// reading it whole every time. A background read like `effective_block_list`.
    fn block_list_since(&self, org: i64, after: Option<ListCursor>) -> ListRead;
    /// The organizations whose effective block list may have changed since the last call (see
    /// `Store::track_list_changes`), forgotten as they are returned; organizations deleted
    /// meanwhile are among them.
    fn take_list_changes(&self) -> Vec<i64>;

    // ------------------------------------------------------------ metrics

    /// The number of organizations, and the length of the domain list of each of the first
    /// `limit` of them by id (for `/metrics`, scraped every few seconds: an engine must not
    /// count a million rows for it).
    fn domain_counts(&self, limit: i64) -> (i64, Vec<(i64, i64)>);
}

/// The parameters of `search_domains_query` after the organization, in order, for a page of the
/// names that start with `prefix`, past `after`, at most `limit` long:
/// - the page's start: the greater of `prefix` (names start with it) and `after` (the page starts
///   past it). One lower bound, so that an engine seeks the name index to it: given both as
///   separate bounds, SQLite seeks to one of them and filters by the other, and a cursor far into
///   a list of a million names then read most of the list;
/// - `after` itself, left out;
/// - the end of the names with the prefix, in byte order: a normalised name is ASCII, so every
///   name with the prefix sorts before the prefix followed by the highest code point (its first
///   byte, 0xF4, is above any ASCII byte), and every other name after `prefix` sorts after it;
/// - the limit, at least 0.
pub(crate) fn search_domains_params<'a>(
    prefix: &'a str,
    after: &'a str,
    limit: i64,
) -> (&'a str, &'a str, String, i64) {
    let mut end = String::with_capacity(prefix.len() + 4);
    end.push_str(prefix);
    end.push(char::MAX);
    (prefix.max(after), after, end, limit.max(0))
}

/// The statement of `Store::search_domains`, both engines, its parameters written `{mark}1` to
/// `{mark}5` (`?` on SQLite, `$` on PostgreSQL): the organization, then the four of
/// `search_domains_params`. One range of the index on `(organization_id, name)`: it reads no
/// entry outside the page.
pub(crate) fn search_domains_query(mark: char) -> String {
    format!(
        "SELECT id, name, last_seen_at FROM domains \
         WHERE organization_id = {mark}1 AND name >= {mark}2 AND name <> {mark}3 \
         AND name < {mark}4 ORDER BY name LIMIT {mark}5"
    )
}

/// Who opens the database, which decides the background work that comes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenRole {
    /// `parasol serve` (and `parasol init`): creates the database or its schema if needed; on
    /// SQLite a checkpointer thread keeps the WAL short and probes the storage after a fault.
    Server,
    /// A command-line tool beside a running server: the database must exist; SQLite's own
    /// automatic checkpoints are enough for its few writes.
    Tool,
}

/// The engines a store can run on.
#[derive(Clone)]
enum Engine {
    Sqlite(sqlite::Sqlite),
    Postgres(postgres::Postgres),
}

/// Handle to the database. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    engine: Engine,
}

impl Store {
    /// Opens (a server: creating it if needed) the SQLite database at `path`, migrates it and
    /// starts its writer.
    pub fn open_sqlite(path: &Path, role: OpenRole) -> Result<Store> {
        Ok(Store {
            engine: Engine::Sqlite(sqlite::Sqlite::open(path, role)?),
        })
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://USER:PASS@HOST:PORT/DB`) and
    /// creates or upgrades its schema (a server) or checks that it holds a current one (a tool).
    pub async fn open_postgres(url: &str, role: OpenRole) -> Result<Store> {
        Ok(Store {
            engine: Engine::Postgres(postgres::Postgres::open(url, role).await?),
        })
    }

    /// Opens the store a server or command was configured with: the PostgreSQL database at
    /// `database` when given, else the SQLite database `parasol.db` in `data_dir`.
    pub async fn open_configured(
        data_dir: &Path,
        database: Option<&str>,
        role: OpenRole,
    ) -> Result<Store> {
        match database {
            Some(url) => Store::open_postgres(url, role).await,
            None => Store::open_sqlite(&data_dir.join("parasol.db"), role),
        }
    }

    /// Which engine the store runs on, and where (a PostgreSQL URL without its password).
    pub fn describe(&self) -> String {
        match &self.engine {
            Engine::Sqlite(s) => format!("SQLite {}", s.path().display()),
            Engine::Postgres(p) => format!("PostgreSQL {}", p.url()),
        }
    }

    /// Whether the store runs on PostgreSQL (shared by several nodes).
    pub fn is_shared(&self) -> bool {
        matches!(self.engine, Engine::Postgres(_))
    }

    /// The server's open connections, kept current by the server (the writer gathers writes
    /// while other clients could still send one).
    pub fn clients(&self) -> &AtomicUsize {
        match &self.engine {
            Engine::Sqlite(s) => s.clients(),
            Engine::Postgres(p) => p.clients(),
        }
    }

    /// Write transactions committed so far.
    pub fn commit_count(&self) -> u64 {
        match &self.engine {
            Engine::Sqlite(s) => s.commit_count(),
            Engine::Postgres(p) => p.commit_count(),
        }
    }

    /// Writes run so far (with `commit_count`, the mean group size).
    pub fn write_count(&self) -> u64 {
        match &self.engine {
            Engine::Sqlite(s) => s.write_count(),
            Engine::Postgres(p) => p.write_count(),
        }
    }

    /// What the store measures of its writes (see `StoreMetrics`).
    pub fn metrics(&self) -> &StoreMetrics {
        match &self.engine {
            Engine::Sqlite(s) => s.metrics(),
            Engine::Postgres(p) => p.metrics(),
        }
    }

    /// The storage's sizes and free space, read now (a few system calls).
    pub fn storage_stats(&self) -> StorageStats {
        match &self.engine {
            Engine::Sqlite(s) => s.storage_stats(),
            Engine::Postgres(p) => p.storage_stats(),
        }
    }

    /// The state of the storage: whether it takes writes, and its last fault.
    pub fn health(&self) -> StorageHealth {
        match &self.engine {
            Engine::Sqlite(s) => s.health(),
            Engine::Postgres(p) => p.health(),
        }
    }

    /// A number that changes whenever anything was committed since it was last read, by this
    /// process or any other; `None` when it cannot be told right now (then nothing derived from
    /// the database may be reused). Cheap, and never waits.
    ///
    /// On PostgreSQL always `None`, so nothing is cached: another node's commit cannot be seen
    /// without asking the database. LISTEN/NOTIFY would tell, but a NOTIFY in every write
    /// serialises all commits on the server's notification queue, and nearly every request
    /// changes a list anyway (an event refreshes its name's `lastSeenAt`), so a cache would
    /// rarely be valid under load; a first page costs one indexed query.
    pub fn version(&self) -> Option<i64> {
        match &self.engine {
            Engine::Sqlite(s) => s.data_version(),
            Engine::Postgres(_) => None,
        }
    }

    /// Whether events that add names record their organization for `take_list_changes` (the
    /// resolver exporter turns it on). Deletes and allow-list changes always record theirs.
    pub fn track_list_changes(&self, on: bool) {
        match &self.engine {
            Engine::Sqlite(s) => s.track_list_changes(on),
            Engine::Postgres(p) => p.track_list_changes(on),
        }
    }

    /// Stops taking writes, finishes what is queued, and waits for the writer (on PostgreSQL:
    /// closes the connection pool).
    pub fn close(&self) {
        match &self.engine {
            Engine::Sqlite(s) => s.close(),
            Engine::Postgres(p) => p.close(),
        }
    }
}

/// A database's schema version `found` against `supported`, this build's: whether it must be
/// upgraded (`false`: it is current). A newer one is refused: this build cannot know its data.
fn behind(found: i64, supported: i64) -> Result<bool> {
    if found > supported {
        return Err(StoreError::NewerSchema { found, supported });
    }
    Ok(found < supported)
}

#[cfg(test)]
mod tests {
    /// Only the store speaks to a database: no file under `src/` outside `src/store/` names a
    /// database crate, so that an engine's types, errors and SQL stay behind `Store`.
    #[test]
    fn no_database_crate_outside_the_store() {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let store = src.join("store");
        let mut files = Vec::new();
        walk(&src, &mut files);
        assert!(files.len() > 20);
        let mut offenders = Vec::new();
        for f in files.iter().filter(|f| !f.starts_with(&store)) {
            let text = std::fs::read_to_string(f).unwrap();
            for krate in ["rusqlite", "tokio_postgres", "tokio-postgres", "deadpool"] {
                if text.contains(krate) {
                    offenders.push(format!("{} mentions {krate}", f.display()));
                }
            }
        }
        assert!(offenders.is_empty(), "{offenders:#?}");
    }
}
