//! Forward-only schema migrations keyed on `PRAGMA user_version`. Migration 1 is `schema.sql`;
//! later versions are appended to `MIGRATIONS` and never edited once released.

use rusqlite::Connection;

use super::{Result, StoreError};

/// Each entry brings the database from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[include_str!("../../schema.sql")];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Applies the missing migrations in one transaction; refuses a database from a newer binary.
pub fn migrate(conn: &mut Connection) -> Result<()> {
    let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
    // Re-read under the lock: another process may have migrated meanwhile.
    let found: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        log::info!("database migrated to schema version {}", i + 1);
    }
    tx.commit()?;
    Ok(())
}

/// A migrated in-memory database with foreign keys on, for unit tests.
#[cfg(test)]
pub(crate) fn memory_db() -> Connection {
    let mut c = Connection::open_in_memory().expect("in-memory database");
    c.execute_batch("PRAGMA foreign_keys = ON")
        .expect("foreign keys");
    migrate(&mut c).expect("migration");
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_database_reaches_current_version_and_is_idempotent() {
        let mut c = Connection::open_in_memory().unwrap();
        migrate(&mut c).unwrap();
        migrate(&mut c).unwrap();
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        let roles: i64 = c
            .query_row("SELECT count(*) FROM roles", [], |r| r.get(0))
            .unwrap();
        assert_eq!(roles, 6);
    }

    #[test]
    fn newer_database_is_refused() {
        let mut c = Connection::open_in_memory().unwrap();
        c.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        match migrate(&mut c) {
            Err(StoreError::NewerSchema { found, supported }) => {
                assert_eq!(found, SCHEMA_VERSION + 1);
                assert_eq!(supported, SCHEMA_VERSION);
            }
            other => panic!("expected NewerSchema, got {other:?}"),
        }
    }
}
