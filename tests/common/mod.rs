//! Test harness: starts the real server on a pre-bound 127.0.0.1:0 listener (in-process, or the
//! real binary as a child process), waits for readiness by polling (never by sleeping blindly),
//! talks HTTPS to it with a client that trusts the server's own certificate, and shuts it down
//! cleanly. Every wait is bounded.
//!
//! The backend: SQLite in each test's data directory, or, with `PARASOL_TEST_POSTGRES` set to a
//! superuser URL (`.ci/postgres` starts such a cluster), a PostgreSQL database of its own for
//! each data directory, created when first needed and dropped with the directory. The same
//! tests then run on both; the few that read the SQLite file itself say so and are skipped on
//! PostgreSQL (`skip_on_postgres`).
#![allow(dead_code)]
// The harness fails a test by panicking, as the tests themselves do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::HeaderMap;
use hyper_util::rt::TokioIo;
use parasol::config::{ServerConfig, TlsSource};
use parasol::store::OpenRole as Role;
use parasol::store::{OrgFields, Parent, Scope, Store};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

pub mod cluster;
pub mod dns;

/// Upper bound for any single wait in the tests.
pub const WAIT: Duration = Duration::from_secs(20);

/// `wait_within` for `WAIT`.
pub async fn wait_for<T>(what: &str, probe: impl FnMut() -> Option<T>) -> T {
    wait_within(what, WAIT, probe).await
}

/// `wait_for` outside a runtime: the thread polls.
pub fn wait_for_blocking<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waited {WAIT:?} for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A fresh, empty directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let p = std::env::temp_dir().join(format!("parasol-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        drop_database_of(&self.0);
    }
}

/// The PostgreSQL server the tests run against (`PARASOL_TEST_POSTGRES`), if any.
pub fn postgres_admin_url() -> Option<String> {
    std::env::var("PARASOL_TEST_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty())
}

/// Whether the tests run on PostgreSQL.
pub fn on_postgres() -> bool {
    postgres_admin_url().is_some()
}

/// For a test that looks into the SQLite file itself: true (skip it) on PostgreSQL, saying why.
pub fn skip_on_postgres(why: &str) -> bool {
    if on_postgres() {
        eprintln!("skipped on PostgreSQL: {why}");
        true
    } else {
        false
    }
}

/// `admin` with its database replaced by `name`.
pub fn url_with_database(admin: &str, name: &str) -> String {
    let (base, query) = match admin.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (admin, String::new()),
    };
    let at = base.rfind('/').unwrap();
    format!("{}/{name}{query}", &base[..at])
}

fn database_name(dir: &Path) -> String {
    // The whole path counts: two tests may each use a directory named `data` in their own
    // temporary directory.
    let clean: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("t_{}", &clean[clean.len().saturating_sub(60)..])
}

static DATABASES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Runs one statement as the PostgreSQL superuser (creating and dropping test databases).
pub fn admin_sql(sql: &str) -> Result<(), String> {
    let admin = postgres_admin_url().ok_or("no PostgreSQL")?;
    let sql = sql.to_string();
    run(async move {
        let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        let task = tokio::spawn(conn);
        let r = client.batch_execute(&sql).await.map_err(|e| e.to_string());
        drop(client);
        let _ = task.await;
        r
    })
}

/// On PostgreSQL: the URL of the database that belongs to data directory `dir` (created now if
/// it does not exist yet); `None` on SQLite.
pub fn database_for(dir: &Path) -> Option<String> {
    let admin = postgres_admin_url()?;
    let name = database_name(dir);
    let mut known = DATABASES.lock().unwrap();
    if !known.contains(&name) {
        if let Err(e) = admin_sql(&format!("CREATE DATABASE {name}")) {
            assert!(e.contains("already exists"), "CREATE DATABASE {name}: {e}");
        }
        known.push(name.clone());
    }
    // Plain TCP: `.ci/postgres`'s cluster offers TLS with a certificate of its own CA, which
    // only the test of TLS itself trusts.
    Some(format!(
        "{}?sslmode=disable",
        url_with_database(&admin, &name)
    ))
}

/// Drops the database of `dir`, if one was made.
fn drop_database_of(dir: &Path) {
    if postgres_admin_url().is_none() {
        return;
    }
    let name = database_name(dir);
    let made = {
        let mut known = DATABASES.lock().unwrap();
        let before = known.len();
        known.retain(|n| n != &name);
        known.len() != before
    };
    if made {
        let _ = admin_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    }
}

