//! The load generator: keep-alive HTTPS connections (hyper client over tokio-rustls), closed-loop
//! runs for maximum throughput and open-loop runs at a fixed rate whose latencies are measured
//! from each request's *scheduled* send time, so a stalled server cannot hide its stall by
//! slowing the client down (no coordinated omission). In an open loop the send times are one
//! schedule shared by all connections (like oha's `-q`): whichever connection is free takes the
//! next one, so an answer that is slow on one connection delays only the requests that find
//! every connection busy, and that wait (`Stats::late_us`) is part of their latency. Connections
//! are opened before the clock starts.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// One request of a workload.
pub struct Req {
    pub method: Method,
    /// Path and query.
    pub path: String,
    pub body: Option<Bytes>,
    /// Extra header (e.g. `authorization`).
    pub auth: Option<Arc<str>>,
    /// The status that counts as success.
    pub expect: u16,
    /// Units of work this request carries (events for POST /events, else 1).
    pub units: u64,
}

impl Req {
    pub fn get(path: String) -> Req {
        Req {
            method: Method::GET,
            path,
            body: None,
            auth: None,
            expect: 200,
            units: 1,
        }
    }

    pub fn post(path: String, body: Bytes, expect: u16, units: u64) -> Req {
        Req {
            method: Method::POST,
            path,
            body: Some(body),
            auth: None,
            expect,
            units,
        }
    }
}

/// A source of requests: `(worker, n)` gives worker `worker`'s `n`-th request, `None` when the
/// worker has nothing more to send.
pub type Source = Arc<dyn Fn(usize, u64) -> Option<Req> + Send + Sync>;

/// What a run measured.
#[derive(Default, Clone)]
pub struct Stats {
    /// Latencies in microseconds, sorted after `finish`.
    pub lat_us: Vec<u32>,
    /// Open loop: how long after its scheduled time each request was sent (waiting for one of
    /// the run's connections to be free), in microseconds; sorted after `finish`.
    pub late_us: Vec<u32>,
    pub ok: u64,
    pub errors: u64,
    pub units: u64,
    pub elapsed: Duration,
    /// The first unexpected answer, for the report.
    pub first_error: Option<String>,
    /// Open loop: for each `INTERVAL` of send times from the start, how many requests were due in
    /// it and how many of those took longer than `SLOW_MS`.
    pub intervals: Vec<(u32, u32)>,
}

/// Open loop: requests taking longer than this are counted as slow in `Stats::intervals` (the
/// open-loop target's bound).
pub const SLOW_MS: u32 = 20;

/// Open loop: the width of an interval of `Stats::intervals`.
pub const INTERVAL: Duration = Duration::from_millis(50);

/// Where an open loop's slow requests came from (see `Stats::slow_spells`).
#[derive(Debug, PartialEq)]
pub struct SlowSpells {
    /// Requests over `SLOW_MS`, as a share of all.
    pub share: f64,
    /// Stretches of consecutive intervals in which most requests due were slow.
    pub count: usize,
    /// The longest of them: when it started (from the run's start) and how long it lasted.
    pub longest: Option<(Duration, Duration)>,
}

impl Stats {
    fn merge(&mut self, o: Stats) {
        self.lat_us.extend(o.lat_us);
        self.late_us.extend(o.late_us);
        if self.intervals.len() < o.intervals.len() {
            self.intervals.resize(o.intervals.len(), (0, 0));
        }
        for (mine, theirs) in self.intervals.iter_mut().zip(o.intervals) {
            mine.0 += theirs.0;
            mine.1 += theirs.1;
        }
        self.ok += o.ok;
        self.errors += o.errors;
        self.units += o.units;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
    }

    /// Several timed windows of one workload as one: their requests together, their durations
    /// added (so `rate` is the rate over all of them), their intervals one after the other.
    pub fn combined(parts: impl IntoIterator<Item = Stats>) -> Stats {
        let mut total = Stats::default();
        let mut elapsed = Duration::ZERO;
        let mut intervals = Vec::new();
        for mut p in parts {
            elapsed += p.elapsed;
            intervals.append(&mut p.intervals);
            total.merge(p);
        }
        total.intervals = intervals;
        total.finish(elapsed)
    }

    pub(crate) fn finish(mut self, elapsed: Duration) -> Stats {
        self.lat_us.sort_unstable();
        self.late_us.sort_unstable();
        self.elapsed = elapsed;
        self
    }

