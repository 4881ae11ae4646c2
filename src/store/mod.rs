//! The only code that speaks SQL. One writer thread owns the write connection and commits
//! concurrent requests together (group commit); reads run on a small pool of read connections
//! through `spawn_blocking`, so they never wait behind the writer (WAL).

pub mod backup;
pub mod blocking;
pub mod customers;
pub mod devices;
pub mod domains;
pub mod internal_networks;
pub mod migrate;
pub mod purge;
pub mod resources;
pub mod sites;
pub mod tenants;
pub mod users;
mod walvfs;
pub mod writer_cache;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

pub use writer_cache::{Statements, WriterCache};

/// Errors of the store. `Sqlite` details are logged, never sent to clients.
#[derive(Debug)]
pub enum StoreError {
    Sqlite(rusqlite::Error),
    /// The database was written by a newer Parasol.
    NewerSchema {
        found: i64,
        supported: i64,
    },
    /// The writer thread has stopped (shutdown in progress).
    Closed,
    /// A blocking task panicked or was cancelled.
    Task(String),
    /// A job undid its own changes on purpose (its savepoint was rolled back).
    Aborted(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Sqlite(e) => write!(f, "database error: {e}"),
            StoreError::NewerSchema { found, supported } => write!(
                f,
                "database schema version {found} is newer than this binary supports ({supported}); refusing to open it"
            ),
            StoreError::Closed => write!(f, "the database writer has stopped"),
            StoreError::Task(e) => write!(f, "database task failed: {e}"),
            StoreError::Aborted(why) => write!(f, "write abandoned: {why}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e)
    }
}

impl StoreError {
    /// True when SQLite refused a write because of a UNIQUE or similar constraint.
    pub fn is_constraint(&self) -> bool {
        matches!(self, StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::ConstraintViolation)
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// What the writer hands back after running a job inside the group transaction: called once the
/// transaction's fate is known, with `Err` if the commit failed.
type Completion = Box<dyn FnOnce(std::result::Result<(), String>) + Send>;
/// Runs a job in the open transaction; also says whether it succeeded (its changes stay).
type JobFn = Box<
    dyn for<'c> FnOnce(&'c Connection, &mut WriterCache, &mut Statements<'c>) -> (Completion, bool)
        + Send,
>;

/// A write queued for the writer.
struct Job {
    run: JobFn,
    /// `Alone`: large enough to fill a transaction by itself (see `Store::write_alone`).
    /// `Shared`: fails only on database errors, so may share its group's fate (see
    /// `Store::write_shared`).
    mode: WriteMode,
    /// Keeps the writer's cache up to date with what it writes (see `Store::write_events`); the
    /// cache is emptied before any other job runs.
    keeps_cache: bool,
}

/// How `Store::write_events` runs a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// In a savepoint of its own, in a group transaction (`Store::write`).
    Savepoint,
    /// Without a savepoint, sharing its group's fate (`Store::write_shared`).
    Shared,
    /// In a transaction of its own (`Store::write_alone`).
    Alone,
}

/// Most jobs folded into one transaction. Bounded so that one commit's latency stays small.
const MAX_GROUP: usize = 256;

/// How long the writer waits for more writes before committing a small group under concurrent
/// load (see `should_linger`), about one commit's fsync on the benchmark's VM.
const LINGER: std::time::Duration = std::time::Duration::from_micros(300);
/// Groups of at least this many writes are committed at once.
const LINGER_BELOW: usize = 16;

/// Whether the writer should wait (once, `LINGER`) for more writes before committing a group of
/// `group` writes, the one before having held `previous`, with `clients` connected. Each commit
/// costs a fixed ~130 us of CPU (frames, checksums, fsync) besides its writes, so under a steady
/// stream of small requests that arrive spread out (an open loop: at 80% of the maximum rate the
/// groups held about half as many requests as in a closed loop, and a request cost a fifth more
/// CPU) gathering longer buys headroom for a quarter of a millisecond of latency. It waits only
/// when there is concurrency (the group before held several writes) and some connected client
/// is not in this group; a lone sequential client, or every client already in the group, is
/// never kept waiting.
fn should_linger(group: usize, previous: usize, clients: usize) -> bool {
    group < LINGER_BELOW && previous >= 2 && clients > group
}

/// Page cache of the writer connection (KiB). Inserting random names into the domain index of a
/// large list touches pages all over it; with SQLite's default 2 MiB most of them are read back
/// through a system call each time.
const WRITER_CACHE_KIB: i64 = 16 * 1024;

/// Read connections kept open, and reads run at once. Each connection holds its own page cache
/// (SQLite's default, 2 MiB), and under writes a reader's cache is reset on every transaction
/// anyway, so a few connections serve as well as many and cap the memory.
const MAX_READERS: usize = 4;

/// The checkpointer copies what was committed into the database file in the background at this
/// interval, so that the writer never pays for a checkpoint (and its fsync of the database file)
/// inside a commit ... Short, because each pass ends with an fsync of the database file
/// (`sync_after_checkpoint`), and a WAL fsync of the writer's that lands behind it waits for
/// that write-back: after 500 ms of commits it was 10-19 ms, every 500 ms, the open loop's worst
/// latencies; after 50 ms, 4-5 ms. The cost is hot pages copied more often (the checkpointer's
/// CPU went from about 0.8 to 1.5 us per single event).
const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);
/// ... and once the WAL holds more than this many bytes of frames, asks the writer to restart it
/// from the beginning (see `Checkpointer`). After a restart the WAL file is truncated back to four
/// times this (`journal_size_limit`): in steady state the file is reused without truncating it
/// (a truncation made the next commit take 10-15 ms), while a burst does not leave a huge file.
const WAL_RESTART_BYTES: i64 = if cfg!(test) { 1 } else { 64 } * 1024 * 1024;
/// Passive checkpoints run back to back before the writer is asked to restart the WAL: each copies
/// what was committed during the one before, so the next is shorter (measured: 10-50 ms, then
/// 1-5 ms), and the writer's restart is left with a few dozen frames to copy. What it cannot
/// avoid is one fsync of the database file (the WAL may be overwritten only once everything in
/// it is durable there): 2-40 ms on the benchmark's VM.
const CATCH_UP_PASSES: usize = 3;

/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 128;

/// Busy handler of every connection: waits up to about 10 s for a lock, polling every 100 us.
/// SQLite's own (`busy_timeout`) sleeps in growing steps of up to 100 ms, so a writer that meets a
/// lock held for 30 ms would sleep until 33 or 53 ms; the locks Parasol's connections wait for
/// (a reader finishing, a checkpoint's last frames) are held for micro- to milliseconds.
fn poll_busy(attempts: i32) -> bool {
    const POLL: std::time::Duration = std::time::Duration::from_micros(100);
    const ATTEMPTS: i32 = 100_000; // ~10 s plus scheduling overhead
    if attempts >= ATTEMPTS {
        return false;
    }
    std::thread::sleep(POLL);
    true
}

/// Page size of a new database, bytes. 8 KiB: with the writer's larger groups (`batch_scheduling`)
/// a commit of single events writes some 25-30 pages, most of them leaves of the name index far
/// apart, and its fsync is the wait in which the server's core idles; half-size pages halve
/// those bytes and the checksums over them. 16 KiB pages did better for 1 MiB batches (fewer
/// system calls a MiB: the realistic mix about 10% faster), still well above its target at 8.
pub const PAGE_SIZE: i64 = 8192;

/// Opens a connection with Parasol's pragmas. Used by the server and by command-line tools.
pub fn open_connection(path: &Path) -> Result<Connection> {
    if let Err(rc) = walvfs::register() {
        return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rc),
            Some("cannot register the WAL-gathering VFS".into()),
        )));
    }
    let conn =
        Connection::open_with_flags_and_vfs(path, rusqlite::OpenFlags::default(), walvfs::NAME)?;
    // Pragmas live outside any migration transaction (journal_mode cannot change inside one).
    conn.busy_handler(Some(poll_busy))?;
    // The writer alone runs some 30 distinct statements (events, lists, management, transaction
    // control); rusqlite's default cache of 16 would evict and re-prepare them in turn.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Takes effect only on a new, empty database (an existing one keeps its page size).
    conn.pragma_update(None, "page_size", PAGE_SIZE)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: a commit is on disk (WAL fsynced) before it returns, so a 202 is never lost.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

