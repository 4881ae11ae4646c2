//! `parasol init`: creates the data directory and its database ahead of the first start, so that
//! the provisioning commands can prepare tenants and keys before the server runs. The other
//! commands never create a database: a mistyped `--data-dir` is an error, not a new empty one.

use argh::{ArgsInfo, FromArgs};
use serde_json::{json, Value};

use crate::store::{OpenRole, Store, SCHEMA_VERSION};

store_command! {
    /// Create the data directory and an empty database, or with --database the Parasol schema in an
    /// existing PostgreSQL database (idempotent).
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "init")]
    pub struct InitCmd {
    }
}

pub fn init(cmd: InitCmd) -> Result<Value, String> {
    if let Some(url) = &cmd.database {
        // PostgreSQL: the schema, created (or upgraded) in the existing database.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start: {e}"))?;
        let created = runtime.block_on(async {
            let existed = Store::open_postgres(url, OpenRole::Tool).await;
            let store = Store::open_postgres(url, OpenRole::Server).await;
            if let Ok(s) = &existed {
                s.close();
            }
            store.map(|s| {
                s.close();
                existed.is_err()
            })
        });
        let created = created.map_err(|e| super::open_error(&cmd.data_dir, Some(url), e))?;
        return Ok(json!({
            "database": crate::store::redact(url),
            "created": created,
            "schemaVersion": SCHEMA_VERSION,
        }));
    }
    let path = cmd.data_dir.join("parasol.db");
    let existed = path.exists();
    let store = Store::open_sqlite(&path, OpenRole::Server)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    store.close();
    Ok(json!({
        "database": path,
        "created": !existed,
        "schemaVersion": SCHEMA_VERSION,
    }))
}
