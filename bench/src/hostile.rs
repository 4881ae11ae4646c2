//! `parasol-bench --hostile`: the server's memory and a normal client's service under hostile
//! load (issue 35's target). On a fresh data directory it starts the server and, while a normal
//! client sends a GET on a new connection every `--normal-interval-ms`:
//!
//! - `--stalled` clients each send the head of a 1 MiB upload and its body, then stall: they
//!   keep the connection and never read the answer (the body is one valid event padded with
//!   spaces to 1 MiB, so that the database stays out of the measurement: holding a body costs
//!   the same whatever it says);
//! - `--amplifiers` clients each send 1 MiB bodies of `[{},{},...]`, the body that cost the most
//!   to validate for its size, one after another.
//!
//! After `--hold-seconds` every hostile connection is dropped; after `--cool-seconds` more the
//! server's resident memory is read again. It prints the server's peak RSS (the kernel's
//! high-water mark), its RSS before and after, the normal client's successes and latencies, and
//! what the hostile clients were answered; with `--check`, it fails unless the peak is at most
//! `--max-peak-mib`, every normal request succeeded and their p99 is under `--max-p99-ms`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::data;
use crate::load::{Req, Target};
use crate::run::{proc_status_kib, ChildProc};

/// What to run.
#[derive(Debug, Clone)]
pub struct Hostile {
    pub binary: PathBuf,
    pub stalled: usize,
    /// New stalled uploads a second (0: all at once).
    pub connect_rate: f64,
    pub amplifiers: usize,
    pub hold: Duration,
    pub cool: Duration,
    pub normal_interval: Duration,
    pub normal_timeout: Duration,
    /// Extra flags for `parasol serve`.
    pub server_args: Vec<String>,
    pub check: Option<(f64, f64)>,
}

/// Size of the stalled uploads' and the amplifiers' bodies (with the head, within the 1 MiB rule).
const BODY: usize = 1024 * 1024 - 1024;

/// Answers counted by status (0: no answer).
#[derive(Default)]
struct Tally(Mutex<std::collections::BTreeMap<u16, u64>>);

impl Tally {
    fn add(&self, status: u16) {
        if let Ok(mut t) = self.0.lock() {
            *t.entry(status).or_default() += 1;
        }
    }

    fn show(&self) -> String {
        let t = self.0.lock().map(|t| t.clone()).unwrap_or_default();
        let parts: Vec<String> = t
            .iter()
            .map(|(s, n)| match s {
                0 => format!("{n} unanswered"),
                s => format!("{n} x {s}"),
            })
            .collect();
        parts.join(", ")
    }
}

fn rss_mib(pid: u32) -> f64 {
    proc_status_kib(pid, "VmRSS:").map_or(f64::NAN, |k| k as f64 / 1024.0)
}