    /// Units per second (successful requests' units).
    pub fn rate(&self) -> f64 {
        self.units as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Requests per second (successful).
    pub fn req_rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// `rate` for a workload counted in events, else `req_rate`.
    pub fn rate_in(&self, events: bool) -> f64 {
        if events {
            self.rate()
        } else {
            self.req_rate()
        }
    }

    /// Latency percentile in milliseconds.
    pub fn pct_ms(&self, p: f64) -> f64 {
        percentile_ms(&self.lat_us, p)
    }

    /// Open loop: percentile of the send delays (`late_us`) in milliseconds.
    pub fn late_pct_ms(&self, p: f64) -> f64 {
        percentile_ms(&self.late_us, p)
    }

    pub fn max_ms(&self) -> f64 {
        self.lat_us.last().map_or(f64::NAN, |&v| v as f64 / 1000.0)
    }

    /// Open loop: how the requests over `SLOW_MS` were spread over the run. A tail made of
    /// stretches in which nearly every request was slow is a stall (of the server, its disk or
    /// the machine) and the backlog it left; slow requests scattered over the run with no such
    /// stretch are queueing at every moment.
    pub fn slow_spells(&self) -> SlowSpells {
        let (total, slow) = self
            .intervals
            .iter()
            .fold((0u64, 0u64), |(t, s), &(a, b)| (t + a as u64, s + b as u64));
        let (mut count, mut longest, mut run) = (0, None::<(usize, usize)>, None::<usize>);
        // One past the end closes a stretch still open at the end of the run.
        for i in 0..=self.intervals.len() {
            let mostly_slow = self
                .intervals
                .get(i)
                .is_some_and(|&(due, slow)| slow > 0 && slow * 2 >= due);
            match (mostly_slow, run) {
                (true, None) => run = Some(i),
                (false, Some(from)) => {
                    count += 1;
                    if longest.is_none_or(|(_, len)| i - from > len) {
                        longest = Some((from, i - from));
                    }
                    run = None;
                }
                _ => {}
            }
        }
        SlowSpells {
            share: slow as f64 / total.max(1) as f64,
            count,
            longest: longest.map(|(from, len)| (INTERVAL * from as u32, INTERVAL * len as u32)),
        }
    }
}

/// Percentile `p` of sorted microsecond values, in milliseconds.
fn percentile_ms(sorted_us: &[u32], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted_us.len() as f64 - 1.0) * p).round() as usize;
    sorted_us[i.min(sorted_us.len() - 1)] as f64 / 1000.0
}

/// Where and how to connect.
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// `None`: plain HTTP.
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Target {
    /// A target that trusts exactly the PEM certificate at `cert`, with the same protocol versions
    /// and ALPN as the server.
    pub fn new(addr: SocketAddr, cert: &Path) -> Result<Target, String> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(cert).map_err(|e| format!("{cert:?}: {e}"))? {
            roots
                .add(c.map_err(|e| format!("{cert:?}: {e}"))?)
                .map_err(|e| format!("{cert:?}: {e}"))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Target {
            addr,
            tls: Some(Arc::new(cfg)),
        })
    }

    /// A target served over plain HTTP (`parasol serve --plain-http`).
    pub fn plain(addr: SocketAddr) -> Target {
        Target { addr, tls: None }
    }

    /// Opens one TLS connection, for raw HTTP.
    pub async fn connect_tls(&self) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
        let tcp = TcpStream::connect(self.addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::IpAddress(self.addr.ip().into());
        let tls = self.tls.clone().ok_or("a plain HTTP target")?;
        TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))
    }

    /// Opens one keep-alive connection.
    pub async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let tcp = TcpStream::connect(self.addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let Some(tls) = self.tls.clone() else {
            return handshake(tcp).await;
        };
        let name = ServerName::IpAddress(self.addr.ip().into());
        let tls = TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        handshake(tls).await
    }

    /// Sends one request; returns the status, or an error text, and the body.
    pub(crate) async fn send(
        &self,
        sender: &mut SendRequest<Full<Bytes>>,
        r: Req,
    ) -> Result<(u16, Bytes), String> {
        sender.ready().await.map_err(|e| e.to_string())?;
        let mut b = Request::builder()
            .method(r.method)
            .uri(r.path)
            .header("host", self.addr.to_string());
        if r.body.is_some() {
            b = b.header("content-type", "application/json");
        }
        if let Some(a) = r.auth {
            b = b.header("authorization", &*a);
        }
        let req = b
            .body(Full::new(r.body.unwrap_or_default()))
            .map_err(|e| e.to_string())?;
        let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = res.status().as_u16();
        let body = res
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    }
}

/// HTTP/1 over `io`, its connection driven by a task of its own.
async fn handshake<IO>(io: IO) -> Result<SendRequest<Full<Bytes>>, String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// How requests are paced.
#[derive(Clone, Copy)]
pub enum Pace {
    /// Each connection sends its next request as soon as the previous answer is in.
    Closed,
    /// All connections together send this many requests per second on a fixed schedule.
    Open(f64),
}

