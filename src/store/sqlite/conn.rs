//! Connection set-up for the SQLite backend: the files' modes, the pragmas every connection
//! gets, the busy handlers, and the one place where SQLite's errors become `StoreError`s.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rusqlite::{Connection, ErrorCode};

use super::{faultvfs, walvfs};
use crate::store::{FaultKind, Result, StoreError};

/// Page size of a new database, bytes. 8 KiB: a commit of single events writes some 25-30
/// pages, most of them leaves of the name index far apart, and its fsync is the wait in which
/// the server's core idles; half-size pages halve those bytes and the checksums over them.
pub const DB_PAGE_BYTES: i64 = 8192;

/// Prepared statements kept per connection. The writer alone runs some 30 distinct statements
/// (events, lists, management, transaction control); rusqlite's default cache of 16 would evict
/// and re-prepare them in turn.
const STATEMENT_CACHE: usize = 128;

/// How long a connection may wait for a lock another connection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The writer, the checkpointer and command-line tools: up to about 10 s (a tool's
    /// transaction or a checkpoint's last frames; the locks Parasol's own connections hold last
    /// micro- to milliseconds).
    Long,
    /// Reads on the blocking pool: up to about 2 s.
    Read,
    /// Calls made on an async runtime thread: never; a lock held elsewhere fails the call at
    /// once with `Busy`, and the caller retries it off the runtime.
    Never,
}

/// Busy handler: polls every 100 us for up to `Wait::Long`. SQLite's own (`busy_timeout`) sleeps
/// in growing steps of up to 100 ms, so a writer that meets a lock held for 30 ms would sleep
/// until 33 or 53 ms.
fn poll_long(attempts: i32) -> bool {
    poll(attempts, 100_000)
}

/// Busy handler of the read connections used off the runtime (about 2 s).
fn poll_read(attempts: i32) -> bool {
    poll(attempts, 20_000)
}

fn poll(attempts: i32, limit: i32) -> bool {
    if attempts >= limit {
        return false;
    }
    std::thread::sleep(std::time::Duration::from_micros(100));
    true
}

/// Sets how long `conn` may wait for a lock.
pub fn set_wait(conn: &Connection, wait: Wait) -> Result<()> {
    match wait {
        Wait::Long => conn.busy_handler(Some(poll_long))?,
        Wait::Read => conn.busy_handler(Some(poll_read))?,
        Wait::Never => conn.busy_handler(None)?,
    }
    Ok(())
}

/// Makes the data directory 0700 and the database with its `-wal` and `-shm` companions 0600,
/// whatever the umask: they hold customer keys and credential hashes. With `create`, an absent
/// database file is created (empty, which SQLite takes for a new database) with that mode, so
/// that SQLite, which gives the companions the database file's mode, never makes a readable one.
/// Without it, an absent database is `StoreError::NoDatabase`.
pub fn prepare_files(path: &Path, create: bool) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let io =
        |what: &Path, e: std::io::Error| StoreError::Internal(format!("{}: {e}", what.display()));
    if !path.exists() {
        if !create {
            return Err(StoreError::NoDatabase(dir.to_path_buf()));
        }
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io(dir, e))?;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| io(path, e))?;
    }
    for suffix in ["", "-wal", "-shm"] {
        let file = path.with_file_name(format!(
            "{}{suffix}",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ));
        match std::fs::metadata(&file) {
            Ok(m) if m.permissions().mode() & 0o777 != 0o600 => {
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| io(&file, e))?;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&file, e)),
        }
    }
    Ok(())
}

