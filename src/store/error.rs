//! The store's errors, the same for every backend. Handlers map them to their interface's status:
//! `NotFound` 404, `Conflict` 409, `Invalid` 400, `Unavailable` and `Closed` 503 (with
//! `Retry-After`), everything else 500. A backend turns its engine's errors into these in one
//! place (for SQLite: `sqlite::conn::classify`), so that no engine type leaves the store.

use std::fmt;

/// What went wrong in a store operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The addressed item, or the organization it belongs to, does not exist. Nothing was written.
    NotFound,
    /// A rule of the data refuses the write (a duplicate, a site still in use). Nothing was
    /// written; the text says why, in the interface's words.
    Conflict(String),
    /// The input names something that does not exist (a package, role or site); the text names
    /// the field. Nothing was written.
    Invalid(String),
    /// The storage cannot take the operation now (disk full, I/O error, the database locked for
    /// too long, the writer restarting). Nothing of the operation was stored; retrying later is
    /// safe. The one exception is `FaultKind::Unsettled`: a commit whose outcome is unknown.
    Unavailable(Fault),
    /// The store is shutting down: the writer takes no more work.
    Closed,
    /// The database was written by a newer Parasol.
    NewerSchema { found: i64, supported: i64 },
    /// A command-line tool was pointed at a data directory that holds no database.
    NoDatabase(std::path::PathBuf),
    /// A command-line tool was pointed at a PostgreSQL database (URL without its password) that
    /// holds no Parasol schema.
    NoSchema(String),
    /// Anything else: a bug or a damaged database. Details are logged, never sent to clients.
    Internal(String),
}

/// A storage fault, by kind (for the log, metrics and readiness) with the engine's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub detail: String,
}

/// Kinds of storage fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// No space left on the device (or a file size limit reached).
    DiskFull,
    /// The device failed a read, write or sync.
    Io,
    /// The database stayed locked by another process for longer than an operation may wait.
    Busy,
    /// The database file cannot be written (read-only file system or permissions).
    ReadOnly,
    /// The writer failed (a panic) and is restarting.
    WriterDown,
    /// The connection to the database server was lost (networked backends).
    Disconnected,
    /// The answer of a commit was lost and its outcome could not be learnt before the settling
    /// window ended (networked backends): the write may or may not have been stored.
    Unsettled,
}

impl FaultKind {
    /// A short stable name (log lines, metrics labels, `/readyz`).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::DiskFull => "disk_full",
            FaultKind::Io => "io_error",
            FaultKind::Busy => "busy",
            FaultKind::ReadOnly => "read_only",
            FaultKind::WriterDown => "writer_down",
            FaultKind::Disconnected => "disconnected",
            FaultKind::Unsettled => "outcome_unknown",
        }
    }
}

impl StoreError {
    /// A storage fault of this kind.
    pub fn fault(kind: FaultKind, detail: impl Into<String>) -> StoreError {
        StoreError::Unavailable(Fault {
            kind,
            detail: detail.into(),
        })
    }

    /// True for errors after which retrying the same request later may succeed (503).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Closed)
    }

    /// True for a write whose outcome is unknown (`FaultKind::Unsettled`): its 503 must not say
    /// that nothing was stored.
    pub fn is_unsettled(&self) -> bool {
        matches!(self, StoreError::Unavailable(f) if f.kind == FaultKind::Unsettled)
    }

    /// Seconds a client should wait before retrying, for errors that are worth a retry.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            StoreError::Unavailable(f) => Some(match f.kind {
                FaultKind::Busy
                | FaultKind::WriterDown
                | FaultKind::Disconnected
                | FaultKind::Unsettled => 1,
                FaultKind::DiskFull | FaultKind::Io | FaultKind::ReadOnly => 5,
            }),
            StoreError::Closed => Some(5),
            _ => None,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotFound => write!(f, "not found"),
            StoreError::Conflict(m) | StoreError::Invalid(m) => f.write_str(m),
            StoreError::Unavailable(fault) => {
                write!(f, "storage unavailable ({}): {}", fault.kind.name(), fault.detail)
            }
            StoreError::Closed => write!(f, "the database writer has stopped"),
            StoreError::NewerSchema { found, supported } => write!(
                f,
                "database schema version {found} is newer than this binary supports ({supported}); refusing to open it"
            ),
            StoreError::NoDatabase(dir) => write!(
                f,
                "{} holds no Parasol database; start `parasol serve --data-dir {}` once to create one",
                dir.display(),
                dir.display()
            ),
            StoreError::NoSchema(url) => write!(
                f,
                "{url} holds no Parasol schema; run `parasol init --database URL` (or start \
                 `parasol serve --database URL`) once to create it"
            ),
            StoreError::Internal(m) => write!(f, "database error: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// The classes every engine sorts its errors into, each with its answer: an engine keeps one
/// table from its own codes (PostgreSQL's SQLSTATEs, SQLite's result codes) to these, and
/// `ErrorClass::error` makes the store's error, with the same words whatever the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// A row the write refers to is gone (another request deleted it meanwhile): 404.
    NotFound,
    /// The write collides with another made at the same time (a unique key taken meanwhile): 409.
    Conflict,
    /// A value the storage refuses (out of its range or its checks): 400.
    Invalid,
    /// The storage cannot take the operation now: 503 with Retry-After, as `FaultKind` says.
    Unavailable(FaultKind),
    /// A bug or a damaged database: 500, details logged.
    Internal,
}

impl ErrorClass {
    /// The store's error for an engine error of this class; `detail` is the engine's words,
    /// which only the log and the metrics see.
    pub(crate) fn error(self, detail: String) -> StoreError {
        match self {
            ErrorClass::NotFound => {
                log::debug!("a referenced row is gone: {detail}");
                StoreError::NotFound
            }
            ErrorClass::Conflict => {
                log::debug!("a concurrent write conflicts: {detail}");
                StoreError::Conflict(CONCURRENT_CONFLICT.into())
            }
            ErrorClass::Invalid => {
                log::debug!("the storage refuses a value: {detail}");
                StoreError::Invalid(VALUE_REFUSED.into())
            }
            ErrorClass::Unavailable(kind) => StoreError::fault(kind, detail),
            ErrorClass::Internal => StoreError::Internal(detail),
        }
    }
}

/// The words of `ErrorClass::Conflict`.
pub(crate) const CONCURRENT_CONFLICT: &str =
    "Another request changed the same data at the same time; nothing of this request was stored";

/// The words of `ErrorClass::Invalid`.
pub(crate) const VALUE_REFUSED: &str =
    "A value is outside the range the storage accepts; nothing of this request was stored";

pub type Result<T> = std::result::Result<T, StoreError>;
