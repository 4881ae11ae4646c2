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
    /// Connections served at once; further clients wait in the listen backlog.
    pub max_connections: usize,
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
            max_connections: 1024,
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
    pub limits: Limits,
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
            limits: Limits::default(),
        }
    }

    /// The database file.
    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("parasol.db")
    }
}
