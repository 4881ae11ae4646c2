//! The PostgreSQL backend, for several stateless Parasol nodes on one database
//! (`--database postgres://USER:PASS@HOST:PORT/DB`).
//!
//! Everything PostgreSQL-specific lives below this module: the connection URL and its TLS
//! (rustls with ring, `sslmode` and `sslrootcert` in the URL), the pool (deadpool-postgres, which
//! replaces a lost connection by itself), the one place where the client's errors become
//! `StoreError`s (`classify`), the schema's migrations (`migrate`) and the operations (`ops`).
//!
//! Concurrency works differently from SQLite's single writer: every node runs transactions of
//! its own at once. Each write runs at READ COMMITTED and takes, first, the row locks its checks
//! depend on (the organization's row `FOR KEY SHARE` for a write of its data, `FOR UPDATE` for
//! its deletion, a site's row before an appliance moves into it, ...), so that a check and the
//! change it guards cannot be separated by another node's write, as the single writer guarantees
//! on SQLite. A deadlock or serialization failure the server reports is a `Busy` fault (503).

mod blocking;
mod customers;
mod devices;
pub mod import;
mod internal_networks;
pub mod migrate;
mod ops;
mod rows;
mod sites;
mod tenants;
mod users;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::store::health::Health;
use crate::store::{ErrorClass, FaultKind, OpenRole, Result, StorageHealth, StoreError};

/// Connections each node keeps to the database at most, unless the URL says otherwise
/// (`pool_size=N`, Parasol's own parameter). Requests beyond wait for one. Each connection is a
/// transaction in flight, and the database flushes the commits of all of them together: fewer
/// connections than concurrent writers cap the throughput, more than the server's
/// `max_connections` (100 by default) over all nodes refuse connections.
const POOL_SIZE: usize = 32;

/// How long a request waits for a pooled connection before it is answered 503.
const POOL_WAIT: Duration = Duration::from_secs(10);

/// How long opening a connection may take (the database unreachable answers 503 by then).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// After a commit whose answer was lost with the connection: how long the node keeps trying to
/// learn, on a new connection, whether it was stored, unless the URL says otherwise
/// (`settle_for=SECONDS`, Parasol's own parameter). Long enough for a failover manager to
/// promote a standby (Patroni's and pg_auto_failover's defaults take 30 to 60 seconds); the
/// client waits for its answer meanwhile.
const SETTLE_FOR: Duration = Duration::from_secs(90);

/// How often the background probe asks the database whether it takes a commit (`probe`).
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// A boxed future borrowing a connection, as the operations' closures return them.
pub(crate) type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// One parameter of a statement.
pub(crate) type Param<'a> = &'a (dyn ToSql + Sync);

