//! `parasol backup` and `parasol restore`: the operators' online backup of the database and its
//! restore. Backup runs beside a live server; restore refuses while one holds the data directory.

use std::path::PathBuf;

use argh::{ArgsInfo, FromArgs};
use serde_json::{json, Value};

use super::default_data_dir;

/// Back up the database while the server runs (SQLite online backup).
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "backup")]
pub struct BackupCmd {
    /// data directory holding parasol.db (default ./parasol-data)
    #[argh(option, default = "default_data_dir()")]
    pub data_dir: PathBuf,
    /// a PostgreSQL database: refused, PostgreSQL's own tools back it up (pg_dump, base backups
    /// with WAL archiving)
    #[argh(option)]
    pub database: Option<String>,
    /// file to write: one self-contained SQLite file, mode 0600, replaced atomically
    #[argh(option)]
    pub output: PathBuf,
}

/// Replace the database with a checked backup (refused while a server runs).
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "restore")]
pub struct RestoreCmd {
    /// data directory to restore into (default ./parasol-data; created if missing)
    #[argh(option, default = "default_data_dir()")]
    pub data_dir: PathBuf,
    /// a PostgreSQL database: refused, PostgreSQL's own tools back it up (pg_dump, base backups
    /// with WAL archiving)
    #[argh(option)]
    pub database: Option<String>,
    /// backup to restore; checked first; the replaced database is kept as
    /// parasol.db.pre-restore-<unix time>
    #[argh(option)]
    pub input: PathBuf,
}

/// A PostgreSQL database is backed up and restored with PostgreSQL's own tools, which know its
/// replication and point-in-time recovery; Parasol's commands copy the SQLite file.
fn refuse_postgres(database: &Option<String>, what: &str) -> Result<(), String> {
    match database {
        Some(url) => Err(format!(
            "{}: parasol {what} is for the SQLite database of a data directory; back up and \
             restore PostgreSQL with its own tools (pg_dump/pg_restore, or base backups with WAL \
             archiving)",
            crate::store::redact(url)
        )),
        None => Ok(()),
    }
}

pub fn backup(c: BackupCmd) -> Result<Value, String> {
    refuse_postgres(&c.database, "backup")?;
    let db = c.data_dir.join("parasol.db");
    let started = std::time::Instant::now();
    let info = crate::store::backup(&db, &c.output)?;
    Ok(json!({
        "database": db,
        "output": c.output,
        "bytes": info.bytes,
        "schemaVersion": info.schema_version,
        "tookMs": started.elapsed().as_millis() as u64,
    }))
}

pub fn restore(c: RestoreCmd) -> Result<Value, String> {
    refuse_postgres(&c.database, "restore")?;
    // Held until the restore is done: no server can start on the directory meanwhile.
    let lock = crate::datadir::lock(&c.data_dir).map_err(|e| e.to_string())?;
    let db = c.data_dir.join("parasol.db");
    let info = crate::store::restore(&db, &c.input)?;
    drop(lock);
    Ok(json!({
        "database": db,
        "input": c.input,
        "bytes": info.bytes,
        "schemaVersion": info.schema_version,
        "previous": info.previous,
    }))
}
