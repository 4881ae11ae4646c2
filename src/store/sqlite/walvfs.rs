//! A VFS over SQLite's own (`unix`) that gathers a transaction's writes to the WAL into one
//! `pwrite` each run of consecutive bytes, made when SQLite next syncs, reads, sizes, truncates or
//! closes the file.
//!
//! SQLite writes each frame of a commit with two calls (its 24-byte header, then the page), and on
//! the benchmark's VM each `pwrite` to ext4 costs about 3.5 us whatever its size, against about
//! 1 us a frame for the whole commit in one call (measured: 40 writes of 24 B and 8 KiB, 8.8 us a
//! frame; one write of the same 20 frames, 1.0 us a frame). A commit of single events writes
//! 10-20 frames, a 1 MiB batch hundreds.
//!
//! Safety of the deferral: under `synchronous=FULL` (every connection Parasol opens,
//! `open_connection`) SQLite syncs the WAL before it publishes a commit in the wal-index, and the
//! sync writes what was gathered first, so no other connection can see a frame that is not in the
//! file; a failed write fails the sync, and so the commit. Every other operation on the file
//! (read, size, truncate, file control, close) writes what was gathered first, so SQLite never
//! sees the file other than as its own writes left it. Only the WAL is wrapped: the database file
//! and the others keep `unix`'s own methods untouched.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rusqlite::ffi;

use super::vfsshim::{self, forward};

/// The name connections open with (`Connection::open_with_flags_and_vfs`).
pub const NAME: &str = "parasol-unix-wal";
pub const NAME_C: &CStr = c"parasol-unix-wal";

/// Gathered bytes past which they are written at once (a 1 MiB batch's commit is a few MiB).
const GATHER_MAX: usize = 1 << 20;
/// Largest write handed to `unix` at a time: its `seekAndWriteFd` keeps only the low 17 bits of
/// a write's length (`nBuf &= 0x1ffff`), so a write of 128 KiB would write nothing.
const WRITE_MAX: usize = 124 * 1024;

/// A WAL file: our header (its first fields the shared `Header`), followed in the same
/// allocation by the `unix` file it wraps.
#[repr(C)]
struct WalFile {
    shim: vfsshim::Header,
    /// Bytes written by SQLite but not yet to the file, to be written at `at`.
    gathered: Vec<u8>,
    at: i64,
}

/// Offset of the wrapped file inside a `WalFile` allocation.
const REAL_OFFSET: usize = vfsshim::real_offset::<WalFile>();

struct Registered {
    /// SQLite's `unix` VFS, which does the work.
    real: *mut ffi::sqlite3_vfs,
}

// SAFETY: the pointer is to SQLite's static `unix` VFS, read-only after registration.
unsafe impl Send for Registered {}
// SAFETY: as above.
unsafe impl Sync for Registered {}

static REGISTERED: OnceLock<Result<Registered, c_int>> = OnceLock::new();

/// Registers the VFS (once; not as the default). Returns SQLite's error code on failure.
pub fn register() -> Result<(), c_int> {
    match REGISTERED.get_or_init(|| {
        // SAFETY: sqlite3_vfs_find with a valid C string; a VFS it finds is registered for the
        // life of the process (`unix` is SQLite's static one).
        let real = unsafe { ffi::sqlite3_vfs_find(c"unix".as_ptr()) };
        if real.is_null() {
            return Err(ffi::SQLITE_ERROR);
        }
        // SAFETY: as above.
        match unsafe { vfsshim::register_over(real, NAME_C, REAL_OFFSET, open) } {
            ffi::SQLITE_OK => Ok(Registered { real }),
            rc => Err(rc),
        }
    }) {
        Ok(_) => Ok(()),
        Err(rc) => Err(*rc),
    }
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(Ok(reg)) = REGISTERED.get() else {
        // SAFETY: SQLite gave `file` to fill; marking it not open is what SQLite requires.
        unsafe { (*file).pMethods = std::ptr::null() };
        return ffi::SQLITE_ERROR;
    };
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // Not the WAL: `unix`'s own file and methods, at the start of the space SQLite gave us
        // (larger than it needs).
        // SAFETY: SQLite's own arguments, passed on; `unix` fills `file` as it would its own.
        return unsafe { vfsshim::open_real(reg.real, name, file, flags, out_flags, 0) }.0;
    }
    // SAFETY: SQLite's own arguments; our files are REAL_OFFSET bytes larger than `unix`'s
    // (`register`).
    let (rc, real) =
        unsafe { vfsshim::open_real(reg.real, name, file, flags, out_flags, REAL_OFFSET) };
    let Some(real) = real else {
        return rc;
    };
    // SAFETY: `file` holds a `WalFile`'s bytes, uninitialised, for us to fill before its methods
    // are set.
    unsafe {
        let wal = file.cast::<WalFile>();
        std::ptr::addr_of_mut!((*wal).shim.real).write(real);
        std::ptr::addr_of_mut!((*wal).gathered).write(Vec::new());
        std::ptr::addr_of_mut!((*wal).at).write(0);
        (*file).pMethods = &WAL_METHODS;
    }
    #[cfg(test)]
    if !name.is_null() {
        // SAFETY: SQLite passes the WAL's full path, a C string valid during the call.
        let path = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        OPENED.lock().unwrap_or_else(|e| e.into_inner()).push(path);
    }
    rc
}

