//! A PostgreSQL cluster of a test's own (initdb in a temporary directory, its own loopback port),
//! for the fault tests that stop, reconfigure or promote a server: the shared cluster of
//! `.ci/postgres` is left alone. It needs that script's server binaries (`PARASOL_PG_BIN`); as
//! root, the clusters run as the unprivileged user `.ci/postgres` creates (`parasol-ci`).
//!
//! One file for both kinds of test: the integration suites use it as `common::cluster`, the
//! library's store suite includes it (`src/store/suite/mod.rs`), so it needs nothing but the
//! crates both have and the library's test directories (`src/testdir.rs`, included here). It
//! also holds the two helpers both kinds of test wait with: `run` and `wait_within`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

// The library's test directories; when the library's suite includes this file, a second copy
// of its module.
#[path = "../../src/testdir.rs"]
#[allow(clippy::duplicate_mod)]
mod testdir;
use testdir::TempDir;

/// Runs a future to completion from synchronous code (or from inside a test's own runtime,
/// which it leaves alone): on a thread with a runtime of its own.
pub fn run<F>(fut: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(fut)
            })
            .join()
            .unwrap()
    })
}

/// The unprivileged user the clusters run as when the tests run as root.
const RUN_AS: &str = "parasol-ci";

/// Polls `probe` until it gives a value, for at most `limit`; panics naming `what` otherwise.
/// Tests wait on observable state this way, never for a fixed time.
pub async fn wait_within<T>(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    wait_within_async(what, limit, || std::future::ready(probe())).await
}

/// `wait_within` with a probe that awaits (a request to the server, say).
pub async fn wait_within_async<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waited {limit:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One PostgreSQL server: a primary made by `Cluster::start`, or a standby of one
/// (`Cluster::standby`). Stopped (immediately) and removed on drop.
pub struct Cluster {
    dir: TempDir,
    pub port: u16,
    bin: String,
    /// `cluster_name`: the name a standby's connection gives the primary.
    pub name: String,
}

/// The server binaries, if the environment names them (`PARASOL_PG_BIN`).
pub fn pg_bin() -> Option<String> {
    std::env::var("PARASOL_PG_BIN")
        .ok()
        .filter(|b| !b.is_empty())
}

fn as_root() -> bool {
    // SAFETY: geteuid only reads the process's user id.
    unsafe { libc::geteuid() == 0 }
}

/// `program` with `args`, as the clusters' user.
fn command(program: &str) -> Command {
    if as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", RUN_AS, "--", program]);
        c
    } else {
        Command::new(program)
    }
}

fn check(what: &str, out: std::io::Result<std::process::Output>) {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A free loopback port (bound by the kernel, then released for the server).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A directory the clusters' user owns.
fn owned_dir() -> TempDir {
    let dir = TempDir::new("cluster");
    if as_root() {
        check(
            "chown",
            Command::new("chown").arg(RUN_AS).arg(&*dir).output(),
        );
    }
    dir
}

impl Cluster {
    /// A new primary, started; `None` (the caller says it skipped) without `PARASOL_PG_BIN`.
    pub fn start(name: &str) -> Option<Cluster> {
        let bin = pg_bin()?;
        let dir = owned_dir();
        check(
            "initdb",
            command(&format!("{bin}/initdb"))
                .arg("-D")
                .arg(dir.join("data"))
                .args([
                    "-U",
                    "parasol",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ])
                .output(),
        );
        let c = Cluster {
            dir,
            port: 0,
            bin,
            name: name.to_string(),
        };
        Some(c.started())
    }

    /// A streaming standby of this server (pg_basebackup -R), started, named `name`.
    pub fn standby(&self, name: &str) -> Cluster {
        let dir = owned_dir();
        check(
            "pg_basebackup",
            command(&format!("{}/pg_basebackup", self.bin))
                .arg("-D")
                .arg(dir.join("data"))
                .args(["-R", "-X", "stream", "-h", "127.0.0.1", "-U", "parasol"])
                .args(["-p", &self.port.to_string()])
                .output(),
        );
        let c = Cluster {
            dir,
            port: 0,
            bin: self.bin.clone(),
            name: name.to_string(),
        };
        c.started()
    }

    /// Starts the server on a free port (tried again if another process took it meanwhile).
    fn started(mut self) -> Cluster {
        for attempt in 1..=5 {
            self.port = free_port();
            if self.try_start() {
                return self;
            }
            eprintln!("cluster start {attempt} on port {} failed", self.port);
        }
        panic!("the cluster did not start: see {}", self.log().display());
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    fn pg_ctl(&self) -> Command {
        let mut c = command(&format!("{}/pg_ctl", self.bin));
        c.arg("-D").arg(self.data()).arg("-l").arg(self.log());
        c
    }

    fn try_start(&self) -> bool {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={} \
             -c max_connections=60 -c shared_buffers=16MB -c fsync=off -c cluster_name={}",
            self.port,
            self.dir.display(),
            self.name
        );
        self.pg_ctl()
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// Starts the server again on its port, after `stop`.
    pub fn start_again(&self) {
        assert!(self.try_start(), "restart: see {}", self.log().display());
    }

    /// Stops the server (`mode`: fast, immediate).
    pub fn stop(&self, mode: &str) {
        check(
            "pg_ctl stop",
            self.pg_ctl()
                .args(["-m", mode, "-w", "-t", "60", "stop"])
                .output(),
        );
    }

    /// Promotes a standby and waits until it takes writes.
    pub fn promote(&self) {
        check(
            "pg_ctl promote",
            self.pg_ctl().args(["-w", "-t", "60", "promote"]).output(),
        );
    }

    /// The URL of its database `postgres`, as Parasol's `--database` takes it.
    pub fn url(&self) -> String {
        format!(
            "postgres://parasol@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// Runs `sql` (simple query protocol; several statements run as one transaction) as the
    /// superuser; the rows of its statements, every value as text.
    pub fn sql(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        let (url, sql) = (self.url(), sql.to_string());
        run(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            let task = tokio::spawn(conn);
            let mut rows = Vec::new();
            for m in client.simple_query(&sql).await.unwrap() {
                match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        rows.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                    }
                    tokio_postgres::SimpleQueryMessage::CommandComplete(_) => {}
                    _ => {}
                }
            }
            drop(client);
            let _ = task.await;
            rows
        })
    }

    /// The one value `sql` answers.
    pub fn value(&self, sql: &str) -> Option<String> {
        self.sql(sql)
            .pop()
            .and_then(|r| r.into_iter().next().flatten())
    }

    /// Sets `synchronous_standby_names` and reloads the configuration: with a name no standby
    /// connects under, every commit that writes waits (in `SyncRep`) for ever.
    pub fn synchronous_standbys(&self, names: &str) {
        self.sql(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{names}'"
        ));
        self.sql("SELECT pg_reload_conf()");
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .pg_ctl()
            .args(["-m", "immediate", "-w", "-t", "60", "stop"])
            .output();
    }
}
