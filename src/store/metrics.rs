//! What the store measures of its own work, the same for every engine: how many writes each
//! committed transaction held, how long transactions and their commits took, and how long the
//! store's own syncs of its files took; and what it can tell of its storage at a glance
//! (`StorageStats`). An engine fills in what applies to it; the server's `/metrics` reads it.

use crate::histogram::Histogram;

/// Upper bounds of writes per committed transaction (group commit).
const GROUP_SIZES: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256];

/// Upper bounds of transaction, commit and sync durations, nanoseconds: 50 us to 5 s.
const STORAGE_SECONDS: &[u64] = &[
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    5_000_000_000,
];

/// The store's measurements, updated by the engine as it works.
pub struct StoreMetrics {
    /// Writes (requests' jobs) in each committed transaction.
    pub group_size: Histogram,
    /// Each write transaction, from its start to its end (committed or not), nanoseconds.
    pub transaction: Histogram,
    /// Each commit, nanoseconds: for SQLite in WAL mode with `synchronous=FULL`, writing the
    /// group's frames to the WAL and its fsync.
    pub commit: Histogram,
    /// The store's own syncs of its files outside commits, nanoseconds (SQLite: the database
    /// file, after each background checkpoint).
    pub sync: Histogram,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics {
            group_size: Histogram::new(GROUP_SIZES),
            transaction: Histogram::new(STORAGE_SECONDS),
            commit: Histogram::new(STORAGE_SECONDS),
            sync: Histogram::new(STORAGE_SECONDS),
        }
    }
}

/// The storage's size and room, read when asked (a few system calls); `None` where the engine
/// has no such thing or it cannot be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// The database's main file.
    pub database_bytes: Option<u64>,
    /// The write-ahead log (SQLite's `-wal` file).
    pub wal_bytes: Option<u64>,
    /// Space an unprivileged process may still write on the database's file system.
    pub free_bytes: Option<u64>,
    /// That file system's size.
    pub filesystem_bytes: Option<u64>,
}

/// Free and total bytes of the file system holding `path` (`statvfs`).
pub fn filesystem_space(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data, written by the call below.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and an output struct that outlives the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    let unit = s.f_frsize as u64;
    Some((s.f_bavail as u64 * unit, s.f_blocks as u64 * unit))
}