/// Parameters of a statement.
pub(crate) type Params<'a> = &'a [Param<'a>];

/// A connection URL taken apart: the client's configuration, the TLS roots, and the URL with its
/// password hidden (the only form that is ever logged or shown).
pub struct DatabaseUrl {
    config: tokio_postgres::Config,
    root_cert: Option<PathBuf>,
    pool_size: usize,
    settle_for: Duration,
    redacted: String,
}

impl DatabaseUrl {
    /// Parses `postgres://USER:PASS@HOST:PORT/DB?sslmode=...&sslrootcert=FILE&pool_size=N`
    /// (`pool_size`: the node's connections at most, `POOL_SIZE` by default; `settle_for`: the
    /// seconds a lost commit answer is settled for, `SETTLE_FOR` by default). Several servers
    /// are given as libpq gives them, tried in order: `postgres://H1:P1,H2:P2/DB`, or
    /// `postgres:///DB?host=H1,H2&port=P1,P2` (or `host=` repeated), with
    /// `target_session_attrs=read-write` to connect only to the one that takes writes. `sslmode` is
    /// `disable`, `prefer` (the default: TLS when the server offers it), `require`, `verify-ca` or
    /// `verify-full`; whenever TLS is used the server's certificate is verified against
    /// `sslrootcert` (a PEM file) or the system's CA bundle, so `require` is as strict as
    /// `verify-full`: rustls has no unverified mode, and Parasol wants none.
    pub fn parse(url: &str) -> Result<DatabaseUrl> {
        let redacted = redact(url);
        let bad = |why: &str| StoreError::Internal(format!("--database {redacted}: {why}"));
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad("expected a postgres:// URL"));
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, q),
            None => (url, ""),
        };
        let mut root_cert = None;
        let mut pool_size = POOL_SIZE;
        let mut settle_for = SETTLE_FOR;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "sslrootcert" => {
                    root_cert = Some(PathBuf::from(
                        percent_encoding::percent_decode_str(v)
                            .decode_utf8_lossy()
                            .into_owned(),
                    ))
                }
                "pool_size" => {
                    pool_size = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| bad("pool_size must be a number from 1 to 1000"))?;
                }
                "settle_for" => {
                    settle_for = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=3600).contains(n))
                        .map(Duration::from_secs)
                        .ok_or_else(|| {
                            bad("settle_for must be a number of seconds from 1 to 3600")
                        })?;
                }
                // libpq's list of servers in one parameter, which the client's URL parser takes
                // as one name: one `host=` each, the form it reads as a list.
                "host" if v.contains(',') => {
                    kept.extend(v.split(',').map(|h| format!("host={h}")));
                }
                "sslmode" => {
                    let mode = match v {
                        "disable" | "prefer" | "require" => v,
                        "verify-ca" | "verify-full" => "require",
                        _ => return Err(bad(
                            "sslmode must be disable, prefer, require, verify-ca or verify-full",
                        )),
                    };
                    kept.push(format!("sslmode={mode}"));
                }
                _ => kept.push(pair.to_string()),
            }
        }
        let rebuilt = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut config: tokio_postgres::Config = rebuilt
            .parse()
            .map_err(|e: tokio_postgres::Error| bad(&e.to_string()))?;
        // SECURITY: a password given in the URL shows in the process list to other local users;
        // as libpq does, a URL without one takes it from PGPASSWORD (an EnvironmentFile=).
        if config.get_password().is_none() {
            if let Ok(p) = std::env::var("PGPASSWORD") {
                config.password(p);
            }
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("parasol");
        }
        // Parasol's statements are few and run over and over: planned once per connection. (By
        // default PostgreSQL plans a prepared statement anew for its first five runs and whenever
        // it judges a custom plan cheaper; the ingest statement's planning cost as much as a
        // third of its run.)
        if config.get_options().is_none() {
            config.options("-c plan_cache_mode=force_generic_plan");
        }
        Ok(DatabaseUrl {
            config,
            root_cert,
            pool_size,
            settle_for,
            redacted,
        })
    }

    /// The URL with its password replaced by `***`.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// The client's TLS set-up: rustls with ring, trusting `sslrootcert` or the system's CAs.
    fn tls(&self) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let file = self
            .root_cert
            .clone()
            .unwrap_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt"));
        let mut roots = rustls::RootCertStore::empty();
        // Without a CA file, TLS simply fails to verify (and `prefer` over plain TCP still works).
        if let Ok(certs) = CertificateDer::pem_file_iter(&file) {
            for c in certs.flatten() {
                let _ = roots.add(c);
            }
        } else if self.root_cert.is_some() {
            return Err(StoreError::Internal(format!(
                "sslrootcert {}: cannot be read",
                file.display()
            )));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StoreError::Internal(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SECURITY: the password never reaches a log line through a debug print.
        f.write_str(&self.redacted)
    }
}

/// `url` with the password (in the user part or a `password=` parameter) replaced by `***`.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(start) = out.find("://").map(|i| i + 3) {
        let rest = &out[start..];
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                out.replace_range(start + colon + 1..start + at, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (base, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some(("password", _)) => "password=***".to_string(),
                _ => p.to_string(),
            })
            .collect();
        out = format!("{base}{}", query.join("&"));
    }
    out
}

/// SQLSTATEs (a whole code, or a class: its first two characters) and their class; codes not
/// listed are `Internal`. A code is looked up whole first, then by its class.
///
/// Unavailable covers everything a node may meet while the database is restarting, failing
/// over, refusing it or overloaded: it says nothing was stored and asks for a retry.
const SQLSTATES: &[(&str, ErrorClass)] = &[
    // Connection exceptions: lost, refused, or never made.
    ("08", ErrorClass::Unavailable(FaultKind::Disconnected)),
    // Refused authentication: a password changed or a role dropped under the running nodes.
    ("28", ErrorClass::Unavailable(FaultKind::Disconnected)),
    // The database does not exist (dropped, or not yet restored).
    ("3D000", ErrorClass::Unavailable(FaultKind::Disconnected)),
    // "The database is not currently accepting connections", and other objects not in the state
    // an operation needs while the server starts, stops or a database is being reconfigured.
    ("55000", ErrorClass::Unavailable(FaultKind::Disconnected)),
    // Operator intervention: shutdown, crash of another backend, the server starting up, the
    // database dropped, idle session timeouts.
    ("57P01", ErrorClass::Unavailable(FaultKind::Disconnected)),
    ("57P02", ErrorClass::Unavailable(FaultKind::Disconnected)),
    ("57P03", ErrorClass::Unavailable(FaultKind::Disconnected)),
    ("57P04", ErrorClass::Unavailable(FaultKind::Disconnected)),
    ("57P05", ErrorClass::Unavailable(FaultKind::Disconnected)),
    // A statement cancelled (statement_timeout, an operator's pg_cancel_backend).
    ("57014", ErrorClass::Unavailable(FaultKind::Busy)),
    // The session ended for being idle inside a transaction.
    ("25P03", ErrorClass::Unavailable(FaultKind::Disconnected)),
    // Serialization failures and deadlocks, locks not available, objects in use.
    ("40", ErrorClass::Unavailable(FaultKind::Busy)),
    ("55P03", ErrorClass::Unavailable(FaultKind::Busy)),
    ("55006", ErrorClass::Unavailable(FaultKind::Busy)),
    // Insufficient resources: too many connections, out of memory; a full disk its own kind.
    ("53100", ErrorClass::Unavailable(FaultKind::DiskFull)),
    ("53", ErrorClass::Unavailable(FaultKind::Busy)),
    // System errors: I/O.
    ("58", ErrorClass::Unavailable(FaultKind::Io)),
    // A read-only transaction: the server is a standby (after a failover, before the node's
    // connections follow the new primary).
    ("25006", ErrorClass::Unavailable(FaultKind::ReadOnly)),
    // A row the write refers to was deleted meanwhile.
    ("23503", ErrorClass::NotFound),
    // A unique key taken meanwhile (the operations catch the cases they expect themselves).
    ("23505", ErrorClass::Conflict),
    ("23P01", ErrorClass::Conflict),
    // Values out of range or refused by a check.
    ("22", ErrorClass::Invalid),
    ("23502", ErrorClass::Invalid),
    ("23514", ErrorClass::Invalid),
];

