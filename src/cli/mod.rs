//! The command line: `parasol serve` and the operators' provisioning commands. Every provisioning
//! command prints JSON on standard output; a failure prints `{"error": "..."}` on standard error
//! and exits with status 1.

/// Declares a command's arguments with the store options first: `--data-dir` and `--database`,
/// written here once for every command that opens the store the same way (argh has no
/// flattening of a shared struct). `parasol serve`, `backup` and `restore`, whose options mean
/// something more, declare their own.
macro_rules! store_command {
    ($(#[$meta:meta])* pub struct $name:ident { $($fields:tt)* }) => {
        $(#[$meta])*
        pub struct $name {
            /// data directory (default ./parasol-data)
            #[argh(option, default = "crate::cli::default_data_dir()")]
            pub data_dir: std::path::PathBuf,
            /// a PostgreSQL database (postgres://USER:PASS@HOST:PORT/DB[?sslmode=...]) instead of the
            /// data directory's SQLite database
            #[argh(option)]
            pub database: Option<String>,
            $($fields)*
        }
    };
}

mod backup;
mod completions;
mod devices;
mod init;
mod lists;
mod migrate;
mod org_resources;
mod serve;
mod tenants;

use std::path::{Path, PathBuf};

use argh::{ArgsInfo, FromArgs};
use serde_json::{json, Value};

use crate::store::{OpenRole, Store, StoreError};

/// Parasol: on-premises enforcement and management interfaces of a DNS-security service.
#[derive(FromArgs, ArgsInfo, Debug)]
pub struct Cli {
    /// print the version and exit
    #[argh(switch, short = 'V')]
    pub version: bool,
    #[argh(subcommand)]
    pub command: Option<Command>,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum Command {
    Serve(serve::ServeArgs),
    Init(init::InitCmd),
    Completions(completions::CompletionsCmd),
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
    Migrate(migrate::MigrateCmd),
}

/// Data directory option shared by the provisioning commands.
pub(crate) fn default_data_dir() -> PathBuf {
    PathBuf::from("./parasol-data")
}

/// Runs the parsed command line; returns the process exit status.
pub fn main(cli: Cli) -> i32 {
    if cli.version {
        return print_text(&format!("parasol {}", env!("CARGO_PKG_VERSION")));
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
        Command::Completions(c) => {
            return match completions::script(&c) {
                Ok(s) => print_text(s.trim_end()),
                Err(e) => print_result(Err(e)),
            }
        }
        Command::Init(c) => init::init(c),
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
        Command::Migrate(c) => migrate::migrate(c),
    };
    print_result(result)
}

/// Prints a command's JSON result, or its error as JSON on standard error.
pub(crate) fn print_result(result: Result<Value, String>) -> i32 {
    match result {
        Ok(v) => print_text(&serde_json::to_string_pretty(&v).unwrap_or_default()),
        Err(e) => {
            eprintln!("{}", json!({ "error": e }));
            1
        }
    }
}

/// Writes `text` and a newline to standard output; the exit status. A reader that went away
/// (`parasol credential list | head -1`) ends the command quietly with status 0, as other Unix
/// tools do, instead of an error (Rust ignores SIGPIPE, so the write fails with EPIPE).
pub(crate) fn print_text(text: &str) -> i32 {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("{}", json!({ "error": format!("standard output: {e}") }));
            1
        }
    }
}

/// Runs `f` with the store the command names, on a small runtime of its own: the PostgreSQL
/// database at `database` when given, else the data directory's SQLite database. The database
/// (or its schema) must exist: only `parasol serve` and `parasol init` create one, so that a
/// mistyped `--data-dir` or `--database` is an error rather than a fresh empty database. Errors
/// name a PostgreSQL database by its URL without the password.
pub(crate) fn with_store<T>(
    data_dir: &Path,
    database: Option<&str>,
    f: impl AsyncFnOnce(&Store) -> Result<T, String>,
) -> Result<T, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))?;
    let store = runtime
        .block_on(Store::open_configured(data_dir, database, OpenRole::Tool))
        .map_err(|e| open_error(data_dir, database, e))?;
    let result = runtime.block_on(f(&store));
    store.close();
    result
}

/// What a command says when its store cannot be opened: the store's words, with where it looked.
pub(crate) fn open_error(data_dir: &Path, database: Option<&str>, e: StoreError) -> String {
    match (e, database) {
        (e @ (StoreError::NoDatabase(_) | StoreError::NoSchema(_)), _) => e.to_string(),
        (e, Some(url)) => format!("{}: {e}", crate::store::redact(url)),
        (e, None) => format!("{}: {e}", data_dir.join("parasol.db").display()),
    }
}

/// What a command says of a store error: `missing` for `NotFound` (one wording for every
/// command: "no organization 7"), the store's own words for the rest.
pub(crate) fn store_err(missing: impl Into<String>) -> impl FnOnce(StoreError) -> String {
    move |e| match e {
        StoreError::NotFound => missing.into(),
        StoreError::Invalid(m) => tenants::to_flag_message(&m),
        e => e.to_string(),
    }
}

/// "no organization 7", "no service provider 2", "no MSP 3": the wording of a missing object,
/// the same in every command.
pub(crate) fn no(kind: &str, id: impl std::fmt::Display) -> String {
    format!("no {kind} {id}")
}

/// "--site-id 4: no site 4": a flag that names a missing object.
pub(crate) fn no_flag(flag: &str, kind: &str, id: impl std::fmt::Display) -> String {
    format!("{flag} {id}: {}", no(kind, &id))
}

/// `Ok` if the organization exists, else "no organization 7". Commands on an organization's
/// items ask first, so that a missing organization and a missing item are told apart (the store
/// answers `NotFound` for both).
pub(crate) async fn require_org(store: &Store, org: i64) -> Result<(), String> {
    // Every organization has its default site from its creation on.
    match store.default_site(org).await.map_err(|e| e.to_string())? {
        Some(_) => Ok(()),
        None => Err(no("organization", org)),
    }
}

/// Every record of a list the store gives in pages (`page(limit, offset)`), in its order.
pub(crate) async fn all_pages<T, F>(page: impl Fn(i64, i64) -> F) -> Result<Vec<T>, String>
where
    F: std::future::Future<Output = crate::store::Result<Vec<T>>>,
{
    const LIMIT: i64 = 200;
    let mut out = Vec::new();
    loop {
        let offset = i64::try_from(out.len()).unwrap_or(i64::MAX);
        let got = page(LIMIT, offset).await.map_err(|e| e.to_string())?;
        let n = got.len();
        out.extend(got);
        if n < LIMIT as usize {
            return Ok(out);
        }
    }
}

/// A value as the command prints it.
pub(crate) fn printed<T: serde::Serialize>(v: T) -> Result<Value, String> {
    serde_json::to_value(v).map_err(|e| e.to_string())
}
