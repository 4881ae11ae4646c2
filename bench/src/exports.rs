//! `parasol-bench --compare-exports`: the resolver exporter's cost on the write path, measured in
//! one run. Two servers of the same binary, on two data directories prepared alike, one with
//! `--export-dir` and one without, take the same workloads in alternating windows (A then B, then
//! B then A, ...), so that the machine's drift over minutes (10-20% on the benchmark's VM) falls
//! on both alike. Before each window the machine is let settle: the window starts once neither
//! server uses the CPU (the exporter's rewrites of the previous window's changes are done), so
//! that one server's leftover work is not charged to the other.
//!
//! Workloads: 1 MiB batches of all-new domains (the exporter rewrites a list that grows by
//! thousands of names a batch), and single events of which 10% name a new domain (every tenth
//! request changes a list), closed loop. The figures are B's rate over A's, over all windows and
//! as the median of the rounds' ratios (steadier on a machine shared with other work), and each
//! server's CPU time per unit from the start of its window until it is idle again: that counts
//! the exporter's work whole, the part it does after the window included, so it bounds from
//! above what the export costs a server that is busy all the time.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::load::{self, Pace, Req, Source, Stats, Target};
use crate::run::{cores, note, pin_current_thread, ChildProc, Options};
use crate::settle::{self, Watched, Window};
use crate::{data, run};

/// Windows per workload and server.
const ROUNDS: usize = 8;

/// One server under test.
struct Side {
    name: &'static str,
    server: ChildProc,
    target: Target,
    world: data::World,
}

