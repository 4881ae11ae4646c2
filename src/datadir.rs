//! The data directory's lock: a running server holds an exclusive advisory lock (`flock`) on
//! `DIR/parasol.lock` for its whole life, so that a second server on the same directory, or a
//! restore, refuses to start instead of corrupting the database. The lock goes with the process:
//! a server killed with SIGKILL leaves no stale lock behind (the file stays, the lock does not).
//!
//! Provisioning commands do not take the lock: they are short SQLite transactions that run safely
//! beside the server (WAL).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Name of the lock file inside the data directory.
pub const LOCK_FILE: &str = "parasol.lock";

/// An exclusive hold on a data directory; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    // Kept open for the lock's lifetime: closing the descriptor releases the flock.
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Why a data directory could not be locked.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds the lock; its pid when it wrote one.
    InUse { dir: PathBuf, pid: Option<u32> },
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::InUse { dir, pid } => {
                write!(
                    f,
                    "data directory {} is in use by a running parasol server",
                    dir.display()
                )?;
                if let Some(pid) = pid {
                    write!(f, " (pid {pid})")?;
                }
                write!(f, "; stop it first (systemctl stop parasol)")
            }
            LockError::Io { path, error } => {
                write!(f, "cannot lock {}: {error}", path.display())
            }
        }
    }
}

impl std::error::Error for LockError {}

/// Creates `dir` if needed and takes its lock without waiting. The holder's pid is written into
/// the lock file so that a refused process can name it.
pub fn lock(dir: &Path) -> Result<DataDirLock, LockError> {
    let path = dir.join(LOCK_FILE);
    let io_err = |error| LockError::Io {
        path: path.clone(),
        error,
    };
    std::fs::create_dir_all(dir).map_err(io_err)?;
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path);
    let (mut file, writable) = match opened {
        Ok(f) => (f, true),
        // A lock file left by another user (say root running `parasol restore`): a read-only
        // descriptor can hold a flock just as well.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            (File::open(&path).map_err(io_err)?, false)
        }
        Err(e) => return Err(io_err(e)),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(LockError::InUse {
                dir: dir.to_path_buf(),
                pid: text.trim().parse().ok(),
            });
        }
        Err(TryLockError::Error(e)) => return Err(io_err(e)),
    }
    if writable {
        // A lock file made by root (a restore run with sudo) is handed to the directory's owner,
        // so that the service user can still open it read-write later. Best effort.
        if let (Ok(d), Ok(f)) = (std::fs::metadata(dir), file.metadata()) {
            if (d.uid(), d.gid()) != (f.uid(), f.gid()) {
                let _ = std::os::unix::fs::fchown(&file, Some(d.uid()), Some(d.gid()));
            }
        }
        // Best effort: the pid only improves the message another process prints.
        let _ = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
            .and_then(|()| writeln!(file, "{}", std::process::id()));
    }
    Ok(DataDirLock { _file: file, path })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TempDir;

    #[test]
    fn second_lock_is_refused_naming_the_holder_and_released_on_drop() {
        let dir = TempDir::new("lock");
        let first = lock(&dir).unwrap();
        assert_eq!(first.path(), dir.join(LOCK_FILE));
        // flock locks belong to the open file description, so a second open in the same
        // process conflicts just like another process would.
        match lock(&dir) {
            Err(LockError::InUse { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("expected InUse, got {other:?}"),
        }
        let msg = lock(&dir).unwrap_err().to_string();
        assert!(msg.contains("in use by a running parasol server"), "{msg}");
        drop(first);
        let again = lock(&dir).unwrap();
        drop(again);
    }

    #[test]
    fn creates_a_missing_directory() {
        let root = TempDir::new("lock");
        let dir = root.join("nested/data");
        let l = lock(&dir).unwrap();
        assert!(dir.join(LOCK_FILE).exists());
        drop(l);
    }
}
