//! Operators' commands for enforcement on the appliance: edit a customer's allow list, export its
//! effective block list for a local DNS resolver, and ask whether a name is blocked.

use std::io::Write;
use std::path::PathBuf;

use argh::FromArgs;
use serde_json::{json, Value};

use super::{default_data_dir, no, store_err, with_store};
use crate::enforcement::domain::normalize;
use crate::timefmt::now;

/// A customer's allow list (wins over the domain list when blocking).
#[derive(FromArgs, Debug)]
#[argh(subcommand, name = "allow")]
pub struct AllowCmd {
    #[argh(subcommand)]
    pub action: AllowAction,
}

#[derive(FromArgs, Debug)]
#[argh(subcommand)]
pub enum AllowAction {
    Add(AllowEdit),
    Remove(AllowRemove),
    List(AllowList),
}

/// Add a name (and everything below it) to the allow list.
#[derive(FromArgs, Debug)]
#[argh(subcommand, name = "add")]
pub struct AllowEdit {
    /// data directory (default ./parasol-data)
    #[argh(option, default = "default_data_dir()")]
    pub data_dir: PathBuf,
    /// a PostgreSQL database (postgres://USER:PASS@HOST:PORT/DB[?sslmode=...]) instead of the
    /// data directory's SQLite database
    #[argh(option)]
    pub database: Option<String>,
    /// organization id
    #[argh(option)]
    pub org: i64,
    /// domain name (normalised like dstDomain: IDN to punycode, lower case)
    #[argh(option)]
    pub name: String,
}

/// Remove a name from the allow list.
#[derive(FromArgs, Debug)]
#[argh(subcommand, name = "remove")]
pub struct AllowRemove {
    /// data directory (default ./parasol-data)
    #[argh(option, default = "default_data_dir()")]
    pub data_dir: PathBuf,
    /// a PostgreSQL database (postgres://USER:PASS@HOST:PORT/DB[?sslmode=...]) instead of the
    /// data directory's SQLite database
    #[argh(option)]
    pub database: Option<String>,
    /// organization id
    #[argh(option)]
    pub org: i64,
    /// domain name
    #[argh(option)]
    pub name: String,
}

/// List the allow list.
#[derive(FromArgs, Debug)]
#[argh(subcommand, name = "list")]
pub struct AllowList {
    /// data directory (default ./parasol-data)
    #[argh(option, default = "default_data_dir()")]
    pub data_dir: PathBuf,
    /// a PostgreSQL database (postgres://USER:PASS@HOST:PORT/DB[?sslmode=...]) instead of the
    /// data directory's SQLite database
    #[argh(option)]
    pub database: Option<String>,
    /// organization id
    #[argh(option)]
    pub org: i64,
}

/// A customer's effective block list (domain list minus allow list).
#[derive(FromArgs, Debug)]
#[argh(subcommand, name = "blocklist")]
pub struct BlocklistCmd {
    #[argh(subcommand)]
    pub action: BlocklistAction,
}

#[derive(FromArgs, Debug)]
#[argh(subcommand)]
pub enum BlocklistAction {
    Export(Export),
    Check(Check),
}

/// Export the effective block list: `plain` (one name a line), `hosts` (0.0.0.0 name) or `rpz`
/// (a response-policy zone blocking each name and its subdomains, with allow-list exceptions).
#[derive(FromArgs, Debug)]
#[argh(subcommand, name = "export")]
pub struct Export {
    /// data directory (default ./parasol-data)
    #[argh(option, default = "default_data_dir()")]
    pub data_dir: PathBuf,
    /// a PostgreSQL database (postgres://USER:PASS@HOST:PORT/DB[?sslmode=...]) instead of the
    /// data directory's SQLite database
    #[argh(option)]
    pub database: Option<String>,
    /// organization id
    #[argh(option)]
    pub org: i64,
    /// plain, hosts or rpz (default plain)
    #[argh(option, default = "String::from(\"plain\")")]
    pub format: String,
    /// write the list to this file (replaced atomically); without it the names are printed in
    /// the JSON output
    #[argh(option)]
    pub output: Option<PathBuf>,
}

/// Tell whether a name is blocked for the organization, and by which entries.
#[derive(FromArgs, Debug)]
#[argh(subcommand, name = "check")]
pub struct Check {
    /// data directory (default ./parasol-data)
    #[argh(option, default = "default_data_dir()")]
    pub data_dir: PathBuf,
    /// a PostgreSQL database (postgres://USER:PASS@HOST:PORT/DB[?sslmode=...]) instead of the
    /// data directory's SQLite database
    #[argh(option)]
    pub database: Option<String>,
    /// organization id
    #[argh(option)]
    pub org: i64,
    /// domain name
    #[argh(option)]
    pub name: String,
}