/// The arguments that point a command at `dir`'s store: `--data-dir DIR`, and on PostgreSQL
/// `--database URL` too.
pub fn store_args(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = vec!["--data-dir".into(), dir.into()];
    if let Some(url) = database_for(dir) {
        args.push("--database".into());
        args.push(url.into());
    }
    args
}

/// A response, fully read.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Something that speaks HTTPS (or HTTP) on an address.
#[derive(Clone)]
pub struct Client {
    pub addr: SocketAddr,
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

impl Client {
    /// A client that trusts exactly the PEM certificate at `cert`.
    pub fn new(addr: SocketAddr, cert: Option<&Path>) -> Client {
        let tls = cert.map(|cert| {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(cert).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(cfg)
        });
        Client { addr, tls }
    }

    /// Opens a connection (TLS when configured).
    pub async fn connect(&self) -> std::io::Result<Box<dyn Io>> {
        let tcp = tokio::time::timeout(WAIT, TcpStream::connect(self.addr))
            .await
            .map_err(|_| std::io::Error::other("connect timed out"))??;
        tcp.set_nodelay(true)?;
        match &self.tls {
            None => Ok(Box::new(tcp)),
            Some(cfg) => {
                let name = ServerName::IpAddress(self.addr.ip().into());
                let tls =
                    tokio::time::timeout(WAIT, TlsConnector::from(cfg.clone()).connect(name, tcp))
                        .await
                        .map_err(|_| std::io::Error::other("handshake timed out"))??;
                Ok(Box::new(tls))
            }
        }
    }