/// The WAL files this VFS opened (test builds): what shows that the store's own connections
/// pass through it.
#[cfg(test)]
static OPENED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// The WAL file behind `f`.
///
/// # Safety
/// `f` must be a WAL file this VFS opened (its methods are `WAL_METHODS`), not yet closed, and
/// not otherwise borrowed: SQLite calls a file's methods one at a time.
unsafe fn wal<'a>(f: *mut ffi::sqlite3_file) -> &'a mut WalFile {
    // SAFETY: per the contract.
    unsafe { &mut *f.cast::<WalFile>() }
}

/// Writes what was gathered (nothing to do if nothing was). On failure what was gathered is
/// dropped: the error goes to the operation that asked, and so to SQLite.
///
/// # Safety
/// As for `wal`.
unsafe fn write_gathered(f: *mut ffi::sqlite3_file) -> c_int {
    // Taken out while the wrapped file writes it (no reference into the file is held across
    // that call), and put back emptied, its allocation kept for the next transaction.
    // SAFETY: per the contract.
    let (mut gathered, mut at) = unsafe {
        let w = wal(f);
        (std::mem::take(&mut w.gathered), w.at)
    };
    let mut rc = ffi::SQLITE_OK;
    for chunk in gathered.chunks(WRITE_MAX) {
        let (buf, len) = (chunk.as_ptr().cast(), chunk.len() as c_int);
        rc = forward!(f, xWrite or ffi::SQLITE_IOERR_WRITE, buf, len, at);
        if rc != ffi::SQLITE_OK {
            break;
        }
        at += chunk.len() as i64;
    }
    gathered.clear();
    // SAFETY: per the contract.
    unsafe { wal(f).gathered = gathered };
    rc
}

/// Writes what was gathered, then runs `then` (the wrapped file's own operation).
///
/// # Safety
/// As for `wal`.
unsafe fn after_gathered(f: *mut ffi::sqlite3_file, then: impl FnOnce() -> c_int) -> c_int {
    // SAFETY: per the contract.
    match unsafe { write_gathered(f) } {
        ffi::SQLITE_OK => then(),
        rc => rc,
    }
}

unsafe extern "C" fn close(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY (of each block): SQLite calls this VFS's WAL methods only on its WAL files, one call
    // at a time; the buffer is dropped once, as the file closes.
    let rc = unsafe { write_gathered(f) };
    let closed = unsafe { vfsshim::close(f) };
    unsafe { std::ptr::drop_in_place(std::ptr::addr_of_mut!((*f.cast::<WalFile>()).gathered)) };
    if rc == ffi::SQLITE_OK {
        closed
    } else {
        rc
    }
}

// The methods that read, size or end the file: `unix`'s own (through `vfsshim`), once what was
// gathered is written. SAFETY (of each): as in `close`, the arguments SQLite's own.

unsafe extern "C" fn read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    unsafe { after_gathered(f, || vfsshim::read(f, buf, amount, offset)) }
}

