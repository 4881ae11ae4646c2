//! The writer: one thread owns the write connection and runs every write. Writes queued while a
//! transaction is running are gathered into the next one (group commit): one fsync of the WAL for
//! many requests. This, the bulk write thread and the checkpointer are what is specific to
//! SQLite's single-writer WAL; a backend on a server database runs each operation in a
//! transaction of its own and has none of it.
//!
//! The rule that makes a 202 mean "all of it stored" and any other answer "none of it": a group
//! is committed only if every job in it ran in the open transaction. After each job the writer
//! checks that SQLite still has the transaction open (a disk-full or I/O error may make it roll
//! the whole transaction back and return to autocommit, after which later statements would
//! commit one by one). If the transaction is gone, or a job met a storage fault, or a job failed
//! where it had no savepoint of its own, or a job panicked, the writer runs no further job of the
//! group, rolls back whatever is left, and fails every job of the group: nothing of any of them
//! is stored. A job that fails on its own account (a 404 or 409, a rate budget spent) in a group
//! with savepoints only undoes its own savepoint.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::checkpoint::Checkpointer;
use super::walvfs;
use super::writer_cache::{Statements, WriterCache};
use super::Shared;
use crate::store::{FaultKind, Result, StoreError};

/// How a write runs in the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// In a savepoint of its own, in a group transaction: its own failure undoes only its own
    /// changes.
    Savepoint,
    /// Without a savepoint, sharing its group's fate: for writes that fail only when the database
    /// does. Saves two statements per write in a large group.
    Shared,
    /// In a transaction of its own: a write large enough to fill one (a batch of thousands of
    /// events). Grouping such writes saves little, while a savepoint over one would first copy
    /// every page it touches to a sub-journal.
    Alone,
}

/// Called once the fate of the job's transaction is known: `Err` if it was not committed.
pub(super) type Completion = Box<dyn FnOnce(std::result::Result<(), StoreError>) + Send>;

/// What running a job tells the writer.
pub(super) struct Ran {
    completion: Completion,
    /// The job succeeded: its changes stay in the transaction.
    ok: bool,
    /// The job met a storage fault: the group cannot be committed.
    fault: Option<StoreError>,
}

/// A queued write: runs in the open transaction, or is failed without running.
pub(super) trait Work: Send {
    fn run<'c>(
        self: Box<Self>,
        conn: &'c Connection,
        cache: &mut WriterCache,
        statements: &mut Statements<'c>,
    ) -> Ran;
    fn fail(self: Box<Self>, why: StoreError);
}

/// A write and where its result goes.
pub(super) struct Task<F, T> {
    pub f: F,
    pub reply: oneshot::Sender<Result<T>>,
}

impl<F, T> Work for Task<F, T>
where
    F: for<'c> FnOnce(&'c Connection, &mut WriterCache, &mut Statements<'c>) -> Result<T> + Send,
    T: Send + 'static,
{
    fn run<'c>(
        self: Box<Self>,
        conn: &'c Connection,
        cache: &mut WriterCache,
        statements: &mut Statements<'c>,
    ) -> Ran {
        let Task { f, reply } = *self;
        super::faultvfs::maybe_panic();
        let result = run_in_savepoint(conn, || f(conn, cache, statements));
        let ok = result.is_ok();
        let fault = match &result {
            Err(e) if e.is_unavailable() => Some(e.clone()),
            _ => None,
        };
        let completion: Completion = Box::new(move |commit| {
            let out = match (commit, result) {
                (Ok(()), r) => r,
                // Its own refusal (or fault) is its answer; nothing of it was stored either way.
                (Err(_), Err(own)) => Err(own),
                (Err(e), Ok(_)) => Err(e),
            };
            let _ = reply.send(out);
        });
        Ran {
            completion,
            ok,
            fault,
        }
    }

    fn fail(self: Box<Self>, why: StoreError) {
        let _ = self.reply.send(Err(why));
    }
}

/// A write queued for the writer.
pub(super) struct Job {
    pub work: Box<dyn Work>,
    pub mode: WriteMode,
    /// Keeps the writer's cache up to date with what it writes (see `Sqlite::write_events`); the
    /// cache is emptied before any other job runs.
    pub keeps_cache: bool,
}