    /// Sends one request on a new connection and reads the whole response.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Resp {
        let io = self.connect().await.expect("connect");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .expect("http handshake");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = hyper::Request::builder().method(method).uri(path);
        // The listener's address, unless the test sends a Host of its own.
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            req = req.header("host", self.addr.to_string());
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .expect("request");
        let res = tokio::time::timeout(WAIT, sender.send_request(req))
            .await
            .expect("response timed out")
            .expect("response");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = tokio::time::timeout(WAIT, res.into_body().collect())
            .await
            .expect("body timed out")
            .expect("body")
            .to_bytes()
            .to_vec();
        Resp {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.request("GET", path, &[], None).await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.request(
            "DELETE",
            path,
            &[("content-type", "application/json")],
            None,
        )
        .await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Resp {
        self.request(
            "POST",
            path,
            &[("content-type", "application/json")],
            Some(serde_json::to_vec(body).unwrap()),
        )
        .await
    }

    /// Polls until the server answers anything, within `WAIT`.
    pub async fn wait_ready(&self) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Ok(Ok(mut io)) =
                tokio::time::timeout(Duration::from_secs(2), self.connect()).await
            {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let req = format!(
                    "GET /ready-probe HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
                    self.addr
                );
                if io.write_all(req.as_bytes()).await.is_ok() {
                    let mut buf = [0u8; 12];
                    if let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_secs(2), io.read(&mut buf)).await
                    {
                        if n > 0 {
                            return;
                        }
                    }
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "server not ready within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// A server running inside the test process on a pre-bound port.
pub struct TestServer {
    pub client: Client,
    pub dir: TempDir,
    /// The PostgreSQL database it runs on, if not SQLite in `dir`.
    pub database: Option<String>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), String>>>,
}

impl std::ops::Deref for TestServer {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl TestServer {
    /// Starts a server over HTTPS with a self-signed certificate in a fresh data directory;
    /// `adjust` may change the configuration first.
    pub async fn start_with(adjust: impl FnOnce(&mut ServerConfig)) -> TestServer {
        Self::start_in(TempDir::new(), adjust).await
    }

    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    /// Starts on an existing data directory (restart tests).
    pub async fn start_in(dir: TempDir, adjust: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let mut config = ServerConfig::new(dir.path());
        config.database = database_for(dir.path());
        adjust(&mut config);
        let cert = match &config.tls {
            TlsSource::Plain => None,
            TlsSource::Files { cert, .. } => Some(cert.clone()),
            TlsSource::SelfSigned => Some(dir.path().join("tls/cert.pem")),
        };
        // A child process that another test of this binary forks holds a copy of each of this
        // process's descriptors until it execs, a data directory's lock file included: a server
        // starting at that moment can find the lock briefly taken. Such a start is retried.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let mut task =
                tokio::spawn(parasol::server::run(config.clone(), listener, async move {
                    let _ = rx.await;
                }));
            // A server that fails to start says why instead of leaving the wait to time out.
            let ended = tokio::select! {
                client = ready(addr, cert.as_deref()) => {
                    return TestServer {
                        client,
                        dir,
                        database: config.database.clone(),
                        stop: Some(tx),
                        task: Some(task),
                    };
                }
                ended = &mut task => ended,
            };
            match ended {
                Ok(Err(e)) if e.contains("in use by a running parasol server") && attempt < 5 => {
                    eprintln!("test server start {attempt} refused ({e}); retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => panic!("the server stopped while starting: {other:?}"),
            }
        }
    }

    /// Stops the server gracefully and returns its data directory.
    pub async fn stop(mut self) -> TempDir {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(40), task)
                .await
                .expect("server did not stop in time")
                .expect("server task panicked")
                .expect("server returned an error");
        }
        let dir = TempDir(self.dir.0.clone());
        // Hand the directory over without deleting it.
        std::mem::forget(std::mem::replace(&mut self.dir, TempDir(PathBuf::new())));
        dir
    }

    /// A plain connection to the server's SQLite database, for checking what is stored (tests
    /// that use it are skipped on PostgreSQL).
    pub fn db(&self) -> rusqlite::Connection {
        assert!(self.database.is_none(), "this test reads the SQLite file");
        open_db(&self.dir.path().join("parasol.db"))
    }

    /// Runs SQL that both engines understand on the server's database (a test setting up what
    /// no interface can, such as old timestamps).
    pub fn execute(&self, sql: &str) {
        match self.database.clone() {
            Some(url) => {
                let sql = sql.to_string();
                run(async move {
                    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                        .await
                        .unwrap();
                    let task = tokio::spawn(conn);
                    client.batch_execute(&sql).await.unwrap();
                    drop(client);
                    let _ = task.await;
                })
            }
            None => open_db(&self.dir.path().join("parasol.db"))
                .execute_batch(sql)
                .unwrap(),
        }
    }

    /// A store on the server's database, as a command-line tool opens it beside the server.
    pub fn store(&self) -> Store {
        match &self.database {
            Some(url) => run(Store::open_postgres(url, Role::Tool)).unwrap(),
            None => tool_store(&self.dir.path().join("parasol.db")),
        }
    }

    /// Creates a stand-alone organization; returns its id and customer key.
    pub fn create_org(&self, name: &str) -> (i64, String) {
        let f = OrgFields {
            name: name.into(),
            seats: 1,
            ..Default::default()
        };
        let o = run(self
            .store()
            .create_organization(Parent::None, f, parasol::timefmt::now()))
        .unwrap();
        (o.id, o.customer_key)
    }
}

/// A plain connection to a database, for checking what is stored.
pub fn open_db(path: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).unwrap();
    c.busy_timeout(WAIT).unwrap();
    c
}

/// A store on an existing database, as a command-line tool opens it.
pub fn tool_store(path: &Path) -> Store {
    Store::open_sqlite(path, Role::Tool).unwrap()
}

/// The store of data directory `dir` (its PostgreSQL database on PostgreSQL), as a tool opens it.
pub fn dir_store(dir: &Path) -> Store {
    match database_for(dir) {
        Some(url) => run(Store::open_postgres(&url, Role::Tool)).unwrap(),
        None => tool_store(&dir.join("parasol.db")),
    }
}

/// Runs a store operation to completion from synchronous code (or from inside a test's own
/// runtime): written once, beside the clusters that need it too.
pub use cluster::run;

/// Polls a probe until it gives a value, for at most a given time (the library's store suite
/// waits with it too, so it is written beside the clusters).
pub use cluster::wait_within;

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// The real `parasol` binary running as a child process (signal and restart tests).
pub struct ChildServer {
    pub child: std::process::Child,
    pub client: Client,
    pub url: String,
    pub stderr_lines: Arc<std::sync::Mutex<Vec<String>>>,
}

impl std::ops::Deref for ChildServer {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl ChildServer {
    /// Runs `parasol serve --listen 127.0.0.1:0 --data-dir DIR <extra>` and waits for the ready
    /// line, which names the URL.
    pub fn spawn(dir: &Path, extra: &[&str]) -> ChildServer {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"));
        command
            .arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .args(store_args(dir))
            .args(extra);
        Self::spawn_command(command, dir)
    }