/// Opens (creating if needed) and migrates the database at `path`, for command-line use.
pub fn open_migrated(path: &Path) -> Result<Connection> {
    let mut conn = open_connection(path)?;
    migrate::migrate(&mut conn)?;
    Ok(conn)
}

/// Handle to the database used by the server. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl Inner {
    /// Runs `f` in a read transaction on a pooled read connection, on this thread.
    fn read_now<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = match self.readers.lock().ok().and_then(|mut v| v.pop()) {
            Some(c) => c,
            None => open_connection(&self.path)?,
        };
        conn.prepare_cached("BEGIN")?.execute([])?;
        let r = f(&conn);
        let end = conn
            .prepare_cached("COMMIT")
            .and_then(|mut s| s.execute([]));
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

struct Inner {
    path: PathBuf,
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    readers: Mutex<Vec<Connection>>,
    /// Bounds the reads running at once (and so the read connections) to `MAX_READERS`.
    read_slots: tokio::sync::Semaphore,
    /// Transactions committed by the writer (each may hold many requests' jobs).
    commits: Arc<std::sync::atomic::AtomicU64>,
    /// Jobs run by the writer.
    jobs: Arc<std::sync::atomic::AtomicU64>,
    /// Clients connected to the server, which may send writes (see `Store::clients`).
    clients: Arc<AtomicUsize>,
    /// A connection that never writes, asked for `PRAGMA data_version` (see `data_version`).
    probe: Mutex<Connection>,
}

