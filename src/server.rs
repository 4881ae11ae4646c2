//! The listener: TLS accept inside each connection's task, the hyper HTTP/1.1 connection loop,
//! connection limits and timeouts, the request-size rule, SIGHUP reloads and graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::config::{ServerConfig, TlsSource};
use crate::error::{EnfError, MgmtError};
use crate::http::{Body, Query};
use crate::reputation::ReputationHandle;
use crate::router::{self, Interface, Route, RouteError};
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
        Some(url) => format!("{}: {e}", crate::store::postgres::redact(url)),
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
    let reputation = ReputationHandle::open(config.reputation.clone(), config.known_good.clone())?;
    let (scores, good) = reputation.get().counts();
    log::info!("reputation data: {scores} scored domains, {good} known-good domains");

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
    });

    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
    let max = config.limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut hangup = Hangup::new()?;
    log::info!("parasol ready: serving {url}");

    let sentinel = tokio::spawn(timer_sentinel());
    let purger = tokio::spawn(purge_events(store.clone()));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            _ = hangup.recv() => { reload(&state); continue; }
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            _ = hangup.recv() => { reload(&state); continue; }
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors and the like: back off briefly instead of spinning.
                    log::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let state = state.clone();
        let acceptor = acceptor.clone();
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            let _client = ClientCount::enter(&state);
            serve_connection(state, stream, acceptor, stop).await;
            drop(permit);
        });
    }

    log::info!("shutting down: no new connections; finishing requests in flight");
    drop(listener);
    let _ = stop_tx.send(true);
    let grace = config.limits.shutdown_grace;
    if tokio::time::timeout(grace, slots.acquire_many(max as u32))
        .await
        .is_err()
    {
        log::warn!("some connections were still open after {grace:?}; closing them");
    }
    sentinel.abort();
    purger.abort();
    drop(state);
    tokio::task::spawn_blocking(move || store.close())
        .await
        .map_err(|e| e.to_string())?;
    drop(dir_lock);
    log::info!("stopped");
    Ok(())
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

/// Deletes deleted organizations' stored requests in the background, one range after another
/// (the other writes queue between them) until none are left, then looks again every
/// `PURGE_POLL`.
async fn purge_events(store: Store) {
    // The organization being purged and its rows deleted so far, for the log. (The steps take the
    // lowest pending organization id: one deleted meanwhile may come first.)
    let mut current = (0, 0);
    loop {
        match store.purge_step().await {
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
            Err(e) => log::error!("deleting a deleted organization's stored requests: {e}"),
        }
        tokio::time::sleep(PURGE_POLL).await;
    }
}

async fn serve_connection(
    state: Arc<AppState>,
    stream: tokio::net::TcpStream,
    acceptor: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let limits = state.limits.clone();
    match acceptor {
        Some(acceptor) => {
            // SECURITY: the handshake runs here, in the connection's task, under a time limit, so
            // a client that stalls mid-handshake holds only its own slot, never the accept loop.
            match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => serve_http(state, tls, stop).await,
                Ok(Err(e)) => log::debug!("TLS handshake failed: {e}"),
                Err(_) => log::debug!("TLS handshake timed out"),
            }
        }
        None => serve_http(state, stream, stop).await,
    }
}