/// The class of SQLSTATE `code` (see `SQLSTATES`).
fn sqlstate_class(code: &str) -> ErrorClass {
    let find = |key: &str| {
        SQLSTATES
            .iter()
            .find(|(c, _)| *c == key)
            .map(|(_, class)| *class)
    };
    find(code)
        .or_else(|| code.get(..2).and_then(find))
        .unwrap_or(ErrorClass::Internal)
}

/// Turns a client error into the store's: a server error by its SQLSTATE (`SQLSTATES`); a lost
/// or refused connection, a failed TLS handshake is `Disconnected` (503, the pool reconnects by
/// itself); anything else `Internal`, with the client's words.
pub(crate) fn classify(e: tokio_postgres::Error) -> StoreError {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        let detail = format!("{} (SQLSTATE {code})", db.message());
        return sqlstate_class(code).error(detail);
    }
    let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
    // The causes too: "error performing TLS handshake" alone does not say that the server's
    // certificate was not trusted.
    let mut detail = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        detail = format!("{detail}: {c}");
        cause = c.source();
    }
    if detail.contains("TLS handshake") {
        detail.push_str(
            " (give the CA of the server's certificate with sslrootcert=FILE, or sslmode=disable)",
        );
    }
    if e.is_closed() || io || detail.contains("connection") || detail.contains("TLS") {
        StoreError::fault(FaultKind::Disconnected, detail)
    } else {
        StoreError::Internal(detail)
    }
}

/// The SQLSTATE of a server error, if it is one.
pub(crate) fn sqlstate(e: &tokio_postgres::Error) -> Option<&str> {
    e.as_db_error().map(|d| d.code().code())
}

fn pool_error(e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => classify(e),
        PoolError::Closed => StoreError::Closed,
        PoolError::Timeout(t) => match t {
            deadpool_postgres::TimeoutType::Wait => StoreError::fault(
                FaultKind::Busy,
                "every database connection stayed busy for too long",
            ),
            _ => StoreError::fault(FaultKind::Disconnected, "the database cannot be reached"),
        },
        e => StoreError::fault(FaultKind::Disconnected, e.to_string()),
    }
}

/// Handle to a PostgreSQL database. Cheap to clone.
#[derive(Clone)]
pub struct Postgres {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    url: String,
    /// The client's configuration and TLS set-up, for the connections of settles (`settle`)
    /// and to cancel a statement (`cancel`).
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    /// How long a lost commit answer is settled for (`SETTLE_FOR`, `settle_for=`).
    settle_for: Duration,
    clients: AtomicUsize,
    commits: AtomicU64,
    writes: AtomicU64,
    health: Health,
    track_list_changes: AtomicBool,
    /// Each write is its own transaction here (PostgreSQL groups commits itself), so a group is
    /// always one write; transaction and commit times are measured from this node.
    metrics: crate::store::StoreMetrics,
    /// `pg_database_size`, refreshed by `refresh_database_size` (0: not read yet).
    database_bytes: AtomicU64,
    /// When `database_bytes` was last read (`refresh_database_size` reads it at most every
    /// `DATABASE_SIZE_EVERY`).
    database_size_read: Mutex<Option<std::time::Instant>>,
}

/// How often a node asks the database for its size: it is for the metrics, and the call walks
/// the database's files.
const DATABASE_SIZE_EVERY: Duration = Duration::from_secs(15);