impl Store {
    /// Opens and migrates the database, then starts the writer thread.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = open_migrated(path)?;
        conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
        // Checkpoints run on the checkpointer thread, never inside the writer's commits.
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        conn.pragma_update(None, "journal_size_limit", 4 * WAL_RESTART_BYTES)?;
        let (tx, rx) = mpsc::channel::<Job>(4096);
        let commits = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let checkpointer = Checkpointer::start(path, commits.clone())?;
        let jobs = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let clients = Arc::new(AtomicUsize::new(0));
        let counters = (commits.clone(), jobs.clone(), clients.clone());
        let handle = std::thread::Builder::new()
            .name("parasol-writer".into())
            .spawn(move || {
                batch_scheduling();
                writer_loop(conn, rx, counters, checkpointer)
            })
            .map_err(|e| StoreError::Task(e.to_string()))?;
        Ok(Store {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                sender: Mutex::new(Some(tx)),
                writer: Mutex::new(Some(handle)),
                readers: Mutex::new(Vec::new()),
                read_slots: tokio::sync::Semaphore::new(MAX_READERS),
                commits,
                jobs,
                clients,
                probe: Mutex::new(open_connection(path)?),
            }),
        })
    }

    /// The number of clients that may send writes (the server's open connections), which the
    /// server keeps current. The writer waits for more writes before a commit only while some
    /// client could still send one (see `should_linger`); without a server it is 0.
    pub fn clients(&self) -> &AtomicUsize {
        &self.inner.clients
    }

    /// How many write transactions have been committed so far.
    pub fn commit_count(&self) -> u64 {
        self.inner.commits.load(Ordering::Relaxed)
    }

    /// How many writes (jobs) the writer has run; with `commit_count`, the mean group size.
    pub fn write_count(&self) -> u64 {
        self.inner.jobs.load(Ordering::Relaxed)
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `f` inside the writer's current group transaction (in a savepoint of its own, so an
    /// `Err` undoes only this job) and resolves once the transaction is durably committed.
    pub async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.queue(uncached(f), WriteMode::Savepoint, false).await
    }

    /// Like `write`, for a write that fails only when the database does (no error of its own
    /// making): it runs without a savepoint, and should it fail after all, its whole group
    /// transaction is rolled back and every write in it fails (callers answer 5xx; nothing was
    /// stored, so a retry is safe). Saves two statements per write in a large group.
    pub async fn write_shared<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.queue(uncached(f), WriteMode::Shared, false).await
    }

    /// Like `write`, for a write large enough to fill a transaction by itself (a batch of
    /// thousands of events): it gets a transaction of its own, without a savepoint. Grouping
    /// such writes saves little (their commit is already shared by thousands of rows), while a
    /// savepoint over one would first copy every page it touches to a sub-journal.
    pub async fn write_alone<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.queue(uncached(f), WriteMode::Alone, false).await
    }

    /// A write of events (or anything else that reads and writes only what `WriterCache` knows
    /// how to keep current): `f` gets the writer's cache besides the connection, and must record
    /// in it whatever it changes of what the cache holds. Writes through `write`, `write_shared`
    /// and `write_alone` empty the cache before they run instead.
    pub async fn write_events<T, F>(&self, mode: WriteMode, f: F) -> Result<T>
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
        let (tx, rx) = oneshot::channel::<Result<T>>();
        let run: JobFn = Box::new(move |conn, cache, statements| {
            let result = run_in_savepoint(conn, || f(conn, cache, statements));
            let ok = result.is_ok();
            let completion: Completion =
                Box::new(move |commit: std::result::Result<(), String>| {
                    let out = match (commit, result) {
                        (Ok(()), r) => r,
                        (Err(_), Err(e)) => Err(e),
                        (Err(e), Ok(_)) => Err(StoreError::Task(format!("commit failed: {e}"))),
                    };
                    let _ = tx.send(out);
                });
            (completion, ok)
        });
        let job = Job {
            run,
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
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Deletes the next range of a deleted organization's stored requests (`purge::step`), if
    /// any are waiting: looked for on a read connection first, so that finding none takes no
    /// write lock. The step runs as a write of its own, at the bulk writes' lower priority.
    pub async fn purge_step(&self) -> Result<Option<purge::Step>> {
        if !self.read(purge::pending).await? {
            return Ok(None);
        }
        // It changes nothing the writer's cache holds.
        self.write_events(WriteMode::Alone, |conn, _cache, _statements| {
            purge::step(conn, purge::STEP_IDS)
        })
        .await
    }

    /// Runs `f` on a read connection in one read transaction (a consistent snapshot), off the
    /// async runtime.
    pub async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let _slot = self
            .inner
            .read_slots
            .acquire()
            .await
            .map_err(|_| StoreError::Closed)?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.read_now(f))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// Like `read`, but runs `f` right here on the calling (async) thread. Only for reads bounded
    /// by an index range and a small LIMIT, such as one page of the domain list: they take tens
    /// of microseconds, less than the two thread switches that `spawn_blocking` costs there and
    /// back, which dominated the list workload's profile. Everything else uses `read`.
    pub async fn read_short<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&Connection) -> Result<T>,
    {
        let _slot = self
            .inner
            .read_slots
            .acquire()
            .await
            .map_err(|_| StoreError::Closed)?;
        self.inner.read_now(f)
    }

    /// A number that changes whenever anything was committed to the database since the last call,
    /// by this server's writer or by any other process (a provisioning command): SQLite's
    /// `PRAGMA data_version` on a connection that never writes. It reads the WAL header, a few
    /// microseconds, so a reader can tell whether what it derived from the database earlier is
    /// still current. Runs on the calling thread.
    pub fn data_version(&self) -> Result<i64> {
        let probe = self.inner.probe.lock().map_err(|_| StoreError::Closed)?;
        let version = probe
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        Ok(version)
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
}