    /// Runs a prepared `parasol serve` command whose data directory is `dir` and waits for the
    /// ready line.
    pub fn spawn_command(mut command: std::process::Command, dir: &Path) -> ChildServer {
        use std::io::BufRead;
        let mut child = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn parasol");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(url) = line.split("ready: serving ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let url = match rx.recv_timeout(WAIT) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                panic!("no ready line; stderr: {:?}", lines.lock().unwrap());
            }
        };
        let hostport = url.split("://").nth(1).unwrap();
        // An address, or (for a server listening on every address) the host name.
        let addr: SocketAddr = hostport.parse().unwrap_or_else(|_| {
            std::net::ToSocketAddrs::to_socket_addrs(hostport)
                .ok()
                .and_then(|mut a| a.next())
                .unwrap_or_else(|| panic!("the ready line's {hostport} does not resolve"))
        });
        let cert = dir.join("tls/cert.pem");
        let client = Client::new(addr, url.starts_with("https").then_some(cert.as_path()));
        ChildServer {
            child,
            client,
            url,
            stderr_lines: lines,
        }
    }

    pub fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} failed");
    }

    /// Waits (bounded) until a stderr line contains `needle`.
    pub fn wait_for_log(&self, needle: &str) {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if self
                .stderr_lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(needle))
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no log line containing {needle:?}; got {:?}",
                self.stderr_lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits (bounded) for a clean exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("server did not exit after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads until the response head and `content-length` bytes of body are in, or EOF/timeout.
pub async fn read_response(io: &mut Box<dyn Io>) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let n =
            match tokio::time::timeout_at(deadline, tokio::io::AsyncReadExt::read(io, &mut chunk))
                .await
            {
                Ok(Ok(n)) => n,
                Ok(Err(_)) => break,
                Err(_) => panic!(
                    "no response in time; got {:?}",
                    String::from_utf8_lossy(&buf)
                ),
            };
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(head_end) = text.find("\r\n\r\n") {
            let len = text
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if buf.len() >= head_end + 4 + len {
                break;
            }
        }
    }
    String::from_utf8_lossy(&buf).to_string()
}

