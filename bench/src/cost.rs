//! The cost guard (`parasol-bench --cost`): instructions per request of a fixed, scripted mix,
//! counted by valgrind's callgrind, so that a change in the server's CPU cost shows as a figure
//! that repeats from run to run on a loaded machine, where timed windows cannot tell 5% apart.
//!
//! The server runs under callgrind on one core (one runtime worker), on a fresh data directory
//! with a small pre-loaded list, serving plain HTTP. This program drives it from outside over one
//! keep-alive connection per phase, one request at a time. Each phase first sends a few warm-up
//! requests (connection set-up, caches, statements prepared), then asks callgrind to dump its
//! counters (`callgrind_control --dump`, which also zeroes them), sends its measured requests and
//! dumps again: the second dump holds the instructions of those requests alone, in every thread
//! of the server (the runtime's, the writer's, the bulk threads'). What the idle server does meanwhile
//! (its timers) is measured in an idle phase of its own and subtracted, per second of the phase.
//!
//! The figures are compared with a committed baseline (`bench/cost/baseline.json`): a figure more
//! than `TOLERANCE_PCT` over its baseline fails the guard. `--cost-update` rewrites the baseline
//! from the run: committing the new file is how a change of cost is accepted, and that commit's
//! message says why.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
use serde_json::{json, Value};

use crate::data;
use crate::load::{Req, Target};
use crate::run::ChildProc;

/// A figure may grow by this much over its baseline before the guard fails, in percent.
pub const TOLERANCE_PCT: u64 = 3;

/// Domains pre-loaded into the list customer: 100 pages of 200.
const LIST_DOMAINS: u64 = 20_000;
/// Page size of the list phases.
const LIST_LIMIT: u64 = 200;

/// One phase of the mix.
struct Phase {
    /// The figure's name in the table and the baseline.
    name: &'static str,
    /// What one unit is ("request" or "event").
    unit: &'static str,
    /// Requests sent before the measured ones.
    warm: u64,
    /// Requests measured.
    measured: u64,
    /// Writes: one request every this long (see `WRITE_SPACING`); reads go back to back.
    spacing: Option<Duration>,
    /// The `n`-th request of the phase (warm-up ones first).
    request: Box<dyn Fn(u64) -> Req>,
}

/// What the guard measured for one phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub name: String,
    pub unit: String,
    /// Instructions per unit, the idle server's share taken out.
    pub instructions: u64,
}

/// Options of `--cost`.
pub struct CostOptions {
    /// The `parasol` binary.
    pub binary: PathBuf,
    /// The baseline file.
    pub baseline: PathBuf,
    /// Rewrite the baseline instead of comparing.
    pub update: bool,
    /// Only the event kinds, on the demo world of `serve --demo` instead of a pre-loaded list,
    /// printed and not compared: for builds whose database the current store cannot prepare
    /// (older schemas), e.g. when looking for the change that made a request dearer.
    pub demo: bool,
    /// Where to keep callgrind's dump files (the run's directory is removed afterwards).
    pub keep: Option<PathBuf>,
}

