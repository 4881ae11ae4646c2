//! The SQLite backend, Parasol's default: one database file in the data directory (with its
//! `-wal` and `-shm` companions), written by one writer thread and read by a small pool of read
//! connections.
//!
//! Everything SQLite-specific lives below this module and nowhere else: SQL, connections and
//! their pragmas (`conn`), the writer with its group commit and the all-or-nothing rule
//! (`writer`), the WAL's checkpoints and restarts (`checkpoint`), the WAL's writes gathered into
//! one system call a run of bytes (`walvfs`), migrations, backup and restore, and the fault
//! injection its tests use (`faultvfs`). What the rest of Parasol sees is
//! `crate::store::Store`, whose typed operations this backend implements in `ops`; a second
//! backend is a sibling module implementing the same `crate::store::Backend`.

pub mod backup;
mod blocking;
mod checkpoint;
mod conn;
mod customers;
mod devices;
mod domains;
pub mod export;
pub(super) mod faultvfs;
mod internal_networks;
pub mod migrate;
mod ops;
mod purge;
mod sites;
mod tenants;
#[cfg(test)]
mod tests;
mod users;
mod vfsshim;
mod walvfs;
mod writer;
mod writer_cache;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

pub use conn::DB_PAGE_BYTES;
use conn::{open_connection, Wait};
use writer::{Job, Task, WriteMode};
use writer_cache::{Statements, WriterCache};

use crate::store::{FaultKind, Result, StorageHealth, StoreError};

/// What the writer thread shares with the store's handle.
pub(crate) struct Shared {
    /// Group sizes, transaction and commit times.
    pub metrics: crate::store::StoreMetrics,
    /// Transactions committed (each may hold many requests' jobs).
    pub commits: AtomicU64,
    /// Jobs run.
    pub jobs: AtomicU64,
    /// WAL restarts the writer ran for the checkpointer.
    pub wal_restarts: AtomicU64,
    /// Clients connected to the server, which may send writes (see `should_gather_more`).
    pub clients: AtomicUsize,
    pub health: Health,
}

/// Page cache of the writer connection (KiB). Inserting random names into the domain index of a
/// large list touches pages all over it; with SQLite's default 2 MiB most of them are read back
/// through a system call each time.
const WRITER_CACHE_KIB: i64 = 16 * 1024;

/// Read connections kept open, and reads run at once. Each connection holds its own page cache
/// (SQLite's default, 2 MiB), and under writes a reader's cache is reset on every transaction
/// anyway, so a few connections serve as well as many and cap the memory.
const MAX_READERS: usize = 4;

/// Writes queued for the writer at most; a request beyond waits for room.
const QUEUE: usize = 4096;

pub use crate::store::OpenRole as Role;

pub(crate) use crate::store::health::Health;

/// Opens the writer's connection: Parasol's pragmas, the schema migrated, a large page cache,
/// and (for a server, whose checkpointer does it) no automatic checkpoints inside commits.
pub(crate) fn open_writer_connection(path: &Path, role: Role) -> Result<Connection> {
    let mut conn = open_connection(path, Wait::Long)?;
    migrate::migrate(&mut conn)?;
    match faultvfs::writer_cache_pages() {
        Some(pages) => conn.pragma_update(None, "cache_size", pages)?,
        None => conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?,
    }
    if role == Role::Server {
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        conn.pragma_update(
            None,
            "journal_size_limit",
            4 * checkpoint::WAL_RESTART_BYTES,
        )?;
    }
    Ok(conn)
}

/// Opens a migrated database for a test, creating it if needed.
#[cfg(test)]
pub(crate) fn open_migrated(path: &Path) -> Result<Connection> {
    conn::prepare_files(path, true)?;
    open_writer_connection(path, Role::Tool)
}

/// Handle to an SQLite database. Cheap to clone.
#[derive(Clone)]
pub struct Sqlite {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    readers: Mutex<Vec<Connection>>,
    /// Bounds the reads running at once (and so the read connections) to `MAX_READERS`.
    read_slots: tokio::sync::Semaphore,
    shared: Arc<Shared>,
    /// A connection that never writes, asked for `PRAGMA data_version` (see `data_version`).
    probe: Mutex<Connection>,
    /// Events that add names record their organization in `list_changes`.
    track_list_changes: AtomicBool,
    /// The thread of `read_background`, started when first needed (`None`: it could not be).
    background: OnceLock<Option<crate::bulk::BulkPool>>,
}

