//! The checkpointer: copies what was committed from the WAL into the database file in the
//! background, so that the writer never pays for a checkpoint inside a commit; restarts the WAL
//! through the writer once it has grown; and, after a storage fault, probes until the storage
//! takes writes again, checkpointing and truncating the WAL as soon as it can so that a disk
//! that filled up gets its space back. All of it is specific to SQLite's WAL.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::conn::{open_connection, Wait};
use super::Shared;
use crate::store::{Result, StoreError};

/// The checkpointer copies what was committed into the database file in the background at this
/// interval, so that the writer never pays for a checkpoint (and its fsync of the database file)
/// inside a commit ... Short, because each pass ends with an fsync of the database file
/// (`sync_after_checkpoint`), and a WAL fsync of the writer's that lands behind it waits for
/// that write-back: after 500 ms of commits it was 10-19 ms, every 500 ms, the open loop's worst
/// latencies; after 50 ms, 4-5 ms. The cost is hot pages copied more often (the checkpointer's
/// CPU went from about 0.8 to 1.5 us per single event).
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(50);
/// ... and once the WAL holds more than this many bytes of frames, asks the writer to restart it
/// from the beginning (see `Checkpointer`). After a restart the WAL file is truncated back to four
/// times this (`journal_size_limit`): in steady state the file is reused without truncating it
/// (a truncation made the next commit take 10-15 ms), while a burst does not leave a huge file.
pub(super) const WAL_RESTART_BYTES: i64 = if cfg!(test) { 1 } else { 64 } * 1024 * 1024;
/// Passive checkpoints run back to back before the writer is asked to restart the WAL: each copies
/// what was committed during the one before, so the next is shorter (measured: 10-50 ms, then
/// 1-5 ms), and the writer's restart is left with a few dozen frames to copy. What it cannot
/// avoid is one fsync of the database file (the WAL may be overwritten only once everything in
/// it is durable there): 2-40 ms on the benchmark's VM.
const CATCH_UP_PASSES: usize = 3;

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
pub(super) struct Checkpointer {
    stop: std::sync::mpsc::SyncSender<()>,
    handle: JoinHandle<()>,
    shared: Arc<CheckpointShared>,
    writer: Arc<Shared>,
}

/// What the checkpointer thread and the writer share.
struct CheckpointShared {
    /// Held while either runs a checkpoint, so that the writer's restart never waits behind a
    /// long passive checkpoint (it tries the lock and, if taken, tries again after its next
    /// transaction).
    running: Mutex<()>,
    /// Set when the WAL has grown past `WAL_RESTART_BYTES`.
    restart_wanted: AtomicBool,
    /// The microseconds WAL restarts held the writer (total, longest); their count is the
    /// writer's (`Shared::wal_restarts`).
    restart_us: AtomicU64,
    restart_max_us: AtomicU64,
}

/// While the storage is faulty, how often the checkpointer tries whether it takes writes again.
const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// A write transaction taking longer than this is logged (a warning: it holds up every request
/// in its group); so is a WAL restart.
const SLOW_RESTART: Duration = Duration::from_millis(50);