/// Runs the guard; `Ok(true)` when every figure is within its bound (or the baseline was
/// rewritten).
pub fn run(opts: &CostOptions) -> Result<bool, String> {
    let dir = std::env::temp_dir().join(format!("parasol-cost-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = measure(opts, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let figures = result?;
    if opts.demo {
        print!("{}", table(&figures, None));
        return Ok(true);
    }
    let toolchain = Toolchain::current();
    if opts.update {
        let text = baseline_json(&figures, &toolchain);
        std::fs::write(&opts.baseline, text)
            .map_err(|e| format!("{}: {e}", opts.baseline.display()))?;
        print!("{}", table(&figures, None));
        println!(
            "cost: wrote {} ({}, {}); commit it with a message that says why the figures moved",
            opts.baseline.display(),
            toolchain.rustc,
            toolchain.valgrind
        );
        return Ok(true);
    }
    let text = std::fs::read_to_string(&opts.baseline).map_err(|e| {
        format!(
            "{}: {e} (make one with .ci/cost-guard --update)",
            opts.baseline.display()
        )
    })?;
    let baseline = parse_baseline(&text)?;
    if baseline.toolchain != toolchain {
        println!(
            "cost: NOTE: the baseline was measured with {} and {}, this run with {} and {}: \
             a new compiler alone moves these figures; compared all the same (if the toolchain \
             change is the reason, rewrite the baseline with --update in the commit that changes \
             the toolchain)",
            baseline.toolchain.rustc,
            baseline.toolchain.valgrind,
            toolchain.rustc,
            toolchain.valgrind
        );
    }
    print!("{}", table(&figures, Some(&baseline.figures)));
    let verdicts = compare(&figures, &baseline.figures);
    for v in &verdicts {
        println!("cost: {v}");
    }
    let failed = verdicts.iter().any(Verdict::fails);
    if failed {
        println!(
            "cost: FAILED: a figure grew more than {TOLERANCE_PCT}% over {}; if the cost is \
             accepted, run .ci/cost-guard --update and commit the baseline with the reason",
            opts.baseline.display()
        );
    } else {
        println!("cost: every figure within {TOLERANCE_PCT}% of the baseline");
    }
    Ok(!failed)
}

/// The compiler and valgrind that made the figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Toolchain {
    pub rustc: String,
    pub valgrind: String,
}

impl Toolchain {
    fn current() -> Toolchain {
        let version = |cmd: &str, arg: &str| {
            Command::new(cmd)
                .arg(arg)
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| format!("{cmd}: unknown"))
        };
        Toolchain {
            rustc: version("rustc", "-V"),
            valgrind: version("valgrind", "--version"),
        }
    }
}

/// A parsed baseline file.
pub struct Baseline {
    pub toolchain: Toolchain,
    pub figures: Vec<Figure>,
}

/// The baseline file's text for `figures`.
pub fn baseline_json(figures: &[Figure], toolchain: &Toolchain) -> String {
    let list: Vec<Value> = figures
        .iter()
        .map(|f| json!({"name": f.name, "unit": f.unit, "instructions": f.instructions}))
        .collect();
    let v = json!({
        "about": "Instructions per unit of parasol-bench --cost's mix (callgrind, release build); \
                  written by .ci/cost-guard --update, compared by .ci/cost-guard",
        "rustc": toolchain.rustc,
        "valgrind": toolchain.valgrind,
        "tolerance_pct": TOLERANCE_PCT,
        "figures": list,
    });
    let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
    s.push('\n');
    s
}

/// Reads a baseline file written by `baseline_json`.
pub fn parse_baseline(text: &str) -> Result<Baseline, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("baseline: {e}"))?;
    let s = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("baseline: no {k:?}"))
    };
    let toolchain = Toolchain {
        rustc: s("rustc")?,
        valgrind: s("valgrind")?,
    };
    let mut figures = Vec::new();
    for f in v
        .get("figures")
        .and_then(Value::as_array)
        .ok_or("baseline: no \"figures\" list")?
    {
        let field = |k: &str| {
            f.get(k)
                .ok_or_else(|| format!("baseline: a figure without {k:?}"))
        };
        figures.push(Figure {
            name: field("name")?.as_str().ok_or("baseline: a name")?.into(),
            unit: field("unit")?.as_str().ok_or("baseline: a unit")?.into(),
            instructions: field("instructions")?
                .as_u64()
                .ok_or("baseline: instructions")?,
        });
    }
    Ok(Baseline { toolchain, figures })
}

/// The outcome of one figure against the baseline.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Within {
        name: String,
        change_pct: f64,
    },
    Grew {
        name: String,
        change_pct: f64,
    },
    /// Cheaper by more than the tolerance: passes, and says the baseline may be lowered.
    Fell {
        name: String,
        change_pct: f64,
    },
    NotInBaseline {
        name: String,
    },
    NotMeasured {
        name: String,
    },
}

impl Verdict {
    pub fn fails(&self) -> bool {
        matches!(
            self,
            Verdict::Grew { .. } | Verdict::NotInBaseline { .. } | Verdict::NotMeasured { .. }
        )
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Within { name, change_pct } => write!(f, "{name}: {change_pct:+.2}%, within"),
            Verdict::Grew { name, change_pct } => write!(
                f,
                "{name}: {change_pct:+.2}%, GREW more than {TOLERANCE_PCT}%: fails"
            ),
            Verdict::Fell { name, change_pct } => write!(
                f,
                "{name}: {change_pct:+.2}%, cheaper (run --update to hold the new figure)"
            ),
            Verdict::NotInBaseline { name } => {
                write!(f, "{name}: not in the baseline: fails (run --update)")
            }
            Verdict::NotMeasured { name } => {
                write!(
                    f,
                    "{name}: in the baseline but not measured: fails (run --update)"
                )
            }
        }
    }
}