/// True if the server closes the connection within `within`.
pub async fn closed_within(
    io: &mut (impl tokio::io::AsyncRead + Unpin),
    within: std::time::Duration,
) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, tokio::io::AsyncReadExt::read(io, &mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// A valid event with the given domain.
pub fn event(domain: &str) -> Value {
    serde_json::json!({
        "deviceId": "ba6a59f4-e692-4724-ba36-c28132c761de",
        "deviceVersion": "13.7a",
        "eventTime": "2026-11-22T10:00:00.0Z",
        "alertTime": "2026-11-22T10:00:01Z",
        "dstDomain": domain,
        "dstUrl": format!("http://{domain}/payload"),
        "protocolVersion": "1.0a",
        "providerName": "Security Platform"
    })
}

/// Creates an organization through the real command line; returns its customer key.
pub fn cli_create_org(dir: &Path, name: &str) -> String {
    cli_init(dir);
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"));
    command
        .args(["org", "create", "--name", name])
        .args(store_args(dir));
    customer_key_from(command)
}

/// `parasol init`: creates the data directory's database if it has none.
pub fn cli_init(dir: &Path) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .arg("init")
        .args(store_args(dir))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a prepared `parasol org create` command; returns the new organization's customer key.
pub fn customer_key_from(mut command: std::process::Command) -> String {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["customerKey"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `Authorization: Basic ...` for an API key and secret.
pub fn basic(key: &str, secret: &str) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{key}:{secret}"));
    format!("Basic {encoded}")
}

/// An API credential of the management interface.
#[derive(Debug, Clone)]
pub struct Cred {
    pub key: String,
    pub secret: String,
}

impl Cred {
    pub fn auth(&self) -> String {
        basic(&self.key, &self.secret)
    }
}

/// A management tenant world in a test server's database: a service provider with one customer
/// organization, an MSP with one customer organization, a stand-alone organization, and a
/// credential for each scope.
pub struct World {
    pub sp: i64,
    pub msp: i64,
    /// Customer of the service provider.
    pub sp_org: i64,
    /// Customer of the MSP.
    pub msp_org: i64,
    /// An organization with no parent.
    pub lone_org: i64,
    pub sp_cred: Cred,
    pub msp_cred: Cred,
    pub sp_org_cred: Cred,
    pub msp_org_cred: Cred,
    pub lone_org_cred: Cred,
}

impl TestServer {
    /// Provisions a [`World`] directly in the database.
    pub fn world(&self) -> World {
        let store = self.store();
        let now = parasol::timefmt::now();
        run(async {
            let sp = store
                .create_service_provider(
                    parasol::store::NewServiceProvider {
                        name: "Provider".into(),
                        package_id: 2,
                        seats_total: 500,
                        rebill_at: Some(now + 86_400 * 30),
                        expires_at: Some(now + 86_400 * 365),
                    },
                    now,
                )
                .await
                .unwrap();
            let msp = store.create_msp("Managed".into(), now).await.unwrap();
            let fields = |name: &str| OrgFields {
                name: name.into(),
                seats: 10,
                package_id: Some(2),
                street_address: Some("1 Main St".into()),
                city: Some("Springfield".into()),
                state: Some("IL".into()),
                country_code: Some("US".into()),
                admin_emails: vec!["admin@example.com".into()],
                ..Default::default()
            };
            let org = async |parent, name| {
                store
                    .create_organization(parent, fields(name), now)
                    .await
                    .unwrap()
                    .id
            };
            let sp_org = org(Parent::ServiceProvider(sp), "Acme").await;
            let msp_org = org(Parent::Msp(msp), "Globex").await;
            let lone_org = org(Parent::None, "Initech").await;
            let cred = async |scope| {
                let (key, secret, stored) = parasol::demo::new_credential(None).unwrap();
                store.create_credential(scope, stored, now).await.unwrap();
                Cred { key, secret }
            };
            World {
                sp,
                msp,
                sp_org,
                msp_org,
                lone_org,
                sp_cred: cred(Scope::ServiceProvider(sp)).await,
                msp_cred: cred(Scope::Msp(msp)).await,
                sp_org_cred: cred(Scope::Organization(sp_org)).await,
                msp_org_cred: cred(Scope::Organization(msp_org)).await,
                lone_org_cred: cred(Scope::Organization(lone_org)).await,
            }
        })
    }
}

impl Client {
    /// A management request with Basic credentials; `body` is sent as JSON when given.
    pub async fn mgmt(&self, method: &str, path: &str, cred: &Cred, body: Option<&Value>) -> Resp {
        let auth = cred.auth();
        let mut headers = vec![("authorization", auth.as_str())];
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        self.request(
            method,
            path,
            &headers,
            body.map(|b| serde_json::to_vec(b).unwrap()),
        )
        .await
    }
}

/// Asserts that `v` is an object with exactly these members (in any order).
pub fn assert_fields(v: &Value, expected: &[&str]) {
    let mut got: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = expected.to_vec();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "{v}");
}

/// Asserts a management error: its status, the error shape, and a message mentioning `needle`.
pub fn assert_mgmt_error(r: &Resp, status: u16, needle: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let b = r.json();
    assert_fields(&b, &["statusCode", "error", "message", "txId"]);
    assert_eq!(b["statusCode"], status);
    assert!(
        b["message"].as_str().unwrap().contains(needle),
        "{b} should mention {needle}"
    );
}

/// Runs the `parasol` binary with `args` and `--data-dir dir`; returns whether it succeeded,
/// its standard output as JSON (null if it is not) and its standard error.
pub fn parasol(dir: &Path, args: &[&str]) -> (bool, Value, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(args)
        .args(store_args(dir))
        .output()
        .unwrap();
    let stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.success(),
        stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until the server at `addr` answers, trusting the certificate at `cert` once it is
/// complete (the server writes it when it starts).
async fn ready(addr: std::net::SocketAddr, cert: Option<&Path>) -> Client {
    if let Some(cert) = cert {
        let deadline = std::time::Instant::now() + WAIT;
        while !std::fs::read_to_string(cert).is_ok_and(|t| t.contains("-----END CERTIFICATE-----"))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no certificate at {}",
                cert.display()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let client = Client::new(addr, cert);
    client.wait_ready().await;
    client
}
