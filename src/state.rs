//! What a handler is given: the server's shared state (`AppState`) and what it knows of its
//! request besides the body (`RequestCtx`). Kept apart from `server.rs` so that handlers depend
//! on this small module, not on the listener that calls them.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::{HeaderMap, Method};

use crate::config::Limits;
use crate::http::Query;
use crate::reputation::ReputationHandle;
use crate::store::Store;

/// Shared state of a running server.
pub struct AppState {
    pub store: Store,
    pub reputation: Arc<ReputationHandle>,
    /// `--public-url` without a trailing slash.
    pub public_url: Option<String>,
    /// `https` or `http`.
    pub scheme: &'static str,
    pub local_addr: SocketAddr,
    pub limits: Limits,
    /// `--cloud-limits`.
    pub rate: crate::ratelimit::RateLimiter,
    /// Pages of the domain lists served since the database last changed.
    pub pages: crate::page_cache::PageCache,
    /// Where large event batches are validated.
    pub bulk: crate::bulk::BulkPool,
    /// What `/metrics` reports of requests, events and connections.
    pub metrics: crate::metrics::Metrics,
    /// `--access-log`.
    pub access: crate::access::AccessLogger,
    /// `--metrics-listen` was given: `/metrics` is served there, not on the main listener.
    pub metrics_elsewhere: bool,
    /// What requests in flight may hold for their bodies and for parsing them.
    pub budget: Arc<crate::budget::MemoryBudget>,
    /// The console's sessions; `None` when the console is off (`--console off`).
    pub console: Option<crate::console::session::Sessions>,
    /// The console's request journal; `None` when the console is off.
    pub journal: Option<crate::console::journal::Journal>,
    /// What the exporter and the RPZ primary did, for the console; `None` when the console is
    /// off or neither runs.
    pub feeds: Option<Arc<crate::feeds::Feeds>>,
}

impl AppState {
    /// Base URL for absolute links: `--public-url`, else the request's Host and our scheme.
    pub fn base_url(&self, headers: &HeaderMap) -> String {
        if let Some(u) = &self.public_url {
            return u.clone();
        }
        // SECURITY: only a Host that passes `host::parse` is echoed into links (the server has
        // refused requests with any other); without one, the listener's own address stands in.
        crate::host::base_url(self.scheme, headers, self.local_addr)
    }
}

/// What a handler knows of its request besides the body.
pub struct RequestCtx {
    pub method: Method,
    pub query: Query,
    pub headers: HeaderMap,
    /// The request's id: its answer's `X-Request-Id`, the management interface's `txId`.
    pub tx_id: String,
    /// The client's address.
    pub peer: Option<SocketAddr>,
}

/// Hands memory freed by a large request back to the system, in the background. glibc keeps
/// freed small blocks in its arenas, and after a 1 MiB batch has been parsed into thousands of
/// small allocations on several threads, that kept memory would otherwise set the process's
/// resident size for good.
pub fn release_freed_memory() {
    crate::trim::in_background();
}
