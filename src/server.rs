//! The listener: TLS accept inside each connection's task, the hyper HTTP/1.1 connection loop,
//! connection slots (`slots`) and timeouts, the request-size rule, the memory budget of request
//! bodies (`budget`), SIGHUP reloads and graceful shutdown; every answer's `X-Request-Id`, its
//! metrics and its access log line; and the optional plain HTTP listener of `--metrics-listen`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::budget::{Charge, MemoryBudget};
use crate::config::{ServerConfig, TlsSource};
use crate::error::{EnfError, MgmtError};
use crate::http::{Body, Query};
use crate::ids::{RequestId, X_REQUEST_ID_NAME};
use crate::metrics::{ConnRefusal, RouteSlot, UNMATCHED};
use crate::reputation::ReputationHandle;
use crate::router::{self, Endpoint, EnfEndpoint, Interface, OwnEndpoint, Route, RouteError};
use crate::slots::{Phase, SlotGuard, Slots};
use crate::state::{AppState, RequestCtx};
use crate::store::{Store, StoreError};
use crate::transport::Transport;

/// Runs the server on an already-bound listener until `shutdown` resolves, then stops accepting,
/// lets in-flight requests finish (within `limits.shutdown_grace`) and closes the database.
pub async fn run(
    config: ServerConfig,
    listener: std::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), String> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| format!("{}: {e}", config.data_dir.display()))?;
    // Held until this function returns: a second server or a restore on this directory refuses.
    let dir_lock = crate::datadir::lock(&config.data_dir).map_err(|e| e.to_string())?;
    let local_addr = listener.local_addr().map_err(|e| e.to_string())?;
    let acceptor = match &config.tls {
        TlsSource::Plain => {
            log::warn!("--plain-http: serving without TLS; use this only in a lab");
            None
        }
        TlsSource::Files { cert, key } => {
            Some(TlsAcceptor::from(crate::tls::server_config(cert, key)?))
        }
        TlsSource::SelfSigned => {
            let names = crate::tls::CertNames::for_listener(local_addr);
            let (cert, key) = crate::tls::ensure_self_signed(&config.data_dir, &names)?;
            Some(TlsAcceptor::from(crate::tls::server_config(&cert, &key)?))
        }
    };
    let scheme = if acceptor.is_some() { "https" } else { "http" };
    // The URL given out (ready line, demo credentials) names an address clients can use, never
    // 0.0.0.0 or :: (see `netinfo::advertised`).
    let url = format!("{scheme}://{}", crate::netinfo::advertised(local_addr));

    let store = Store::open_configured(
        &config.data_dir,
        config.database.as_deref(),
        crate::store::OpenRole::Server,
    )
    .await
    .map_err(|e| match &config.database {
        Some(url) => format!("{}: {e}", crate::store::redact(url)),
        None => format!("{}: {e}", config.db_path().display()),
    })?;
    log::info!("storage: {}", store.describe());
    if config.demo {
        let base = config.public_url.clone().unwrap_or_else(|| url.clone());
        if let Some(creds) = crate::demo::ensure(&store, &config.data_dir, &base).await? {
            println!(
                "{}",
                serde_json::to_string_pretty(&creds).unwrap_or_default()
            );
        }
    }
    // Bound before anything is served, so that a wrong address stops the start.
    let metrics_listener = match &config.metrics_listen {
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr)
                .map_err(|e| format!("cannot listen on {addr} (--metrics-listen): {e}"))?;
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
            Some(tokio::net::TcpListener::from_std(l).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let reputation = ReputationHandle::open(config.reputation.clone(), config.known_good.clone())?;
    let (scores, good) = reputation.get().counts();
    log::info!("reputation data: {scores} scored domains, {good} known-good domains");
    let budget = Arc::new(MemoryBudget::new(
        config.limits.memory_budget,
        config.limits.budget_wait,
    ));

    // What the feeds do is kept for the console only, and only when there are feeds.
    let feeds = (config.console.is_some() && (config.export.is_some() || config.rpz.is_some()))
        .then(|| Arc::new(crate::feeds::Feeds::default()));
    let state = Arc::new(AppState {
        store: store.clone(),
        reputation: Arc::new(reputation),
        public_url: config
            .public_url
            .as_ref()
            .map(|u| u.trim_end_matches('/').to_string()),
        scheme,
        local_addr,
        limits: config.limits.clone(),
        rate: crate::ratelimit::RateLimiter::new(config.cloud_limits),
        pages: Default::default(),
        bulk: crate::bulk::BulkPool::start().map_err(|e| format!("cannot start threads: {e}"))?,
        metrics: crate::metrics::Metrics::new(),
        access: crate::access::AccessLogger::new(config.access_log),
        metrics_elsewhere: metrics_listener.is_some(),
        budget: budget.clone(),
        console: config.console.map(crate::console::session::Sessions::new),
        journal: config
            .console
            .map(|_| crate::console::journal::Journal::default()),
        feeds: feeds.clone(),
    });

    let rpz = match &config.rpz {
        Some(r) => Some(crate::rpz::Primary::start(
            r,
            &config.data_dir,
            feeds.clone(),
        )?),
        None => None,
    };
    let exporter = if config.export.is_some() || rpz.is_some() {
        // Large request bodies (event batches) are charged to the budget while in flight.
        let budget = budget.clone();
        let busy = Box::new(move || budget.in_use() > 0);
        Some(crate::export::Exporter::start(
            store.clone(),
            config.export.clone(),
            rpz,
            busy,
            feeds,
        )?)
    } else {
        None
    };

    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    widen_backlog(&listener, config.limits.max_connections);
    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
    let slots = Slots::new(
        config.limits.max_connections,
        config.limits.eviction_grace,
        move || budget.note_freed(crate::budget::CONNECTION_BYTES),
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut hangup = Hangup::new()?;
    let metrics_task = match metrics_listener {
        Some(l) => {
            let addr = l.local_addr().map_err(|e| e.to_string())?;
            log::info!(
                "metrics: serving http://{}/metrics",
                crate::netinfo::advertised(addr)
            );
            Some(tokio::spawn(serve_metrics(
                state.clone(),
                l,
                stop_rx.clone(),
            )))
        }
        None => None,
    };
    log::info!("parasol ready: serving {url}");

    let sentinel = tokio::spawn(timer_sentinel());
    let purger = tokio::spawn(purge_events(store.clone()));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            _ = hangup.recv() => { reload(&state); continue; }
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors and the like: back off briefly instead of spinning.
                    log::warn!("accept failed: {e}");
                    state.metrics.connection_refused(ConnRefusal::AcceptFailed);
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        state.metrics.connection_accepted();
        // A slot for it: a free one, or one made by closing a connection that sends no request
        // (see `slots`). Meanwhile the next clients wait in the listen backlog.
        let slot = match slots.try_claim() {
            Some(slot) => slot,
            None => {
                state.metrics.connection_limit_reached();
                tokio::select! {
                    _ = &mut shutdown => break,
                    slot = slots.claim() => slot,
                }
            }
        };
        let state = state.clone();
        let acceptor = acceptor.clone();
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            let _client = ClientCount::enter(&state);
            serve_connection(state, stream, peer, acceptor, stop, slot).await;
        });
    }

    log::info!("shutting down: no new connections; finishing requests in flight");
    drop(listener);
    let _ = stop_tx.send(true);
    let grace = config.limits.shutdown_grace;
    if tokio::time::timeout(grace, slots.all_released())
        .await
        .is_err()
    {
        log::warn!("some connections were still open after {grace:?}; closing them");
    }
    sentinel.abort();
    purger.abort();
    if let Some(t) = metrics_task {
        t.abort();
    }
    if let Some(e) = exporter {
        e.stop().await;
    }
    drop(state);
    tokio::task::spawn_blocking(move || store.close())
        .await
        .map_err(|e| e.to_string())?;
    drop(dir_lock);
    crate::access::flush();
    log::info!("stopped");
    Ok(())
}

