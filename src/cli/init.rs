//! `parasol init`: creates the data directory and its database ahead of the first start, so that
//! the provisioning commands can prepare tenants and keys before the server runs. The other
//! commands never create a database: a mistyped `--data-dir` is an error, not a new empty one.

use std::path::PathBuf;

use argh::{ArgsInfo, FromArgs};
use serde_json::{json, Value};

use super::default_data_dir;
use crate::store::sqlite::{migrate::SCHEMA_VERSION, Role};
use crate::store::Store;

/// Create the data directory and an empty database (idempotent).
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "init")]
pub struct InitCmd {
    /// data directory (default ./parasol-data)
    #[argh(option, default = "default_data_dir()")]
    pub data_dir: PathBuf,
}

pub fn init(cmd: InitCmd) -> Result<Value, String> {
    let path = cmd.data_dir.join("parasol.db");
    let existed = path.exists();
    let store =
        Store::open_sqlite(&path, Role::Server).map_err(|e| format!("{}: {e}", path.display()))?;
    store.close();
    Ok(json!({
        "database": path,
        "created": !existed,
        "schemaVersion": SCHEMA_VERSION,
    }))
}
