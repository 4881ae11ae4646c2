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
    /// backup to restore; checked first; the replaced database is kept as
    /// parasol.db.pre-restore-<unix time>
    #[argh(option)]
    pub input: PathBuf,
}

pub fn backup(c: BackupCmd) -> Result<Value, String> {
    let db = c.data_dir.join("parasol.db");
    let started = std::time::Instant::now();
    let info = crate::store::sqlite::backup::backup(&db, &c.output)?;
    Ok(json!({
        "database": db,
        "output": c.output,
        "bytes": info.bytes,
        "schemaVersion": info.schema_version,
        "tookMs": started.elapsed().as_millis() as u64,
    }))
}

pub fn restore(c: RestoreCmd) -> Result<Value, String> {
    // Held until the restore is done: no server can start on the directory meanwhile.
    let lock = crate::datadir::lock(&c.data_dir).map_err(|e| e.to_string())?;
    let db = c.data_dir.join("parasol.db");
    let info = crate::store::sqlite::backup::restore(&db, &c.input)?;
    drop(lock);
    Ok(json!({
        "database": db,
        "input": c.input,
        "bytes": info.bytes,
        "schemaVersion": info.schema_version,
        "previous": info.previous,
    }))
}
