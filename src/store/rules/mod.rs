//! The store's rules, written once for every engine: each management operation's checks,
//! conflict rules, derived fields and messages, over the typed statements each resource's trait
//! declares (`sites::Sites`, `devices::Devices`, ...). Each engine implements those statements
//! with its own SQL and locks, in a file of the same name on both sides (`sqlite/sites.rs`,
//! `postgres/sites.rs`): SQLite inside its single writer, where a lock is only a look, PostgreSQL
//! with the row locks that make a check hold against other nodes' concurrent writes.
//!
//! A rule ends in one of three ways: its value (the engine commits), a deliberate refusal
//! (`TxError::Abort`: not found, a conflict, an invalid reference; the engine rolls back and the
//! caller gets the refusal), or a database failure (`TxError::Db`: rolled back, answered as the
//! fault it is). A refusal is never a database error in disguise, nor the reverse.
//!
//! `store/managed.rs` declares the operations written here as methods of `Store`: each names the
//! kind of transaction it runs in and its rule, and hands the rule the engine's connection.

pub(crate) mod allow;
pub(crate) mod customers;
pub(crate) mod demo;
pub(crate) mod devices;
pub(crate) mod internal_networks;
pub(crate) mod sites;
pub(crate) mod tenants;
pub(crate) mod users;

use super::{Result, StoreError};

/// Why a rule's transaction ends without its change.
#[derive(Debug)]
pub(crate) enum TxError {
    /// A rule refused the change; the text, where there is one, is the interface's answer.
    Abort(Refusal),
    /// The database failed (or a statement broke an invariant): a fault or an internal error.
    Db(StoreError),
}

/// A rule's deliberate refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The addressed item (or its organization) does not exist.
    NotFound,
    /// A rule of the data forbids the change (a duplicate, a site still in use).
    Conflict(String),
    /// The input names something that does not exist; the text names the field.
    Invalid(String),
}

/// A statement's rows.
pub(crate) type Rows<T> = Result<Vec<T>>;

/// A statement's row, if there is one.
pub(crate) type One<T> = Result<Option<T>>;

/// What a rule returns.
pub(crate) type TxResult<T> = std::result::Result<T, TxError>;

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> TxError {
        TxError::Db(e)
    }
}

impl From<TxError> for StoreError {
    fn from(e: TxError) -> StoreError {
        match e {
            TxError::Abort(Refusal::NotFound) => StoreError::NotFound,
            TxError::Abort(Refusal::Conflict(m)) => StoreError::Conflict(m),
            TxError::Abort(Refusal::Invalid(m)) => StoreError::Invalid(m),
            TxError::Db(e) => e,
        }
    }
}

/// Refuses with `NotFound`.
pub(crate) fn not_found<T>() -> TxResult<T> {
    Err(TxError::Abort(Refusal::NotFound))
}

/// Refuses with a conflict.
pub(crate) fn conflict<T>(why: impl Into<String>) -> TxResult<T> {
    Err(TxError::Abort(Refusal::Conflict(why.into())))
}

/// Refuses with an invalid reference.
pub(crate) fn invalid<T>(why: impl Into<String>) -> TxResult<T> {
    Err(TxError::Abort(Refusal::Invalid(why.into())))
}

/// The item, or `NotFound`.
pub(crate) fn found<T>(item: Option<T>) -> TxResult<T> {
    item.ok_or(TxError::Abort(Refusal::NotFound))
}

/// The item a statement has just written and must read back; its absence is a broken
/// invariant (an internal error), not a refusal.
pub(crate) fn written<T>(item: Option<T>, what: &str) -> TxResult<T> {
    item.ok_or_else(|| TxError::Db(StoreError::Internal(format!("{what} vanished"))))
}

/// How long, and against what, a statement that finds a row holds it (PostgreSQL's row locks;
/// SQLite's single writer holds everything anyway, so there a hold is only a look).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Until the commit, against the row's deletion (`FOR KEY SHARE`): what is being put in it
    /// cannot lose it.
    Share,
    /// Until the commit, against any other write of it (`FOR UPDATE`): what moves into it
    /// meanwhile waits, and then sees it as this transaction left it.
    Exclusive,
}