impl Sqlite {
    /// Opens the database at `path` (a server creates it if needed; a tool refuses a missing
    /// one), migrates it, and starts the writer.
    pub fn open(path: &Path, role: Role) -> Result<Sqlite> {
        conn::prepare_files(path, role == Role::Server)?;
        let conn = open_writer_connection(path, role)?;
        let (tx, rx) = mpsc::channel::<Job>(QUEUE);
        let shared = Arc::new(Shared {
            metrics: Default::default(),
            commits: AtomicU64::new(0),
            jobs: AtomicU64::new(0),
            wal_restarts: AtomicU64::new(0),
            clients: AtomicUsize::new(0),
            health: Health::default(),
        });
        let checkpointer = match role {
            Role::Server => Some(checkpoint::Checkpointer::start(path, shared.clone())?),
            Role::Tool => None,
        };
        let probe = open_connection(path, Wait::Never)?;
        let handle = writer::start(
            conn,
            rx,
            shared.clone(),
            checkpointer,
            path.to_path_buf(),
            role,
        )?;
        Ok(Sqlite {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                sender: Mutex::new(Some(tx)),
                writer: Mutex::new(Some(handle)),
                readers: Mutex::new(Vec::new()),
                read_slots: tokio::sync::Semaphore::new(MAX_READERS),
                shared,
                probe: Mutex::new(probe),
                track_list_changes: AtomicBool::new(false),
                background: OnceLock::new(),
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The clients that may send writes (the server's open connections), which the server keeps
    /// current: the writer waits for more writes before a commit only while some client could
    /// still send one.
    pub fn clients(&self) -> &AtomicUsize {
        &self.inner.shared.clients
    }

    /// Write transactions committed so far.
    pub fn commit_count(&self) -> u64 {
        self.inner.shared.commits.load(Ordering::Relaxed)
    }

    /// Writes (jobs) the writer has run; with `commit_count`, the mean group size.
    pub fn write_count(&self) -> u64 {
        self.inner.shared.jobs.load(Ordering::Relaxed)
    }

    /// See `Store::track_list_changes`.
    pub fn track_list_changes(&self, on: bool) {
        self.inner.track_list_changes.store(on, Ordering::Relaxed);
    }

    fn tracking_list_changes(&self) -> bool {
        self.inner.track_list_changes.load(Ordering::Relaxed)
    }

    /// The state of the storage. A writer that has stopped (its thread ended, or the store was
    /// closed) takes no writes, whatever the last write did: that is a fault of its own kind.
    pub fn health(&self) -> StorageHealth {
        let mut health = self.inner.shared.health.snapshot();
        if !self.writer_running() {
            health.writable = false;
            health.last_fault = Some((
                FaultKind::WriterDown.name().to_string(),
                "the database writer has stopped".into(),
            ));
        }
        health
    }

    /// Whether the writer thread still takes writes.
    fn writer_running(&self) -> bool {
        let open = self
            .inner
            .sender
            .lock()
            .is_ok_and(|s| s.as_ref().is_some_and(|s| !s.is_closed()));
        let alive = self
            .inner
            .writer
            .lock()
            .is_ok_and(|h| h.as_ref().is_some_and(|h| !h.is_finished()));
        open && alive
    }

    /// See `StoreMetrics`.
    pub fn metrics(&self) -> &crate::store::StoreMetrics {
        &self.inner.shared.metrics
    }

    /// The database file's and the WAL's sizes and the free space beside them.
    pub fn storage_stats(&self) -> crate::store::StorageStats {
        let path = &self.inner.path;
        let len = |p: &Path| std::fs::metadata(p).ok().map(|m| m.len());
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let space = path
            .parent()
            .and_then(crate::store::metrics::filesystem_space);
        crate::store::StorageStats {
            database_bytes: len(path),
            wal_bytes: Some(len(Path::new(&wal)).unwrap_or(0)),
            free_bytes: space.map(|s| s.0),
            filesystem_bytes: space.map(|s| s.1),
        }
    }

    /// A number that changes whenever anything was committed to the database since the last call,
    /// by this server's writer or by any other process (a provisioning command): SQLite's
    /// `PRAGMA data_version` on a connection that never writes. It reads the WAL header, a few
    /// microseconds, so a reader can tell whether what it derived from the database earlier is
    /// still current. Runs on the calling thread and never waits for a lock: `None` when it
    /// cannot tell right now.
    pub fn data_version(&self) -> Option<i64> {
        let probe = self.inner.probe.lock().ok()?;
        probe
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .ok()
    }

    /// Stops accepting writes, lets the writer finish what is queued, and waits for it.
    pub fn close(&self) {
        if let Ok(mut s) = self.inner.sender.lock() {
            s.take();
        }
        let handle = self.inner.writer.lock().ok().and_then(|mut h| h.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
        if let Ok(mut r) = self.inner.readers.lock() {
            r.clear();
        }
    }

    /// Writes waiting in the writer's queue (tests wait on it instead of on time).
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.inner
            .sender
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.max_capacity() - s.capacity()))
            .unwrap_or(0)
    }

    // ------------------------------------------------------------ the primitives of `ops`

    /// Runs `f` inside the writer's current group transaction, in a savepoint of its own (so an
    /// `Err` undoes only this job), and resolves once the transaction is durably committed.
    pub(in crate::store) async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.queue(move |c, _, _| f(c), WriteMode::Savepoint, false)
            .await
    }

    /// `write` for organization `org`'s data: the write first checks, in its own transaction,
    /// that the organization still exists, and fails with `NotFound` if not, exactly as if it had
    /// never existed (rather than with a foreign key failure). A handler found the organization
    /// in scope in a read of its own, and a concurrent delete may have removed it since; existing
    /// is enough to be still in scope: organization ids are never reused (AUTOINCREMENT) and an
    /// organization never changes its parent.
    pub(in crate::store) async fn write_org<T, F>(&self, org: i64, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.write(move |c| {
            if tenants::organization_exists(c, org)? {
                f(c)
            } else {
                Err(StoreError::NotFound)
            }
        })
        .await
    }

    /// A write of events (or anything else that reads and writes only what `WriterCache` knows
    /// how to keep current): `f` gets the writer's cache besides the connection, and must record
    /// in it whatever it changes of what the cache holds. Other writes empty the cache before
    /// they run.
    async fn write_events<T, F>(&self, mode: WriteMode, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c Connection, &mut WriterCache, &mut Statements<'c>) -> Result<T>
            + Send
            + 'static,
    {
        self.queue(f, mode, true).await
    }

    async fn queue<T, F>(&self, f: F, mode: WriteMode, keeps_cache: bool) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c Connection, &mut WriterCache, &mut Statements<'c>) -> Result<T>
            + Send
            + 'static,
    {
        let (reply, rx) = oneshot::channel::<Result<T>>();
        let job = Job {
            work: Box::new(Task { f, reply }),
            mode,
            keeps_cache,
        };
        let sender = self
            .inner
            .sender
            .lock()
            .map_err(|_| StoreError::Closed)?
            .clone()
            .ok_or(StoreError::Closed)?;
        sender.send(job).await.map_err(|_| StoreError::Closed)?;
        // A job dropped without an answer panicked in the writer (its group was rolled back).
        rx.await.unwrap_or_else(|_| {
            Err(StoreError::fault(
                FaultKind::WriterDown,
                "the write failed unexpectedly and was undone",
            ))
        })
    }

    /// One of the `MAX_READERS` slots a read takes while it runs.
    async fn read_slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>> {
        self.inner
            .read_slots
            .acquire()
            .await
            .map_err(|_| StoreError::Closed)
    }

    /// Runs `f` on a read connection in one read transaction (a consistent snapshot), off the
    /// async runtime.
    pub(in crate::store) async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let _slot = self.read_slot().await?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.read_now(Wait::Read, f))
            .await
            .map_err(|e| StoreError::Internal(format!("a read task failed: {e}")))?
    }

