//! The server's metrics, kept in atomics as requests are served and written out in the Prometheus
//! text format (version 0.0.4) when `/metrics` is scraped.
//!
//! Hand-written rather than through a metrics crate: the format is a few lines of text per
//! sample, Parasol's metrics are a fixed set known at compile time (per-route counters live in an
//! array indexed by `Route::kind`, so recording a request is two relaxed atomic additions and a
//! histogram observation, with no map, lock or allocation on the request path), and the crates
//! bring registries, label maps and dependencies that buy nothing here.
//!
//! `docs/operations.md` lists every metric with its meaning and labels.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::histogram::Histogram;
use crate::router::{Interface, Route, ROUTES, ROUTE_KINDS};

/// Upper bounds of request latencies, nanoseconds: 0.5 ms to 10 s.
pub const REQUEST_SECONDS: &[u64] = &[
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Writes a metric family's `# HELP` and `# TYPE` lines.
pub fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Writes one sample line.
pub fn sample(out: &mut String, name: &str, labels: &str, value: impl std::fmt::Display) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// A label value escaped for the text format (backslash, double quote, line feed).
pub fn escape(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return value.into();
    }
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
        .into()
}

/// Statuses counted exactly: 100 to 599.
const STATUSES: std::ops::RangeInclusive<u16> = 100..=599;

/// The counters of one kind of route.
struct RouteStats {
    /// Requests answered, by status (index: status - 100).
    by_status: Box<[AtomicU64]>,
    latency: Histogram,
}

/// Where a request is counted: the kind of its route (`Route::kind`), or, for a request no
/// route took, the interface whose error shape answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteSlot(usize);

impl RouteSlot {
    pub fn of(route: &Result<Route, crate::router::RouteError>) -> RouteSlot {
        use crate::router::RouteError;
        match route {
            Ok(r) => RouteSlot(r.kind()),
            Err(RouteError::NotFound(i) | RouteError::MethodNotAllowed(i, _)) => {
                RouteSlot::unmatched(*i)
            }
        }
    }

    /// A request no route took (an unknown path or method, or one hyper could not parse).
    pub fn unmatched(interface: Interface) -> RouteSlot {
        match interface {
            Interface::Enforcement => RouteSlot(ROUTE_KINDS),
            Interface::Management => RouteSlot(ROUTE_KINDS + 1),
        }
    }
}

/// The labels of each slot: interface, method and route template.
struct SlotLabels {
    interface: &'static str,
    method: String,
    route: &'static str,
}

/// The route label of requests no route took (a raw path may hold a customer key or a domain
/// name, and every distinct one would be a series of its own).
pub const UNMATCHED: &str = "unmatched";

fn slot_labels() -> Vec<SlotLabels> {
    let mut labels: Vec<SlotLabels> = ROUTES
        .iter()
        .map(|r| SlotLabels {
            interface: r.interface_name(),
            method: r.verb.as_str().to_string(),
            route: r.template,
        })
        .collect();
    for interface in ["enforcement", "management"] {
        labels.push(SlotLabels {
            interface,
            method: "*".into(),
            route: UNMATCHED,
        });
    }
    labels
}

/// Why `POST /1.0/events` refused a request (`parasol_event_requests_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 400: the body is not JSON, not events, or an event is invalid.
    Validation,
    /// 429: `--cloud-limits` (requests, bytes or new domains per minute).
    RateLimit,
    /// 403: the customer key.
    Credentials,
    /// 415: the `Content-Type`.
    MediaType,
    /// 503: the storage could not take it.
    Unavailable,
    /// 500.
    Internal,
}

impl Refusal {
    const ALL: [Refusal; 6] = [
        Refusal::Validation,
        Refusal::RateLimit,
        Refusal::Credentials,
        Refusal::MediaType,
        Refusal::Unavailable,
        Refusal::Internal,
    ];

    fn name(self) -> &'static str {
        match self {
            Refusal::Validation => "validation",
            Refusal::RateLimit => "rate_limit",
            Refusal::Credentials => "credentials",
            Refusal::MediaType => "media_type",
            Refusal::Unavailable => "unavailable",
            Refusal::Internal => "internal",
        }
    }

    /// The refusal an enforcement error stands for, if it is one of `POST /1.0/events`.
    pub fn of(e: &crate::error::EnfError) -> Option<Refusal> {
        use crate::error::EnfError as E;
        Some(match e {
            E::BadRequest(_) | E::Validation(_) => Refusal::Validation,
            E::TooManyRequests(_) | E::TooManyNewDomains(_) => Refusal::RateLimit,
            E::InvalidCredentials => Refusal::Credentials,
            E::UnsupportedMediaType => Refusal::MediaType,
            E::Unavailable(_) | E::Unsettled(_) => Refusal::Unavailable,
            E::Internal => Refusal::Internal,
            E::TooLarge | E::NotFound(_) | E::MethodNotAllowed(_) => return None,
        })
    }
}