/// One page of the rows of `sql`, whose parameters are the owner's id (`?1`), then LIMIT (`?2`)
/// and OFFSET (`?3`): the list query of every management resource.
pub(crate) fn owned_page<T>(
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
pub(crate) fn owned_row<T>(
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

/// A write that ignores the writer's cache (so the writer empties it first).
fn uncached<T>(
    f: impl FnOnce(&Connection) -> Result<T>,
) -> impl for<'c> FnOnce(&'c Connection, &mut WriterCache, &mut Statements<'c>) -> Result<T> {
    move |conn, _, _| f(conn)
}

/// Runs one cached statement without parameters (transaction control).
fn exec_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

thread_local! {
    /// Whether the writer wraps each job in a savepoint. A group of one job needs none: the
    /// transaction's own rollback undoes exactly that job, and a savepoint over a large job
    /// writes every page it touches to a sub-journal first.
    static SAVEPOINTS: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

fn run_in_savepoint<T>(conn: &Connection, f: impl FnOnce() -> Result<T>) -> Result<T> {
    if !SAVEPOINTS.with(|s| s.get()) {
        // Alone in its transaction: an error rolls the whole transaction back (see writer_loop).
        let r = f();
        if r.is_err() {
            LAST_JOB_FAILED.with(|x| x.set(true));
        }
        return r;
    }
    exec_cached(conn, "SAVEPOINT job")?;
    let r = f();
    let end = match &r {
        Ok(_) => exec_cached(conn, "RELEASE job"),
        Err(_) => {
            exec_cached(conn, "ROLLBACK TO job").and_then(|_| exec_cached(conn, "RELEASE job"))
        }
    };
    match (r, end) {
        (Ok(v), Ok(())) => Ok(v),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e.into()),
    }
}

/// Puts the calling thread (the writer) under Linux's `SCHED_BATCH` policy: same share of the
/// CPU as before, but its wake-ups (from the last commit's fsync, or a new write) no longer
/// preempt the thread that serves requests; it runs once that thread waits or its time slice
/// ends. On a machine where both share a core, the requests served meanwhile join the next group
/// instead of each commit interrupting the request path: measured on the benchmark's VM with
/// server pinned to one core, single events in groups of 36-50 instead of about 30, half the
/// context switches, 18-22 against 23-26 us of CPU a request. Where the writer has a core of
/// its own it changes nothing. Failure (a system-call filter, say) leaves the normal policy.
fn batch_scheduling() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a plain system call on the calling thread (0); `param` outlives it.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
        log::debug!(
            "cannot put the writer under SCHED_BATCH: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn writer_loop(
    mut conn: Connection,
    mut rx: mpsc::Receiver<Job>,
    (commits, job_count, clients): (Arc<AtomicU64>, Arc<AtomicU64>, Arc<AtomicUsize>),
    checkpointer: Checkpointer,
) {
    let mut jobs: Vec<Job> = Vec::with_capacity(MAX_GROUP);
    // Travels with the connection (to the bulk write thread and back).
    let mut cache = WriterCache::new();
    // A large job met while gathering a group waits for the next transaction.
    let mut held: Option<Job> = None;
    let bulk = BulkWriter::start(commits.clone());
    // Size of the group before this one (see `should_linger`).
    let mut previous = 0usize;
    loop {
        let Some(first) = held.take().or_else(|| rx.blocking_recv()) else {
            break;
        };
        let first_alone = first.mode == WriteMode::Alone;
        jobs.push(first);
        if !first_alone {
            gather(&mut rx, &mut jobs, &mut held);
            let clients = clients.load(Ordering::Relaxed);
            if held.is_none() && should_linger(jobs.len(), previous, clients) {
                std::thread::sleep(LINGER);
                gather(&mut rx, &mut jobs, &mut held);
            }
        }
        previous = jobs.len();
        job_count.fetch_add(jobs.len() as u64, Ordering::Relaxed);
        match &bulk {
            Some(bulk) if first_alone => match bulk.run(conn, cache, std::mem::take(&mut jobs)) {
                Some((c, k, j)) => (conn, cache, jobs) = (c, k, j),
                None => {
                    log::error!("the bulk write thread failed; the writer stops");
                    checkpointer.stop();
                    return;
                }
            },
            _ => run_transaction(&conn, &mut cache, &mut jobs, &commits),
        }
        checkpointer.restart_if_wanted(&conn);
    }
    let restarts = checkpointer.restart_summary();
    checkpointer.stop();
    log::info!(
        "writer stopped: {} writes in {} transactions; {restarts}; its cache emptied {} times",
        job_count.load(Ordering::Relaxed),
        commits.load(Ordering::Relaxed),
        cache.clears()
    );
}

/// Adds the queued jobs to the group in `jobs`, up to `MAX_GROUP`, without waiting; a large
/// (`Alone`) job ends the group and is left in `held` for the next transaction.
fn gather(rx: &mut mpsc::Receiver<Job>, jobs: &mut Vec<Job>, held: &mut Option<Job>) {
    while held.is_none() && jobs.len() < MAX_GROUP {
        match rx.try_recv() {
            Ok(j) if j.mode == WriteMode::Alone => *held = Some(j),
            Ok(j) => jobs.push(j),
            Err(_) => break,
        }
    }
}

/// A write transaction taking longer than this is logged (a warning: it holds up every request
/// in its group).
const SLOW_TRANSACTION: std::time::Duration = std::time::Duration::from_millis(50);

/// The log line for a write transaction over `SLOW_TRANSACTION`; the benchmark reads these lines
/// back from the server's log (`bench::slow_transaction_ms`), so both take the format from here.
pub(crate) fn slow_transaction_message(
    total_ms: u128,
    writes: usize,
    lock_wait_ms: u128,
    commit_ms: u128,
    sync_ms: u128,
) -> String {
    format!(
        "slow write transaction: {total_ms} ms for {writes} writes ({lock_wait_ms} ms of it waiting for the write lock, {commit_ms} ms in COMMIT, {sync_ms} ms of that in the WAL's fsync)"
    )
}

/// Runs `jobs` in one write transaction and tells each how it ended.
fn run_transaction(
    conn: &Connection,
    cache: &mut WriterCache,
    jobs: &mut Vec<Job>,
    commits: &AtomicU64,
) {
    let started = std::time::Instant::now();
    // Counted from here: what the transaction's COMMIT spends syncing the WAL.
    walvfs::take_sync_time();
    let group = jobs.len();
    let alone = jobs.len() == 1;
    // Savepoints are needed only when a job may fail on its own in a group of several.
    let no_savepoints = alone || jobs.iter().all(|j| j.mode == WriteMode::Shared);
    let begun = exec_cached(conn, "BEGIN IMMEDIATE");
    let lock_wait = started.elapsed();
    if let Err(e) = begun {
        log::error!("cannot begin write transaction: {e}");
        // Run nothing; every job learns of the failure through its completion.
        for job in jobs.drain(..) {
            fail_job(job, conn, e.to_string());
        }
        return;
    }
    SAVEPOINTS.with(|s| s.set(!no_savepoints));
    // With the write lock held, nothing else can commit until this transaction ends.
    if let Err(e) = cache.revalidate(conn) {
        log::warn!("cannot read the data version: {e}");
        cache.clear();
    }
    // Without savepoints a failed job says so through LAST_JOB_FAILED, and the transaction
    // is rolled back below instead of committed. The statements are given back to the
    // connection's cache (reset) before the transaction ends.
    let mut statements = Statements::new(conn);
    let completions: Vec<Completion> = jobs
        .drain(..)
        .map(|job| {
            if !job.keeps_cache {
                cache.clear();
            }
            let (completion, ok) = (job.run)(conn, cache, &mut statements);
            if !ok {
                // What it recorded in the cache was rolled back with it.
                cache.clear();
            }
            completion
        })
        .collect();
    drop(statements);
    let failed = LAST_JOB_FAILED.with(|f| f.replace(false));
    let ran = started.elapsed();
    let commit = if failed {
        // The failed job's own error is its answer (it wins over this one); the others in the
        // group learn that nothing of theirs was stored.
        let _ = exec_cached(conn, "ROLLBACK");
        Err("another write in the same transaction failed; nothing was stored".to_string())
    } else {
        exec_cached(conn, "COMMIT").map_err(|e| {
            log::error!("commit failed: {e}");
            let _ = exec_cached(conn, "ROLLBACK");
            e.to_string()
        })
    };
    let took = started.elapsed();
    let synced = walvfs::take_sync_time();
    if took > SLOW_TRANSACTION {
        log::warn!(
            "{}",
            slow_transaction_message(
                took.as_millis(),
                group,
                lock_wait.as_millis(),
                (took - ran).as_millis(),
                synced.as_millis()
            )
        );
    }
    if commit.is_ok() && !failed {
        commits.fetch_add(1, Ordering::Relaxed);
    } else {
        cache.clear();
    }
    for c in completions {
        c(commit.clone());
    }
}

/// The writer hands its connection to this thread, at the lower priority of `crate::bulk`, for a
/// transaction of one large job (a batch of thousands of events: tens of milliseconds of CPU),
/// and waits for it. So a stream of large batches yields the CPU to the small requests of other
/// connections instead of taking an equal share from them; on an otherwise idle server it runs
/// as fast as on the writer's own thread.
struct BulkWriter {
    work: std::sync::mpsc::SyncSender<Lent>,
    done: std::sync::mpsc::Receiver<Lent>,
}

/// What the writer lends the bulk write thread: its connection with its cache, and the jobs.
type Lent = (Connection, WriterCache, Vec<Job>);

impl BulkWriter {
    /// `None` if the thread cannot be started (the writer then runs everything itself).
    fn start(commits: Arc<AtomicU64>) -> Option<BulkWriter> {
        let (work, work_rx) = std::sync::mpsc::sync_channel::<Lent>(1);
        let (done_tx, done) = std::sync::mpsc::sync_channel::<Lent>(1);
        let spawned = std::thread::Builder::new()
            .name("parasol-bulk-write".into())
            .spawn(move || {
                crate::bulk::lower_priority();
                while let Ok((conn, mut cache, mut jobs)) = work_rx.recv() {
                    run_transaction(&conn, &mut cache, &mut jobs, &commits);
                    if done_tx.send((conn, cache, jobs)).is_err() {
                        return;
                    }
                }
            });
        match spawned {
            Ok(_) => Some(BulkWriter { work, done }),
            Err(e) => {
                log::warn!(
                    "cannot start the bulk write thread ({e}); large writes run on the writer"
                );
                None
            }
        }
    }

    /// Runs `jobs` on the bulk thread; gives the connection, its cache and the emptied vector
    /// back.
    fn run(&self, conn: Connection, cache: WriterCache, jobs: Vec<Job>) -> Option<Lent> {
        self.work.send((conn, cache, jobs)).ok()?;
        self.done.recv().ok()
    }
}

thread_local! {
    /// Set by a job run without a savepoint when it returned an error.
    static LAST_JOB_FAILED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Copies the WAL back into the database file on a thread of its own (with its own connection),
/// so that commits never wait for a checkpoint. Durability is unaffected: each commit is already
/// on disk in the WAL (synchronous=FULL) before any request is answered.
///
/// Passive checkpoints alone do not stop the WAL from growing under a continuous stream of
/// commits: SQLite starts the WAL over only when a write transaction begins while every frame is
/// already in the database file, and commits keep arriving while a checkpoint runs. So once the
/// WAL holds more than `WAL_RESTART_BYTES`, the checkpointer asks the writer to restart it: the
/// writer, between two transactions, runs `wal_checkpoint(RESTART)` itself, which has only the
/// frames committed since the last passive checkpoint left to copy (plus one fsync of the
/// database file). A RESTART run by another connection would instead hold the write lock for the
/// whole copy while the writer waited in its busy handler: that was the 30-330 ms write stalls
/// measured before. The checkpointer runs at the lower priority of `crate::bulk`.
struct Checkpointer {
    stop: std::sync::mpsc::SyncSender<()>,
    handle: JoinHandle<()>,
    shared: Arc<CheckpointShared>,
}

/// What the checkpointer thread and the writer share.
struct CheckpointShared {
    /// Held while either runs a checkpoint, so that the writer's restart never waits behind a
    /// long passive checkpoint (it tries the lock and, if taken, tries again after its next
    /// transaction).
    running: Mutex<()>,
    /// Set when the WAL has grown past `WAL_RESTART_BYTES`.
    restart_wanted: std::sync::atomic::AtomicBool,
    /// WAL restarts done by the writer, and the microseconds they held it (total, longest).
    restarts: AtomicU64,
    restart_us: AtomicU64,
    restart_max_us: AtomicU64,
}

impl Checkpointer {
    fn start(db: &Path, commits: Arc<AtomicU64>) -> Result<Checkpointer> {
        let conn = open_connection(db)?;
        let (stop, rx) = std::sync::mpsc::sync_channel::<()>(1);
        let shared = Arc::new(CheckpointShared {
            running: Mutex::new(()),
            restart_wanted: std::sync::atomic::AtomicBool::new(false),
            restarts: AtomicU64::new(0),
            restart_us: AtomicU64::new(0),
            restart_max_us: AtomicU64::new(0),
        });
        let state = shared.clone();
        let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let handle = std::thread::Builder::new()
            .name("parasol-checkpoint".into())
            .spawn(move || {
                // Background work: the CPU goes to requests and commits first.
                crate::bulk::lower_priority();
                let mut seen = commits.load(Ordering::Relaxed);
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    rx.recv_timeout(CHECKPOINT_INTERVAL)
                {
                    let now = commits.load(Ordering::Relaxed);
                    if now == seen {
                        continue;
                    }
                    seen = now;
                    match passive_pass(&conn, &state) {
                        Ok(frames) if frames * page_size > WAL_RESTART_BYTES => {
                            // Copy what was committed during that checkpoint too (a much shorter
                            // pass, and a shorter one after it), so that the writer's restart has
                            // only a few frames left to copy.
                            for _ in 0..CATCH_UP_PASSES {
                                if let Err(e) = passive_pass(&conn, &state) {
                                    log::warn!("checkpoint failed: {e}");
                                }
                            }
                            state.restart_wanted.store(true, Ordering::Relaxed)
                        }
                        Ok(_) => {}
                        Err(e) => log::warn!("checkpoint failed: {e}"),
                    }
                }
                // A last full checkpoint leaves a small WAL behind for the next start.
                let _ = checkpoint(&conn, Mode::Truncate);
            })
            .map_err(|e| StoreError::Task(e.to_string()))?;
        Ok(Checkpointer {
            stop,
            handle,
            shared,
        })
    }

    /// Called by the writer between transactions: restarts the WAL if the checkpointer asked for
    /// it and is not checkpointing right now.
    fn restart_if_wanted(&self, conn: &Connection) {
        if !self.shared.restart_wanted.load(Ordering::Relaxed) {
            return;
        }
        let Ok(_running) = self.shared.running.try_lock() else {
            return;
        };
        let started = std::time::Instant::now();
        match checkpoint(conn, Mode::Restart) {
            Ok(_) => self.shared.restart_wanted.store(false, Ordering::Relaxed),
            Err(e) => log::warn!("WAL restart failed: {e}"),
        }
        let took = started.elapsed();
        if took > SLOW_TRANSACTION {
            log::warn!("slow WAL restart: {} ms", took.as_millis());
        }
        let us = took.as_micros() as u64;
        self.shared.restarts.fetch_add(1, Ordering::Relaxed);
        self.shared.restart_us.fetch_add(us, Ordering::Relaxed);
        self.shared.restart_max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// "N WAL restarts holding the writer X ms in all, Y ms at most", for the log.
    fn restart_summary(&self) -> String {
        let ms = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1000.0;
        format!(
            "{} WAL restarts holding the writer {:.1} ms in all, {:.1} ms at most",
            self.shared.restarts.load(Ordering::Relaxed),
            ms(&self.shared.restart_us),
            ms(&self.shared.restart_max_us)
        )
    }

    fn stop(self) {
        drop(self.stop);
        let _ = self.handle.join();
    }
}

#[derive(Clone, Copy)]
enum Mode {
    Passive,
    Restart,
    Truncate,
}

/// Writes what checkpoints copied into the database file through to the disk (fsync through
/// SQLite's own handle of the file: a descriptor of our own, once closed, would drop the
/// process's POSIX locks on it). SQLite syncs the database file only at the end of a checkpoint
/// that copies the whole WAL, which under a steady stream of commits is the writer's WAL restart:
/// that fsync then had every page copied since the last restart to write back (64 MiB of WAL:
/// 3-15 ms measured with strace, while every request waited). Synced here after each pass, on
/// the checkpointer's thread, the restart finds only its last few pages dirty. A failure costs
/// nothing but that: SQLite still syncs at the end of the next complete checkpoint. Returns
/// SQLite's error code on failure.
fn sync_database_file(conn: &Connection) -> std::result::Result<(), i32> {
    use rusqlite::ffi;
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: the connection is open and used by this thread only; FILE_POINTER stores the
    // main database's sqlite3_file (owned by SQLite, valid while the connection is open) in
    // `file`. Its xSync is what SQLite itself calls to sync the file, and no statement of this
    // connection is running meanwhile.
    let rc = unsafe {
        let rc = ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&mut file as *mut *mut ffi::sqlite3_file).cast(),
        );
        if rc != ffi::SQLITE_OK || file.is_null() || (*file).pMethods.is_null() {
            rc
        } else {
            match (*(*file).pMethods).xSync {
                Some(sync) => sync(file, ffi::SQLITE_SYNC_NORMAL),
                None => ffi::SQLITE_OK,
            }
        }
    };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rc)
    }
}

