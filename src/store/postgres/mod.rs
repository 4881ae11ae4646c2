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

use crate::store::{FaultKind, OpenRole, Result, StorageHealth, StoreError};

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
/// learn, on a new connection, whether it was stored.
const VERIFY_FOR: Duration = Duration::from_secs(15);

/// A boxed future borrowing a connection, as the operations' closures return them.
pub(crate) type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// Parameters of a statement.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A connection URL taken apart: the client's configuration, the TLS roots, and the URL with its
/// password hidden (the only form that is ever logged or shown).
pub struct DatabaseUrl {
    config: tokio_postgres::Config,
    root_cert: Option<PathBuf>,
    pool_size: usize,
    redacted: String,
}

impl DatabaseUrl {
    /// Parses `postgres://USER:PASS@HOST:PORT/DB?sslmode=...&sslrootcert=FILE&pool_size=N`
    /// (`pool_size`: the node's connections at most, `POOL_SIZE` by default). `sslmode` is
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
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "sslrootcert" => root_cert = Some(PathBuf::from(percent_decode(v))),
                "pool_size" => {
                    pool_size = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| bad("pool_size must be a number from 1 to 1000"))?;
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

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Turns a client error into the store's: a lost or refused connection, a server shutting
/// down or restarting is `Disconnected` (503, the pool reconnects by itself); a deadlock or
/// serialization failure `Busy`; a full disk, an I/O error and a read-only server (a standby
/// after a failover) their own faults; anything else `Internal`, with the server's words.
pub(crate) fn classify(e: tokio_postgres::Error) -> StoreError {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        let detail = format!("{} (SQLSTATE {code})", db.message());
        let kind = match code {
            c if c.starts_with("08") => FaultKind::Disconnected,
            "57P01" | "57P02" | "57P03" => FaultKind::Disconnected,
            "40001" | "40P01" | "55P03" | "55006" => FaultKind::Busy,
            "53100" => FaultKind::DiskFull,
            c if c.starts_with("53") => FaultKind::Busy,
            "58030" => FaultKind::Io,
            "25006" => FaultKind::ReadOnly,
            _ => return StoreError::Internal(detail),
        };
        return StoreError::fault(kind, detail);
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

/// The state of the storage as this node's writes see it.
#[derive(Default)]
struct Health {
    faulty: AtomicBool,
    faults: AtomicU64,
    last: Mutex<Option<(FaultKind, String)>>,
}

impl Health {
    fn fault(&self, e: &StoreError) {
        let StoreError::Unavailable(f) = e else {
            return;
        };
        self.faults.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last.lock() {
            *last = Some((f.kind, f.detail.clone()));
        }
        if !self.faulty.swap(true, Ordering::Relaxed) {
            log::error!(
                "storage fault ({}): {}; requests are answered 503 until the database takes writes again",
                f.kind.name(),
                f.detail
            );
        }
    }

    fn written(&self) {
        if self.faulty.swap(false, Ordering::Relaxed) {
            log::warn!("the database takes writes again");
        }
    }

    fn snapshot(&self) -> StorageHealth {
        StorageHealth {
            writable: !self.faulty.load(Ordering::Relaxed),
            last_fault: self
                .last
                .lock()
                .ok()
                .and_then(|l| l.clone())
                .map(|(k, d)| (k.name().to_string(), d)),
            faults: self.faults.load(Ordering::Relaxed),
        }
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
            tls,
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
                    let c = db.batch("COMMIT").await;
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

    #[test]
    fn lost_connections_and_server_shutdowns_are_disconnected_faults() {
        let e = StoreError::fault(FaultKind::Disconnected, "x");
        assert_eq!(e.retry_after(), Some(1));
        assert!(e.is_unavailable());
    }
}
