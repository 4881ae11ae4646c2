//! Storage faults on demand, for tests that prove what a client gets when the disk fails and
//! that nothing is then stored in part: a VFS over SQLite's own `unix` (which Parasol otherwise
//! uses directly) that fails chosen writes or syncs of the database file or its WAL the way a
//! failing or full disk does.
//!
//! It is registered and used only when the environment variable `PARASOL_FAULT_INJECTION` holds
//! a plan (the server logs a warning saying so); otherwise connections never pass through it.
//! A plan is a comma-separated list of rules `FILE-OP:ERROR@FIRST[-LAST|+]`:
//! - `FILE`: `db` (the database file) or `wal`;
//! - `OP`: `write` or `sync`;
//! - `ERROR`: `eio` (an I/O error) or `enospc` (no space left);
//! - which calls fail, counted per file kind and operation from the start of the process
//!   (1-based): `@37` only the 37th, `@37-60` the 37th to the 60th, `@37+` every one from the
//!   37th on.
//!
//! `wal-sync` counts the syncs of the WAL that commit transactions. A checkpoint syncs the WAL
//! too, before it copies frames into the database file; those syncs are neither counted nor
//! failed, so that a rule meant for commits strikes a commit wherever the checkpointer's passes
//! fall (a checkpoint's own faults are the database file's: `db-write`, `db-sync`).
//!
//! A failing write first writes half of its bytes (a torn write, as a device that fails midway
//! leaves), then reports the error; a failing sync reports it without syncing.
//!
//! `panic@N` makes the writer's N-th write panic (a bug in a write, as far as the writer can
//! tell), to show that the writer survives it.
//!
//! The library's own tests arm rules of the same form on one database at a time instead
//! (`arm`, in test builds only, where every connection passes through this VFS): calls are then
//! counted on that database's files from the arming, and other tests of the process, on other
//! databases, are left alone.
//!
//! One more rule, `cache=PAGES`, shrinks the writer's page cache to that many pages, so that a
//! group of writes larger than it spills pages to the WAL in the middle of its transaction (as a
//! group of megabyte batches does with the normal cache): a fault then strikes between two
//! writes of a group rather than in its COMMIT.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use rusqlite::ffi;

/// The variable holding the plan.
pub const ENV: &str = "PARASOL_FAULT_INJECTION";
/// The name connections open with when a plan is set.
pub const NAME: &str = "parasol-faults";
const NAME_C: &CStr = c"parasol-faults";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Db,
    Wal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Sync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Error {
    Eio,
    Enospc,
}

/// One rule of a plan: calls `first..=last` of `op` on `target` fail with `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rule {
    target: Target,
    op: Op,
    error: Error,
    first: u64,
    last: u64,
}

/// A parsed plan.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    rules: Vec<Rule>,
    cache_pages: Option<i64>,
    /// The write (1-based, counted by the writer) that panics.
    panic_at: Option<u64>,
}