/// Most jobs folded into one transaction. Bounded so that one commit's latency stays small.
const MAX_GROUP: usize = 256;

/// How long the writer waits for more writes before committing a small group under concurrent
/// load (see `should_gather_more`), about one commit's fsync on the benchmark's VM.
const GATHER_WAIT: Duration = Duration::from_micros(300);
/// Groups of at least this many writes are committed at once.
const GATHER_BELOW: usize = 16;

/// Whether the writer should wait (once, `GATHER_WAIT`) for more writes before committing a
/// group of `group` writes, the one before having held `previous`, with `clients` connected.
/// Each commit costs a fixed ~130 us of CPU (frames, checksums, fsync) besides its writes, so
/// under a steady stream of small requests that arrive spread out (an open loop: at 80% of the
/// maximum rate the groups held about half as many requests as in a closed loop, and a request
/// cost a fifth more CPU) gathering longer buys headroom for a quarter of a millisecond of
/// latency. It waits only when there is concurrency (the group before held several writes) and
/// some connected client is not in this group; a lone sequential client, or every client
/// already in the group, is never kept waiting.
fn should_gather_more(group: usize, previous: usize, clients: usize) -> bool {
    group < GATHER_BELOW && previous >= 2 && clients > group
}

/// A write transaction taking longer than this is logged (a warning: it holds up every request
/// in its group).
const SLOW_TRANSACTION: Duration = Duration::from_millis(50);

/// Runs one cached statement without parameters (transaction control).
pub(super) fn exec_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
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
        // Alone in its transaction, or sharing its group's fate: an error rolls the whole
        // transaction back (see `run_transaction`).
        return f();
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
        // The savepoint went with the transaction, which SQLite rolled back.
        (Ok(_), Err(_)) if conn.is_autocommit() => Err(rolled_back()),
        (Ok(_), Err(e)) => Err(e.into()),
    }
}

