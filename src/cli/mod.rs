//! The command line: `parasol serve` and the operators' provisioning commands. Every provisioning
//! command prints JSON on standard output; a failure prints `{"error": "..."}` on standard error
//! and exits with status 1.

mod backup;
mod bench;
mod devices;
mod lists;
mod org_resources;
mod serve;
mod tenants;

use std::path::PathBuf;

use argh::FromArgs;
use serde_json::{json, Value};

/// Parasol: on-premises enforcement and management interfaces of a DNS-security service.
#[derive(FromArgs, Debug)]
pub struct Cli {
    /// print the version and exit
    #[argh(switch)]
    pub version: bool,
    #[argh(subcommand)]
    pub command: Option<Command>,
}

#[derive(FromArgs, Debug)]
#[argh(subcommand)]
pub enum Command {
    Serve(serve::ServeArgs),
    Provider(tenants::ProviderCmd),
    Msp(tenants::MspCmd),
    Org(tenants::OrgCmd),
    Key(tenants::KeyCmd),
    Credential(tenants::CredentialCmd),
    Allow(lists::AllowCmd),
    Blocklist(lists::BlocklistCmd),
    Site(org_resources::SiteCmd),
    InternalNetwork(org_resources::InternalNetworkCmd),
    User(org_resources::UserCmd),
    Package(org_resources::PackageCmd),
    Network(devices::NetworkCmd),
    Roaming(devices::RoamingCmd),
    Va(devices::VaCmd),
    Backup(backup::BackupCmd),
    Restore(backup::RestoreCmd),
    Bench(bench::BenchArgs),
}

/// Data directory option shared by the provisioning commands.
pub(crate) fn default_data_dir() -> PathBuf {
    PathBuf::from("./parasol-data")
}

/// Runs the parsed command line; returns the process exit status.
pub fn main(cli: Cli) -> i32 {
    if cli.version {
        println!("parasol {}", env!("CARGO_PKG_VERSION"));
        return 0;
    }
    let Some(command) = cli.command else {
        eprintln!(
            "parasol {}: a command is required; see `parasol --help`",
            env!("CARGO_PKG_VERSION")
        );
        return 2;
    };
    let result = match command {
        Command::Serve(args) => return serve::run(args),
        Command::Bench(args) => return bench::run(args),
        Command::Provider(c) => tenants::provider(c),
        Command::Msp(c) => tenants::msp(c),
        Command::Org(c) => tenants::org(c),
        Command::Key(c) => tenants::key(c),
        Command::Credential(c) => tenants::credential(c),
        Command::Allow(c) => lists::allow(c),
        Command::Blocklist(c) => lists::blocklist(c),
        Command::Site(c) => org_resources::site(c),
        Command::InternalNetwork(c) => org_resources::internal_network(c),
        Command::User(c) => org_resources::user(c),
        Command::Package(c) => org_resources::package(c),
        Command::Network(c) => devices::network(c),
        Command::Roaming(c) => devices::roaming(c),
        Command::Va(c) => devices::va(c),
        Command::Backup(c) => backup::backup(c),
        Command::Restore(c) => backup::restore(c),
    };
    print_result(result)
}

/// Prints a command's JSON result, or its error as JSON on standard error.
pub(crate) fn print_result(result: Result<Value, String>) -> i32 {
    match result {
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            0
        }
        Err(e) => {
            eprintln!("{}", json!({ "error": e }));
            1
        }
    }
}

/// Opens the data directory's database for a provisioning command (creating it if needed).
pub(crate) fn open_db(data_dir: &std::path::Path) -> Result<rusqlite::Connection, String> {
    std::fs::create_dir_all(data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    let path = data_dir.join("parasol.db");
    crate::store::open_migrated(&path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `f` in one immediate transaction and commits it.
pub(crate) fn in_transaction<T>(
    data_dir: &std::path::Path,
    f: impl FnOnce(&rusqlite::Connection) -> Result<T, String>,
) -> Result<T, String> {
    let mut conn = open_db(data_dir)?;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| e.to_string())?;
    let v = f(&tx)?;
    tx.commit().map_err(|e| e.to_string())?;
    Ok(v)
}
