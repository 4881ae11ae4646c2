//! `parasol-bench --compare-binaries A,B,...`: several `parasol` binaries (e.g. an old commit's
//! build and the current one) and a bare hyper server, measured in one run over plain HTTP, in
//! alternating windows, so that the machine's drift falls on all of them alike. Each binary
//! serves its own fresh data directory with the demo world (`serve --demo --plain-http`), so that
//! builds with different schemas can be compared. Every server runs on the server core, the load
//! generator on the other.
//!
//! Workloads: single events (90% naming one of 1,000 names, 64 connections, closed loop: the
//! bare server answers them with a 202 and does nothing else), 1 MiB batches of new names (4
//! clients), and page 1 of the list (cached), each a window per server per round. A window's CPU
//! time is the server's from the window's start until it is idle again. The table gives each
//! server's rate and CPU per unit, the median of the rounds, and each binary's ratio to the
//! bare server's CPU per request.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::load::{self, Pace, Req, Source, Stats, Target};
use crate::run::{cores, note, pin_current_thread, proc_cpu_secs, ChildProc};
use crate::{data, run};

/// What `--compare-binaries` runs.
pub struct AbOptions {
    pub binaries: Vec<PathBuf>,
    pub rounds: usize,
    pub seconds: f64,
    pub connections: usize,
    pub ingest_batches: u64,
    pub pin: bool,
    pub only: Option<Vec<String>>,
    pub serve_args: Vec<String>,
}

/// One server under test.
struct Side {
    name: String,
    server: ChildProc,
    target: Target,
    /// The demo organization's customer key (none for the bare server).
    key: String,
}

/// The first non-empty `customerKey` in a demo credentials file.
pub(crate) fn demo_key(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Object(m) => m
            .get("customerKey")
            .and_then(|k| k.as_str())
            .filter(|k| !k.is_empty())
            .map(str::to_string)
            .or_else(|| m.values().find_map(demo_key)),
        serde_json::Value::Array(a) => a.iter().find_map(demo_key),
        _ => None,
    }
}

fn start_binary(
    bin: &Path,
    dir: &Path,
    cpu: Option<usize>,
    extra: &[String],
) -> Result<Side, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let dir_arg = dir.to_string_lossy().into_owned();
    let mut args = vec![
        "serve",
        "--demo",
        "--plain-http",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir_arg.as_str(),
    ];
    args.extend(extra.iter().map(String::as_str));
    let (server, _) = ChildProc::spawn(bin, &args, cpu, "ready: serving ", false)?;
    let creds = dir.join("demo-credentials.json");
    let text = std::fs::read_to_string(&creds).map_err(|e| format!("{creds:?}: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{creds:?}: {e}"))?;
    let key = demo_key(&v).ok_or_else(|| format!("{creds:?}: no customerKey"))?;
    Ok(Side {
        name: bin.display().to_string(),
        target: Target::plain(server.addr),
        server,
        key,
    })
}

/// A workload of the comparison.
#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Single,
    Ingest,
    Page1,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Single => "single",
            Workload::Ingest => "ingest",
            Workload::Page1 => "list",
        }
    }
}