/// Opens a connection with Parasol's pragmas.
pub fn open_connection(path: &Path, wait: Wait) -> Result<Connection> {
    if let Err(rc) = walvfs::register() {
        return Err(StoreError::Internal(format!(
            "cannot register the WAL-gathering VFS (SQLite error {rc})"
        )));
    }
    // Storage faults on demand, for tests (`faultvfs`): only with its environment variable set.
    let vfs = faultvfs::vfs_over(walvfs::NAME, walvfs::NAME_C).map_err(StoreError::Internal)?;
    let conn = Connection::open_with_flags_and_vfs(path, rusqlite::OpenFlags::default(), vfs)?;
    // Pragmas live outside any migration transaction (journal_mode cannot change inside one).
    set_wait(&conn, wait)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Takes effect only on a new, empty database (an existing one keeps its page size).
    conn.pragma_update(None, "page_size", DB_PAGE_BYTES)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: a commit is on disk (WAL fsynced) before it returns, so a 202 is never lost. The WAL
    // VFS gathers a transaction's frames until SQLite syncs, which is sound only because SQLite
    // syncs the WAL before it publishes a commit, which FULL guarantees.
    conn.pragma_update(None, "synchronous", "FULL")?;
    let synchronous: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    if synchronous != 2 {
        return Err(StoreError::Internal(format!(
            "synchronous is {synchronous}, not FULL (2): refusing to run without durable commits"
        )));
    }
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

/// The storage fault an SQLite error stands for, if it is one.
pub fn fault_kind(e: &rusqlite::Error) -> Option<FaultKind> {
    let rusqlite::Error::SqliteFailure(f, _) = e else {
        return None;
    };
    match f.code {
        ErrorCode::DiskFull => Some(FaultKind::DiskFull),
        ErrorCode::SystemIoFailure
        | ErrorCode::CannotOpen
        | ErrorCode::FileLockingProtocolFailed => Some(FaultKind::Io),
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Some(FaultKind::Busy),
        ErrorCode::ReadOnly => Some(FaultKind::ReadOnly),
        ErrorCode::OutOfMemory => Some(FaultKind::Io),
        _ => None,
    }
}

/// SQLite's errors become store errors here and nowhere else, through the classes both engines
/// share (`ErrorClass`): storage faults are `Unavailable` (503, retry later), everything else
/// `Internal` (500). (A constraint SQLite refuses is a bug here: with one writer, the operations
/// check every rule before they write.)
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        fault_kind(&e)
            .map_or(
                crate::store::ErrorClass::Internal,
                crate::store::ErrorClass::Unavailable,
            )
            .error(e.to_string())
    }
}

/// Opens an existing database read-only (`parasol migrate` reading an appliance's data): no
/// pragma that writes, and the usual wait for a lock another connection holds.
pub fn open_read_only(path: &Path) -> Result<Connection> {
    if !path.exists() {
        return Err(StoreError::NoDatabase(
            path.parent().unwrap_or(Path::new(".")).to_path_buf(),
        ));
    }
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    set_wait(&conn, Wait::Long)?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TempDir;

    #[test]
    fn connections_are_durable_wal_with_foreign_keys() {
        let dir = TempDir::new("conn");
        let path = dir.join("parasol.db");
        prepare_files(&path, true).unwrap();
        let c = open_connection(&path, Wait::Long).unwrap();
        let mode: String = c
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        let sync: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        let fk: i64 = c
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!((mode.as_str(), sync, fk), ("wal", 2, 1));
    }

    #[test]
    fn files_are_private_whatever_the_umask_and_a_tool_never_creates_a_database() {
        let dir = TempDir::new("conn");
        let data = dir.join("data");
        let path = data.join("parasol.db");
        assert_eq!(
            prepare_files(&path, false),
            Err(StoreError::NoDatabase(data.clone()))
        );
        assert!(!data.exists(), "a tool created the directory");
        // SAFETY: umask only changes this process's file-creation mask; restored below.
        let old = unsafe { libc::umask(0) };
        let made = prepare_files(&path, true).and_then(|()| {
            let c = open_connection(&path, Wait::Long)?;
            c.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")?;
            Ok(c)
        });
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let c = made.unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data), 0o700);
        for suffix in ["", "-wal", "-shm"] {
            let f = data.join(format!("parasol.db{suffix}"));
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
        drop(c);
        // A file made readable by someone else gets its mode back at the next open.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        prepare_files(&path, false).unwrap();
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn storage_faults_are_told_from_other_errors() {
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        assert!(matches!(
            StoreError::from(full),
            StoreError::Unavailable(f) if f.kind == FaultKind::DiskFull
        ));
        let io = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR_FSYNC),
            None,
        );
        assert!(matches!(
            StoreError::from(io),
            StoreError::Unavailable(f) if f.kind == FaultKind::Io
        ));
        let constraint = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE),
            None,
        );
        assert!(matches!(
            StoreError::from(constraint),
            StoreError::Internal(_)
        ));
    }
}