/// Each measured figure against its baseline, then the baseline's figures not measured.
pub fn compare(now: &[Figure], baseline: &[Figure]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for f in now {
        let name = f.name.clone();
        match baseline
            .iter()
            .find(|b| b.name == f.name && b.unit == f.unit)
        {
            None => out.push(Verdict::NotInBaseline { name }),
            Some(b) => {
                let change_pct =
                    (f.instructions as f64 / b.instructions.max(1) as f64 - 1.0) * 100.0;
                // In integers: exactly 3% more is within, any more is not.
                let (now, base) = (u128::from(f.instructions), u128::from(b.instructions));
                out.push(if now * 100 > base * u128::from(100 + TOLERANCE_PCT) {
                    Verdict::Grew { name, change_pct }
                } else if now * 100 < base * u128::from(100 - TOLERANCE_PCT) {
                    Verdict::Fell { name, change_pct }
                } else {
                    Verdict::Within { name, change_pct }
                });
            }
        }
    }
    for b in baseline {
        if !now.iter().any(|f| f.name == b.name && f.unit == b.unit) {
            out.push(Verdict::NotMeasured {
                name: b.name.clone(),
            });
        }
    }
    out
}

/// The figures as a Markdown table, with the baseline's beside them if given.
pub fn table(figures: &[Figure], baseline: Option<&[Figure]>) -> String {
    let mut s = String::from("| request kind | instructions per unit | baseline | change |\n");
    s.push_str("|---|---:|---:|---:|\n");
    for f in figures {
        let b = baseline.and_then(|b| b.iter().find(|b| b.name == f.name && b.unit == f.unit));
        let (base, change) = match b {
            Some(b) => (
                b.instructions.to_string(),
                format!(
                    "{:+.2}%",
                    (f.instructions as f64 / b.instructions.max(1) as f64 - 1.0) * 100.0
                ),
            ),
            None => (String::new(), String::new()),
        };
        s.push_str(&format!(
            "| {} (per {}) | {} | {base} | {change} |\n",
            f.name, f.unit, f.instructions
        ));
    }
    s
}

/// The first CPU this process may run on: the server runs there alone.
fn first_cpu() -> usize {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            for cpu in 0..libc::CPU_SETSIZE as usize {
                if libc::CPU_ISSET(cpu, &set) {
                    return cpu;
                }
            }
        }
    }
    0
}