unsafe extern "C" fn write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    let Ok(len) = usize::try_from(amount) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    // SAFETY: as in `close`; `buf` holds `amount` bytes (SQLite's own arguments).
    unsafe {
        let w = wal(f);
        if !w.gathered.is_empty() && offset != w.at + w.gathered.len() as i64 {
            let rc = write_gathered(f);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        let w = wal(f);
        if w.gathered.is_empty() {
            w.at = offset;
        }
        w.gathered
            .extend_from_slice(std::slice::from_raw_parts(buf.cast::<u8>(), len));
        if w.gathered.len() >= GATHER_MAX {
            return write_gathered(f);
        }
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn truncate(f: *mut ffi::sqlite3_file, size: i64) -> c_int {
    unsafe { after_gathered(f, || vfsshim::truncate(f, size)) }
}

thread_local! {
    /// Time this thread has spent in the WAL's own sync (its fsync, not the writes gathered before
    /// it) since `take_sync_time` last ran.
    static SYNC_TIME: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// The time the calling thread spent syncing WAL files since it last asked, and starts counting
/// again: the writer asks around each transaction, so that a slow commit's log line tells a
/// stall of the disk (the fsync) from one of the process.
pub fn take_sync_time() -> Duration {
    SYNC_TIME.with(|t| t.replace(Duration::ZERO))
}

unsafe extern "C" fn sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    unsafe {
        after_gathered(f, || {
            let started = Instant::now();
            let rc = vfsshim::sync(f, flags);
            let took = started.elapsed();
            SYNC_TIME.with(|t| t.set(t.get() + took));
            rc
        })
    }
}

unsafe extern "C" fn file_size(f: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    unsafe { after_gathered(f, || vfsshim::file_size(f, size)) }
}

unsafe extern "C" fn file_control(f: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    unsafe { after_gathered(f, || vfsshim::file_control(f, op, arg)) }
}

unsafe extern "C" fn fetch(
    f: *mut ffi::sqlite3_file,
    offset: i64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    unsafe { after_gathered(f, || vfsshim::fetch(f, offset, amount, out)) }
}

/// A WAL file's methods: every one that reads, sizes or ends the file writes what was gathered
/// first; locks and shared memory pass on untouched.
static WAL_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xFileControl: Some(file_control),
    xFetch: Some(fetch),
    ..vfsshim::PASS_ON
};

#[cfg(test)]
mod tests {
    use crate::testdir::TempDir;
    use rusqlite::{params, Connection, OpenFlags};

    /// A connection through SQLite's own `unix` VFS, which reads the WAL from the file: what it
    /// sees, the gathering connection had written to the file before publishing it.
    fn plain(path: &std::path::Path) -> Connection {
        Connection::open_with_flags_and_vfs(path, OpenFlags::default(), "unix").unwrap()
    }

    /// A connection through this VFS alone, with Parasol's WAL and durability settings. (The
    /// library's own connections pass through the fault injection VFS above it in test builds.)
    fn gathering(path: &std::path::Path) -> Connection {
        super::register().unwrap();
        let c =
            Connection::open_with_flags_and_vfs(path, OpenFlags::default(), super::NAME).unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.pragma_update(None, "synchronous", "FULL").unwrap();
        c
    }

    fn vfs_name(c: &Connection) -> String {
        let mut vfs: *mut rusqlite::ffi::sqlite3_vfs = std::ptr::null_mut();
        // SAFETY: the connection is open; the file control stores the main database's VFS (a
        // registered VFS, alive for the process) in `vfs`.
        unsafe {
            let rc = rusqlite::ffi::sqlite3_file_control(
                c.handle(),
                c"main".as_ptr(),
                rusqlite::ffi::SQLITE_FCNTL_VFS_POINTER,
                (&mut vfs as *mut *mut rusqlite::ffi::sqlite3_vfs).cast(),
            );
            assert_eq!(rc, rusqlite::ffi::SQLITE_OK);
            std::ffi::CStr::from_ptr((*vfs).zName)
                .to_string_lossy()
                .into_owned()
        }
    }

    fn sum_and_count(c: &Connection) -> (i64, i64) {
        c.query_row(
            "SELECT coalesce(sum(length(v)), 0), count(*) FROM t",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    }

    #[test]
    fn a_commits_fsync_of_the_wal_is_timed_on_the_committing_thread() {
        let dir = TempDir::new("walvfs-sync");
        let w = gathering(&dir.join("t.db"));
        w.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
            .unwrap();
        super::take_sync_time();
        // A read syncs nothing.
        assert_eq!(sum_and_count(&w), (0, 0));
        assert_eq!(super::take_sync_time(), std::time::Duration::ZERO);
        // A commit at synchronous=FULL syncs the WAL once at least, and the time is this
        // thread's: another thread's count is untouched, and taking it starts again from zero.
        w.execute("INSERT INTO t(v) VALUES (randomblob(100))", [])
            .unwrap();
        let other = std::thread::spawn(super::take_sync_time).join().unwrap();
        assert_eq!(other, std::time::Duration::ZERO);
        assert!(super::take_sync_time() > std::time::Duration::ZERO);
        assert_eq!(super::take_sync_time(), std::time::Duration::ZERO);
    }

    #[test]
    fn the_stores_connections_write_their_wal_through_it() {
        let dir = TempDir::new("walvfs-store");
        let path = dir.join("t.db");
        let c = super::super::conn::open_connection(&path, super::super::conn::Wait::Long).unwrap();
        c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY)")
            .unwrap();
        // The directory's name is unique to this test; SQLite may spell the rest of the path
        // its own way.
        let dir_name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let wal = format!("{dir_name}/t.db-wal");
        let opened = super::OPENED.lock().unwrap().clone();
        assert!(
            opened.iter().any(|p| p.ends_with(&wal)),
            "{wal} not among the WAL files the VFS opened: {opened:?}"
        );
    }

    #[test]
    fn what_a_commit_gathered_is_in_the_wal_file_before_others_see_it() {
        let dir = TempDir::new("walvfs");
        let path = dir.join("t.db");
        let w = gathering(&path);
        assert_eq!(vfs_name(&w), super::NAME);
        w.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
            .unwrap();
        let reader = plain(&path);
        // Commits of one row, of a few hundred KiB (several of unix's 124 KiB writes, and a
        // multiple of 128 KiB, which unix alone would write as nothing), and of 3 MiB (past the
        // 1 MiB at which gathered bytes are written at once).
        let mut expected = (0i64, 0i64);
        for (rows, size) in [(1, 100), (2, 128 * 1024), (3, 100_000), (3, 1 << 20)] {
            let tx = w.unchecked_transaction().unwrap();
            for _ in 0..rows {
                tx.execute("INSERT INTO t(v) VALUES (randomblob(?1))", params![size])
                    .unwrap();
            }
            tx.commit().unwrap();
            expected = (expected.0 + rows * size, expected.1 + rows);
            assert_eq!(sum_and_count(&reader), expected);
        }
        // Nothing is checkpointed by the reader, so the rows it saw were read from the WAL.
        let frames: i64 = w
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
            .unwrap();
        assert!(frames > 400, "{frames} frames in the WAL");
        drop(reader);
        drop(w);
        let again = plain(&path);
        assert_eq!(sum_and_count(&again), expected);
        let ok: String = again
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
    }

    #[test]
    fn a_transaction_that_spills_and_rolls_back_leaves_the_wal_consistent() {
        let dir = TempDir::new("walvfs");
        let path = dir.join("t.db");
        let w = gathering(&path);
        // A tiny page cache: a large transaction writes frames before its commit (a spill) and
        // reads some of them back.
        w.execute_batch("PRAGMA cache_size = 10; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
            .unwrap();
        w.execute("INSERT INTO t(v) VALUES (randomblob(5000))", [])
            .unwrap();
        let tx = w.unchecked_transaction().unwrap();
        for _ in 0..400 {
            tx.execute("INSERT INTO t(v) VALUES (randomblob(3000))", [])
                .unwrap();
        }
        let inside: i64 = tx
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(inside, 401);
        tx.rollback().unwrap();
        // The next commits write over the rolled-back frames' place in the file.
        for _ in 0..3 {
            w.execute("INSERT INTO t(v) VALUES (randomblob(20000))", [])
                .unwrap();
        }
        let reader = plain(&path);
        assert_eq!(sum_and_count(&reader), (65000, 4));
        let ok: String = reader
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
    }
}
