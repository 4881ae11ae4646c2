//! Forward-only schema migrations of the PostgreSQL database, versioned with the same numbers as
//! SQLite's (`crate::store::sqlite::migrate::SCHEMA_VERSION`): a version names one data model,
//! whichever engine holds it. The version lives in the table `parasol_schema`. An empty database
//! gets `schema-postgres.sql` whole; a database of an earlier version runs the scripts of
//! `upgrades/` from its version on. A database of a newer version is refused.
//!
//! Several nodes may start at once on a new or older database: the migration runs inside one
//! transaction holding a transaction-level advisory lock, so one node migrates and the others,
//! waiting for the lock, then find the work done. PostgreSQL's DDL is transactional: a migration
//! that fails leaves nothing behind.

use super::Db;
use crate::store::{Result, StoreError};

/// The current schema, for an empty database.
pub const SCHEMA: &str = include_str!("../../../schema-postgres.sql");

/// The first schema version the PostgreSQL backend shipped with: `SCHEMA` when no upgrade exists
/// yet. Upgrades never change it.
const FIRST_VERSION: i64 = 5;

/// Entry `i` brings a database from version `FIRST_VERSION + i` to `FIRST_VERSION + i + 1`
/// (files `upgrades/N-what.sql`, N the version they make).
const UPGRADES: &[&str] = &[
    include_str!("upgrades/6-commit-tokens.sql"),
    include_str!("upgrades/7-list-check-sums.sql"),
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = FIRST_VERSION + UPGRADES.len() as i64;

/// Key of the advisory lock that serialises migrations (an arbitrary constant: "parasol" as a
/// number).
const MIGRATION_LOCK: i64 = 0x7061_7261_736f_6c01;

/// Brings the database to `SCHEMA_VERSION` (creating the schema when `create`); refuses a
/// database from a newer binary, and (without `create`) one that holds no Parasol schema.
pub(crate) async fn migrate(db: &Db, create: bool, url: &str) -> Result<()> {
    // Fast path, no lock: a current database.
    if let Some(found) = version(db).await? {
        if !crate::store::behind(found, SCHEMA_VERSION)? {
            return Ok(());
        }
    } else if !create {
        return Err(StoreError::NoSchema(url.to_string()));
    }
    db.batch("BEGIN").await?;
    let r = migrate_locked(db).await;
    match r {
        Ok(()) => db.batch("COMMIT").await,
        Err(e) => {
            let _ = db.batch("ROLLBACK").await;
            Err(e)
        }
    }
}

async fn migrate_locked(db: &Db) -> Result<()> {
    db.exec("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    // Read again under the lock: another node may have migrated meanwhile.
    match version(db).await? {
        None => {
            db.batch(SCHEMA).await?;
            db.exec(
                "INSERT INTO parasol_schema (version) VALUES ($1)",
                &[&(SCHEMA_VERSION as i32)],
            )
            .await?;
            log::info!("database created with schema version {SCHEMA_VERSION}");
        }
        Some(found) => {
            crate::store::behind(found, SCHEMA_VERSION)?;
            for (i, sql) in UPGRADES
                .iter()
                .enumerate()
                .skip((found - FIRST_VERSION).max(0) as usize)
            {
                let to = FIRST_VERSION + i as i64 + 1;
                db.batch(sql).await?;
                db.exec("UPDATE parasol_schema SET version = $1", &[&(to as i32)])
                    .await?;
                log::info!("database upgraded to schema version {to}");
            }
        }
    }
    Ok(())
}

/// The database's schema version; `None` if it holds no Parasol schema.
pub(crate) async fn version(db: &Db) -> Result<Option<i64>> {
    let exists: bool = db
        .one("SELECT to_regclass('parasol_schema') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let v: Option<i32> = db
        .opt("SELECT version FROM parasol_schema", &[])
        .await?
        .map(|r| r.get(0));
    Ok(Some(v.unwrap_or(0) as i64))
}

#[cfg(test)]
mod tests {
    /// A new SQLite schema version needs its PostgreSQL counterpart (an upgrade script here and
    /// schema-postgres.sql brought up to date), and the reverse: the numbers name one data model.
    #[test]
    fn both_engines_are_at_the_same_schema_version() {
        assert_eq!(
            super::SCHEMA_VERSION,
            crate::store::sqlite::migrate::SCHEMA_VERSION
        );
    }
}