/// Parses a plan (see the module's documentation).
fn parse(plan: &str) -> Result<Plan, String> {
    let mut cache_pages = None;
    let mut panic_at = None;
    let rules = plan
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .filter(|r| match r.strip_prefix("cache=").map(str::parse::<i64>) {
            Some(Ok(pages)) if pages > 0 => {
                cache_pages = Some(pages);
                false
            }
            _ => true,
        })
        .filter(|r| match r.strip_prefix("panic@").map(str::parse::<u64>) {
            Some(Ok(n)) if n > 0 => {
                panic_at = Some(n);
                false
            }
            _ => true,
        })
        .map(|rule| {
            let bad = || format!("fault injection rule {rule:?}: expected FILE-OP:ERROR@N[-M|+]");
            let (what, when) = rule.split_once('@').ok_or_else(bad)?;
            let (which, error) = what.split_once(':').ok_or_else(bad)?;
            let (file, op) = which.split_once('-').ok_or_else(bad)?;
            let target = match file {
                "db" => Target::Db,
                "wal" => Target::Wal,
                _ => return Err(bad()),
            };
            let op = match op {
                "write" => Op::Write,
                "sync" => Op::Sync,
                _ => return Err(bad()),
            };
            let error = match error {
                "eio" => Error::Eio,
                "enospc" => Error::Enospc,
                _ => return Err(bad()),
            };
            let number = |s: &str| s.parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(bad);
            let (first, last) = if let Some(first) = when.strip_suffix('+') {
                (number(first)?, u64::MAX)
            } else if let Some((a, b)) = when.split_once('-') {
                (number(a)?, number(b)?)
            } else {
                let n = number(when)?;
                (n, n)
            };
            Ok(Rule {
                target,
                op,
                error,
                first,
                last,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Plan {
        rules,
        cache_pages,
        panic_at,
    })
}

struct Registered {
    /// The VFS that does the work.
    parent: *mut ffi::sqlite3_vfs,
    plan: Plan,
}

// SAFETY: `parent` points to a VFS registered with SQLite for the life of the process (SQLite's
// static `unix`, or a leaked one of Parasol's), only read after registration.
unsafe impl Send for Registered {}
// SAFETY: as above; the rules are read only.
unsafe impl Sync for Registered {}

static REGISTERED: OnceLock<Result<Option<Registered>, String>> = OnceLock::new();

/// Calls made so far: database writes, database syncs, WAL writes, WAL syncs.
static CALLS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

thread_local! {
    /// Whether this thread is inside a checkpoint (`checkpointing`).
    static IN_CHECKPOINT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, a checkpoint: its syncs of the WAL pass through uncounted (see the module's notes).
pub fn checkpointing<R>(f: impl FnOnce() -> R) -> R {
    IN_CHECKPOINT.with(|c| c.set(true));
    let r = f();
    IN_CHECKPOINT.with(|c| c.set(false));
    r
}

/// Writes the writer has started (counted only while a plan is set).
static WRITES: AtomicU64 = AtomicU64::new(0);

/// Called by the writer before each write: panics if the plan says this one must.
pub fn maybe_panic() {
    let Some(at) = registered().and_then(|r| r.plan.panic_at) else {
        return;
    };
    let n = WRITES.fetch_add(1, Ordering::Relaxed) + 1;
    assert!(n != at, "fault injection: write {n} panics");
}

/// The VFS connections should open with: this one over `parent` when the environment holds a
/// plan (registered once), else `parent` itself.
pub fn vfs_over(
    parent_name: &'static str,
    parent_c: &'static CStr,
) -> Result<&'static str, String> {
    let registered = REGISTERED.get_or_init(|| {
        let plan = match std::env::var(ENV) {
            Ok(plan) => {
                log::warn!("storage fault injection is on ({ENV}={plan}): for tests only");
                plan
            }
            // The library's tests arm faults per database (`arm`): every connection passes
            // through the VFS, with no plan of the environment's.
            Err(_) if cfg!(test) => String::new(),
            Err(_) => return Ok(None),
        };
        let parsed = parse(&plan)?;
        // SAFETY: sqlite3_vfs_find with a valid C string; the VFS copied is a registered one,
        // alive for the process, and the copy, leaked, lives as long as the process, as
        // registration needs.
        unsafe {
            let parent = ffi::sqlite3_vfs_find(parent_c.as_ptr());
            if parent.is_null() {
                return Err(format!("no VFS {parent_name}"));
            }
            let mut vfs: ffi::sqlite3_vfs = *parent;
            vfs.szOsFile = (REAL_OFFSET + (*parent).szOsFile as usize) as c_int;
            vfs.pNext = std::ptr::null_mut();
            vfs.zName = NAME_C.as_ptr();
            vfs.xOpen = Some(open);
            let vfs = Box::leak(Box::new(vfs));
            match ffi::sqlite3_vfs_register(vfs, 0) {
                ffi::SQLITE_OK => Ok(Some(Registered {
                    parent,
                    plan: parsed,
                })),
                rc => Err(format!("cannot register the fault injection VFS ({rc})")),
            }
        }
    });
    match registered {
        Ok(Some(_)) => Ok(NAME),
        Ok(None) => Ok(parent_name),
        Err(e) => Err(e.clone()),
    }
}

/// The writer's page cache in pages, when the plan sets it.
pub fn writer_cache_pages() -> Option<i64> {
    registered().and_then(|r| r.plan.cache_pages)
}

fn registered() -> Option<&'static Registered> {
    match REGISTERED.get() {
        Some(Ok(Some(r))) => Some(r),
        _ => None,
    }
}

/// Counts a call of `op` on `target` (the file `f`); the SQLite error it must fail with, if a
/// rule says so.
fn injected(f: *mut ffi::sqlite3_file, target: Target, op: Op) -> Option<c_int> {
    if (target, op) == (Target::Wal, Op::Sync) && IN_CHECKPOINT.with(|c| c.get()) {
        return None;
    }
    #[cfg(test)]
    if let Some(error) = armed::struck(f, target, op) {
        return Some(code(op, error));
    }
    #[cfg(not(test))]
    let _ = f;
    let reg = registered()?;
    let slot = match (target, op) {
        (Target::Db, Op::Write) => 0,
        (Target::Db, Op::Sync) => 1,
        (Target::Wal, Op::Write) => 2,
        (Target::Wal, Op::Sync) => 3,
    };
    let n = CALLS[slot].fetch_add(1, Ordering::Relaxed) + 1;
    let rule = reg
        .plan
        .rules
        .iter()
        .find(|r| r.target == target && r.op == op && (r.first..=r.last).contains(&n))?;
    Some(code(rule.op, rule.error))
}

/// The SQLite error a failing call of `op` reports.
fn code(op: Op, error: Error) -> c_int {
    match (op, error) {
        (_, Error::Enospc) => ffi::SQLITE_FULL,
        (Op::Write, Error::Eio) => ffi::SQLITE_IOERR_WRITE,
        (Op::Sync, Error::Eio) => ffi::SQLITE_IOERR_FSYNC,
    }
}

/// A file: our header, followed in the same allocation by the parent's file it wraps.
#[repr(C)]
struct FaultFile {
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    target: Option<Target>,
    /// The file's full path as SQLite gave it to `open` (valid until `close`), or null.
    name: *const c_char,
}

/// Offset of the wrapped file inside a `FaultFile` allocation (aligned for any C struct).
const REAL_OFFSET: usize = std::mem::size_of::<FaultFile>().next_multiple_of(16);

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(reg) = registered() else {
        return ffi::SQLITE_ERROR;
    };
    let parent = reg.parent;
    // SAFETY: SQLite gives `file` szOsFile bytes (ours: the header and the parent's file after
    // it) to fill; the parent's xOpen fills its part, ours is written below before use.
    unsafe {
        let Some(parent_open) = (*parent).xOpen else {
            (*file).pMethods = std::ptr::null();
            return ffi::SQLITE_ERROR;
        };
        let real = file
            .cast::<u8>()
            .add(REAL_OFFSET)
            .cast::<ffi::sqlite3_file>();
        (*real).pMethods = std::ptr::null();
        let rc = parent_open(parent, name, real, flags, out_flags);
        if (*real).pMethods.is_null() {
            (*file).pMethods = std::ptr::null();
            return rc;
        }
        let target = if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
            Some(Target::Db)
        } else if flags & ffi::SQLITE_OPEN_WAL != 0 {
            Some(Target::Wal)
        } else {
            None
        };
        let f = file.cast::<FaultFile>();
        std::ptr::addr_of_mut!((*f).real).write(real);
        std::ptr::addr_of_mut!((*f).target).write(target);
        std::ptr::addr_of_mut!((*f).name).write(name);
        (*file).pMethods = &METHODS;
        rc
    }
}

/// The wrapped file.
///
/// # Safety
/// `f` must be a file this VFS opened (and not yet closed).
unsafe fn real(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: per the contract, `f` is a `FaultFile` whose `real` was set in `open`.
    unsafe { (*f.cast::<FaultFile>()).real }
}

/// The wrapped file's methods.
///
/// # Safety
/// As for `real`.
unsafe fn methods(f: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: the parent's xOpen succeeded (`open` checked pMethods), so they are its static
    // methods.
    unsafe { &*(*real(f)).pMethods }
}

/// Calls the wrapped file's `$method`; without one, answers `$default` (`SQLITE_OK` unless
/// given).
macro_rules! forward {
    ($f:expr, $method:ident or $default:expr $(, $arg:expr)*) => {
        // SAFETY: `$f` is a file this VFS opened (SQLite calls its methods only on those); the
        // arguments are SQLite's own, passed on unchanged.
        unsafe {
            match methods($f).$method {
                Some(m) => m(real($f) $(, $arg)*),
                None => $default,
            }
        }
    };
    ($f:expr, $method:ident $(, $arg:expr)*) => {
        forward!($f, $method or ffi::SQLITE_OK $(, $arg)*)
    };
}

fn target_of(f: *mut ffi::sqlite3_file) -> Option<Target> {
    // SAFETY: `f` is a file this VFS opened: its header was written in `open`.
    unsafe { (*f.cast::<FaultFile>()).target }
}

unsafe extern "C" fn write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    if let Some(rc) = target_of(f).and_then(|t| injected(f, t, Op::Write)) {
        // A torn write: half of it reaches the file.
        let _ = forward!(f, xWrite, buf, amount / 2, offset);
        return rc;
    }
    forward!(f, xWrite, buf, amount, offset)
}