    /// `read`: every read transaction here is a snapshot already (the rules' `snapshot`).
    pub(in crate::store) async fn snapshot<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.read(f).await
    }

    /// Like `read`, but on a thread of its own at the bulk threads' priority (`crate::bulk`), for
    /// long reads that no request waits for (the resolver exporter's whole lists): on a busy
    /// server they take less than an equal share from the requests and the writes, yet still
    /// finish within the exporter's deadline. Should that thread not start, the read runs as
    /// `read` does.
    async fn read_background<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let pool = self.inner.background.get_or_init(|| {
            crate::bulk::BulkPool::background("parasol-store-background")
                .map_err(|e| log::warn!("cannot start the store's background thread: {e}"))
                .ok()
        });
        let Some(pool) = pool else {
            return self.read(f).await;
        };
        let _slot = self.read_slot().await?;
        let inner = self.inner.clone();
        pool.run(move || inner.read_now(Wait::Read, f))
            .await
            .map_err(|e| StoreError::Internal(format!("a background read failed: {e}")))?
    }

    /// Like `read`, but tried first right here on the calling (async) thread, for reads bounded
    /// by an index range and a small LIMIT such as one page of the domain list: they take tens
    /// of microseconds, less than the two thread switches that `spawn_blocking` costs there and
    /// back, which dominated the list workload's profile. On the runtime it never waits for a
    /// lock: should one be held (a WAL being recovered or restarted), the read is done again
    /// through `read`, where waiting blocks no one else.
    async fn read_short<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        let here = {
            let _slot = self.read_slot().await?;
            self.inner.read_now(Wait::Never, &f)
        };
        match here {
            Err(StoreError::Unavailable(fault)) if fault.kind == FaultKind::Busy => {
                self.read(f).await
            }
            other => other,
        }
    }
}