/// Why a group fails when SQLite ended its transaction on its own (on a disk-full or I/O error
/// it rolls the whole transaction back).
fn rolled_back() -> StoreError {
    StoreError::fault(FaultKind::Io, "the database rolled the transaction back")
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

/// Starts the writer thread on `conn`.
pub(super) fn start(
    conn: Connection,
    rx: mpsc::Receiver<Job>,
    shared: Arc<Shared>,
    checkpointer: Option<Checkpointer>,
    path: PathBuf,
    role: super::Role,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("parasol-writer".into())
        .spawn(move || {
            batch_scheduling();
            writer_loop(conn, rx, shared, checkpointer, (path, role))
        })
        .map_err(|e| StoreError::Internal(format!("cannot start the writer thread: {e}")))
}

fn writer_loop(
    mut conn: Connection,
    mut rx: mpsc::Receiver<Job>,
    shared: Arc<Shared>,
    checkpointer: Option<Checkpointer>,
    (path, role): (PathBuf, super::Role),
) {
    let mut jobs: Vec<Job> = Vec::with_capacity(MAX_GROUP);
    // Travels with the connection (to the bulk write thread and back).
    let mut cache = WriterCache::new();
    // A large job met while gathering a group waits for the next transaction.
    let mut held: Option<Job> = None;
    let mut bulk = BulkWriter::start(shared.clone());
    // Size of the group before this one (see `should_gather_more`).
    let mut previous = 0usize;
    loop {
        let Some(first) = held.take().or_else(|| rx.blocking_recv()) else {
            break;
        };
        let first_alone = first.mode == WriteMode::Alone;
        jobs.push(first);
        if !first_alone {
            gather(&mut rx, &mut jobs, &mut held);
            let clients = shared.clients.load(Ordering::Relaxed);
            if held.is_none() && should_gather_more(jobs.len(), previous, clients) {
                std::thread::sleep(GATHER_WAIT);
                gather(&mut rx, &mut jobs, &mut held);
            }
        }
        previous = jobs.len();
        shared.jobs.fetch_add(jobs.len() as u64, Ordering::Relaxed);
        let on_bulk = if first_alone { bulk.as_ref() } else { None };
        if let Some(b) = on_bulk {
            if let Some((c, k, j)) = b.run(conn, cache, std::mem::take(&mut jobs)) {
                (conn, cache, jobs) = (c, k, j);
            } else {
                // The bulk thread is gone, and the connection with it: the jobs it held were
                // failed as their replies dropped. Carry on with a new connection.
                log::error!("the bulk write thread failed; the writer reopens the database");
                bulk = None;
                match super::open_writer_connection(&path, role) {
                    Ok(c) => (conn, cache) = (c, WriterCache::new()),
                    Err(e) => {
                        log::error!("cannot reopen the database, the writer stops: {e}");
                        stopped(checkpointer, &shared, 0);
                        return;
                    }
                }
            }
        } else {
            let ran = catch_unwind(AssertUnwindSafe(|| {
                run_transaction(&conn, &mut cache, &mut jobs, &shared)
            }));
            if ran.is_err() {
                recover_from_panic(&conn, &mut cache, &mut jobs, &shared);
            }
        }
        if let Some(c) = &checkpointer {
            c.restart_if_wanted(&conn);
        }
    }
    stopped(checkpointer, &shared, cache.clears());
}

/// Stops the checkpointer and logs what the writer did.
fn stopped(checkpointer: Option<Checkpointer>, shared: &Shared, cache_clears: u64) {
    let restarts = checkpointer
        .as_ref()
        .map(|c| c.restart_summary())
        .unwrap_or_default();
    if let Some(c) = checkpointer {
        c.stop();
    }
    log::info!(
        "writer stopped: {} writes in {} transactions; {restarts}; its cache emptied {cache_clears} times",
        shared.jobs.load(Ordering::Relaxed),
        shared.commits.load(Ordering::Relaxed),
    );
}

/// After a panic in the writer's own code (a job's panic is caught where it runs): whatever
/// the transaction held is rolled back, the cache forgotten, and the jobs still held failed, so
/// that the writer goes on with a clean connection.
fn recover_from_panic(
    conn: &Connection,
    cache: &mut WriterCache,
    jobs: &mut Vec<Job>,
    shared: &Shared,
) {
    log::error!("the writer panicked; its transaction was rolled back and its writes failed");
    if !conn.is_autocommit() {
        let _ = exec_cached(conn, "ROLLBACK");
    }
    cache.clear();
    let why = StoreError::fault(FaultKind::WriterDown, "the writer failed and restarted");
    shared.health.fault(&why);
    for job in jobs.drain(..) {
        job.work.fail(why.clone());
    }
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

/// Runs `jobs` in one write transaction and tells each how it ended (see the module's doc for
/// the rule).
fn run_transaction(
    conn: &Connection,
    cache: &mut WriterCache,
    jobs: &mut Vec<Job>,
    shared: &Shared,
) {
    let started = Instant::now();
    // Counted from here: what the transaction's COMMIT spends syncing the WAL.
    walvfs::take_sync_time();
    let group = jobs.len();
    // Savepoints are needed only when a job may fail on its own in a group of several.
    let no_savepoints = group == 1 || jobs.iter().all(|j| j.mode == WriteMode::Shared);
    let begun = exec_cached(conn, "BEGIN IMMEDIATE");
    let lock_wait = started.elapsed();
    if let Err(e) = begun {
        let e = StoreError::from(e);
        log::error!("cannot begin a write transaction: {e}");
        shared.health.fault(&e);
        for job in jobs.drain(..) {
            job.work.fail(e.clone());
        }
        return;
    }
    SAVEPOINTS.with(|s| s.set(!no_savepoints));
    // With the write lock held, nothing else can commit until this transaction ends.
    if let Err(e) = cache.revalidate(conn) {
        log::warn!("cannot read the data version: {e}");
        cache.clear();
    }
    // The statements are given back to the connection's cache (reset) before the transaction
    // ends.
    let mut statements = Statements::new(conn);
    let mut completions: Vec<Completion> = Vec::with_capacity(group);
    // Set once the group cannot be committed: why every job of it fails.
    let mut broken: Option<StoreError> = None;
    for job in jobs.drain(..) {
        if let Some(why) = &broken {
            job.work.fail(why.clone());
            continue;
        }
        if !job.keeps_cache {
            cache.clear();
        }
        let ran = catch_unwind(AssertUnwindSafe(|| {
            job.work.run(conn, cache, &mut statements)
        }));
        let ran = match ran {
            Ok(ran) => ran,
            Err(_) => {
                // The job's reply went with it; its caller learns that the writer failed.
                log::error!("a write panicked; its transaction is rolled back");
                cache.clear();
                broken = Some(StoreError::fault(
                    FaultKind::WriterDown,
                    "another write in the same transaction failed; nothing was stored",
                ));
                continue;
            }
        };
        if !ran.ok {
            // What it recorded in the cache was rolled back with it.
            cache.clear();
        }
        if let Some(fault) = ran.fault {
            broken = Some(fault);
        } else if conn.is_autocommit() {
            broken = Some(rolled_back());
        } else if !ran.ok && no_savepoints {
            broken = Some(StoreError::Internal(
                "another write in the same transaction failed; nothing was stored".into(),
            ));
        }
        completions.push(ran.completion);
    }
    drop(statements);
    let ran = started.elapsed();
    let mut committing = None;
    let commit = match broken {
        Some(why) => {
            if !conn.is_autocommit() {
                if let Err(e) = exec_cached(conn, "ROLLBACK") {
                    log::error!("rollback failed: {e}");
                }
            }
            Err(why)
        }
        None => {
            let at = Instant::now();
            let done = exec_cached(conn, "COMMIT");
            committing = Some(at.elapsed());
            done
        }
        .map_err(|e| {
            let e = StoreError::from(e);
            log::error!("commit failed: {e}");
            if !conn.is_autocommit() {
                let _ = exec_cached(conn, "ROLLBACK");
            }
            e
        }),
    };
    let took = started.elapsed();
    let synced = walvfs::take_sync_time();
    if took > SLOW_TRANSACTION {
        log::warn!(
            "slow write transaction: {} ms for {group} writes ({} ms of it waiting for the write lock, {} ms in COMMIT, {} ms of that in the WAL's fsync)",
            took.as_millis(),
            lock_wait.as_millis(),
            (took - ran).as_millis(),
            synced.as_millis(),
        );
    }
    if let Some(c) = committing {
        shared.metrics.commit.observe_duration(c);
    }
    shared.metrics.transaction.observe_duration(took);
    match &commit {
        Ok(()) => {
            shared.metrics.group_size.observe(group as u64);
            shared.commits.fetch_add(1, Ordering::Relaxed);
            shared.health.written();
        }
        Err(e) => {
            cache.clear();
            if e.is_unavailable() {
                shared.health.fault(e);
            }
        }
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
    fn start(shared: Arc<Shared>) -> Option<BulkWriter> {
        let (work, work_rx) = std::sync::mpsc::sync_channel::<Lent>(1);
        let (done_tx, done) = std::sync::mpsc::sync_channel::<Lent>(1);
        let spawned = std::thread::Builder::new()
            .name("parasol-bulk-write".into())
            .spawn(move || {
                crate::bulk::lower_priority();
                while let Ok((conn, mut cache, mut jobs)) = work_rx.recv() {
                    let ran = catch_unwind(AssertUnwindSafe(|| {
                        run_transaction(&conn, &mut cache, &mut jobs, &shared)
                    }));
                    if ran.is_err() {
                        recover_from_panic(&conn, &mut cache, &mut jobs, &shared);
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_waits_for_more_writes_only_under_concurrency_with_clients_left_out() {
        // A lone sequential client, or no concurrency in the group before: never.
        assert!(!should_gather_more(1, 1, 1));
        assert!(!should_gather_more(1, 0, 5));
        assert!(!should_gather_more(1, 1, 64));
        // Concurrency, and connected clients outside the group: waits.
        assert!(should_gather_more(1, 2, 64));
        assert!(should_gather_more(GATHER_BELOW - 1, 30, 64));
        // Every connected client already in the group: nobody else can send.
        assert!(!should_gather_more(4, 4, 4));
        assert!(!should_gather_more(5, 4, 4));
        // A large group is committed at once.
        assert!(!should_gather_more(GATHER_BELOW, 30, 64));
        // No server counting clients (tools, tests): never.
        assert!(!should_gather_more(2, 2, 0));
    }
}
