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
//! request changes a list), closed loop. The figure is B's rate over A's, over all windows.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::load::{self, Pace, Req, Source, Stats, Target};
use crate::run::{cores, note, pin_current_thread, proc_cpu_secs, ChildProc, Options};
use crate::{data, run};

/// Windows per workload and server.
const ROUNDS: usize = 6;

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
            let r = data::mix(i ^ 31 << 48);
            let name = if r.is_multiple_of(10) {
                data::domain(31, i)
            } else {
                data::domain(data::SPACE_HOT, r % data::HOT_DOMAINS)
            };
            Some(Req::post(
                path.clone(),
                Bytes::from(data::event_json(&name, i)),
                202,
                1,
            ))
        })
    };

    let window = Duration::from_secs_f64(opts.seconds / 2.0);
    let mut results: Vec<(String, &'static str, [Vec<Stats>; 2])> = Vec::new();
    for workload in ["ingest", "single"] {
        if !opts
            .only
            .as_ref()
            .is_none_or(|o| o.iter().any(|x| x == workload))
        {
            continue;
        }
        let mut stats: [Vec<Stats>; 2] = [Vec::new(), Vec::new()];
        for round in 0..ROUNDS {
            // A then B, then B then A: neither always goes first.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                settle(&sides)?;
                let side = &sides[i];
                let s = match workload {
                    "ingest" => runtime.block_on(load::run(
                        &side.target,
                        ic,
                        Duration::from_secs(3600),
                        Pace::Closed,
                        ingest(&side.world.ingest_key, batches(40 + i as u64, round as u64)),
                    )),
                    _ => runtime.block_on(load::run(
                        &side.target,
                        opts.connections,
                        window,
                        Pace::Closed,
                        single(&side.world.mixed_key, round as u64),
                    )),
                };
                if s.errors > 0 {
                    return Err(format!(
                        "{workload} on {}: {} errors; first: {:?}",
                        side.name, s.errors, s.first_error
                    ));
                }
                note(format!(
                    "{workload} round {round}, {}: {:.0} {}/s",
                    side.name,
                    if workload == "ingest" {
                        s.rate()
                    } else {
                        s.req_rate()
                    },
                    if workload == "ingest" {
                        "events"
                    } else {
                        "requests"
                    }
                ));
                stats[i].push(s);
            }
        }
        let what = match workload {
            "ingest" => format!(
                "ingest new domains, 1 MiB x {batch_events} ev, {ic} clients, {ROUNDS} windows of {per_window} batches"
            ),
            _ => format!(
                "single events, 10% new domains, closed loop, {} conns, {ROUNDS} windows of {} s",
                opts.connections,
                window.as_secs_f64()
            ),
        };
        results.push((
            what,
            if workload == "ingest" {
                "events/s"
            } else {
                "req/s"
            },
            stats,
        ));
    }
    for side in sides {
        side.server
            .stop()
            .map_err(|e| format!("{}: {e}", side.name))?;
    }

    println!();
    println!(
        "parasol-bench --compare-exports, {}, {} cores, {}; {} domains pre-loaded on each side",
        parasol::timefmt::rfc3339(parasol::timefmt::now()),
        ncores,
        if pinned {
            "both servers pinned to cpu 0, load generator to cpu 1"
        } else {
            "not pinned"
        },
        opts.domains
    );
    println!();
    println!(
        "| workload | unit | exports off | exports on | on / off | windows on / off (min-max) |"
    );
    println!("|---|---|---:|---:|---:|---|");
    for (what, unit, [off, on]) in results {
        let rate = |s: &Stats| {
            if unit == "events/s" {
                s.rate()
            } else {
                s.req_rate()
            }
        };
        let ratios: Vec<f64> = off
            .iter()
            .zip(&on)
            .map(|(a, b)| rate(b) / rate(a))
            .collect();
        let (low, high) = ratios
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
        let (off, on) = (Stats::combined(off), Stats::combined(on));
        let ratio = rate(&on) / rate(&off);
        let (shown, met) = run::against(ratio * 100.0, 1, |p| p >= 90.0);
        println!(
            "| {what} | {unit} | {:.0} | {:.0} | {shown}% (>= 90%: {met}) | {:.1}-{:.1}% |",
            rate(&off),
            rate(&on),
            low * 100.0,
            high * 100.0
        );
    }
    Ok(())
}

/// Waits until neither server has used more than 2% of a core over the last 200 ms (at most 60 s,
/// then goes on), so that a window starts with the previous one's work done.
fn settle(sides: &[Side]) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let cpu = || -> Option<f64> {
        sides
            .iter()
            .map(|s| proc_cpu_secs(s.server.pid()))
            .sum::<Option<f64>>()
    };
    let mut before = cpu();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let now = cpu();
        match (before, now) {
            (Some(b), Some(n)) if n - b <= 0.004 => return Ok(()),
            (None, _) | (_, None) => return Err("cannot read the servers' CPU time".into()),
            _ => before = now,
        }
    }
    note("the servers were still busy after 60 s; going on");
    Ok(())
}