impl Checkpointer {
    pub(super) fn start(db: &Path, writer: Arc<Shared>) -> Result<Checkpointer> {
        let conn = open_connection(db, Wait::Long)?;
        let (stop, rx) = std::sync::mpsc::sync_channel::<()>(1);
        let shared = Arc::new(CheckpointShared {
            running: Mutex::new(()),
            restart_wanted: AtomicBool::new(false),
            restart_us: AtomicU64::new(0),
            restart_max_us: AtomicU64::new(0),
        });
        let state = shared.clone();
        let for_thread = writer.clone();
        let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let handle = std::thread::Builder::new()
            .name("parasol-checkpoint".into())
            .spawn(move || {
                let writer = for_thread;
                // Background work: the CPU goes to requests and commits first.
                crate::bulk::lower_priority();
                let mut seen = writer.commits.load(Ordering::Relaxed);
                let mut probed = Instant::now();
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    rx.recv_timeout(CHECKPOINT_INTERVAL)
                {
                    if !writer.health.writable() {
                        if probed.elapsed() >= PROBE_INTERVAL {
                            probe(&conn, &state, &writer);
                            probed = Instant::now();
                        }
                        continue;
                    }
                    let now = writer.commits.load(Ordering::Relaxed);
                    if now == seen {
                        continue;
                    }
                    seen = now;
                    match passive_pass(&conn, &state, &writer) {
                        Ok(frames) if frames * page_size > WAL_RESTART_BYTES => {
                            // Copy what was committed during that checkpoint too (a much shorter
                            // pass, and a shorter one after it), so that the writer's restart has
                            // only a few frames left to copy.
                            for _ in 0..CATCH_UP_PASSES {
                                if let Err(e) = passive_pass(&conn, &state, &writer) {
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
            .map_err(|e| StoreError::Internal(format!("cannot start the checkpointer: {e}")))?;
        Ok(Checkpointer {
            stop,
            handle,
            shared,
            writer,
        })
    }

    /// Called by the writer between transactions: restarts the WAL if the checkpointer asked for
    /// it and is not checkpointing right now.
    pub(super) fn restart_if_wanted(&self, conn: &Connection) {
        if !self.shared.restart_wanted.load(Ordering::Relaxed) {
            return;
        }
        let Ok(_running) = self.shared.running.try_lock() else {
            return;
        };
        let started = Instant::now();
        match checkpoint(conn, Mode::Restart) {
            Ok(_) => self.shared.restart_wanted.store(false, Ordering::Relaxed),
            Err(e) => log::warn!("WAL restart failed: {e}"),
        }
        let took = started.elapsed();
        if took > SLOW_RESTART {
            log::warn!("slow WAL restart: {} ms", took.as_millis());
        }
        let us = took.as_micros() as u64;
        self.writer.wal_restarts.fetch_add(1, Ordering::Relaxed);
        self.shared.restart_us.fetch_add(us, Ordering::Relaxed);
        self.shared.restart_max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// "N WAL restarts holding the writer X ms in all, Y ms at most", for the log.
    pub(super) fn restart_summary(&self) -> String {
        let ms = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1000.0;
        format!(
            "{} WAL restarts holding the writer {:.1} ms in all, {:.1} ms at most",
            self.writer.wal_restarts.load(Ordering::Relaxed),
            ms(&self.shared.restart_us),
            ms(&self.shared.restart_max_us)
        )
    }

    pub(super) fn stop(self) {
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
fn passive_pass(conn: &Connection, state: &CheckpointShared, writer: &Shared) -> Result<i64> {
    let frames = {
        let _running = state.running.lock();
        checkpoint(conn, Mode::Passive)
    };
    sync_after_checkpoint(conn, writer);
    frames
}

/// `sync_database_file`, for the checkpointer: timed for the metrics; a failure is logged.
fn sync_after_checkpoint(conn: &Connection, writer: &Shared) {
    let started = Instant::now();
    let synced = sync_database_file(conn);
    writer.metrics.sync.observe_duration(started.elapsed());
    if let Err(rc) = synced {
        log::warn!("cannot sync the database file after a checkpoint (SQLite error {rc})");
    }
}

/// Checkpoints the WAL in `mode` (what `PRAGMA wal_checkpoint(mode)` does); returns the frames
/// the WAL held. Called through SQLite's C function rather than as the PRAGMA: SQLite prepared
/// the PRAGMA's cached statement again on every run (`sqlite3Reprepare` in callgrind's profile),
/// about 6,000 instructions of parsing and code generation a pass on top of the checkpoint
/// itself; requests that come one at a time get a pass each. As with the PRAGMA, `SQLITE_BUSY`
/// (a reader or writer kept the checkpoint from completing) is not an error: what it copied
/// counts.
fn checkpoint(conn: &Connection, mode: Mode) -> Result<i64> {
    use rusqlite::ffi;
    let mode = match mode {
        Mode::Passive => ffi::SQLITE_CHECKPOINT_PASSIVE,
        Mode::Restart => ffi::SQLITE_CHECKPOINT_RESTART,
        Mode::Truncate => ffi::SQLITE_CHECKPOINT_TRUNCATE,
    };
    let mut frames: std::os::raw::c_int = -1;
    let mut copied: std::os::raw::c_int = -1;
    // SAFETY: the connection is open and used by this thread only, with no statement of it
    // running; a null database name checkpoints every attached database, as the PRAGMA without
    // a schema name does; both out-pointers are valid for the call.
    let rc = super::faultvfs::checkpointing(|| unsafe {
        ffi::sqlite3_wal_checkpoint_v2(
            conn.handle(),
            std::ptr::null(),
            mode,
            &mut frames,
            &mut copied,
        )
    });
    if rc == ffi::SQLITE_OK || rc & 0xff == ffi::SQLITE_BUSY {
        return Ok(i64::from(frames));
    }
    // SAFETY: as above; the message is copied before any other call on the connection.
    let message = unsafe { std::ffi::CStr::from_ptr(ffi::sqlite3_errmsg(conn.handle())) }
        .to_string_lossy()
        .into_owned();
    Err(rusqlite::Error::SqliteFailure(ffi::Error::new(rc), Some(message)).into())
}

/// After a storage fault, whether the storage takes writes again: the whole WAL is checkpointed
/// into the database file and truncated (when no reader holds an older snapshot), which gives a
/// filled disk the WAL's space back, then one page is written and committed in a transaction of
/// its own. Success makes the store writable again (`Health::written`); failure leaves it as it
/// is, to be tried again.
fn probe(conn: &Connection, state: &CheckpointShared, writer: &Shared) {
    let _running = state.running.lock();
    if let Err(e) = checkpoint(conn, Mode::Truncate) {
        log::debug!("checkpoint after a storage fault failed: {e}");
    }
    let wrote = (|| -> Result<()> {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        // Rewrites the database header's page with the value it holds: one real page of WAL,
        // changing nothing.
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        conn.pragma_update(None, "user_version", version)?;
        conn.execute_batch("COMMIT")?;
        Ok(())
    })();
    match wrote {
        Ok(()) => writer.health.written(),
        Err(e) => {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            log::debug!("the storage still refuses writes: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TempDir;

    /// A new database in `dir` with a table `s` of one row, and a connection to it.
    fn database(dir: &TempDir, wait: Wait) -> (std::path::PathBuf, Connection) {
        let path = dir.join("parasol.db");
        super::super::conn::prepare_files(&path, true).unwrap();
        let c = open_connection(&path, wait).unwrap();
        c.execute_batch("CREATE TABLE s (x); INSERT INTO s VALUES (1);")
            .unwrap();
        (path, c)
    }

    #[test]
    fn the_database_file_is_synced_through_sqlites_own_handle() {
        let dir = TempDir::new("checkpoint");
        let (_, c) = database(&dir, Wait::Long);
        assert_eq!(sync_database_file(&c), Ok(()));
    }

    /// The frames of the WAL, read from its file's size (32-byte header, 24-byte frame headers).
    fn wal_frames(path: &Path, page: u64) -> u64 {
        let wal = std::fs::metadata(path.with_extension("db-wal")).map_or(0, |m| m.len());
        wal.saturating_sub(32) / (24 + page)
    }

    #[test]
    fn a_checkpoint_counts_the_wals_frames_and_truncate_empties_it() {
        let dir = TempDir::new("checkpoint-modes");
        let (path, c) = database(&dir, Wait::Long);
        c.execute_batch("INSERT INTO s VALUES (2);").unwrap();
        let page: u64 = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        let held = wal_frames(&path, page);
        assert!(held > 0);
        assert_eq!(checkpoint(&c, Mode::Passive).unwrap(), held as i64);
        // Everything is copied: the file keeps its frames until a restart or truncation.
        assert_eq!(checkpoint(&c, Mode::Passive).unwrap(), held as i64);
        assert_eq!(checkpoint(&c, Mode::Truncate).unwrap(), 0);
        assert_eq!(wal_frames(&path, page), 0);
    }

    #[test]
    fn a_checkpoint_held_back_by_a_reader_is_not_an_error() {
        let dir = TempDir::new("checkpoint-busy");
        let (path, c) = database(&dir, Wait::Never);
        // A reader's snapshot of the WAL, then a commit it does not see: the restart cannot
        // finish while the reader holds its snapshot, and says so with SQLITE_BUSY.
        let reader = open_connection(&path, Wait::Never).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM s", [], |r| r.get(0))
            .unwrap();
        c.execute_batch("INSERT INTO s VALUES (2);").unwrap();
        let frames = checkpoint(&c, Mode::Restart).unwrap();
        assert!(frames > 0);
        reader.execute_batch("COMMIT").unwrap();
        assert_eq!(checkpoint(&c, Mode::Restart).unwrap(), frames);
    }

    /// A rule on the WAL's syncs strikes commits: a checkpoint's sync of the WAL is not counted,
    /// so the first sync after the arming is the next commit's, whatever checkpoints run first.
    #[test]
    fn a_wal_sync_rule_strikes_the_next_commit_not_a_checkpoint() {
        let dir = TempDir::new("checkpoint-wal-sync");
        let (path, c) = database(&dir, Wait::Long);
        c.execute_batch("INSERT INTO s VALUES (2);").unwrap();
        let fault = super::super::faultvfs::armed::arm(&path, "wal-sync:eio@1");
        assert!(checkpoint(&c, Mode::Passive).unwrap() > 0);
        assert_eq!(fault.struck(), 0);
        let e = c.execute_batch("INSERT INTO s VALUES (3);").unwrap_err();
        assert_eq!(
            e.sqlite_error().map(|e| e.extended_code),
            Some(rusqlite::ffi::SQLITE_IOERR_FSYNC),
            "{e}"
        );
        assert_eq!(fault.struck(), 1);
    }
}