async fn serve_http<IO>(state: Arc<AppState>, io: IO, mut stop: watch::Receiver<bool>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = state.limits.clone();
    let linger = Arc::new(AtomicBool::new(false));
    let io = Transport::new(
        io,
        linger.clone(),
        limits.linger_bytes,
        limits.linger_time,
        limits.max_request_bytes,
    );
    let service = service_fn(move |req| {
        let state = state.clone();
        let linger = linger.clone();
        async move { Ok::<_, Infallible>(handle(state, req, linger).await) }
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
        Ok(Route::Enf(_)) => Interface::Enforcement,
        Ok(Route::Mgmt(_)) => Interface::Management,
        Err(RouteError::NotFound(i)) | Err(RouteError::MethodNotAllowed(i, _)) => *i,
    }
}

fn too_large(iface: Interface, tx_id: &str) -> Response<Body> {
    match iface {
        Interface::Enforcement => EnfError::TooLarge.into_response(),
        Interface::Management => MgmtError::TooLarge.into_response(tx_id),
    }
}

enum BodyError {
    TooLarge,
    Timeout,
    Broken,
}

async fn read_body(
    body: Incoming,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Bytes, BodyError> {
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Err(_) => Err(BodyError::Timeout),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(BodyError::TooLarge)
            } else {
                Err(BodyError::Broken)
            }
        }
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

/// Handles one request: route, size rule, Host, body, then the interface's handler.
async fn handle(
    state: Arc<AppState>,
    req: Request<Incoming>,
    linger: Arc<AtomicBool>,
) -> Response<Body> {
    let route = router::route(req.method(), req.uri().path());
    let iface = iface_of(&route);
    // Only the management interface reports a txId; an enforcement request needs no random id
    // (and no getrandom system call).
    let tx_id = match iface {
        Interface::Management => crate::ids::request_id().to_string(),
        Interface::Enforcement => String::new(),
    };
    let route = match route {
        Ok(r) => r,
        Err(e) => {
            let mut res = match e {
                RouteError::NotFound(Interface::Enforcement) => {
                    EnfError::NotFound("Resource not found").into_response()
                }
                RouteError::NotFound(Interface::Management) => {
                    MgmtError::NotFound.into_response(&tx_id)
                }
                RouteError::MethodNotAllowed(Interface::Enforcement, allow) => {
                    EnfError::MethodNotAllowed(allow).into_response()
                }
                RouteError::MethodNotAllowed(Interface::Management, allow) => {
                    MgmtError::MethodNotAllowed(allow).into_response(&tx_id)
                }
            };
            // The body is not read for a request refused by its route: the connection closes
            // after the answer, first discarding what is still arriving (as after a refusal for
            // size), so that a client sending its whole body before reading gets the answer
            // instead of a reset.
            if carries_body(req.headers()) {
                close_after(&mut res, &linger);
            }
            return res;
        }
    };

    // The 1 MiB rule counts the request line, the headers and the body. A declared length decides
    // before any of the body is read; a chunked body is counted as it arrives.
    let max = state.limits.max_request_bytes;
    let head = head_size(&req);
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    if head as u64 + declared > max as u64 {
        linger.store(true, Ordering::Relaxed);
        return too_large(iface, &tx_id);
    }
    // A malformed Host is refused at the same point as a request too large, before the body is
    // read (and so, like a refusal by route, the connection closes after the answer when a body
    // is on its way). Links are built only from a Host that passed here.
    if let Err(e) = crate::host::request_host(req.headers()) {
        let mut res = match iface {
            Interface::Enforcement => EnfError::BadRequest(e.to_string()).into_response(),
            Interface::Management => MgmtError::BadRequest(e.to_string()).into_response(&tx_id),
        };
        if carries_body(req.headers()) {
            close_after(&mut res, &linger);
        }
        return res;
    }
    let (parts, body) = req.into_parts();
    let body = match read_body(body, max - head, state.limits.body_timeout).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            linger.store(true, Ordering::Relaxed);
            return too_large(iface, &tx_id);
        }
        Err(BodyError::Timeout) => {
            let mut res = match iface {
                Interface::Enforcement => {
                    EnfError::BadRequest("Request body timed out".into()).into_response()
                }
                Interface::Management => {
                    MgmtError::BadRequest("Request body timed out".into()).into_response(&tx_id)
                }
            };
            close_after(&mut res, &linger);
            return res;
        }
        Err(BodyError::Broken) => {
            return match iface {
                Interface::Enforcement => {
                    EnfError::BadRequest("Request body could not be read".into()).into_response()
                }
                Interface::Management => {
                    MgmtError::BadRequest("Request body could not be read".into())
                        .into_response(&tx_id)
                }
            }
        }
    };
    let ctx = RequestCtx {
        query: Query::new(parts.uri),
        method: parts.method,
        headers: parts.headers,
        tx_id,
    };
    match route {
        Route::Enf(ep) => crate::enforcement::handlers::handle(&state, ep, &ctx, body).await,
        Route::Mgmt(ep) => crate::management::handle(&state, ep, &ctx, body).await,
    }
}