/// Runs `conns` connections until `duration` has passed or every worker's source is exhausted.
pub async fn run(
    target: &Target,
    conns: usize,
    duration: Duration,
    pace: Pace,
    source: Source,
) -> Stats {
    // Every connection is open (TCP and TLS handshakes done) before the clock starts.
    let mut opening = Vec::with_capacity(conns);
    for _ in 0..conns {
        let target = target.clone();
        opening.push(tokio::spawn(async move { target.connect().await }));
    }
    let mut opened = Vec::with_capacity(conns);
    for o in opening {
        // A failed handshake is retried, and counted, by the worker.
        opened.push(o.await.ok().and_then(Result::ok));
    }
    let schedule = Arc::new(Schedule::new(pace, duration));
    let mut tasks = Vec::with_capacity(conns);
    for (w, sender) in opened.into_iter().enumerate() {
        let target = target.clone();
        let source = source.clone();
        let schedule = schedule.clone();
        tasks.push(tokio::spawn(async move {
            worker(&target, w, sender, &schedule, source).await
        }));
    }
    let mut total = Stats::default();
    for t in tasks {
        match t.await {
            Ok(s) => total.merge(s),
            Err(e) => {
                total.errors += 1;
                total
                    .first_error
                    .get_or_insert(format!("worker failed: {e}"));
            }
        }
    }
    total.finish(schedule.start.elapsed())
}