/// One pass of the checkpointer: a passive checkpoint (under `running`, so that the writer's
/// restart never waits behind it), then the database file synced; returns the frames the WAL
/// held.
fn passive_pass(conn: &Connection, state: &CheckpointShared) -> Result<i64> {
    let frames = {
        let _running = state.running.lock();
        checkpoint(conn, Mode::Passive)
    };
    sync_after_checkpoint(conn);
    frames
}

/// `sync_database_file`, for the checkpointer: a failure is logged.
fn sync_after_checkpoint(conn: &Connection) {
    if let Err(rc) = sync_database_file(conn) {
        log::warn!("cannot sync the database file after a checkpoint (SQLite error {rc})");
    }
}

/// Runs `PRAGMA wal_checkpoint(mode)`; returns the frames the WAL held.
fn checkpoint(conn: &Connection, mode: Mode) -> Result<i64> {
    let sql = match mode {
        Mode::Passive => "PRAGMA wal_checkpoint(PASSIVE)",
        Mode::Restart => "PRAGMA wal_checkpoint(RESTART)",
        Mode::Truncate => "PRAGMA wal_checkpoint(TRUNCATE)",
    };
    Ok(conn.prepare_cached(sql)?.query_row([], |r| r.get(1))?)
}

/// Completes a job that could not run: its closure is never given the connection.
fn fail_job(job: Job, _conn: &Connection, why: String) {
    // The job's closure owns the reply channel; dropping it closes the channel, which the waiting
    // request sees as `StoreError::Closed`.
    drop(job);
    log::warn!("write job dropped: {why}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TempDir;

    /// Creates table `t` with the given column definition.
    async fn create_t(store: &Store, column: &'static str) {
        store
            .write(move |c| {
                c.execute_batch(&format!("CREATE TABLE t ({column})"))?;
                Ok(())
            })
            .await
            .unwrap();
    }

    /// Holds the writer busy for 200 ms so that the next writes queue up behind it, in one group.
    async fn hold_writer(store: &Store) -> tokio::task::JoinHandle<Result<()>> {
        let s = store.clone();
        let blocker = tokio::spawn(async move {
            s.write(|_| {
                std::thread::sleep(std::time::Duration::from_millis(200));
                Ok(())
            })
            .await
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        blocker
    }

    fn temp_db() -> (TempDir, Store) {
        let dir = TempDir::new("store");
        let store = Store::open(&dir.join("parasol.db")).unwrap();
        (dir, store)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wal_is_restarted_under_a_continuous_stream_of_commits() {
        let (dir, store) = temp_db();
        create_t(&store, "v BLOB").await;
        let wal = dir.join("parasol.db-wal");
        // Readers running all along, as on a busy server: each holds a WAL snapshot for a while.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (s, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    s.read(|c| {
                        Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))?)
                    })
                    .await
                    .unwrap();
                }
            })
        };
        // Commits without a pause over several checkpoint intervals (the test build restarts the
        // WAL past 1 MiB; it grows by whatever is committed between two checkpoints).
        let (mut largest, mut last, mut shrunk) = (0, 0, 0);
        let started = std::time::Instant::now();
        let mut written = 0u64;
        while started.elapsed() < std::time::Duration::from_secs(3) {
            store
                .write(|c| {
                    c.execute("INSERT INTO t (v) VALUES (zeroblob(16384))", [])?;
                    Ok(())
                })
                .await
                .unwrap();
            written += 16384;
            let size = std::fs::metadata(&wal).map_or(0, |m| m.len());
            if size < last {
                shrunk += 1;
            }
            (largest, last) = (largest.max(size), size);
        }
        stop.store(true, Ordering::Relaxed);
        reader.await.unwrap();
        // Without restarts the file never shrinks and ends up holding every commit (more than
        // `written`: each commit also rewrites index pages). How large it gets between two
        // restarts depends on the page size and on this machine's speed.
        assert!(
            shrunk >= 2 && largest < written,
            "WAL file reached {largest} bytes after {written} bytes of commits, truncated {shrunk} times"
        );
        store.close();
    }

    #[test]
    fn the_writer_waits_for_more_writes_only_under_concurrency_with_clients_left_out() {
        // A lone sequential client, or no concurrency in the group before: never.
        assert!(!should_linger(1, 1, 1));
        assert!(!should_linger(1, 0, 5));
        assert!(!should_linger(1, 1, 64));
        // Concurrency, and connected clients outside the group: waits.
        assert!(should_linger(1, 2, 64));
        assert!(should_linger(LINGER_BELOW - 1, 30, 64));
        // Every connected client already in the group: nobody else can send.
        assert!(!should_linger(4, 4, 4));
        assert!(!should_linger(5, 4, 4));
        // A large group is committed at once.
        assert!(!should_linger(LINGER_BELOW, 30, 64));
        // No server counting clients (tools, tests): never.
        assert!(!should_linger(2, 2, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_still_commit_and_answer_while_the_writer_gathers() {
        // With clients counted and concurrent writes, the writer waits for more before small
        // commits: every write still commits, none is lost or answered twice.
        let (_dir, store) = temp_db();
        create_t(&store, "v INTEGER").await;
        store.clients().store(64, Ordering::Relaxed);
        let tasks: Vec<_> = (0..200i64)
            .map(|i| {
                let s = store.clone();
                tokio::spawn(async move {
                    s.write_shared(move |c| {
                        Ok(c.execute("INSERT INTO t (v) VALUES (?1)", [i]).map(|_| i)?)
                    })
                    .await
                })
            })
            .collect();
        let done: Vec<i64> = futures_join(tasks)
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(done, (0..200).collect::<Vec<_>>());
        let n: i64 = store
            .read(|c| Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(n, 200);
    }

    #[test]
    fn the_database_file_is_synced_through_sqlites_own_handle() {
        let (_dir, store) = temp_db();
        let c = open_connection(store.path()).unwrap();
        c.execute_batch("CREATE TABLE s (x); INSERT INTO s VALUES (1);")
            .unwrap();
        assert_eq!(sync_database_file(&c), Ok(()));
        drop(c);
        store.close();
    }

    #[test]
    fn connections_are_durable_wal_with_foreign_keys() {
        let (_dir, store) = temp_db();
        let c = open_connection(store.path()).unwrap();
        let mode: String = c
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        let sync: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        let fk: i64 = c
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            (mode.as_str(), sync, fk),
            ("wal", 2, 1),
            "WAL, synchronous=FULL, foreign keys on"
        );
        store.close();
    }

    #[test]
    fn new_databases_get_the_large_page_size_and_old_ones_keep_theirs() {
        let (dir, store) = temp_db();
        let c = open_connection(store.path()).unwrap();
        let size: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        assert_eq!(size, PAGE_SIZE);
        drop(c);
        store.close();
        // A database made with SQLite's default pages (as earlier versions did) opens and works.
        let old = dir.join("old.db");
        {
            let c = Connection::open(&old).unwrap();
            c.execute_batch(
                "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; CREATE TABLE t (x);",
            )
            .unwrap();
        }
        let c = open_migrated(&old).unwrap();
        let size: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        assert_eq!(size, 4096);
        c.execute("INSERT INTO t (x) VALUES (1)", []).unwrap();
        drop(c);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_share_transactions_and_failures_stay_isolated() {
        let (_dir, store) = temp_db();
        create_t(&store, "v INTEGER UNIQUE").await;
        let before = store.commit_count();
        let blocker = hold_writer(&store).await;
        let mut tasks = Vec::new();
        for i in 0..200i64 {
            let s = store.clone();
            tasks.push(tokio::spawn(async move {
                // Every 10th job fails after writing; only its own row is undone.
                s.write(move |c| {
                    c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
                    if i % 10 == 0 {
                        c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
                    }
                    Ok(())
                })
                .await
            }));
        }
        blocker.await.unwrap().unwrap();
        let mut failed = 0;
        for t in tasks {
            if t.await.unwrap().is_err() {
                failed += 1;
            }
        }
        assert_eq!(failed, 20);
        let rows: i64 = store
            .read(|c| Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(rows, 180);
        let commits = store.commit_count() - before;
        assert!(
            commits < 20,
            "201 writes took {commits} transactions: no group commit"
        );
        store.close();
    }

    #[tokio::test]
    async fn a_failing_write_alone_in_its_transaction_leaves_nothing() {
        let (_dir, store) = temp_db();
        create_t(&store, "v INTEGER UNIQUE").await;
        // One job at a time: each runs without a savepoint.
        let failed = store
            .write(|c| {
                c.execute("INSERT INTO t (v) VALUES (1)", [])?;
                Err::<(), _>(StoreError::Aborted("on purpose".into()))
            })
            .await;
        assert!(matches!(failed, Err(StoreError::Aborted(_))));
        store
            .write(|c| {
                c.execute("INSERT INTO t (v) VALUES (2)", [])?;
                Ok(())
            })
            .await
            .unwrap();
        let rows: Vec<i64> = store
            .read(|c| {
                let mut s = c.prepare("SELECT v FROM t ORDER BY v")?;
                let v = s
                    .query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                Ok(v)
            })
            .await
            .unwrap();
        assert_eq!(
            rows,
            vec![2],
            "the failed write's row is gone, the next one stays"
        );
        store.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_shared_write_fails_its_whole_group_and_stores_nothing() {
        let (_dir, store) = temp_db();
        create_t(&store, "v INTEGER").await;
        let blocker = hold_writer(&store).await;
        let mut tasks = Vec::new();
        for i in 0..10i64 {
            let s = store.clone();
            tasks.push(tokio::spawn(async move {
                s.write_shared(move |c| {
                    c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
                    if i == 5 {
                        return Err(StoreError::Task("disk trouble".into()));
                    }
                    Ok(())
                })
                .await
            }));
        }
        blocker.await.unwrap().unwrap();
        let results: Vec<_> = futures_join(tasks).await;
        assert!(
            results.iter().all(|r| r.is_err()),
            "every write of the group failed"
        );
        let rows: i64 = store
            .read(|c| Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(rows, 0, "nothing of the failed group was stored");
        store
            .write_shared(|c| {
                c.execute("INSERT INTO t (v) VALUES (99)", [])?;
                Ok(())
            })
            .await
            .unwrap();
        store.close();
    }

    async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    /// A write that fails in a group (its savepoint rolled back, the others committed) takes
    /// what it recorded in the writer's cache with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_write_leaves_nothing_in_the_writer_cache() {
        let (_dir, store) = temp_db();
        store
            .write(|c| {
                c.execute(
                    "INSERT INTO organizations (id, name, created_at, modified_at) VALUES (7, 'o', 0, 0)",
                    [],
                )?;
                Ok(())
            })
            .await
            .unwrap();
        let blocker = hold_writer(&store).await;
        let (s1, s2) = (store.clone(), store.clone());
        // Queued behind the blocker, so they share one transaction, each in a savepoint.
        let failing = tokio::spawn(async move {
            s1.write_events(WriteMode::Savepoint, |c, cache, _| {
                c.execute(
                    "INSERT INTO customer_keys (key, organization_id, created_at) VALUES ('k', 7, 0)",
                    [],
                )?;
                assert_eq!(cache.organization_of_key(c, "k")?, Some(7));
                Err::<(), _>(StoreError::Aborted("on purpose".into()))
            })
            .await
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let other = tokio::spawn(async move {
            s2.write_events(WriteMode::Savepoint, |_, _, _| Ok(()))
                .await
        });
        blocker.await.unwrap().unwrap();
        assert!(failing.await.unwrap().is_err());
        other.await.unwrap().unwrap();
        let after = store
            .write_events(WriteMode::Savepoint, |c, cache, _| {
                cache.organization_of_key(c, "k")
            })
            .await
            .unwrap();
        assert_eq!(after, None, "the rolled-back key is not remembered");
        store.close();
    }

    /// The scheduling policy (`/proc/<tid>/stat` field 41) of this process's threads named `name`.
    fn policies_of(name: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() != name {
                continue;
            }
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // Fields after the parenthesised name start at field 3.
            let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
            if let Some(policy) = after.split(' ').nth(41 - 3) {
                out.push(policy.parse().unwrap());
            }
        }
        out
    }

    #[tokio::test]
    async fn the_writer_runs_under_batch_scheduling() {
        let (_dir, store) = temp_db();
        // A write has run on the writer thread, so it has set its policy.
        store.write(|_| Ok(())).await.unwrap();
        // (Other tests' writers run in this process too: one just started may not have set its
        // policy yet.)
        let mut policies = policies_of("parasol-writer");
        for _ in 0..100 {
            if policies.iter().all(|&p| p == libc::SCHED_BATCH as u32) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            policies = policies_of("parasol-writer");
        }
        assert!(!policies.is_empty(), "no writer thread found");
        assert!(
            policies.iter().all(|&p| p == libc::SCHED_BATCH as u32),
            "{policies:?}"
        );
        // Only the writer: the checkpointer keeps the normal policy (at a lower priority).
        assert!(policies_of("parasol-checkpo")
            .iter()
            .all(|&p| p == libc::SCHED_OTHER as u32));
        store.close();
    }

    #[tokio::test]
    async fn writes_after_close_fail_cleanly() {
        let (_dir, store) = temp_db();
        store.close();
        assert!(matches!(
            store.write(|_| Ok(())).await,
            Err(StoreError::Closed)
        ));
    }
}