fn name_arg(name: &str) -> Result<String, String> {
    normalize(name).map_err(|_| format!("--name {name:?}: not a valid domain name"))
}

pub fn allow(cmd: AllowCmd) -> Result<Value, String> {
    match cmd.action {
        AllowAction::Add(a) => {
            let name = name_arg(&a.name)?;
            with_store(&a.data_dir, a.database.as_deref(), async |store| {
                let added = store
                    .allow_add(a.org, name.clone(), now())
                    .await
                    .map_err(store_err(no("organization", a.org)))?;
                Ok(json!({"org": a.org, "name": name, "added": added}))
            })
        }
        AllowAction::Remove(a) => {
            let name = name_arg(&a.name)?;
            with_store(&a.data_dir, a.database.as_deref(), async |store| {
                let removed = store
                    .allow_remove(a.org, name.clone())
                    .await
                    .map_err(store_err(no("organization", a.org)))?;
                Ok(json!({"org": a.org, "name": name, "removed": removed}))
            })
        }
        AllowAction::List(a) => with_store(&a.data_dir, a.database.as_deref(), async |store| {
            let names = store
                .allow_list(a.org)
                .await
                .map_err(store_err(no("organization", a.org)))?;
            Ok(json!({"org": a.org, "names": names}))
        }),
    }
}

pub fn blocklist(cmd: BlocklistCmd) -> Result<Value, String> {
    match cmd.action {
        BlocklistAction::Check(a) => {
            let name = name_arg(&a.name)?;
            with_store(&a.data_dir, a.database.as_deref(), async |store| {
                let v = store
                    .verdict(a.org, name)
                    .await
                    .map_err(store_err(no("organization", a.org)))?;
                serde_json::to_value(v).map_err(|e| e.to_string())
            })
        }
        BlocklistAction::Export(a) => export(a),
    }
}

fn export(a: Export) -> Result<Value, String> {
    if !["plain", "hosts", "rpz"].contains(&a.format.as_str()) {
        return Err(format!(
            "--format {:?}: expected plain, hosts or rpz",
            a.format
        ));
    }
    // The domain list and the allow list come from the same snapshot.
    let (blocked, exceptions) = with_store(&a.data_dir, a.database.as_deref(), async |store| {
        store
            .effective_block_list(a.org)
            .await
            .map_err(store_err(no("organization", a.org)))
    })?;
    let Some(path) = a.output else {
        return Ok(json!({
            "org": a.org,
            "entries": blocked.len(),
            "names": blocked,
            "exceptions": exceptions,
        }));
    };
    let text = render(&a.format, a.org, &blocked, &exceptions);
    write_atomically(&path, text.as_bytes())?;
    Ok(json!({
        "org": a.org,
        "format": a.format,
        "entries": blocked.len(),
        "exceptions": exceptions.len(),
        "path": path,
    }))
}

/// The list in a resolver's format.
pub fn render(format: &str, org: i64, blocked: &[String], exceptions: &[String]) -> String {
    let mut out = String::new();
    match format {
        "hosts" => {
            out.push_str(&format!("# parasol block list of organization {org}\n"));
            for n in blocked {
                out.push_str(&format!("0.0.0.0 {n}\n"));
            }
        }
        "rpz" => {
            let serial = now();
            out.push_str(&format!(
                "; parasol block list of organization {org}\n$TTL 60\n\
                 @ IN SOA localhost. hostmaster.localhost. {serial} 3600 600 86400 60\n\
                 @ IN NS localhost.\n"
            ));
            // Exceptions first: RPZ applies the most specific name, and passthru lets the
            // allow-listed name (and below) resolve normally.
            for n in exceptions {
                out.push_str(&format!(
                    "{n} CNAME rpz-passthru.\n*.{n} CNAME rpz-passthru.\n"
                ));
            }
            for n in blocked {
                out.push_str(&format!("{n} CNAME .\n*.{n} CNAME .\n"));
            }
        }
        _ => {
            for n in blocked {
                out.push_str(n);
                out.push('\n');
            }
        }
    }
    out
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, renames it over `path` and syncs the
/// directory, so a resolver never reads a half-written list and the new list survives a power cut.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename itself is durable only once the directory is.
        std::fs::File::open(dir)?.sync_all()
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", path.display())
    })
}