impl Inner {
    /// Runs `f` in a read transaction on a pooled read connection, on this thread, waiting for
    /// locks as `wait` allows.
    fn read_now<T>(&self, wait: Wait, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = match self.readers.lock().ok().and_then(|mut v| v.pop()) {
            Some(c) => c,
            None => open_connection(&self.path, Wait::Read)?,
        };
        if wait != Wait::Read {
            conn::set_wait(&conn, wait)?;
        }
        let r = writer::exec_cached(&conn, "BEGIN")
            .map_err(StoreError::from)
            .and_then(|()| f(&conn));
        let end = writer::exec_cached(&conn, "COMMIT");
        if wait != Wait::Read && conn::set_wait(&conn, Wait::Read).is_err() {
            return r;
        }
        if end.is_ok() {
            if let Ok(mut pool) = self.readers.lock() {
                if pool.len() < MAX_READERS {
                    pool.push(conn);
                }
            }
        }
        r
    }
}

/// The outcome of a rule (`crate::store::rules`), or of one of the statements rules are made
/// of, run on a SQLite connection. Every statement of SQLite's is done when its future is first
/// polled (nothing in them waits), so the rule is too: it is polled once, here, on the thread
/// that owns the connection.
pub(in crate::store) fn settle<T, E: Into<StoreError>>(
    rule: impl std::future::Future<Output = std::result::Result<T, E>>,
) -> Result<T> {
    let mut rule = std::pin::pin!(rule);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match rule.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(r) => r.map_err(Into::into),
        std::task::Poll::Pending => Err(StoreError::Internal(
            "a rule waited on SQLite, whose statements never wait".into(),
        )),
    }
}

/// One page of the rows of `sql`, whose parameters are the owner's id (`?1`), then LIMIT (`?2`)
/// and OFFSET (`?3`): the list query of every management resource.
fn owned_page<T>(
    conn: &Connection,
    sql: &str,
    owner: i64,
    limit: i64,
    offset: i64,
    map: fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(rusqlite::params![owner, limit, offset], map)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The row of `sql`, whose parameters are the owner's id (`?1`) and the item's key (`?2`), if
/// there is one: the read query of every management resource.
fn owned_row<T>(
    conn: &Connection,
    sql: &str,
    owner: i64,
    key: &dyn rusqlite::ToSql,
    map: fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Option<T>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .prepare_cached(sql)?
        .query_row(rusqlite::params![owner, key], map)
        .optional()?)
}