pub fn compare(opts: &AbOptions, dir: &Path) -> Result<(), String> {
    let ncores = cores();
    let pinned = opts.pin && ncores >= 2 && pin_current_thread(run::CLIENT_CPU);
    let cpu = pinned.then_some(run::SERVER_CPU);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;

    // The bare server first, then the binaries in the order given.
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let (bare, _) = ChildProc::spawn(&me, &["--serve-bare"], cpu, "ready ", true)?;
    let mut sides = vec![Side {
        name: "bare hyper server (202, nothing else)".into(),
        target: Target::plain(bare.addr),
        server: bare,
        key: String::new(),
    }];
    for (i, bin) in opts.binaries.iter().enumerate() {
        sides.push(start_binary(
            bin,
            &dir.join(format!("server-{i}")),
            cpu,
            &opts.serve_args,
        )?);
    }

    let (_, batch_events) = data::batch(
        (0..).map(|n| (data::domain(7, n), n)),
        data::MAX_BATCH_BYTES,
    );
    let window = Duration::from_secs_f64(opts.seconds);
    let conns = opts.connections;
    let ic = 4usize;
    let single = |key: &str, window: u64| -> Source {
        let path = format!("/1.0/events?customerKey={key}");
        Arc::new(move |w, n| {
            let i = window << 40 | (w as u64) << 32 | n;
            let r = data::mix(i ^ 33 << 48);
            let name = if r.is_multiple_of(10) {
                data::domain(33, i)
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
    let batches_per_window = opts.ingest_batches.max(1);
    let ingest = |key: &str, window: u64| -> Source {
        let path = format!("/1.0/events?customerKey={key}");
        let batches: Arc<Vec<Bytes>> = Arc::new(
            (0..batches_per_window)
                .map(|b| {
                    let first = (window * batches_per_window + b) * batch_events;
                    data::batch(
                        (first..).map(|n| (data::domain(34, n), n)),
                        data::MAX_BATCH_BYTES,
                    )
                    .0
                })
                .collect(),
        );
        Arc::new(move |w, n| {
            let body = batches.get(n as usize * ic + w)?.clone();
            Some(Req::post(path.clone(), body, 202, batch_events))
        })
    };
    let page1 = |key: &str| -> Source {
        let path = format!("/1.0/domains?customerKey={key}&page=1&limit=200");
        Arc::new(move |_, _| Some(Req::get(path.clone())))
    };

    // A warm-up window of single events on every binary: the hot names get listed.
    for side in sides.iter().skip(1) {
        runtime.block_on(load::run(
            &side.target,
            conns,
            Duration::from_secs(1),
            Pace::Closed,
            single(&side.key, 999),
        ));
    }

    let mut tables = Vec::new();
    for workload in [Workload::Single, Workload::Ingest, Workload::Page1] {
        if !opts
            .only
            .as_ref()
            .is_none_or(|o| o.iter().any(|x| x == workload.name()))
        {
            continue;
        }
        let first = usize::from(workload != Workload::Single);
        // rates[side][round], cpu per unit[side][round]
        let mut rates = vec![Vec::new(); sides.len()];
        let mut cpus = vec![Vec::new(); sides.len()];
        for round in 0..opts.rounds {
            // Each round in a new order (rotated), so that none always goes first.
            let n = sides.len() - first;
            for k in 0..n {
                let i = first + (k + round) % n;
                let side = &sides[i];
                settle(&sides)?;
                let before = proc_cpu_secs(side.server.pid());
                let s: Stats = match workload {
                    Workload::Single => runtime.block_on(load::run(
                        &side.target,
                        conns,
                        window,
                        Pace::Closed,
                        single(&side.key, round as u64),
                    )),
                    Workload::Ingest => runtime.block_on(load::run(
                        &side.target,
                        ic,
                        Duration::from_secs(3600),
                        Pace::Closed,
                        ingest(&side.key, round as u64),
                    )),
                    Workload::Page1 => runtime.block_on(load::run(
                        &side.target,
                        conns,
                        window,
                        Pace::Closed,
                        page1(&side.key),
                    )),
                };
                settle(&sides)?;
                let cpu = proc_cpu_secs(side.server.pid())
                    .zip(before)
                    .map_or(f64::NAN, |(a, b)| a - b);
                if s.errors > 0 {
                    return Err(format!(
                        "{} on {}: {} errors; first: {:?}",
                        workload.name(),
                        side.name,
                        s.errors,
                        s.first_error
                    ));
                }
                let (rate, units) = if workload == Workload::Ingest {
                    (s.rate(), s.units)
                } else {
                    (s.req_rate(), s.ok)
                };
                let per = cpu * 1e6 / units.max(1) as f64;
                note(format!(
                    "{} round {round}, {}: {rate:.0}/s, {per:.2} us CPU a unit",
                    workload.name(),
                    side.name
                ));
                rates[i].push(rate);
                cpus[i].push(per);
            }
        }
        tables.push((workload, rates, cpus));
    }
    // The bare server has no graceful stop: it is killed when dropped.
    for side in sides.into_iter().skip(1) {
        side.server
            .stop()
            .map_err(|e| format!("{}: {e}", side.name))?;
    }

    println!();
    println!(
        "parasol-bench --compare-binaries, {}, {ncores} cores, {}, plain HTTP, {} rounds of \
         alternating windows ({} s; ingest {} batches of {batch_events} events, 4 clients), \
         medians of the rounds",
        parasol::timefmt::rfc3339(parasol::timefmt::now()),
        if pinned {
            "servers pinned to cpu 0, load generator to cpu 1"
        } else {
            "not pinned"
        },
        opts.rounds,
        opts.seconds,
        batches_per_window,
    );
    println!();
    println!("| workload | server | rate (median) | CPU us per unit (median, min-max) | CPU / bare server's |");
    println!("|---|---|---:|---:|---:|");
    for (workload, rates, cpus) in tables {
        let bare_cpu = median(&cpus[0]);
        for (i, (r, c)) in rates.iter().zip(&cpus).enumerate() {
            if r.is_empty() {
                continue;
            }
            let ratio = if workload == Workload::Single && i > 0 {
                format!("{:.2}x", median(c) / bare_cpu)
            } else {
                String::new()
            };
            println!(
                "| {} | {} | {:.0} {} | {:.2} ({:.2}-{:.2}) | {ratio} |",
                workload.name(),
                name_of(i, opts),
                median(r),
                if workload == Workload::Ingest {
                    "events/s"
                } else {
                    "req/s"
                },
                median(c),
                c.iter().copied().fold(f64::INFINITY, f64::min),
                c.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            );
        }
    }
    Ok(())
}

fn name_of(i: usize, opts: &AbOptions) -> String {
    if i == 0 {
        "bare hyper server".into()
    } else {
        opts.binaries[i - 1].display().to_string()
    }
}

/// The median of `v` (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n => (s[(n - 1) / 2] + s[n / 2]) / 2.0,
    }
}

/// Waits until no server has used more than 2% of a core over 200 ms (at most 60 s).
fn settle(sides: &[Side]) -> Result<(), String> {
    let watched = crate::settle::Watched {
        plain: sides.iter().map(|s| s.server.pid()).collect(),
        trees: Vec::new(),
    };
    watched.settle()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_key_is_found_anywhere_in_the_file() {
        let v = serde_json::json!({"orgs": [{"customerKey": ""}, {"x": {"customerKey": "k"}}]});
        assert_eq!(demo_key(&v).as_deref(), Some("k"));
        assert_eq!(demo_key(&serde_json::json!({"a": 1})), None);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