/// The callgrind output directory's dump files, by name.
fn dumps(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("callgrind.out"))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// The instructions a callgrind dump file counted (its `totals:` or `summary:` line).
pub fn dump_total(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// Asks callgrind in process `pid` to dump and zero its counters; returns the instructions
/// counted since the previous dump.
/// With `keep`, the dump file is kept there as `LABEL.callgrind`.
fn dump(pid: u32, out_dir: &Path, label: &str, keep: Option<&Path>) -> Result<u64, String> {
    let before = dumps(out_dir);
    let status = Command::new("callgrind_control")
        .arg(format!("--dump={label}"))
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("callgrind_control: {e}"))?;
    if !status.success() {
        return Err(format!("callgrind_control --dump failed: {status}"));
    }
    // The dump is written before callgrind_control returns; the file is found by its new name.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let new: Vec<PathBuf> = dumps(out_dir)
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        if let [file] = new.as_slice() {
            let text = std::fs::read_to_string(file).map_err(|e| format!("{file:?}: {e}"))?;
            if let Some(total) = dump_total(&text) {
                if let Some(keep) = keep {
                    let to = keep.join(format!("{label}.callgrind"));
                    std::fs::create_dir_all(keep)
                        .and_then(|()| std::fs::copy(file, &to))
                        .map_err(|e| format!("{}: {e}", to.display()))?;
                }
                let _ = std::fs::remove_file(file);
                return Ok(total);
            }
        } else if new.len() > 1 {
            return Err(format!("more than one new callgrind dump: {new:?}"));
        }
        if Instant::now() > deadline {
            return Err(format!("no callgrind dump for {label} within 30 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends requests `range` of `phase` one at a time over one connection; returns the units sent
/// and, for a phase of spaced writes, how many writes could not keep to their spacing.
async fn send_phase(
    target: &Target,
    sender: &mut Option<SendRequest<Full<Bytes>>>,
    phase: &Phase,
    range: std::ops::Range<u64>,
) -> Result<(u64, u64), String> {
    let mut units = 0;
    let mut overruns = 0;
    let start = tokio::time::Instant::now();
    let mut answered: Option<tokio::time::Instant> = None;
    for (k, n) in range.enumerate() {
        if let Some(every) = phase.spacing {
            let slot = start + every * k as u32;
            let quiet = answered.map_or(slot, |a| a + WRITE_QUIET);
            if quiet > slot {
                overruns += 1;
            }
            tokio::time::sleep_until(slot.max(quiet)).await;
        }
        let s = match sender {
            Some(s) => s,
            None => sender.insert(target.connect().await?),
        };
        let req = (phase.request)(n);
        let (expect, u) = (req.expect, req.units);
        let (status, _) = target.send(s, req).await?;
        answered = Some(tokio::time::Instant::now());
        if status != expect {
            return Err(format!(
                "{}: request {n} answered {status}, expected {expect}",
                phase.name
            ));
        }
        units += u;
    }
    Ok((units, overruns))
}

/// The mix: every phase's requests.
fn phases(world: &data::World) -> Vec<Phase> {
    let events = |key: &str| format!("/1.0/events?customerKey={key}");
    let single_new = events(&world.ingest_key);
    let single_repeat = events(&world.mixed_key);
    let batch_path = events(&world.ingest_key);
    let refused_key = events("00000000-0000-4000-8000-00000000c057");
    let bad_event = events(&world.mixed_key);
    let list_key = world.list_key.clone();
    let deep_key = world.list_key.clone();
    let org = world.mgmt_org;
    let auth: Arc<str> = Arc::from(world.mgmt_auth.as_str());
    let auth2 = auth.clone();
    let repeated = data::domain(data::SPACE_HOT, 7);
    vec![
        Phase {
            name: "single event, new name",
            unit: "request",
            warm: 5,
            measured: 60,
            spacing: Some(WRITE_SPACING),
            request: Box::new(move |n| {
                let body = data::event_json(&data::domain(30, n), n);
                Req::post(single_new.clone(), Bytes::from(body), 202, 1)
            }),
        },
        Phase {
            name: "single event, repeated name",
            unit: "request",
            warm: 5,
            measured: 60,
            spacing: Some(WRITE_SPACING),
            request: Box::new(move |n| {
                let body = data::event_json(&repeated, n);
                Req::post(single_repeat.clone(), Bytes::from(body), 202, 1)
            }),
        },
        Phase {
            name: "1 MiB batch of new names",
            unit: "event",
            warm: 1,
            measured: 3,
            spacing: None,
            request: Box::new(move |n| {
                let names = (n * 10_000..).map(|i| (data::domain(31, i), i));
                let (body, count) = data::batch(names, data::MAX_BATCH_BYTES);
                Req::post(batch_path.clone(), body, 202, count)
            }),
        },
        Phase {
            name: "domain list, page 1 (cached)",
            unit: "request",
            warm: 5,
            measured: 100,
            spacing: None,
            request: Box::new(move |_| {
                Req::get(format!(
                    "/1.0/domains?customerKey={list_key}&page=1&limit={LIST_LIMIT}"
                ))
            }),
        },
        Phase {
            name: "domain list, deep page (uncached)",
            unit: "request",
            warm: 2,
            measured: 40,
            spacing: None,
            request: Box::new(move |n| {
                // Pages 51-92 of 100, each asked once: none is in the page cache.
                let page = LIST_DOMAINS / LIST_LIMIT / 2 + 1 + n;
                Req::get(format!(
                    "/1.0/domains?customerKey={deep_key}&page={page}&limit={LIST_LIMIT}"
                ))
            }),
        },
        Phase {
            name: "management GET sites",
            unit: "request",
            warm: 3,
            measured: 40,
            spacing: None,
            request: Box::new(move |_| Req {
                auth: Some(auth.clone()),
                ..Req::get(format!("/v1/organizations/{org}/sites"))
            }),
        },
        Phase {
            name: "management POST site",
            unit: "request",
            warm: 3,
            measured: 40,
            spacing: Some(WRITE_SPACING),
            request: Box::new(move |n| Req {
                auth: Some(auth2.clone()),
                ..Req::post(
                    format!("/v1/organizations/{org}/sites"),
                    Bytes::from(format!(r#"{{"name":"cost site {n}"}}"#)),
                    200,
                    1,
                )
            }),
        },
        Phase {
            name: "refused event (400)",
            unit: "request",
            warm: 5,
            measured: 100,
            spacing: None,
            request: Box::new(move |n| {
                let body = format!(r#"{{"deviceId":"{n}","dstDomain":"no such thing"}}"#);
                Req::post(bad_event.clone(), Bytes::from(body), 400, 1)
            }),
        },
        Phase {
            name: "refused key (403)",
            unit: "request",
            warm: 5,
            // Over 100 requests this figure moved by up to 4% between runs of the same build
            // (49.7k-53.5k): one-off work of a few hundred thousand instructions falls in the
            // phase or not (e.g. a key look-up that finds a lock held and goes to a blocking
            // thread, which may have to be started). Over 1,000 it weighs a tenth as much.
            measured: 1000,
            spacing: None,
            request: Box::new(move |n| {
                let body = data::event_json(&data::domain(32, n), n);
                Req::post(refused_key.clone(), Bytes::from(body), 403, 1)
            }),
        },
    ]
}

/// Small writes are sent on a fixed schedule, one every `WRITE_SPACING`, and each at least
/// `WRITE_QUIET` after the previous answer. A durable write's cost includes its share of the
/// background checkpoints (copying the WAL's pages into the database, on a timer every 50 ms):
/// back to back, how many writes share one pass, and so each write's share, would follow how fast
/// the machine runs the server under callgrind (figures moved by 4-8% from run to run on a loaded
/// machine). With two checkpoint periods of quiet after each write, every write gets a pass of
/// its own; with the fixed schedule, time-driven work (a listed name's `lastSeenAt`, refreshed at
/// most once a second) comes a fixed number of times per phase. A write that cannot keep to both
/// (its answer took longer than their difference) is counted and reported.
const WRITE_SPACING: Duration = Duration::from_millis(200);
const WRITE_QUIET: Duration = Duration::from_millis(120);

/// Seconds of the idle phase, whose instructions a second are taken out of every phase.
const IDLE: Duration = Duration::from_secs(3);

fn measure(opts: &CostOptions, dir: &Path) -> Result<Vec<Figure>, String> {
    let data_dir = dir.join("data");
    let out_dir = dir.join("callgrind");
    let keep = opts.keep.as_deref();
    for d in [&data_dir, &out_dir] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let rep_file = dir.join("reputation.csv");
    data::write_reputation(&rep_file, LIST_DOMAINS)?;
    let world = if opts.demo {
        None
    } else {
        Some(data::prepare(&data_dir.join("parasol.db"), LIST_DOMAINS)?)
    };

    let path = |p: &Path| {
        p.to_str()
            .map(str::to_string)
            .ok_or("temp path is not UTF-8")
    };
    let binary = path(&opts.binary)?;
    let out_file = format!("--callgrind-out-file={}/callgrind.out", path(&out_dir)?);
    let data_arg = path(&data_dir)?;
    let rep_arg = path(&rep_file)?;
    let mut args = vec![
        "--tool=callgrind",
        out_file.as_str(),
        "--dump-instr=no",
        "--dump-line=no",
        binary.as_str(),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--plain-http",
        "--data-dir",
        data_arg.as_str(),
        "--reputation",
        rep_arg.as_str(),
    ];
    if opts.demo {
        args.push("--demo");
    }
    crate::run::note("starting the server under callgrind");
    let (server, _) = ChildProc::spawn(
        Path::new("valgrind"),
        &args,
        Some(first_cpu()),
        "ready: serving ",
        false,
    )?;
    let pid = server.pid();
    let phases = match world {
        Some(world) => phases(&world),
        None => {
            let creds = data_dir.join("demo-credentials.json");
            let text = std::fs::read_to_string(&creds).map_err(|e| format!("{creds:?}: {e}"))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| format!("{creds:?}: {e}"))?;
            let key = crate::ab::demo_key(&v).ok_or("no customerKey in the demo credentials")?;
            let world = data::World {
                ingest_key: key.clone(),
                mixed_key: key.clone(),
                list_key: key,
                mgmt_org: 0,
                mgmt_auth: String::new(),
            };
            phases(&world)
                .into_iter()
                .filter(|p| !p.name.starts_with("domain list") && !p.name.starts_with("management"))
                .collect()
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;

    // The idle server's instructions a second (its timers), taken out of each phase below.
    // The first second after the ready line still holds start-up work: left out.
    std::thread::sleep(Duration::from_secs(1));
    dump(pid, &out_dir, "start-up", keep)?;
    let t = Instant::now();
    std::thread::sleep(IDLE);
    let idle = dump(pid, &out_dir, "idle", keep)? as f64 / t.elapsed().as_secs_f64();
    crate::run::note(format!("idle server: {idle:.0} instructions a second"));

    let mut figures = Vec::new();
    let target = Target::plain(server.addr());
    for (i, phase) in phases.iter().enumerate() {
        let mut sender = None;
        runtime.block_on(send_phase(&target, &mut sender, phase, 0..phase.warm))?;
        dump(pid, &out_dir, &format!("warm-{i}"), keep)?;
        let t = Instant::now();
        let (units, overruns) = runtime.block_on(send_phase(
            &target,
            &mut sender,
            phase,
            phase.warm..phase.warm + phase.measured,
        ))?;
        let total = dump(pid, &out_dir, &format!("phase-{i}"), keep)?;
        let secs = t.elapsed().as_secs_f64();
        let own = (total as f64 - idle * secs).max(0.0);
        let per = (own / units.max(1) as f64).round() as u64;
        crate::run::note(format!(
            "{}: {total} instructions for {units} {}s in {secs:.1} s, {per} each",
            phase.name, phase.unit
        ));
        if overruns > 0 {
            println!(
                "cost: NOTE: {overruns} of the {} writes of {:?} came late for their {} ms slot \
                 (the server under callgrind took over {} ms to answer): the machine is too busy \
                 for exact figures; this one may be off by several percent",
                phase.measured,
                phase.name,
                WRITE_SPACING.as_millis(),
                (WRITE_SPACING - WRITE_QUIET).as_millis()
            );
        }
        figures.push(Figure {
            name: phase.name.into(),
            unit: phase.unit.into(),
            instructions: per,
        });
        drop(sender);
    }
    let _ = std::io::stdout().flush();
    server.stop()?;
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(name: &str, instructions: u64) -> Figure {
        Figure {
            name: name.into(),
            unit: "request".into(),
            instructions,
        }
    }

    #[test]
    fn growth_past_the_tolerance_fails_and_within_passes() {
        let base = [fig("a", 100_000), fig("b", 100_000), fig("c", 100_000)];
        let now = [fig("a", 103_000), fig("b", 103_001), fig("c", 90_000)];
        let v = compare(&now, &base);
        assert!(!v[0].fails(), "{}", v[0]);
        assert!(v[1].fails(), "{}", v[1]);
        assert!(matches!(v[2], Verdict::Fell { .. }));
        assert!(!v[2].fails());
    }

    #[test]
    fn a_figure_missing_on_either_side_fails() {
        let v = compare(&[fig("new", 1)], &[fig("old", 1)]);
        assert_eq!(
            v,
            vec![
                Verdict::NotInBaseline { name: "new".into() },
                Verdict::NotMeasured { name: "old".into() }
            ]
        );
        assert!(v.iter().all(Verdict::fails));
    }

    #[test]
    fn the_baseline_file_reads_back() {
        let t = Toolchain {
            rustc: "rustc 1.0.0".into(),
            valgrind: "valgrind-3.19.0".into(),
        };
        let figures = vec![fig("single event, new name", 123_456), fig("x", 7)];
        let b = parse_baseline(&baseline_json(&figures, &t)).unwrap();
        assert_eq!(b.toolchain, t);
        assert_eq!(b.figures, figures);
    }

    #[test]
    fn a_dump_files_total_is_read() {
        let text = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\n\nfn=(1) main\n3 5\n\ntotals: 98765\n";
        assert_eq!(dump_total(text), Some(98_765));
        assert_eq!(dump_total("summary: 12\n"), Some(12));
        assert_eq!(dump_total("events: Ir\n"), None);
    }
}