/// Gives the listener a backlog as long as the connection limit (the kernel caps it at
/// `net.core.somaxconn`). The standard library listens with a backlog of 128: when a thousand
/// clients connected at once the queue overflowed, the kernel dropped their SYNs, and every
/// client behind them, an ordinary one included, waited for its SYN to be sent again 1, 3 or 7
/// seconds later. Listening again on a listening socket only changes its backlog.
fn widen_backlog(listener: &std::net::TcpListener, max_connections: usize) {
    use std::os::fd::AsRawFd;
    let backlog = i32::try_from(max_connections.max(128)).unwrap_or(i32::MAX);
    // SAFETY: listen on a socket descriptor this listener owns, which is already listening.
    if unsafe { libc::listen(listener.as_raw_fd(), backlog) } != 0 {
        log::debug!(
            "cannot widen the listen backlog: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Counts a connection in `Store::clients` for as long as it lives.
struct ClientCount(Arc<AppState>);

impl ClientCount {
    fn enter(state: &Arc<AppState>) -> ClientCount {
        state.store.clients().fetch_add(1, Ordering::Relaxed);
        ClientCount(state.clone())
    }
}

impl Drop for ClientCount {
    fn drop(&mut self) {
        self.0.store.clients().fetch_sub(1, Ordering::Relaxed);
    }
}

fn reload(state: &Arc<AppState>) {
    let rep = state.reputation.clone();
    tokio::task::spawn_blocking(move || match rep.reload() {
        Ok((scores, good)) => {
            log::info!(
                "reputation data reloaded: {scores} scored domains, {good} known-good domains"
            )
        }
        Err(e) => log::error!("reputation reload refused, the previous data stays in force: {e}"),
    });
}

/// SIGHUP, where the platform has it.
struct Hangup(Option<tokio::signal::unix::Signal>);

impl Hangup {
    fn new() -> Result<Self, String> {
        let s = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| format!("cannot watch SIGHUP: {e}"))?;
        Ok(Hangup(Some(s)))
    }

    async fn recv(&mut self) {
        match &mut self.0 {
            Some(s) => {
                if s.recv().await.is_none() {
                    self.0 = None;
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}

/// Keeps a timer due within the next second registered at all times, so that the request-head
/// timers hyper arms on every keep-alive connection never wake the runtime for nothing. Tokio's
/// timer wheel wakes the I/O driver (a write to its eventfd, then a spurious return from
/// epoll_wait) whenever a timer is registered that is due before the driver's next planned
/// wake-up, or while the driver parked with no timer at all; under single-event load every
/// connection's request was often waiting on the writer at once, so the driver parked without
/// timers and the next head timer (due in `header_timeout`) woke it: one extra system call for
/// every three requests, measured. With this timer always due sooner, a new head timer is never
/// the earliest, and the cost is one wake-up a second.
async fn timer_sentinel() {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// How often the server looks for deleted organizations whose stored requests are still to be
/// deleted (`store::purge`).
const PURGE_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest pause between two attempts while the purge keeps failing (the pause doubles from
/// `PURGE_POLL` after each failure).
const PURGE_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Deletes deleted organizations' stored requests in the background, one range after another
/// (the other writes queue between them) until none are left, then looks again every
/// `PURGE_POLL`. While it fails (the database restarting or failing over) it logs once when it
/// starts failing and once when it works again, and waits longer after each failure.
async fn purge_events(store: Store) {
    // The organization being purged and its rows deleted so far, for the log. (The steps take the
    // lowest pending organization id: one deleted meanwhile may come first.)
    let mut current = (0, 0);
    // The failures in a row, and the pause before the next attempt.
    let mut failures = 0u32;
    let mut pause = PURGE_POLL;
    loop {
        let step = store.purge_step().await;
        if failures > 0 && step.is_ok() {
            log::warn!(
                "deleting deleted organizations' stored requests works again (after {failures} failed attempts)"
            );
            failures = 0;
            pause = PURGE_POLL;
        }
        match step {
            Ok(Some(step)) => {
                if current.0 != step.organization_id {
                    current = (step.organization_id, 0);
                }
                current.1 += step.deleted;
                if step.finished {
                    log::info!(
                        "deleted the {} stored requests of deleted organization {}",
                        current.1,
                        step.organization_id
                    );
                    current = (0, 0);
                }
                continue;
            }
            Ok(None) => {}
            Err(StoreError::Closed) => return,
            Err(e) => {
                if failures == 0 {
                    let what = "deleting a deleted organization's stored requests";
                    if e.is_unavailable() {
                        log::warn!("{what}: {e}; trying again, with longer pauses, until it works");
                    } else {
                        log::error!(
                            "{what}: {e}; trying again, with longer pauses, until it works"
                        );
                    }
                } else {
                    pause = (pause * 2).min(PURGE_BACKOFF_MAX);
                }
                failures += 1;
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// Connections the `--metrics-listen` listener serves at once.
const METRICS_CONNECTIONS: usize = 16;

/// The `--metrics-listen` listener: plain HTTP, `GET /metrics`, `/healthz` and `/readyz` only,
/// a few connections at a time; its connections are not clients of the store's writer.
async fn serve_metrics(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    stop: watch::Receiver<bool>,
) {
    // Its own slots, so that a scraper is never turned away by the main listener's clients.
    let slots = Slots::new(METRICS_CONNECTIONS, state.limits.eviction_grace, || {});
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                log::warn!("metrics listener: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                continue;
            }
        };
        let slot = match slots.try_claim() {
            Some(slot) => slot,
            None => slots.claim().await,
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let conn = slot.conn().clone();
            serve_http(state, stream, peer, Listener::Metrics, stop, conn).await;
            drop(slot);
        });
    }
}

/// The listener a connection came in on, which decides the paths it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listener {
    /// Both interfaces and Parasol's own paths (less `/metrics` with `--metrics-listen`).
    Main,
    /// `--metrics-listen`: `/metrics`, `/healthz` and `/readyz` only.
    Metrics,
}

/// Whether `listener` serves `route`; a route it does not serve is answered as an unknown path.
fn serves(listener: Listener, metrics_elsewhere: bool, route: &Route) -> bool {
    match (listener, &route.endpoint) {
        (Listener::Metrics, Endpoint::Own(o)) => o != &OwnEndpoint::OpenApi,
        (Listener::Metrics, _) => false,
        (Listener::Main, Endpoint::Own(OwnEndpoint::Metrics)) => !metrics_elsewhere,
        (Listener::Main, _) => true,
    }
}

async fn serve_connection(
    state: Arc<AppState>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    acceptor: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
    slot: SlotGuard,
) {
    let _ = stream.set_nodelay(true);
    let limits = state.limits.clone();
    let conn = slot.conn().clone();
    let served = async {
        match acceptor {
            Some(acceptor) => {
                // SECURITY: the handshake runs here, in the connection's task, under a time limit,
                // so a client that stalls mid-handshake holds only its own slot, never the accept
                // loop.
                match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)).await
                {
                    Ok(Ok(tls)) => {
                        serve_http(state, tls, peer, Listener::Main, stop, conn.clone()).await
                    }
                    Ok(Err(e)) => {
                        log::debug!("TLS handshake failed: {e}");
                        state.metrics.connection_refused(ConnRefusal::TlsFailed);
                    }
                    Err(_) => {
                        log::debug!("TLS handshake timed out");
                        state.metrics.connection_refused(ConnRefusal::TlsTimeout);
                    }
                }
            }
            None => serve_http(state, stream, peer, Listener::Main, stop, conn.clone()).await,
        }
    };
    // SECURITY: a connection chosen to make room for a new client (it sent no request within the
    // grace while every slot was taken) is dropped wherever it is.
    tokio::select! {
        _ = served => {}
        _ = conn.evicted() => log::debug!("connection closed to make room for a new client"),
    }
    drop(slot);
}

async fn serve_http<IO>(
    state: Arc<AppState>,
    io: IO,
    peer: SocketAddr,
    listener: Listener,
    mut stop: watch::Receiver<bool>,
    slot: Arc<crate::slots::Conn>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = state.limits.clone();
    let linger = Arc::new(AtomicBool::new(false));
    // The transport's own answers (to requests hyper cannot parse) are counted and logged like
    // any other.
    let answered = {
        let state = state.clone();
        move |management: bool, id: &RequestId, bytes: usize| {
            let iface = if management {
                Interface::Management
            } else {
                Interface::Enforcement
            };
            state
                .metrics
                .request_unmeasured(RouteSlot::unmatched(iface), 400);
            state.access.log(&crate::access::Entry {
                method: None,
                route: UNMATCHED,
                status: 400,
                bytes: bytes as u64,
                took: None,
                client: Some(peer),
                request_id: id.as_str(),
            });
        }
    };
    let io = Transport::new(
        io,
        linger.clone(),
        limits.linger_bytes,
        limits.linger_time,
        limits.max_request_bytes,
        limits.write_timeout,
    )
    .on_own_answer(Box::new(answered))
    .charging_heads(slot.clone(), state.budget.clone());
    slot.set_phase(Phase::AwaitingHead);
    let service = service_fn(move |req| {
        let state = state.clone();
        let linger = linger.clone();
        let slot = slot.clone();
        async move {
            slot.set_phase(Phase::Active);
            // A head past the transport's free allowance grew hyper's read buffer, which stays
            // that size: the connection ends after this answer, and the buffer with it.
            // Measured once: the 1 MiB rule counts it too (`respond`).
            let head = head_size(&req);
            let large_head = head > crate::transport::HEAD_FREE;
            let (mut res, held) = handle(state, req, head, &slot, linger, peer, listener).await;
            if large_head {
                res.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
            }
            // The request's share of the memory budget stays with its answer until hyper has
            // handed all of it to the kernel (see `budget`).
            slot.set_phase(Phase::Idle);
            Ok::<_, Infallible>(res.map(|body| ChargedBody { body, _held: held }))
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        // SECURITY: headers must arrive within this time, and an idle keep-alive connection is
        // closed after it, so slow or stuck clients cannot hold connection slots.
        .header_read_timeout(limits.header_timeout)
        // Room for a request head up to the 1 MiB rule, so that we (not hyper) refuse it.
        .max_buf_size(limits.max_request_bytes + 64 * 1024)
        // While a request is being answered, hyper would otherwise try a read on every poll of
        // the connection to notice a client that went away (and drop the request's future). That
        // read costs a system call and, since the request still holds slices of hyper's read
        // buffer, a fresh 8 KiB buffer for every request. A request that reached us is carried
        // out instead, and a client that half-closes its side after sending still gets its answer.
        .half_close(true)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                log::debug!("connection ended: {e}");
            }
        }
        _ = async { let _ = stop.wait_for(|s| *s).await; } => {
            conn.as_mut().graceful_shutdown();
            if let Err(e) = conn.await {
                log::debug!("connection ended during shutdown: {e}");
            }
        }
    }
}

/// Size of the request head as sent: request line and header lines.
fn head_size<B>(req: &Request<B>) -> usize {
    let target = req
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str().len())
        .unwrap_or(1);
    let headers: usize = req
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
        .sum();
    req.method().as_str().len() + 1 + target + 1 + 8 + 2 + headers + 2
}

fn iface_of(route: &Result<Route, RouteError>) -> Interface {
    match route {
        Ok(r) => r.interface(),
        Err(RouteError::NotFound(i)) | Err(RouteError::MethodNotAllowed(i, _)) => *i,
    }
}

fn too_large(iface: Interface, tx_id: &str) -> Response<Body> {
    match iface {
        Interface::Enforcement => EnfError::TooLarge.into_response(),
        Interface::Management => MgmtError::TooLarge.into_response(tx_id),
    }
}

/// An answer's body with the share of the memory budget it holds until hyper has written it.
struct ChargedBody {
    body: Body,
    _held: Option<Charge>,
}

impl hyper::body::Body for ChargedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// What reading a request's body and parsing it may take, as a multiple of its length: the
/// charge asked of the memory budget (see `budget`).
fn memory_factor(route: &Route) -> usize {
    match route.endpoint {
        Endpoint::Enf(EnfEndpoint::PostEvents) => crate::enforcement::event::MEMORY_FACTOR,
        Endpoint::Enf(_) => crate::budget::PLAIN_FACTOR,
        Endpoint::Mgmt(_) => crate::json::MEMORY_FACTOR,
        Endpoint::Own(_) | Endpoint::Console(_) => crate::budget::PLAIN_FACTOR,
    }
}

/// The 503 of a request refused because the memory budget stayed spent, asking the client to
/// come back in this many seconds.
const BUDGET_RETRY_AFTER: u64 = 1;

fn overloaded(iface: Interface, tx_id: &str) -> Response<Body> {
    match iface {
        Interface::Enforcement => EnfError::Unavailable(BUDGET_RETRY_AFTER).into_response(),
        Interface::Management => MgmtError::Unavailable(BUDGET_RETRY_AFTER).into_response(tx_id),
    }
}

enum BodyError {
    TooLarge,
    Timeout,
    Broken,
    /// A body of unknown length outgrew what the memory budget could grant.
    Spent,
}

/// A body of unknown length is charged in steps of at least this many bytes as it arrives.
const CHARGE_STEP: usize = 64 * 1024;

/// Reads a body of at most `limit` bytes within `timeout`, into one buffer of its declared length
/// when it has one (each piece hyper hands over is copied in and freed at once, so the body is
/// held once). A body of unknown length grows `charge` (`factor` times its bytes) as it arrives.
async fn read_body(
    mut body: Incoming,
    declared: Option<usize>,
    limit: usize,
    timeout: std::time::Duration,
    budget: &MemoryBudget,
    charge: &mut Charge,
    factor: usize,
) -> Result<Bytes, BodyError> {
    let read = async {
        let mut buf: Vec<u8> = Vec::with_capacity(declared.unwrap_or(0).min(limit));
        let mut covered = declared.unwrap_or(0);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| BodyError::Broken)?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let len = buf.len() + data.len();
            if len > limit {
                return Err(BodyError::TooLarge);
            }
            if len > covered {
                covered = (covered + CHARGE_STEP).max(len).min(limit);
                budget
                    .grow(
                        charge,
                        covered
                            .saturating_mul(factor)
                            .saturating_sub(charge.bytes()),
                    )
                    .await
                    .map_err(|_| BodyError::Spent)?;
            }
            buf.extend_from_slice(&data);
        }
        Ok(Bytes::from(buf))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(r) => r,
        Err(_) => Err(BodyError::Timeout),
    }
}

/// Whether a request has a body (a declared length above zero, or a transfer coding).
fn carries_body(headers: &hyper::HeaderMap) -> bool {
    headers.contains_key(hyper::header::TRANSFER_ENCODING)
        || headers
            .get(CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0")
}

/// Marks `res` as the connection's last answer: `Connection: close`, and the transport discards
/// what the client is still sending before it closes (see `Transport`).
fn close_after(res: &mut Response<Body>, linger: &AtomicBool) {
    linger.store(true, Ordering::Relaxed);
    res.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
}

/// Handles one request: routes it, answers it (`respond`), then gives the answer its
/// `X-Request-Id`, counts it in the metrics and writes its access log line. Returns the answer
/// with what it still holds of the memory budget (see `respond`).
async fn handle(
    state: Arc<AppState>,
    req: Request<Incoming>,
    head: usize,
    slot: &crate::slots::Conn,
    linger: Arc<AtomicBool>,
    peer: SocketAddr,
    listener: Listener,
) -> (Response<Body>, Option<Charge>) {
    let started = Instant::now();
    let id = RequestId::next();
    let method = req.method().clone();
    let route = match router::route(req.method(), req.uri().path()) {
        Ok(r) if !serves(listener, state.metrics_elsewhere, &r) => {
            Err(RouteError::NotFound(Interface::Enforcement))
        }
        other => other,
    };
    let counted = RouteSlot::of(&route);
    let template = route.as_ref().map_or(UNMATCHED, Route::template);
    let mut held = None;
    let mut res = respond(
        &state,
        route,
        req,
        head,
        slot,
        &mut held,
        &linger,
        id.as_str(),
        peer,
    )
    .await;
    res.headers_mut()
        .insert(X_REQUEST_ID_NAME, id.header_value());
    let took = started.elapsed();
    let status = res.status().as_u16();
    state.metrics.request(counted, status, took);
    state.access.log(&crate::access::Entry {
        method: Some(method.as_str()),
        route: template,
        status,
        bytes: hyper::body::Body::size_hint(res.body())
            .exact()
            .unwrap_or(0),
        took: Some(took),
        client: Some(peer),
        request_id: id.as_str(),
    });
    (res, held)
}

/// Answers one request: route, size rule, Host, body, then the interface's handler. `head` is
/// the size of its request line and headers (`head_size`); `slot` its connection's slot. What is
/// left of the request's charge to the memory budget once it is answered goes to `held`, to be
/// kept with the answer's body until hyper has written it. (Passed as arguments, not through
/// the request's and the answer's extensions: those cost a map and a box each per request.)
#[allow(clippy::too_many_arguments)]
async fn respond(
    state: &Arc<AppState>,
    route: Result<Route, RouteError>,
    req: Request<Incoming>,
    head: usize,
    slot: &crate::slots::Conn,
    held: &mut Option<Charge>,
    linger: &AtomicBool,
    tx_id: &str,
    peer: SocketAddr,
) -> Response<Body> {
    let iface = iface_of(&route);
    let route = match route {
        Ok(r) => r,
        Err(e) => {
            let mut res = match e {
                RouteError::NotFound(Interface::Enforcement) => {
                    EnfError::NotFound("Resource not found").into_response()
                }
                RouteError::NotFound(Interface::Management) => {
                    MgmtError::NotFound.into_response(tx_id)
                }
                RouteError::MethodNotAllowed(Interface::Enforcement, allow) => {
                    EnfError::MethodNotAllowed(allow).into_response()
                }
                RouteError::MethodNotAllowed(Interface::Management, allow) => {
                    MgmtError::MethodNotAllowed(allow).into_response(tx_id)
                }
            };
            // The body is not read for a request refused by its route: the connection closes
            // after the answer, first discarding what is still arriving (as after a refusal for
            // size), so that a client sending its whole body before reading gets the answer
            // instead of a reset.
            if carries_body(req.headers()) {
                close_after(&mut res, linger);
            }
            return res;
        }
    };

    // The 1 MiB rule counts the request line, the headers and the body. A declared length decides
    // before any of the body is read; a chunked body is counted as it arrives.
    let max = state.limits.max_request_bytes;
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    if head as u64 + declared > max as u64 {
        linger.store(true, Ordering::Relaxed);
        return too_large(iface, tx_id);
    }
    // A malformed Host is refused at the same point as a request too large, before the body is
    // read (and so, like a refusal by route, the connection closes after the answer when a body
    // is on its way). Links are built only from a Host that passed here.
    if let Err(e) = crate::host::request_host(req.headers()) {
        let mut res = match iface {
            Interface::Enforcement => EnfError::BadRequest(e.to_string()).into_response(),
            Interface::Management => MgmtError::BadRequest(e.to_string()).into_response(tx_id),
        };
        if carries_body(req.headers()) {
            close_after(&mut res, linger);
        }
        return res;
    }
    // The body's share of the memory budget, granted before any of it is read (see `budget`).
    let factor = memory_factor(&route);
    let mut charge = if declared > 0 {
        let cost = (declared as usize).saturating_mul(factor);
        let granted = match state.budget.try_charge(cost) {
            Some(c) => Ok(c),
            None => {
                // While it waits, its slot may go to a new client (see `slots`).
                slot.set_phase(Phase::Waiting);
                let granted = state.budget.charge(cost).await;
                slot.set_phase(Phase::Active);
                granted
            }
        };
        match granted {
            Ok(c) => c,
            Err(_) => {
                log::debug!("memory budget spent: refusing a {declared}-byte request");
                let mut res = overloaded(iface, tx_id);
                close_after(&mut res, linger);
                return res;
            }
        }
    } else {
        state.budget.none()
    };
    let declared = req
        .headers()
        .contains_key(CONTENT_LENGTH)
        .then_some(declared as usize);
    let (parts, body) = req.into_parts();
    let body = match read_body(
        body,
        declared,
        max - head,
        state.limits.body_timeout,
        &state.budget,
        &mut charge,
        factor,
    )
    .await
    {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            linger.store(true, Ordering::Relaxed);
            return too_large(iface, tx_id);
        }
        Err(BodyError::Spent) => {
            let mut res = overloaded(iface, tx_id);
            close_after(&mut res, linger);
            return res;
        }
        Err(BodyError::Timeout) => {
            let mut res = match iface {
                Interface::Enforcement => {
                    EnfError::BadRequest("Request body timed out".into()).into_response()
                }
                Interface::Management => {
                    MgmtError::BadRequest("Request body timed out".into()).into_response(tx_id)
                }
            };
            close_after(&mut res, linger);
            return res;
        }
        Err(BodyError::Broken) => {
            return match iface {
                Interface::Enforcement => {
                    EnfError::BadRequest("Request body could not be read".into()).into_response()
                }
                Interface::Management => {
                    MgmtError::BadRequest("Request body could not be read".into())
                        .into_response(tx_id)
                }
            }
        }
    };
    let ctx = RequestCtx {
        query: Query::new(parts.uri),
        method: parts.method,
        headers: parts.headers,
        tx_id: tx_id.to_string(),
        peer: Some(peer),
    };
    let res = match route.endpoint {
        Endpoint::Enf(ep) => crate::enforcement::handlers::handle(state, ep, &ctx, body).await,
        Endpoint::Mgmt(ep) => crate::management::handle(state, ep, &ctx, body).await,
        Endpoint::Own(ep) => crate::own::handle(state, ep).await,
        Endpoint::Console(ep) => crate::console::handle(state, ep, &ctx, body).await,
    };
    // What is left of the charge follows the answer until it is written: as much as its body.
    if charge.bytes() > 0 {
        let answer = hyper::body::Body::size_hint(res.body())
            .exact()
            .unwrap_or(u64::MAX);
        charge.shrink_to(usize::try_from(answer).unwrap_or(usize::MAX));
        if charge.bytes() > 0 {
            *held = Some(charge);
        }
    }
    res
}