unsafe extern "C" fn sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    if let Some(rc) = target_of(f).and_then(|t| injected(f, t, Op::Sync)) {
        return rc;
    }
    forward!(f, xSync, flags)
}

unsafe extern "C" fn close(f: *mut ffi::sqlite3_file) -> c_int {
    forward!(f, xClose)
}

unsafe extern "C" fn read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    forward!(f, xRead, buf, amount, offset)
}

unsafe extern "C" fn truncate(f: *mut ffi::sqlite3_file, size: i64) -> c_int {
    forward!(f, xTruncate, size)
}

unsafe extern "C" fn file_size(f: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    forward!(f, xFileSize, size)
}

unsafe extern "C" fn lock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    forward!(f, xLock, level)
}

unsafe extern "C" fn unlock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    forward!(f, xUnlock, level)
}

unsafe extern "C" fn check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    forward!(f, xCheckReservedLock, out)
}

unsafe extern "C" fn file_control(f: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    forward!(f, xFileControl or ffi::SQLITE_NOTFOUND, op, arg)
}

unsafe extern "C" fn sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    forward!(f, xSectorSize or 4096)
}

unsafe extern "C" fn device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    forward!(f, xDeviceCharacteristics or 0)
}

unsafe extern "C" fn shm_map(
    f: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    forward!(f, xShmMap or ffi::SQLITE_IOERR_SHMMAP, region, size, extend, out)
}