pub fn compare(opts: &Options, dir: &Path) -> Result<(), String> {
    let ncores = cores();
    let pinned = opts.pin && ncores >= 2 && pin_current_thread(run::CLIENT_CPU);
    let server_cpu = pinned.then_some(run::SERVER_CPU);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let rep = dir.join("reputation.csv");
    data::write_reputation(&rep, opts.reputation_lines)?;

    let mut sides = Vec::new();
    for (name, exports) in [("exports off", false), ("exports on", true)] {
        let data_dir = dir.join(if exports { "on" } else { "off" });
        std::fs::create_dir_all(&data_dir).map_err(|e| e.to_string())?;
        note(format!("{name}: pre-loading {} domains", opts.domains));
        let world = data::prepare(&data_dir.join("parasol.db"), opts.domains)?;
        let names = parasol::tls::CertNames::for_listener(([127, 0, 0, 1], 0).into());
        let (cert, _key) = parasol::tls::ensure_self_signed(&data_dir, &names)?;
        let export_dir = dir.join("exports");
        let mut args = vec![
            "serve".to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            data_dir.to_string_lossy().into_owned(),
            "--reputation".into(),
            rep.to_string_lossy().into_owned(),
        ];
        if exports {
            args.extend([
                "--export-dir".into(),
                export_dir.to_string_lossy().into_owned(),
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (server, _) =
            ChildProc::spawn(&opts.binary, &args, server_cpu, "ready: serving ", false)?;
        if exports {
            note("waiting for the exporter's first round");
            let line = server
                .wait_for_log("export: wrote the files of", Duration::from_secs(600))
                .ok_or("the exporter's first round did not finish within 600 s")?;
            note(line);
        }
        let target = Target::new(server.addr, &cert)?;
        sides.push(Side {
            name,
            server,
            target,
            world,
        });
    }

    // The ingest windows: each sends its own batches of new names.
    let (_, batch_events) = data::batch(
        (0..).map(|n| (data::domain(7, n), n)),
        data::MAX_BATCH_BYTES,
    );
    let per_window = (opts.ingest_batches / ROUNDS as u64).max(1);
    let batches = |space: u64, window: u64| -> Arc<Vec<Bytes>> {
        Arc::new(
            (0..per_window)
                .map(|b| {
                    let first = (window * per_window + b) * batch_events;
                    data::batch(
                        (first..).map(|n| (data::domain(space, n), n)),
                        data::MAX_BATCH_BYTES,
                    )
                    .0
                })
                .collect(),
        )
    };
    let ic = opts.ingest_clients;
    let ingest = |key: &str, batches: Arc<Vec<Bytes>>| -> Source {
        let path = format!("/1.0/events?customerKey={key}");
        Arc::new(move |w, n| {
            let body = batches.get(n as usize * ic + w)?.clone();
            Some(Req::post(path.clone(), body, 202, batch_events))
        })
    };
    let single = |key: &str, window: u64| -> Source {
        let path = format!("/1.0/events?customerKey={key}");
        Arc::new(move |w, n| {
            let i = window << 40 | (w as u64) << 32 | n;
            Some(Req::post(
                path.clone(),
                data::single_event(31, i, true),
                202,
                1,
            ))
        })
    };

    let machine = Watched::of(sides.iter().map(|s| s.server.pid()));
    let window = Duration::from_secs_f64(opts.seconds / 2.0);
    let mut results: Vec<Measured> = Vec::new();
    for workload in ["ingest", "single"] {
        if !opts
            .only
            .as_ref()
            .is_none_or(|o| o.iter().any(|x| x == workload))
        {
            continue;
        }
        let events = workload == "ingest";
        let mut m = Measured {
            what: if events {
                format!(
                    "ingest new domains, 1 MiB x {batch_events} ev, {ic} clients, {ROUNDS} windows of {per_window} batches"
                )
            } else {
                format!(
                    "single events, 10% new domains, closed loop, {} conns, {ROUNDS} windows of {} s",
                    opts.connections,
                    window.as_secs_f64()
                )
            },
            events,
            stats: [Vec::new(), Vec::new()],
            cpu: [0.0, 0.0],
        };
        for round in 0..ROUNDS {
            for i in settle::order(round, 2) {
                let side = &sides[i];
                let counted = Watched::of([side.server.pid()]);
                let w = Window::open(&machine, QUIET, &[&counted])?;
                let s = if events {
                    runtime.block_on(load::run(
                        &side.target,
                        ic,
                        Duration::from_secs(3600),
                        Pace::Closed,
                        ingest(&side.world.ingest_key, batches(40 + i as u64, round as u64)),
                    ))
                } else {
                    runtime.block_on(load::run(
                        &side.target,
                        opts.connections,
                        window,
                        Pace::Closed,
                        single(&side.world.mixed_key, round as u64),
                    ))
                };
                // The window's CPU time runs until the server is idle again (its exporter done).
                m.cpu[i] += w.close()?[0];
                if s.errors > 0 {
                    return Err(format!(
                        "{workload} on {}: {} errors; first: {:?}",
                        side.name, s.errors, s.first_error
                    ));
                }
                note(format!(
                    "{workload} round {round}, {}: {:.0} {}/s",
                    side.name,
                    m.rate(&s),
                    if events { "events" } else { "requests" }
                ));
                m.stats[i].push(s);
            }
        }
        results.push(m);
    }
    // Peak resident memory over the whole run (the exporter's first round, which writes the
    // pre-loaded list's files, included).
    let peaks: Vec<String> = sides
        .iter()
        .map(|s| format!("{} {:.0} MiB", s.name, s.server.peak_rss_mib()))
        .collect();
    for side in sides {
        side.server
            .stop()
            .map_err(|e| format!("{}: {e}", side.name))?;
    }

    println!();
    println!(
        "parasol-bench --compare-exports, {}, {} cores, {}; {} domains pre-loaded on each side; \
         peak RSS: {}",
        parasol::timefmt::rfc3339(parasol::timefmt::now()),
        ncores,
        if pinned {
            "both servers pinned to cpu 0, load generator to cpu 1"
        } else {
            "not pinned"
        },
        opts.domains,
        peaks.join(", ")
    );
    println!();
    println!(
        "| workload | unit | exports off | exports on | on / off, all windows | median of the rounds' on / off (min-max) | server CPU us per unit, off / on (until idle) |"
    );
    println!("|---|---|---:|---:|---:|---|---|");
    for m in results {
        let [off, on] = &m.stats;
        let mut ratios: Vec<f64> = off
            .iter()
            .zip(on)
            .map(|(a, b)| m.rate(b) / m.rate(a))
            .collect();
        ratios.sort_by(f64::total_cmp);
        let n = ratios.len();
        let median = if n == 0 {
            f64::NAN
        } else {
            (ratios[(n - 1) / 2] + ratios[n / 2]) / 2.0
        };
        let (low, high) = (
            ratios.first().copied().unwrap_or(f64::NAN),
            ratios.last().copied().unwrap_or(f64::NAN),
        );
        let (off, on) = (Stats::combined(off.clone()), Stats::combined(on.clone()));
        let ratio = m.rate(&on) / m.rate(&off);
        let (shown, met) = run::against(ratio * 100.0, 1, |p| p >= 90.0);
        let (m_shown, m_met) = run::against(median * 100.0, 1, |p| p >= 90.0);
        let (cpu_off, cpu_on) = (m.cpu_us(0, &off), m.cpu_us(1, &on));
        println!(
            "| {} | {} | {:.0} | {:.0} | {shown}% (>= 90%: {met}) | {m_shown}% (>= 90%: {m_met}) ({:.1}-{:.1}%) | {cpu_off:.1} / {cpu_on:.1} ({:+.1}%) |",
            m.what,
            if m.events { "events/s" } else { "req/s" },
            m.rate(&off),
            m.rate(&on),
            low * 100.0,
            high * 100.0,
            (cpu_on / cpu_off - 1.0) * 100.0
        );
    }
    Ok(())
}

/// One workload's windows on both sides (0: exports off, 1: on) and their CPU seconds.
struct Measured {
    what: String,
    /// Counted in events (ingest), else in requests.
    events: bool,
    stats: [Vec<Stats>; 2],
    cpu: [f64; 2],
}

impl Measured {
    fn rate(&self, s: &Stats) -> f64 {
        if self.events {
            s.rate()
        } else {
            s.req_rate()
        }
    }

    /// Server CPU microseconds per unit on side `i`.
    fn cpu_us(&self, i: usize, s: &Stats) -> f64 {
        let units = if self.events { s.units } else { s.ok };
        self.cpu[i] * 1e6 / units.max(1) as f64
    }
}

/// How long neither server may have used more than 2% of a core (over each 200 ms) before a
/// window starts or ends, so that a window starts with the previous one's work done. Longer than
/// the exporter's pause between two rounds after a short round (`INTERVAL`, or `BUSY_SHARE` times
/// the round's time): a quiet spell that ended only because the exporter was waiting would charge
/// its last round to the next window, perhaps the other server's.
const QUIET: Duration = Duration::from_millis(1600);
