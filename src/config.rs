//! Server configuration, as built from the `serve` flags (or by tests).

use std::path::PathBuf;
use std::time::Duration;

/// Where the TLS certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsSource {
    /// Plain HTTP (`--plain-http`), for labs and tests.
    Plain,
    /// PEM files given with `--tls-cert` and `--tls-key`.
    Files { cert: PathBuf, key: PathBuf },
    /// A self-signed certificate kept in the data directory, made on first start.
    SelfSigned,
}

/// Connection and request limits. The defaults are what `parasol serve` uses.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request: request line, headers and body together (1 MiB).
    pub max_request_bytes: usize,
    /// Time to complete the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time to receive a request's headers; also the idle keep-alive limit between requests.
    pub header_timeout: Duration,
    /// Time to receive a request's body once its headers are in.
    pub body_timeout: Duration,
    /// Time an answer may make no progress at all (the client reads nothing) before the
    /// connection is closed.
    pub write_timeout: Duration,
    /// Connections served at once. When all are taken, a new client gets the slot of a
    /// connection that has sent no request for longer than `eviction_grace` (see `slots`);
    /// otherwise it waits in the listen backlog.
    pub max_connections: usize,
    /// How long a connection may go without a request (from its start, or since its last answer)
    /// before it may be closed to make room for a new client when every slot is taken.
    pub eviction_grace: Duration,
    /// Bytes that requests in flight may hold at once for their bodies and for parsing them,
    /// shared by all connections (see `budget`).
    pub memory_budget: usize,
    /// How long a request waits for its share of `memory_budget` before it is refused with 503.
    pub budget_wait: Duration,
    /// After refusing an oversized request: how much of its body is read and discarded, at most,
    /// before closing, so that the client can read the answer.
    pub linger_bytes: usize,
    /// ... and for how long at most.
    pub linger_time: Duration,
    /// On shutdown, how long in-flight requests get to finish.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 1024 * 1024,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(20),
            max_connections: 1024,
            eviction_grace: Duration::from_secs(2),
            memory_budget: 64 * 1024 * 1024,
            budget_wait: Duration::from_secs(5),
            linger_bytes: 4 * 1024 * 1024,
            linger_time: Duration::from_secs(2),
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// Everything `server::run` needs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The certificate, the lock and the demo credentials; the SQLite database too unless
    /// `database` names a PostgreSQL one.
    pub data_dir: PathBuf,
    /// A PostgreSQL database URL (`--database`): the store runs there, shared with other nodes.
    pub database: Option<String>,
    pub tls: TlsSource,
    /// Base of the absolute URLs in `meta.next`/`meta.prev`, e.g. `https://parasol.lab:8443`.
    pub public_url: Option<String>,
    pub reputation: Option<PathBuf>,
    pub known_good: Option<PathBuf>,
    /// Create the demo world on an empty data directory.
    pub demo: bool,
    /// Enforce the cloud's published rate limits per customer key.
    pub cloud_limits: bool,
    /// Keep the block lists in files for a local resolver (`--export-dir`).
    pub export: Option<crate::export::ExportConfig>,
    /// Serve the block lists as response-policy zones (`--rpz-listen`).
    pub rpz: Option<crate::rpz::RpzConfig>,
    pub limits: Limits,
    /// Which requests get an access log line.
    pub access_log: crate::access::AccessLog,
    /// Serve `/metrics` (and the health paths) on this address, over plain HTTP, instead of on
    /// the main listener.
    pub metrics_listen: Option<String>,
    /// The console in the browser (`/console/`) and its sessions' limits; `None`: off
    /// (`--console off`).
    pub console: Option<crate::console::session::SessionLimits>,
}

impl ServerConfig {
    /// A configuration with defaults for everything but the data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            data_dir: data_dir.into(),
            database: None,
            tls: TlsSource::SelfSigned,
            public_url: None,
            reputation: None,
            known_good: None,
            demo: false,
            cloud_limits: false,
            export: None,
            rpz: None,
            limits: Limits::default(),
            access_log: crate::access::AccessLog::All,
            metrics_listen: None,
            console: Some(crate::console::session::SessionLimits::default()),
        }
    }

    /// The database file.
    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("parasol.db")
    }
}