unsafe extern "C" fn shm_lock(
    f: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    forward!(f, xShmLock or ffi::SQLITE_IOERR_SHMLOCK, offset, n, flags)
}

unsafe extern "C" fn shm_barrier(f: *mut ffi::sqlite3_file) {
    // SAFETY: as in `forward!`.
    unsafe {
        if let Some(m) = methods(f).xShmBarrier {
            m(real(f))
        }
    }
}

unsafe extern "C" fn shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    forward!(f, xShmUnmap, delete)
}

unsafe extern "C" fn fetch(
    f: *mut ffi::sqlite3_file,
    offset: i64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: as in `forward!`; without a fetch method, SQLite reads the page instead.
    unsafe {
        match methods(f).xFetch {
            Some(m) => m(real(f), offset, amount, out),
            None => {
                *out = std::ptr::null_mut();
                ffi::SQLITE_OK
            }
        }
    }
}

unsafe extern "C" fn unfetch(f: *mut ffi::sqlite3_file, offset: i64, page: *mut c_void) -> c_int {
    forward!(f, xUnfetch, offset, page)
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

/// Faults armed on one database by the library's tests.
#[cfg(test)]
pub(crate) mod armed {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    struct Armed {
        id: u64,
        /// The database file; its WAL is this path with `-wal`.
        db: PathBuf,
        rule: Rule,
        /// Calls of the rule's operation on the rule's file since the arming.
        calls: u64,
        /// Calls failed.
        struck: u64,
    }

    static ARMED: Mutex<Vec<Armed>> = Mutex::new(Vec::new());
    static NEXT: AtomicU64 = AtomicU64::new(1);

    /// A rule armed until dropped.
    pub(crate) struct Fault(u64);

    /// Arms `rule` (`FILE-OP:ERROR@FIRST[-LAST|+]`, counted on the database `db` from now) until
    /// the returned fault is dropped.
    pub(crate) fn arm(db: &Path, rule: &str) -> Fault {
        let plan = parse(rule).unwrap();
        assert_eq!(plan.rules.len(), 1, "one rule: {rule}");
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let db = std::fs::canonicalize(db).unwrap();
        ARMED.lock().unwrap().push(Armed {
            id,
            db,
            rule: plan.rules[0],
            calls: 0,
            struck: 0,
        });
        Fault(id)
    }

    impl Fault {
        /// The calls this rule has failed so far.
        pub(crate) fn struck(&self) -> u64 {
            let armed = ARMED.lock().unwrap();
            armed
                .iter()
                .find(|a| a.id == self.0)
                .map_or(0, |a| a.struck)
        }
    }

    impl Drop for Fault {
        fn drop(&mut self) {
            ARMED.lock().unwrap().retain(|a| a.id != self.0);
        }
    }

    /// Counts the call for the rules armed on `f`'s database; the error of one that strikes.
    pub(super) fn struck(f: *mut ffi::sqlite3_file, target: Target, op: Op) -> Option<Error> {
        // SAFETY: `f` is a file this VFS opened: its header was written in `open`, and SQLite
        // keeps the name it points to valid until `close`.
        let name = unsafe { (*f.cast::<FaultFile>()).name };
        if name.is_null() {
            return None;
        }
        // SAFETY: as above, a C string SQLite keeps for the file's life.
        let name = unsafe { CStr::from_ptr(name) }.to_str().ok()?;
        let mut armed = ARMED.lock().unwrap();
        let mut error = None;
        for a in armed.iter_mut() {
            let file = match target {
                Target::Db => a.db.clone(),
                Target::Wal => PathBuf::from(format!("{}-wal", a.db.display())),
            };
            if a.rule.target != target || a.rule.op != op || Path::new(name) != file {
                continue;
            }
            a.calls += 1;
            if (a.rule.first..=a.rule.last).contains(&a.calls) {
                a.struck += 1;
                error = Some(a.rule.error);
            }
        }
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse_and_bad_ones_are_refused() {
        let plan =
            parse("wal-sync:eio@3, db-write:enospc@10-12,cache=16,wal-write:enospc@7+").unwrap();
        assert_eq!(plan.cache_pages, Some(16));
        assert_eq!(parse("panic@4").unwrap().panic_at, Some(4));
        assert_eq!(
            plan.rules,
            vec![
                Rule {
                    target: Target::Wal,
                    op: Op::Sync,
                    error: Error::Eio,
                    first: 3,
                    last: 3
                },
                Rule {
                    target: Target::Db,
                    op: Op::Write,
                    error: Error::Enospc,
                    first: 10,
                    last: 12
                },
                Rule {
                    target: Target::Wal,
                    op: Op::Write,
                    error: Error::Enospc,
                    first: 7,
                    last: u64::MAX
                },
            ]
        );
        for bad in [
            "wal-sync:eio",
            "shm-write:eio@1",
            "wal-read:eio@1",
            "wal-sync:x@1",
            "wal-sync:eio@0",
            "wal-sync:eio@a-b",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
