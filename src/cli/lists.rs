//! Operators' commands for enforcement on the appliance: edit a customer's allow list, export its
//! effective block list for a local DNS resolver, and ask whether a name is blocked.

use std::path::PathBuf;

use argh::{ArgsInfo, FromArgs};
use serde_json::{json, Value};

use super::{no, store_err, with_store};
use crate::enforcement::domain::normalize;
use crate::export::files::write_atomically;
use crate::export::formats::{self, Format};
use crate::timefmt::now;

/// A customer's allow list (wins over the domain list when blocking).
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "allow")]
pub struct AllowCmd {
    #[argh(subcommand)]
    pub action: AllowAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum AllowAction {
    Add(AllowEdit),
    Remove(AllowRemove),
    List(AllowList),
}

store_command! {
    /// Add a name (and everything below it) to the allow list.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "add")]
    pub struct AllowEdit {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// domain name (normalised like dstDomain: IDN to punycode, lower case)
        #[argh(option)]
        pub name: String,
    }
}

store_command! {
    /// Remove a name from the allow list.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "remove")]
    pub struct AllowRemove {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// domain name
        #[argh(option)]
        pub name: String,
    }
}

store_command! {
    /// List the allow list.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "list")]
    pub struct AllowList {
        /// organization id
        #[argh(option)]
        pub org: i64,
    }
}

/// A customer's effective block list (domain list minus allow list).
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "blocklist")]
pub struct BlocklistCmd {
    #[argh(subcommand)]
    pub action: BlocklistAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum BlocklistAction {
    Export(Export),
    Check(Check),
}

store_command! {
    /// Export the effective block list once: `plain` (one name a line), `hosts` (0.0.0.0 name), `rpz`
    /// (a response-policy zone), `unbound` (local-zone lines) or `dnsmasq` (server= lines); the last
    /// three block each name with its subdomains and let allow-listed names under them through.
    /// `parasol serve --export-dir` keeps such files current by itself.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "export")]
    pub struct Export {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// plain, hosts, rpz, unbound or dnsmasq (default plain)
        #[argh(option, default = "String::from(\"plain\")")]
        pub format: String,
        /// write the list to this file (replaced atomically); without it the names are printed in
        /// the JSON output
        #[argh(option)]
        pub output: Option<PathBuf>,
    }
}

store_command! {
    /// Tell whether a name is blocked for the organization, and by which entries.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "check")]
    pub struct Check {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// domain name
        #[argh(option)]
        pub name: String,
    }
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
    let format = Format::parse(&a.format).ok_or_else(|| {
        format!(
            "--format {:?}: expected plain, hosts, rpz, unbound or dnsmasq",
            a.format
        )
    })?;
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
    // An RPZ file written over an older one continues its serial, as the server's exporter does.
    let previous = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| formats::rpz_serial(&t));
    let serial = formats::next_serial(previous, now());
    let text = formats::render_to_string(format, a.org, &blocked, &exceptions, serial);
    write_atomically(&path, text.as_bytes())?;
    Ok(json!({
        "org": a.org,
        "format": format.name(),
        "entries": blocked.len(),
        "exceptions": exceptions.len(),
        "path": path,
    }))
}