impl Postgres {
    /// Connects to the database at `url`, then (a server or `parasol init`: `Role::Server`)
    /// creates or upgrades its schema, or (a tool) checks that it holds a current one.
    pub async fn open(url: &str, role: OpenRole) -> Result<Postgres> {
        let parsed = DatabaseUrl::parse(url)?;
        let tls = parsed.tls()?;
        let manager = Manager::from_config(
            parsed.config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        // Last in, first out: a request takes the connection used last, whose backend has the
        // statements' plans, the catalog and the shared buffers it touches warm, rather than
        // cycling through every connection a burst opened (first in, first out, the default):
        // each of those backends would fault in and cache everything again.
        let pool = Pool::builder(manager)
            .max_size(parsed.pool_size)
            .queue_mode(deadpool_postgres::QueueMode::Lifo)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(CONNECT_TIMEOUT + Duration::from_secs(1)))
            .build()
            .map_err(|e| StoreError::Internal(format!("{}: {e}", parsed.redacted)))?;
        let pg = Postgres {
            inner: Arc::new(Inner {
                pool,
                url: parsed.redacted.clone(),
                config: parsed.config.clone(),
                tls: tls.clone(),
                settle_for: parsed.settle_for,
                clients: AtomicUsize::new(0),
                commits: AtomicU64::new(0),
                writes: AtomicU64::new(0),
                health: Health::default(),
                track_list_changes: AtomicBool::new(false),
                metrics: Default::default(),
                database_bytes: AtomicU64::new(0),
                database_size_read: Mutex::new(None),
            }),
        };
        let db = pg.db().await?;
        migrate::migrate(&db, role == OpenRole::Server, &parsed.redacted).await?;
        drop(db);
        pg.refresh_database_size().await?;
        if role == OpenRole::Server {
            tokio::spawn(probe(Arc::downgrade(&pg.inner), parsed.config, tls));
        }
        Ok(pg)
    }