async fn worker(
    target: &Target,
    w: usize,
    mut sender: Option<SendRequest<Full<Bytes>>>,
    schedule: &Schedule,
    source: Source,
) -> Stats {
    let mut s = Stats::default();
    let open = schedule.interval.is_some();
    let mut n = 0u64;
    while let Some(scheduled) = schedule.next().await {
        let Some(req) = source(w, n) else { break };
        n += 1;
        if sender.is_none() {
            match target.connect().await {
                Ok(c) => sender = Some(c),
                Err(e) => {
                    s.errors += 1;
                    s.first_error.get_or_insert(e);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let Some(conn) = sender.as_mut() else {
            continue;
        };
        if open {
            s.late_us
                .push(scheduled.elapsed().as_micros().min(u32::MAX as u128) as u32);
        }
        let expect = req.expect;
        let units = req.units;
        let result = target.send(conn, req).await;
        let lat = scheduled.elapsed().as_micros().min(u32::MAX as u128) as u32;
        if open {
            let i = ((scheduled - schedule.start).as_micros() / INTERVAL.as_micros()) as usize;
            if s.intervals.len() <= i {
                s.intervals.resize(i + 1, (0, 0));
            }
            s.intervals[i].0 += 1;
            s.intervals[i].1 += u32::from(lat > SLOW_MS * 1000);
        }
        match result {
            Ok((status, _)) if status == expect => {
                s.ok += 1;
                s.units += units;
                s.lat_us.push(lat);
            }
            Ok((status, body)) => {
                s.errors += 1;
                s.lat_us.push(lat);
                s.first_error.get_or_insert_with(|| {
                    let text = String::from_utf8_lossy(&body);
                    format!(
                        "{status} (expected {expect}): {}",
                        text.chars().take(160).collect::<String>()
                    )
                });
            }
            Err(e) => {
                s.errors += 1;
                s.first_error.get_or_insert(e);
                sender = None;
            }
        }
    }
    s
}

/// When each request of a run is sent.
struct Schedule {
    start: Instant,
    deadline: Instant,
    /// Open loop: one send time every `interval` from `start`, shared by all connections.
    interval: Option<Duration>,
    /// Open loop: the next send time's number.
    tokens: AtomicU64,
}

impl Schedule {
    fn new(pace: Pace, duration: Duration) -> Schedule {
        let start = Instant::now();
        Schedule {
            start,
            deadline: start + duration,
            interval: match pace {
                Pace::Open(rate) => Some(Duration::from_secs_f64(1.0 / rate.max(1e-3))),
                Pace::Closed => None,
            },
            tokens: AtomicU64::new(0),
        }
    }

    /// Waits for the caller's next send time and returns it; `None` once the run is over.
    async fn next(&self) -> Option<Instant> {
        let t = match self.interval {
            Some(iv) => {
                // Like oha's `-q`: whichever connection is free takes the next send time, so a
                // slow answer on one connection does not delay the requests due on the others.
                let k = self.tokens.fetch_add(1, Ordering::Relaxed);
                self.start + iv.mul_f64(k as f64)
            }
            None => Instant::now(),
        };
        if t >= self.deadline {
            return None;
        }
        wait_until(t).await;
        Some(t)
    }
}

/// Waits until `t` to within a few microseconds: tokio's timer fires on millisecond ticks, which
/// would send every request up to a millisecond late and in bursts at each tick, so the last
/// millisecond is spent yielding to the other tasks instead.
async fn wait_until(t: Instant) {
    const COARSE: Duration = Duration::from_millis(1);
    if let Some(early) = t.checked_sub(COARSE) {
        if early > Instant::now() {
            tokio::time::sleep_until(early.into()).await;
        }
    }
    while Instant::now() < t {
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_open_schedule_is_one_sequence_of_send_times_shared_by_all_callers() {
        // 1,000 sends a second for 30 ms: send times 0, 1, ... 29 ms after the start, each
        // handed out once, whoever asks, and never before it is due.
        let s = Arc::new(Schedule::new(Pace::Open(1000.0), Duration::from_millis(30)));
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(t) = s.next().await {
                    assert!(Instant::now() >= t, "returned before its send time");
                    got.push(t);
                }
                got
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all.sort();
        let offsets: Vec<u128> = all
            .iter()
            .map(|t| (*t - s.start).as_micros().div_euclid(100))
            .collect();
        let expected: Vec<u128> = (0..30).map(|k| k * 10).collect();
        assert_eq!(offsets, expected, "send times in tenths of a millisecond");
    }

    #[test]
    fn windows_combine_into_one_rate_over_their_added_durations() {
        let window = |lat: Vec<u32>, ms: u64| {
            let n = lat.len() as u64;
            Stats {
                lat_us: lat,
                ok: n,
                units: 2 * n,
                ..Stats::default()
            }
            .finish(Duration::from_millis(ms))
        };
        let first = window(vec![300, 100, 200], 1000);
        let second = window(vec![50, 400], 500);
        let mut third = window(vec![], 500);
        third.errors = 1;
        third.first_error = Some("status 500".into());
        let all = Stats::combined([first, second, third]);
        assert_eq!(all.elapsed, Duration::from_secs(2));
        assert_eq!((all.ok, all.units, all.errors), (5, 10, 1));
        assert_eq!(all.req_rate(), 2.5);
        assert_eq!(all.rate(), 5.0);
        assert_eq!(all.lat_us, vec![50, 100, 200, 300, 400]);
        assert_eq!(all.max_ms(), 0.4);
        assert_eq!(all.first_error.as_deref(), Some("status 500"));
    }

    #[test]
    fn slow_spells_are_the_stretches_of_intervals_with_mostly_slow_requests() {
        let stats = |intervals: Vec<(u32, u32)>| Stats {
            intervals,
            ..Stats::default()
        };
        // Slow requests scattered (never half of an interval): no stretch.
        let scattered = stats(vec![(10, 1), (10, 4), (10, 0), (10, 2)]);
        assert_eq!(
            scattered.slow_spells(),
            SlowSpells {
                share: 7.0 / 40.0,
                count: 0,
                longest: None
            }
        );
        // Two stretches: intervals 1-2, and 4-6 (half slow counts; it runs to the end).
        let stalls = stats(vec![
            (10, 0),
            (10, 9),
            (10, 10),
            (10, 4),
            (10, 5),
            (8, 8),
            (6, 6),
        ]);
        assert_eq!(
            stalls.slow_spells(),
            SlowSpells {
                share: 42.0 / 64.0,
                count: 2,
                longest: Some((INTERVAL * 4, INTERVAL * 3))
            }
        );
        // An empty interval (nothing due, e.g. a client stall) ends a stretch.
        let gap = stats(vec![(4, 4), (0, 0), (4, 4)]);
        assert_eq!(gap.slow_spells().count, 2);
        assert_eq!(gap.slow_spells().longest, Some((Duration::ZERO, INTERVAL)));
        assert_eq!(Stats::default().slow_spells().share, 0.0);
    }

    #[test]
    fn workers_intervals_add_up_and_windows_follow_one_another() {
        let stats = |intervals: Vec<(u32, u32)>| Stats {
            intervals,
            ..Stats::default()
        };
        let mut run = stats(vec![(3, 1)]);
        run.merge(stats(vec![(2, 2), (5, 0)]));
        assert_eq!(run.intervals, vec![(5, 3), (5, 0)]);
        let windows = Stats::combined([run, stats(vec![(1, 1)])]);
        assert_eq!(windows.intervals, vec![(5, 3), (5, 0), (1, 1)]);
    }

    #[tokio::test]
    async fn a_closed_schedule_sends_at_once_until_the_deadline() {
        let s = Schedule::new(Pace::Closed, Duration::from_millis(20));
        let before = Instant::now();
        let t = s.next().await.expect("before the deadline");
        assert!(t >= before, "a closed loop's send time is now");
        tokio::time::sleep(Duration::from_millis(25)).await;
        assert!(s.next().await.is_none());
    }
}
