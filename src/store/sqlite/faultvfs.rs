//! Storage faults on demand, for tests that prove what a client gets when the disk fails and
//! that nothing is then stored in part: a VFS over the one Parasol otherwise uses (`walvfs`, over
//! SQLite's own `unix`) that fails chosen writes or syncs of the database file or its WAL the way
//! a failing or full disk does. It sits above the gathering: a rule strikes SQLite's own call
//! (one frame's write, a commit's sync), as a disk under `unix` alone would fail it.
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

use super::vfsshim::{self, forward};

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
        // SAFETY: sqlite3_vfs_find with a valid C string; a VFS it finds is a registered one,
        // alive for the process.
        let parent = unsafe { ffi::sqlite3_vfs_find(parent_c.as_ptr()) };
        if parent.is_null() {
            return Err(format!("no VFS {parent_name}"));
        }
        // SAFETY: as above.
        match unsafe { vfsshim::register_over(parent, NAME_C, REAL_OFFSET, open) } {
            ffi::SQLITE_OK => Ok(Some(Registered {
                parent,
                plan: parsed,
            })),
            rc => Err(format!("cannot register the fault injection VFS ({rc})")),
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

/// A file: our header (its first fields the shared `Header`), followed in the same allocation by
/// the parent's file it wraps.
#[repr(C)]
struct FaultFile {
    shim: vfsshim::Header,
    target: Option<Target>,
    /// The file's full path as SQLite gave it to `open` (valid until `close`), or null.
    name: *const c_char,
}

/// Offset of the wrapped file inside a `FaultFile` allocation.
const REAL_OFFSET: usize = vfsshim::real_offset::<FaultFile>();

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
    // SAFETY: SQLite's own arguments; our files are REAL_OFFSET bytes larger than the parent's
    // (`vfs_over`).
    let (rc, real) =
        unsafe { vfsshim::open_real(reg.parent, name, file, flags, out_flags, REAL_OFFSET) };
    let Some(real) = real else {
        return rc;
    };
    let target = if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
        Some(Target::Db)
    } else if flags & ffi::SQLITE_OPEN_WAL != 0 {
        Some(Target::Wal)
    } else {
        None
    };
    // SAFETY: `file` holds a `FaultFile`'s bytes for us to fill, before its methods are set.
    unsafe {
        let f = file.cast::<FaultFile>();
        std::ptr::addr_of_mut!((*f).shim.real).write(real);
        std::ptr::addr_of_mut!((*f).target).write(target);
        std::ptr::addr_of_mut!((*f).name).write(name);
        (*file).pMethods = &METHODS;
    }
    rc
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

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    xWrite: Some(write),
    xSync: Some(sync),
    ..vfsshim::PASS_ON
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