    /// The database's URL without its password.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    pub fn clients(&self) -> &AtomicUsize {
        &self.inner.clients
    }

    pub fn commit_count(&self) -> u64 {
        self.inner.commits.load(Ordering::Relaxed)
    }

    pub fn write_count(&self) -> u64 {
        self.inner.writes.load(Ordering::Relaxed)
    }

    /// Whether the database's size is due to be read again (and if so, it counts as read now).
    pub(crate) fn database_size_due(&self) -> bool {
        let mut at = self
            .inner
            .database_size_read
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let due = at.is_none_or(|t| t.elapsed() >= DATABASE_SIZE_EVERY);
        if due {
            *at = Some(std::time::Instant::now());
        }
        due
    }

    pub(crate) fn note_database_size(&self, bytes: u64) {
        self.inner.database_bytes.store(bytes, Ordering::Relaxed);
    }

    pub fn metrics(&self) -> &crate::store::StoreMetrics {
        &self.inner.metrics
    }

    /// The database's size as PostgreSQL reports it, read at open and then by the background
    /// purge steps at most every `DATABASE_SIZE_EVERY`; the file system's room is the database
    /// server's business, not this node's.
    pub fn storage_stats(&self) -> crate::store::StorageStats {
        let bytes = self.inner.database_bytes.load(Ordering::Relaxed);
        crate::store::StorageStats {
            database_bytes: (bytes > 0).then_some(bytes),
            ..Default::default()
        }
    }

    pub fn health(&self) -> StorageHealth {
        self.inner.health.snapshot()
    }

    pub fn track_list_changes(&self, on: bool) {
        self.inner.track_list_changes.store(on, Ordering::Relaxed);
    }

    fn tracking_list_changes(&self) -> bool {
        self.inner.track_list_changes.load(Ordering::Relaxed)
    }

    /// Closes the pool: idle connections now, busy ones as they are returned.
    pub fn close(&self) {
        self.inner.pool.close();
    }

    /// A pooled connection.
    pub(crate) async fn db(&self) -> Result<Db> {
        let obj = self.inner.pool.get().await.map_err(pool_error)?;
        Ok(Db { obj })
    }

    /// Runs `f` in a READ COMMITTED transaction and commits it. The work runs in a task of its
    /// own, so that a request cancelled halfway (its client gone) never leaves a connection
    /// inside a transaction: it finishes, and the pool gets the connection back clean.
    pub(crate) async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(&'a Db) -> Fut<'a, T> + Send + 'static,
    {
        let pg = self.clone();
        let r = tokio::spawn(async move {
            let db = pg.db().await?;
            let started = std::time::Instant::now();
            db.batch("BEGIN").await?;
            let r = f(&db).await;
            pg.inner.writes.fetch_add(1, Ordering::Relaxed);
            let m = &pg.inner.metrics;
            let r = match r {
                Ok(v) => {
                    let committing = std::time::Instant::now();
                    let c = pg.commit_with_token(db).await;
                    m.commit.observe(nanos(committing.elapsed()));
                    c?;
                    pg.inner.commits.fetch_add(1, Ordering::Relaxed);
                    m.group_size.observe(1);
                    Ok(v)
                }
                Err(e) => {
                    db.rollback().await;
                    Err(e)
                }
            };
            m.transaction.observe(nanos(started.elapsed()));
            r
        })
        .await
        .unwrap_or_else(|e| Err(StoreError::Internal(format!("a database task failed: {e}"))));
        self.noted(r)
    }

    /// Commits `db`'s transaction with a token row of its own (`commit_tokens`), inserted and
    /// committed in one round trip. A commit whose answer is lost (the connection or the server
    /// gone meanwhile) is settled through the token before the write is answered: stored is
    /// success, not stored the fault, unknown after `settle_for` an `Unsettled` fault.
    async fn commit_with_token(&self, db: Db) -> Result<()> {
        // Random: unlike the ids of a sequence, none repeats after a failover.
        let token = uuid::Uuid::new_v4().as_u64_pair().0 as i64;
        let now = crate::timefmt::now();
        let st = match db.stmt(COMMIT_TOKEN).await {
            Ok(st) => st,
            Err(e) => {
                // Nothing was committed: the COMMIT was never sent.
                db.rollback().await;
                return Err(e);
            }
        };
        // Sent together, in this order (each is written to the connection when first polled).
        let params: [&(dyn ToSql + Sync); 2] = [&token, &now];
        let (claimed, committed) = tokio::join!(
            db.client().execute(&st, &params),
            db.client().batch_execute("COMMIT")
        );
        let (claimed, committed) = (claimed.map_err(classify), committed.map_err(classify));
        let lost = [claimed.as_ref().err(), committed.as_ref().err()]
            .into_iter()
            .flatten()
            .find(|e| e.is_unavailable())
            .cloned();
        if let Some(e) = lost {
            db.discard();
            return if self
                .settle(SETTLE_TOKEN, &[&token], |row| row.get::<_, i64>(0) != 0)
                .await?
            {
                Ok(())
            } else {
                Err(e)
            };
        }
        // A failed insert turned the COMMIT into a rollback: nothing was stored.
        claimed?;
        committed
    }

    /// Learns the outcome of a commit whose answer was lost, on new connections (made for it,
    /// following the URL's servers to the one that takes writes), for as long as
    /// `settle_for` allows: true if it was stored, false if it was not. `claim` tries to insert
    /// the commit's own row again (its key in `params`) and returns the row as it then is: the
    /// insert waits for the original transaction if it is still in progress (a backend still
    /// committing, or waiting for the synchronous standby), and then finds the original's row
    /// (`mine` says whether the row is the original's) or none, in which case its own insert
    /// proves that the original never committed, and is rolled back. A row found is updated to
    /// itself, and that transaction committed: under synchronous replication its commit returns
    /// only once the synchronous standby holds everything before it, the original's commit
    /// included, so "stored" means stored on the standby too, not only visible on this server
    /// (a commit is visible locally, before the standby has it, after its backend was ended
    /// while waiting for the standby or after the server restarted). No transaction id is
    /// compared: those of a promoted standby may repeat the old primary's.
    ///
    /// An outcome that cannot be learnt by then is an `Unsettled` fault (503: unknown).
    pub(crate) async fn settle(
        &self,
        claim: &str,
        params: Params<'_>,
        mine: impl Fn(&Row) -> bool,
    ) -> Result<bool> {
        let until = std::time::Instant::now() + self.inner.settle_for;
        let mut last: Option<StoreError> = None;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            // A connection of its own, made now: not one of the pool's, which may be a stale
            // one to a server that is gone or no longer the primary.
            let connected =
                tokio::time::timeout(left, self.inner.config.connect(self.inner.tls.clone())).await;
            let client = match connected {
                Ok(Ok((client, connection))) => {
                    tokio::spawn(connection);
                    client
                }
                Ok(Err(e)) => {
                    last = Some(classify(e));
                    tokio::time::sleep(left.min(SETTLE_PAUSE)).await;
                    continue;
                }
                Err(_) => break,
            };
            let attempt = async {
                client.batch_execute("BEGIN").await?;
                let stored = mine(&client.query_one(claim, params).await?);
                client
                    .batch_execute(if stored { "COMMIT" } else { "ROLLBACK" })
                    .await?;
                Ok::<_, tokio_postgres::Error>(stored)
            };
            let left = until.saturating_duration_since(std::time::Instant::now());
            let outcome = tokio::time::timeout(left, attempt).await;
            match outcome.map(|r| r.map_err(classify)) {
                Ok(Ok(stored)) => return Ok(stored),
                Ok(Err(e)) if e.is_unavailable() => {
                    last = Some(e);
                    tokio::time::sleep(left.min(SETTLE_PAUSE)).await;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    cancel(&client, &self.inner.tls).await;
                    break;
                }
            }
        }
        let why = last.map_or_else(
            || "the database did not answer".to_string(),
            |e| e.to_string(),
        );
        Err(StoreError::fault(
            FaultKind::Unsettled,
            format!(
                "a commit's answer was lost and its outcome is still unknown after {} s: {why}",
                self.inner.settle_for.as_secs()
            ),
        ))
    }

    /// `write` for organization `org`'s data: the organization's row is held (FOR KEY SHARE)
    /// until the commit, so it cannot be deleted meanwhile by this node or another; `NotFound`
    /// if it does not exist, exactly as on SQLite.
    pub(crate) async fn write_org<T, F>(&self, org: i64, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(&'a Db) -> Fut<'a, T> + Send + 'static,
    {
        self.write(move |db| {
            Box::pin(async move {
                if db
                    .opt(
                        "SELECT 1 FROM organizations WHERE id = $1 FOR KEY SHARE",
                        &[&org],
                    )
                    .await?
                    .is_none()
                {
                    return Err(StoreError::NotFound);
                }
                f(db).await
            })
        })
        .await
    }

    /// Runs `f`'s reads in one snapshot (a REPEATABLE READ, READ ONLY transaction).
    pub(crate) async fn snapshot<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(&'a Db) -> Fut<'a, T> + Send + 'static,
    {
        let pg = self.clone();
        tokio::spawn(async move {
            let db = pg.db().await?;
            db.batch("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .await?;
            let r = f(&db).await;
            match r {
                Ok(v) => {
                    db.batch("COMMIT").await?;
                    Ok(v)
                }
                Err(e) => {
                    db.rollback().await;
                    Err(e)
                }
            }
        })
        .await
        .unwrap_or_else(|e| Err(StoreError::Internal(format!("a database task failed: {e}"))))
    }

    /// Runs `f` on a pooled connection without a transaction of its own (reads of one
    /// statement each).
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T>
    where
        F: for<'a> FnOnce(&'a Db) -> Fut<'a, T>,
    {
        let db = self.db().await?;
        f(&db).await
    }

    /// Records a write's outcome in the storage's health.
    fn noted<T>(&self, r: Result<T>) -> Result<T> {
        match &r {
            Ok(_) => self.inner.health.written(),
            Err(e) => self.inner.health.fault(e),
        }
        r
    }
}

/// Asks the server to cancel the statement `client` is running (a settle or a probe that ran out
/// of time, still waiting for a lock or the synchronous standby).
async fn cancel(client: &tokio_postgres::Client, tls: &tokio_postgres_rustls::MakeRustlsConnect) {
    let token = client.cancel_token();
    let cancelled = tokio::time::timeout(CONNECT_TIMEOUT, token.cancel_query(tls.clone())).await;
    if !matches!(cancelled, Ok(Ok(()))) {
        log::debug!("cannot cancel a statement that ran out of time");
    }
}

/// A write's token row, inserted before its COMMIT (`Postgres::commit_with_token`).
const COMMIT_TOKEN: &str = "INSERT INTO commit_tokens (token, at) VALUES ($1, $2)";

/// A lost commit's token claimed again (`Postgres::settle`): `at` is 0 on the settle's own row.
const SETTLE_TOKEN: &str = "INSERT INTO commit_tokens (token, at) VALUES ($1, 0)
    ON CONFLICT (token) DO UPDATE SET at = commit_tokens.at RETURNING at";

/// Tokens older than this are deleted by the probe (every `TOKENS_PURGED_EVERY`): no settle
/// looks for them after `settle_for`, at most an hour.
const TOKENS_KEPT: Duration = Duration::from_secs(2 * 3600);
const TOKENS_PURGED_EVERY: Duration = Duration::from_secs(600);

/// The pause between two tries of a settle.
const SETTLE_PAUSE: Duration = Duration::from_millis(200);

/// The probe's write: the node's own row of `commit_tokens`, its time set anew (a commit that
/// writes, as a client's write does: only a server that takes writes accepts it, and under
/// synchronous replication its commit returns once the standby has it).
const PROBE: &str = "INSERT INTO commit_tokens (token, at) VALUES ($1, $2)
    ON CONFLICT (token) DO UPDATE SET at = excluded.at";

/// Keeps a node's readiness true to the database, with no client write needed: every
/// `PROBE_EVERY`, on a connection of its own (application name `parasol probe`; a pool whose
/// connections are all busy cannot delay it, nor a probe take a client's connection), commits
/// a write (`PROBE`). A database gone, refusing connections, a standby, or a commit not
/// confirmed within `CONNECT_TIMEOUT` (a synchronous standby away) is a fault (`/readyz` 503);
/// the first commit confirmed clears it. Every `TOKENS_PURGED_EVERY` it also deletes the old
/// `commit_tokens`. Ends with the store.
async fn probe(
    inner: std::sync::Weak<Inner>,
    mut config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
) {
    let name = format!(
        "{} probe",
        config.get_application_name().unwrap_or("parasol")
    );
    config.application_name(&name);
    let token = uuid::Uuid::new_v4().as_u64_pair().0 as i64;
    let mut client: Option<tokio_postgres::Client> = None;
    let mut purged = std::time::Instant::now();
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.pool.is_closed() {
            return;
        }
        let once = async {
            if client.is_none() {
                let (c, connection) = config.connect(tls.clone()).await.map_err(classify)?;
                tokio::spawn(connection);
                client = Some(c);
            }
            let Some(c) = client.as_ref() else {
                return Err(StoreError::Closed);
            };
            c.execute(PROBE, &[&token, &crate::timefmt::now()])
                .await
                .map_err(classify)?;
            if purged.elapsed() >= TOKENS_PURGED_EVERY {
                purged = std::time::Instant::now();
                let before = crate::timefmt::now() - TOKENS_KEPT.as_secs() as i64;
                c.execute("DELETE FROM commit_tokens WHERE at < $1", &[&before])
                    .await
                    .map_err(classify)?;
            }
            Ok(())
        };
        let outcome = tokio::time::timeout(CONNECT_TIMEOUT, once).await;
        let e = match outcome {
            Ok(Ok(())) => {
                inner.health.written();
                continue;
            }
            Ok(Err(e)) if e.is_unavailable() => e,
            Ok(Err(e)) => StoreError::fault(FaultKind::Disconnected, e.to_string()),
            Err(_) => {
                if let Some(c) = &client {
                    cancel(c, &tls).await;
                }
                StoreError::fault(
                    FaultKind::Busy,
                    format!(
                        "the database did not confirm a commit within {} s",
                        CONNECT_TIMEOUT.as_secs()
                    ),
                )
            }
        };
        client = None;
        inner.health.fault(&e);
    }
}

/// A pooled connection with its statement cache.
pub(crate) struct Db {
    obj: Object,
}

impl Db {
    async fn stmt(&self, sql: &str) -> Result<Statement> {
        self.obj.prepare_cached(sql).await.map_err(classify)
    }

    /// Every row of `sql`.
    pub(crate) async fn rows(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>> {
        let st = self.stmt(sql).await?;
        self.obj.query(&st, params).await.map_err(classify)
    }

    /// The row of `sql`, if there is one.
    pub(crate) async fn opt(&self, sql: &str, params: Params<'_>) -> Result<Option<Row>> {
        let st = self.stmt(sql).await?;
        self.obj.query_opt(&st, params).await.map_err(classify)
    }

    /// The one row of `sql`.
    pub(crate) async fn one(&self, sql: &str, params: Params<'_>) -> Result<Row> {
        let st = self.stmt(sql).await?;
        self.obj.query_one(&st, params).await.map_err(classify)
    }

    /// Runs `sql`; the number of rows it changed.
    pub(crate) async fn exec(&self, sql: &str, params: Params<'_>) -> Result<u64> {
        let st = self.stmt(sql).await?;
        self.obj.execute(&st, params).await.map_err(classify)
    }

    /// Runs `sql`; `None` when a unique constraint refused it (the caller says what that means).
    pub(crate) async fn exec_unique(&self, sql: &str, params: Params<'_>) -> Result<Option<u64>> {
        let st = self.stmt(sql).await?;
        match self.obj.execute(&st, params).await {
            Ok(n) => Ok(Some(n)),
            Err(e) if sqlstate(&e) == Some("23505") => Ok(None),
            Err(e) => Err(classify(e)),
        }
    }

    /// Runs statements without parameters (transaction control, the schema).
    pub(crate) async fn batch(&self, sql: &str) -> Result<()> {
        self.obj.batch_execute(sql).await.map_err(classify)
    }

    /// Ends a failed transaction; a connection that cannot is dropped rather than pooled, so
    /// that no later request finds it inside the failed transaction.
    pub(crate) async fn rollback(self) {
        if self.obj.batch_execute("ROLLBACK").await.is_err() {
            self.discard();
        }
    }

    /// The raw client (ingest's pipelined statements).
    pub(crate) fn client(&self) -> &tokio_postgres::Client {
        &self.obj
    }

    /// Takes the connection out of the pool for good (it may be inside a transaction).
    pub(crate) fn discard(self) {
        drop(Object::take(self.obj));
    }
}

/// A duration in nanoseconds, for the store's histograms.
fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_wherever_they_are_given() {
        assert_eq!(
            redact("postgres://parasol:s3cret@db:5432/parasol"),
            "postgres://parasol:***@db:5432/parasol"
        );
        assert_eq!(
            redact("postgresql://u:p%40ss@h/d?sslmode=require&password=other"),
            "postgresql://u:***@h/d?sslmode=require&password=***"
        );
        assert_eq!(redact("postgres://u@h/d"), "postgres://u@h/d");
        assert_eq!(redact("postgres://h/d?x=@y"), "postgres://h/d?x=@y");
    }

    #[test]
    fn urls_are_parsed_with_parasols_tls_parameters_and_never_shown_with_the_password() {
        let u = DatabaseUrl::parse(
            "postgres://a:pw@127.0.0.1:5433/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(
            u.root_cert.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        assert_eq!(
            u.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        assert_eq!(u.config.get_dbname(), Some("db"));
        assert_eq!(
            format!("{u:?}"),
            "postgres://a:***@127.0.0.1:5433/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem"
        );
        for bad in [
            "mysql://a:pw@h/db",
            "postgres://a:pw@h/db?sslmode=sometimes",
            "postgres://a:pw@h/db?nosuchoption=1",
        ] {
            let e = DatabaseUrl::parse(bad).unwrap_err().to_string();
            assert!(!e.contains("pw@"), "{e}");
        }
    }

    /// The servers of a multi-host URL, in order, with their ports.
    fn servers(url: &str) -> Vec<(String, u16)> {
        let u = DatabaseUrl::parse(url).unwrap();
        let hosts = u.config.get_hosts();
        let ports = u.config.get_ports();
        assert!(ports.len() == 1 || ports.len() == hosts.len(), "{url}");
        hosts
            .iter()
            .enumerate()
            .map(|(i, h)| match h {
                tokio_postgres::config::Host::Tcp(name) => {
                    (name.clone(), *ports.get(i).unwrap_or(&ports[0]))
                }
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn several_servers_are_taken_in_every_form_libpq_accepts() {
        let both = vec![("db1".to_string(), 5432), ("db2".to_string(), 5433)];
        for url in [
            "postgres://u:pw@db1:5432,db2:5433/parasol?target_session_attrs=read-write",
            "postgres:///parasol?host=db1,db2&port=5432,5433&target_session_attrs=read-write",
            "postgres:///parasol?host=db1&host=db2&port=5432,5433&target_session_attrs=read-write",
            "postgresql://u@/parasol?host=db1,db2&port=5432,5433&target_session_attrs=read-write",
        ] {
            assert_eq!(servers(url), both, "{url}");
            let u = DatabaseUrl::parse(url).unwrap();
            assert_eq!(u.config.get_dbname(), Some("parasol"));
            assert_eq!(
                u.config.get_target_session_attrs(),
                tokio_postgres::config::TargetSessionAttrs::ReadWrite,
                "{url}"
            );
        }
        // One port for every server, as libpq reads it.
        assert_eq!(
            servers("postgres:///parasol?host=db1,db2&port=6000"),
            vec![("db1".to_string(), 6000), ("db2".to_string(), 6000)]
        );
    }

    #[test]
    fn the_settle_window_is_a_parameter_of_the_url() {
        let u = DatabaseUrl::parse("postgres://h/db").unwrap();
        assert_eq!(u.settle_for, SETTLE_FOR);
        let u = DatabaseUrl::parse("postgres://h/db?settle_for=240&pool_size=4").unwrap();
        assert_eq!(u.settle_for, Duration::from_secs(240));
        assert_eq!(u.pool_size, 4);
        for bad in ["settle_for=0", "settle_for=x", "settle_for=3601"] {
            let e = DatabaseUrl::parse(&format!("postgres://h/db?{bad}")).unwrap_err();
            assert!(e.to_string().contains("settle_for"), "{e}");
        }
    }

    /// One SQLSTATE of each class, and the faults the database gives while it restarts, fails
    /// over or refuses a node: every one of those is a 503 with Retry-After, none a 500.
    #[test]
    fn sqlstates_are_classified_by_one_table() {
        let cases = [
            // NotFound: a referenced row deleted meanwhile.
            ("23503", ErrorClass::NotFound),
            // Conflict: a unique key taken meanwhile.
            ("23505", ErrorClass::Conflict),
            // Invalid: a value out of range or refused by a check.
            ("22003", ErrorClass::Invalid),
            ("23514", ErrorClass::Invalid),
            // Unavailable: connections refused, lost or ended, the server starting or stopping,
            // refused credentials, a missing database, too many connections, a standby.
            ("08006", ErrorClass::Unavailable(FaultKind::Disconnected)),
            ("55000", ErrorClass::Unavailable(FaultKind::Disconnected)),
            ("28000", ErrorClass::Unavailable(FaultKind::Disconnected)),
            ("28P01", ErrorClass::Unavailable(FaultKind::Disconnected)),
            ("3D000", ErrorClass::Unavailable(FaultKind::Disconnected)),
            ("57P01", ErrorClass::Unavailable(FaultKind::Disconnected)),
            ("57P02", ErrorClass::Unavailable(FaultKind::Disconnected)),
            ("57P03", ErrorClass::Unavailable(FaultKind::Disconnected)),
            ("53300", ErrorClass::Unavailable(FaultKind::Busy)),
            ("53100", ErrorClass::Unavailable(FaultKind::DiskFull)),
            ("40P01", ErrorClass::Unavailable(FaultKind::Busy)),
            ("40001", ErrorClass::Unavailable(FaultKind::Busy)),
            ("57014", ErrorClass::Unavailable(FaultKind::Busy)),
            ("58030", ErrorClass::Unavailable(FaultKind::Io)),
            ("25006", ErrorClass::Unavailable(FaultKind::ReadOnly)),
            // Internal: a bug (a missing table, bad SQL) or a damaged database.
            ("42P01", ErrorClass::Internal),
            ("42601", ErrorClass::Internal),
            ("XX001", ErrorClass::Internal),
        ];
        for (code, class) in cases {
            assert_eq!(sqlstate_class(code), class, "{code}");
            let e = class.error("the server's words".into());
            match class {
                ErrorClass::NotFound => assert_eq!(e, StoreError::NotFound),
                ErrorClass::Conflict => assert!(matches!(e, StoreError::Conflict(_))),
                ErrorClass::Invalid => assert!(matches!(e, StoreError::Invalid(_))),
                ErrorClass::Unavailable(_) => {
                    assert!(e.is_unavailable() && e.retry_after().is_some(), "{code}")
                }
                ErrorClass::Internal => assert!(matches!(e, StoreError::Internal(_))),
            }
            // The engine's words never reach a client through a 400 or 409.
            if let StoreError::Conflict(m) | StoreError::Invalid(m) = &e {
                assert!(!m.contains("server"), "{m}");
            }
        }
    }

    #[test]
    fn lost_connections_and_server_shutdowns_are_disconnected_faults() {
        let e = StoreError::fault(FaultKind::Disconnected, "x");
        assert_eq!(e.retry_after(), Some(1));
        assert!(e.is_unavailable());
    }
}