/// Runs the scenario in a temporary directory and prints the figures.
pub fn run(h: Hostile) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("parasol-hostile-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{dir:?}: {e}"))?;
    let result = run_in(&h, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(h: &Hostile, dir: &Path) -> Result<(), String> {
    let data_dir = dir.join("data");
    std::fs::create_dir_all(&data_dir).map_err(|e| e.to_string())?;
    let world = data::prepare(&data_dir.join("parasol.db"), 1000)?;
    let names = parasol::tls::CertNames::for_listener(([127, 0, 0, 1], 0).into());
    let (cert, _key) = parasol::tls::ensure_self_signed(&data_dir, &names)?;
    let data_arg = data_dir.to_string_lossy().into_owned();
    let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--data-dir", &data_arg];
    args.extend(h.server_args.iter().map(String::as_str));
    let (server, _) = ChildProc::spawn(&h.binary, &args, None, "ready: serving ", false)?;
    let pid = server.pid();
    let target = Target::new(server.addr, &cert)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let before = rss_mib(pid);
    server.reset_peak();
    let key = world.list_key.clone();
    let figures = runtime.block_on(scenario(h, &target, &key, pid));
    let peak = server.peak_rss_mib();
    let (normal, latencies, stalled, amplified, sampled_peak, held, after) = figures?;
    server.stop()?;

    let n = latencies.len();
    let pct = |p: f64| {
        if n == 0 {
            f64::NAN
        } else {
            latencies[((n as f64 - 1.0) * p).round() as usize] as f64 / 1000.0
        }
    };
    let ok = normal.0;
    let total = normal.0 + normal.1;
    println!(
        "parasol-bench --hostile: {} stalled 1 MiB uploads ({}), {} amplification clients, {} s \
         held, server flags: {}",
        h.stalled,
        if h.connect_rate > 0.0 {
            format!("{} new a second", h.connect_rate)
        } else {
            "all at once".to_string()
        },
        h.amplifiers,
        h.hold.as_secs_f64(),
        if h.server_args.is_empty() {
            "(defaults)".to_string()
        } else {
            h.server_args.join(" ")
        }
    );
    println!("server RSS before: {before:.1} MiB");
    println!("server RSS peak: {peak:.1} MiB (sampled: {sampled_peak:.1} MiB)");
    println!("server RSS at the end of the hold: {held:.1} MiB");
    println!(
        "server RSS {} s after the hostile clients left: {after:.1} MiB",
        h.cool.as_secs_f64()
    );
    println!(
        "normal client: {ok}/{total} GETs succeeded; latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    println!("stalled uploads answered: {}", stalled.show());
    println!("amplification bodies answered: {}", amplified.show());
    if let Some((max_peak, max_p99)) = h.check {
        let mut missed = Vec::new();
        if peak.is_nan() || peak > max_peak {
            missed.push(format!("peak RSS {peak:.1} MiB > {max_peak} MiB"));
        }
        if ok != total || total == 0 {
            missed.push(format!("{} of {total} normal GETs failed", total - ok));
        }
        let p99 = pct(0.99);
        if p99.is_nan() || p99 >= max_p99 {
            missed.push(format!("normal p99 {p99:.1} ms >= {max_p99} ms"));
        }
        if !missed.is_empty() {
            return Err(format!("targets missed: {}", missed.join("; ")));
        }
        println!("targets met: peak RSS <= {max_peak} MiB, every normal GET succeeded, p99 < {max_p99} ms");
    }
    Ok(())
}

type Figures = ((u64, u64), Vec<u32>, Arc<Tally>, Arc<Tally>, f64, f64, f64);

async fn scenario(h: &Hostile, target: &Target, key: &str, pid: u32) -> Result<Figures, String> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));

    // RSS sampler (the kernel's VmHWM is the figure; the samples show the shape).
    let peak_bits = Arc::new(AtomicU64::new(0));
    let sampler = {
        let peak_bits = peak_bits.clone();
        let stopping = stopping.clone();
        tokio::spawn(async move {
            while !stopping.load(Ordering::Relaxed) {
                let r = rss_mib(pid);
                if r.is_finite() {
                    peak_bits.fetch_max((r * 1024.0) as u64, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    // The normal client: a GET on a new connection every interval, each within the timeout.
    let normal = {
        let target = target.clone();
        let path = format!("/1.0/domains?customerKey={key}&limit=10");
        let stopping = stopping.clone();
        let (interval, limit) = (h.normal_interval, h.normal_timeout);
        tokio::spawn(async move {
            let mut lat = Vec::new();
            let (mut ok, mut failed) = (0u64, 0u64);
            let mut tasks = Vec::new();
            let mut tick = tokio::time::interval(interval);
            while !stopping.load(Ordering::Relaxed) {
                tick.tick().await;
                let target = target.clone();
                let path = path.clone();
                tasks.push(tokio::spawn(async move {
                    let t = Instant::now();
                    let r = tokio::time::timeout(limit, async {
                        let mut s = target.connect().await?;
                        target.send(&mut s, Req::get(path)).await
                    })
                    .await;
                    match r {
                        Ok(Ok((200, _))) => Ok(t.elapsed().as_micros() as u32),
                        Ok(Ok((s, b))) => Err(format!("{s}: {}", String::from_utf8_lossy(&b))),
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err("timed out".into()),
                    }
                }));
            }
            let mut first_error = None;
            for t in tasks {
                match t.await {
                    Ok(Ok(us)) => {
                        ok += 1;
                        lat.push(us);
                    }
                    Ok(Err(e)) => {
                        failed += 1;
                        first_error.get_or_insert(e);
                    }
                    Err(_) => failed += 1,
                }
            }
            if let Some(e) = first_error {
                eprintln!("hostile: first failed normal GET: {e}");
            }
            lat.sort_unstable();
            ((ok, failed), lat)
        })
    };

    // The amplifiers.
    let amplified = Arc::new(Tally::default());
    let amp_body = {
        let mut b = b"[{}".to_vec();
        while b.len() + 4 <= BODY {
            b.extend_from_slice(b",{}");
        }
        b.push(b']');
        Bytes::from(b)
    };
    let mut amps = Vec::new();
    for _ in 0..h.amplifiers {
        let target = target.clone();
        let tally = amplified.clone();
        let body = amp_body.clone();
        let path = format!("/1.0/events?customerKey={key}");
        let stopping = stopping.clone();
        amps.push(tokio::spawn(async move {
            while !stopping.load(Ordering::Relaxed) {
                let r = async {
                    let mut s = target.connect().await?;
                    target
                        .send(&mut s, Req::post(path.clone(), body.clone(), 400, 1))
                        .await
                }
                .await;
                tally.add(r.map_or(0, |(s, _)| s));
            }
        }));
    }

    // The stalled uploads: head, body, then nothing (the connection kept, the answer unread).
    let stalled = Arc::new(Tally::default());
    let upload = {
        let mut b = serde_json::to_vec(&serde_json::json!([{
            "deviceId": "ba6a59f4-e692-4724-ba36-c28132c761de",
            "deviceVersion": "13.7a",
            "eventTime": "2026-11-22T10:00:00Z",
            "alertTime": "2026-11-22T10:00:01Z",
            "dstDomain": "stalled.example",
            "dstUrl": "http://stalled.example/",
            "protocolVersion": "1.0a",
            "providerName": "Security Platform"
        }]))
        .map_err(|e| e.to_string())?;
        b.resize(BODY, b' ');
        Bytes::from(b)
    };
    let head = format!(
        "POST /1.0/events?customerKey={key} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {BODY}\r\n\r\n",
        target.addr
    );
    let sent = Arc::new(AtomicU64::new(0));
    let mut uploads = Vec::new();
    let started = Instant::now();
    for i in 0..h.stalled {
        if h.connect_rate > 0.0 {
            let due = started + Duration::from_secs_f64(i as f64 / h.connect_rate);
            tokio::time::sleep_until(due.into()).await;
        }
        let target = target.clone();
        let head = head.clone();
        let body = upload.clone();
        let mut stop = stop_rx.clone();
        let sent = sent.clone();
        let tally = stalled.clone();
        uploads.push(tokio::spawn(async move {
            let Ok(mut io) = target.connect_tls().await else {
                tally.add(0);
                return;
            };
            let wrote = async {
                io.write_all(head.as_bytes()).await?;
                io.write_all(&body).await?;
                io.flush().await
            };
            tokio::select! {
                r = wrote => {
                    if r.is_ok() {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
                _ = stop.wait_for(|s| *s) => return,
            }
            // Stalled: the answer stays unread until the hold ends; then a peek at its status.
            let _ = stop.wait_for(|s| *s).await;
            let mut first = [0u8; 12];
            let status =
                match tokio::time::timeout(Duration::from_millis(100), io.read(&mut first)).await {
                    Ok(Ok(n)) if n >= 12 => std::str::from_utf8(&first[9..12])
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0),
                    _ => 0,
                };
            tally.add(status);
        }));
    }

    tokio::time::sleep_until((started + h.hold).into()).await;
    let held = rss_mib(pid);
    eprintln!(
        "hostile: {} of {} stalled uploads had sent their body when the hold ended",
        sent.load(Ordering::Relaxed),
        h.stalled
    );
    stopping.store(true, Ordering::Relaxed);
    let _ = stop_tx.send(true);
    for u in uploads {
        let _ = u.await;
    }
    for a in amps {
        let _ = tokio::time::timeout(Duration::from_secs(10), a).await;
    }
    let (normal_counts, latencies) = normal.await.map_err(|e| e.to_string())?;
    tokio::time::sleep(h.cool).await;
    let after = rss_mib(pid);
    let _ = sampler.await;
    let sampled_peak = peak_bits.load(Ordering::Relaxed) as f64 / 1024.0;
    Ok((
        normal_counts,
        latencies,
        stalled,
        amplified,
        sampled_peak,
        held,
        after,
    ))
}