/// Why a connection ended before any request was read from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnRefusal {
    /// The TLS handshake failed (a client that does not speak TLS, or no common version or
    /// cipher suite).
    TlsFailed,
    /// The TLS handshake did not finish in time.
    TlsTimeout,
    /// `accept` failed (out of file descriptors, say).
    AcceptFailed,
}

impl ConnRefusal {
    const ALL: [ConnRefusal; 3] = [
        ConnRefusal::TlsFailed,
        ConnRefusal::TlsTimeout,
        ConnRefusal::AcceptFailed,
    ];

    fn name(self) -> &'static str {
        match self {
            ConnRefusal::TlsFailed => "tls_handshake_failed",
            ConnRefusal::TlsTimeout => "tls_handshake_timeout",
            ConnRefusal::AcceptFailed => "accept_failed",
        }
    }
}

/// Everything the server counts.
pub struct Metrics {
    slots: Box<[RouteStats]>,
    labels: Vec<SlotLabels>,
    events_accepted: AtomicU64,
    events_not_listed: AtomicU64,
    refusals: [AtomicU64; Refusal::ALL.len()],
    connections_accepted: AtomicU64,
    connections_refused: [AtomicU64; ConnRefusal::ALL.len()],
    connection_limit_reached: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let labels = slot_labels();
        Metrics {
            slots: labels
                .iter()
                .map(|_| RouteStats {
                    by_status: STATUSES.map(|_| AtomicU64::new(0)).collect(),
                    latency: Histogram::new(REQUEST_SECONDS),
                })
                .collect(),
            labels,
            events_accepted: AtomicU64::new(0),
            events_not_listed: AtomicU64::new(0),
            refusals: Default::default(),
            connections_accepted: AtomicU64::new(0),
            connections_refused: Default::default(),
            connection_limit_reached: AtomicU64::new(0),
        }
    }

    /// Counts one answered request.
    pub fn request(&self, slot: RouteSlot, status: u16, took: Duration) {
        let Some(stats) = self.slots.get(slot.0) else {
            return;
        };
        let i = usize::from(status.clamp(*STATUSES.start(), *STATUSES.end()) - STATUSES.start());
        stats.by_status[i].fetch_add(1, Ordering::Relaxed);
        stats.latency.observe_duration(took);
    }

    /// Counts one answered request whose time was not measured (one the transport answered
    /// itself, see `transport`): its status only.
    pub fn request_unmeasured(&self, slot: RouteSlot, status: u16) {
        let Some(stats) = self.slots.get(slot.0) else {
            return;
        };
        let i = usize::from(status.clamp(*STATUSES.start(), *STATUSES.end()) - STATUSES.start());
        stats.by_status[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the events of a request answered 202: `not_listed` of them had a domain that the
    /// acceptance checks kept off the list.
    pub fn events_accepted(&self, events: usize, not_listed: usize) {
        self.events_accepted
            .fetch_add(events as u64, Ordering::Relaxed);
        self.events_not_listed
            .fetch_add(not_listed as u64, Ordering::Relaxed);
    }

    /// Events accepted, and event requests refused, since start (the console's overview).
    pub fn event_totals(&self) -> (u64, u64) {
        let refused = self
            .refusals
            .iter()
            .map(|r| r.load(Ordering::Relaxed))
            .sum();
        (self.events_accepted.load(Ordering::Relaxed), refused)
    }

    pub fn event_request_refused(&self, why: Refusal) {
        let i = Refusal::ALL.iter().position(|r| *r == why).unwrap_or(0);
        self.refusals[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_accepted(&self) {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_refused(&self, why: ConnRefusal) {
        let i = ConnRefusal::ALL.iter().position(|r| *r == why).unwrap_or(0);
        self.connections_refused[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Every connection slot was taken when the listener wanted to accept another: further
    /// clients wait in the listen backlog until one frees.
    pub fn connection_limit_reached(&self) {
        self.connection_limit_reached
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Writes the request, event and connection metrics (the rest of the exposition is
    /// gathered by the `/metrics` handler, which knows the store and the reputation data).
    pub fn render(&self, out: &mut String, open_connections: usize, max_connections: usize) {
        family(
            out,
            "parasol_http_requests_total",
            "counter",
            "Requests answered, by interface, method, route template and status.",
        );
        for (stats, l) in self.slots.iter().zip(&self.labels) {
            for (i, c) in stats.by_status.iter().enumerate() {
                let n = c.load(Ordering::Relaxed);
                if n > 0 {
                    let status = *STATUSES.start() as usize + i;
                    sample(
                        out,
                        "parasol_http_requests_total",
                        &format!(
                            "interface=\"{}\",method=\"{}\",route=\"{}\",status=\"{status}\"",
                            l.interface,
                            escape(&l.method),
                            escape(l.route)
                        ),
                        n,
                    );
                }
            }
        }
        family(
            out,
            "parasol_http_request_duration_seconds",
            "histogram",
            "Time from a request's head being read to its answer being ready, by interface, method and route template.",
        );
        for (stats, l) in self.slots.iter().zip(&self.labels) {
            if stats.latency.count() > 0 {
                stats.latency.render(
                    out,
                    "parasol_http_request_duration_seconds",
                    &format!(
                        "interface=\"{}\",method=\"{}\",route=\"{}\"",
                        l.interface,
                        escape(&l.method),
                        escape(l.route)
                    ),
                    1e9,
                );
            }
        }
        family(
            out,
            "parasol_events_accepted_total",
            "counter",
            "Events stored (POST /1.0/events answered 202), each element of a batch counted.",
        );
        sample(
            out,
            "parasol_events_accepted_total",
            "",
            self.events_accepted.load(Ordering::Relaxed),
        );
        family(
            out,
            "parasol_events_not_listed_total",
            "counter",
            "Stored events whose domain the acceptance checks kept off the domain list (known-good, or reputation +1).",
        );
        sample(
            out,
            "parasol_events_not_listed_total",
            "",
            self.events_not_listed.load(Ordering::Relaxed),
        );
        family(
            out,
            "parasol_event_requests_refused_total",
            "counter",
            "POST /1.0/events requests refused (nothing of them stored), by reason.",
        );
        for (r, c) in Refusal::ALL.iter().zip(&self.refusals) {
            sample(
                out,
                "parasol_event_requests_refused_total",
                &format!("reason=\"{}\"", r.name()),
                c.load(Ordering::Relaxed),
            );
        }
        family(
            out,
            "parasol_connections_open",
            "gauge",
            "Client connections open on the main listener.",
        );
        sample(out, "parasol_connections_open", "", open_connections);
        family(
            out,
            "parasol_connections_max",
            "gauge",
            "Client connections served at once at most; further clients wait in the listen backlog.",
        );
        sample(out, "parasol_connections_max", "", max_connections);
        family(
            out,
            "parasol_connections_accepted_total",
            "counter",
            "Client connections accepted on the main listener.",
        );
        sample(
            out,
            "parasol_connections_accepted_total",
            "",
            self.connections_accepted.load(Ordering::Relaxed),
        );
        family(
            out,
            "parasol_connections_refused_total",
            "counter",
            "Connections closed before a request could be read from them, or not accepted, by reason.",
        );
        for (r, c) in ConnRefusal::ALL.iter().zip(&self.connections_refused) {
            sample(
                out,
                "parasol_connections_refused_total",
                &format!("reason=\"{}\"", r.name()),
                c.load(Ordering::Relaxed),
            );
        }
        family(
            out,
            "parasol_connection_limit_reached_total",
            "counter",
            "Times every connection slot was taken when another client was waiting to connect.",
        );
        sample(
            out,
            "parasol_connection_limit_reached_total",
            "",
            self.connection_limit_reached.load(Ordering::Relaxed),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("plain"), "plain");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn every_route_kind_and_the_unmatched_have_a_slot() {
        let m = Metrics::new();
        assert_eq!(m.slots.len(), ROUTE_KINDS + 2);
        for r in crate::router::every() {
            let l = &m.labels[RouteSlot::of(&Ok(r.clone())).0];
            assert_eq!(
                (l.route, l.method.as_str()),
                (r.template(), r.method().as_str())
            );
        }
        m.request(
            RouteSlot::unmatched(Interface::Management),
            404,
            Duration::ZERO,
        );
        m.request(
            RouteSlot::unmatched(Interface::Management),
            999,
            Duration::ZERO,
        );
        let mut out = String::new();
        m.render(&mut out, 3, 10);
        assert!(out.contains(
            "parasol_http_requests_total{interface=\"management\",method=\"*\",route=\"unmatched\",status=\"404\"} 1\n"
        ));
        assert!(out.contains("status=\"599\"} 1\n"), "out of range: clamped");
        assert!(out.contains("parasol_connections_open 3\n"));
    }
}
