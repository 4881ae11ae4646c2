//! `parasol-bench --compare-binaries A,B,...`: several `parasol` binaries (e.g. an old commit's
//! build and the current one) measured in one run over plain HTTP, in alternating windows, so
//! that the machine's drift falls on all of them alike, beside a bare hyper server (single events)
//! and, on PostgreSQL, a plain tokio-postgres loop (ingest). Each binary serves a world of its
//! own that it made itself (`serve --demo --plain-http`: a fresh data directory, and with
//! `--database` a fresh database that the binary migrates), so that builds with different
//! schemas can be compared; each side's database is vacuumed before each of its windows
//! (`postgres::vacuum`). Every server runs on the server core, the load generator on the other.
//!
//! Workloads (`--only` names them): `single` events (90% naming one of 1,000 listed names, 64
//! connections, closed loop: the bare server answers them with a 202 and does nothing else),
//! `open`, single events in an open loop at 80% of the slowest binary's closed-loop rate,
//! `ingest`, 1 MiB batches of new names (4 clients), `mix`, 1 MiB batches of which 90% name a
//! listed name, `list`, page 1 (from the page cache), `pages`, pages 1-40 and `deep`, pages
//! 60-99 (with limits 100-200, so that nearly every answer misses the page cache and is read from
//! the database), `readers`, page 1 on 8 connections while 4 clients ingest, `delete`, deletes by
//! name, and `management`, GET and POST of an organization's sites (8 connections). Each is a
//! window per server per round, the rounds in rotated orders. A window's CPU time is counted from
//! its start until every process is idle again. The table gives each server's rate, its CPU per
//! unit (the median of the rounds, with their range) and its ratio to the first binary's (and,
//! for single events, to the bare server's and to the durable bare server's: the bare server
//! answering only once each body is appended to a file and synced, in groups, which is the floor
//! under any server that answers after a durable write).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;

use crate::load::{self, Pace, Req, Source, Stats, Target};
use crate::postgres::{self, Databases};
use crate::run::{cores, note, pin_current_thread, ChildProc};
use crate::settle::{self, Watched, Window};
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
    /// PostgreSQL: a URL whose role may create databases; each binary gets one of its own.
    pub database: Option<String>,
    /// Settings of single binaries' databases: `I:NAME=VALUE` (`postgres::Databases::set`).
    pub database_set: Vec<String>,
}

/// What a side of the comparison is.
enum Kind {
    /// The bare hyper server: single events only.
    Bare,
    /// The bare hyper server answering after a durable append (`baseline::serve_bare_durable`):
    /// single events only.
    DurableBare,
    /// A `parasol` binary, with its demo world's customer key, organization and credentials.
    Binary {
        key: String,
        org: i64,
        auth: Arc<str>,
    },
    /// The plain tokio-postgres ingest loop on a database of its own: ingest only.
    Loop { url: String },
}

/// One side of the comparison.
struct Side {
    name: String,
    kind: Kind,
    /// The process serving it (none for the loop, which runs in this program).
    server: Option<ChildProc>,
    target: Option<Target>,
    /// What its windows' CPU time counts: its server.
    counted: Watched,
    /// The URL of its database (with --database), vacuumed before each of its windows.
    database: Option<String>,
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

/// The demo credentials' organization that has a customer key: its id and Basic credentials.
fn demo_org(v: &serde_json::Value) -> Option<(i64, String)> {
    let org = v
        .get("organizations")?
        .as_array()?
        .iter()
        .find(|o| o.get("customerKey").and_then(|k| k.as_str()) != Some(""))?;
    let id = org.get("id")?.as_i64()?;
    let key = org.get("apiKey")?.as_str()?;
    let secret = org.get("apiSecret")?.as_str()?;
    Some((id, data::basic_auth(key, secret)))
}

fn start_binary(
    bin: &Path,
    dir: &Path,
    database: Option<&str>,
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
    if let Some(url) = database {
        args.extend(["--database", url]);
    }
    args.extend(extra.iter().map(String::as_str));
    let (server, _) = ChildProc::spawn(bin, &args, cpu, "ready: serving ", false)?;
    let creds = dir.join("demo-credentials.json");
    let text = std::fs::read_to_string(&creds).map_err(|e| format!("{creds:?}: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{creds:?}: {e}"))?;
    let key = demo_key(&v).ok_or_else(|| format!("{creds:?}: no customerKey"))?;
    let (org, auth) = demo_org(&v).ok_or_else(|| format!("{creds:?}: no organization"))?;
    Ok(Side {
        name: bin.display().to_string(),
        kind: Kind::Binary {
            key,
            org,
            auth: Arc::from(auth),
        },
        target: Some(Target::plain(server.addr)),
        counted: Watched::of([server.pid()]),
        server: Some(server),
        database: database.map(str::to_string),
    })
}

/// A workload of the comparison.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Workload {
    Single,
    Open,
    Ingest,
    Mix,
    Page1,
    Pages,
    Deep,
    Readers,
    Delete,
    MgmtGet,
    MgmtPost,
}

const WORKLOADS: [Workload; 11] = [
    Workload::Single,
    Workload::Open,
    Workload::Ingest,
    Workload::Mix,
    Workload::Page1,
    Workload::Pages,
    Workload::Deep,
    Workload::Readers,
    Workload::Delete,
    Workload::MgmtGet,
    Workload::MgmtPost,
];

/// Connections of the readers and management workloads.
const FEW: usize = 8;
/// Ingest clients.
const INGEST_CLIENTS: usize = 4;
/// Pages of the `pages` and `deep` workloads, and the first of each.
const PAGE_SPAN: u64 = 40;
const DEEP_FIRST: u64 = 60;
/// Limits of those pages: 100 to 200 (with the page numbers, 4,040 distinct pages, many more
/// than the page cache keeps).
const LIMITS: u64 = 101;
/// Names listed before the page workloads, so that the deepest page (99 at limit 200) exists.
const PAGED_NAMES: u64 = 20_000;

impl Workload {
    /// Its name for `--only`.
    fn name(self) -> &'static str {
        match self {
            Workload::Single => "single",
            Workload::Open => "open",
            Workload::Ingest => "ingest",
            Workload::Mix => "mix",
            Workload::Page1 => "list",
            Workload::Pages => "pages",
            Workload::Deep => "deep",
            Workload::Readers => "readers",
            Workload::Delete => "delete",
            Workload::MgmtGet | Workload::MgmtPost => "management",
        }
    }

    /// Its row in the table.
    fn what(self, conns: usize) -> String {
        match self {
            Workload::Single => format!("single events, 90% listed names, closed loop, {conns} conns"),
            Workload::Open => format!("single events, open loop at 80% of the slowest binary's closed loop, {conns} conns"),
            Workload::Ingest => format!("ingest, 1 MiB batches of new names, {INGEST_CLIENTS} clients"),
            Workload::Mix => format!("ingest, 1 MiB batches, 90% listed names, {INGEST_CLIENTS} clients"),
            Workload::Page1 => format!("list page 1 (SQLite: from the page cache), {conns} conns"),
            Workload::Pages => format!("list pages 1-{PAGE_SPAN}, limits 100-200 (past the page cache), {conns} conns"),
            Workload::Deep => format!("list pages {DEEP_FIRST}-{}, limits 100-200 (past the page cache), {conns} conns", DEEP_FIRST + PAGE_SPAN - 1),
            Workload::Readers => format!("readers: page 1, {FEW} conns, while {INGEST_CLIENTS} clients ingest new names"),
            Workload::Delete => format!("delete by name, {conns} conns"),
            Workload::MgmtGet => format!("management GET /v1/organizations/ID/sites, {FEW} conns"),
            Workload::MgmtPost => format!("management POST /v1/organizations/ID/sites, {FEW} conns"),
        }
    }

    /// Counted in events (ingest), else in requests.
    fn events(self) -> bool {
        matches!(self, Workload::Ingest | Workload::Mix)
    }

    /// Whether side `kind` takes part.
    fn takes(self, kind: &Kind) -> bool {
        match kind {
            Kind::Binary { .. } => true,
            Kind::Bare | Kind::DurableBare => self == Workload::Single,
            Kind::Loop { .. } => self == Workload::Ingest,
        }
    }
}

/// One workload's windows: per side, each round's stats and CPU seconds (the side's own, the
/// database's).
struct Measured {
    workload: Workload,
    stats: Vec<Vec<Stats>>,
    cpu: Vec<Vec<[f64; 2]>>,
    /// The readers' workload: the ingest that ran beside each window, per side.
    beside: Vec<Vec<Stats>>,
}

impl Measured {
    fn units(&self, s: &Stats) -> u64 {
        if self.workload.events() {
            s.units
        } else {
            s.ok
        }
    }

    /// CPU microseconds per unit of side `i`, each round: `which` 0 for the side's own, 1 for
    /// the database's.
    fn cpu_us(&self, i: usize, which: usize) -> Vec<f64> {
        self.stats[i]
            .iter()
            .zip(&self.cpu[i])
            .map(|(s, c)| c[which] * 1e6 / self.units(s).max(1) as f64)
            .collect()
    }

    fn rates(&self, i: usize) -> Vec<f64> {
        self.stats[i]
            .iter()
            .map(|s| s.rate_in(self.workload.events()))
            .collect()
    }
}

/// Bodies and paths, made before any clock starts.
struct Loads {
    seconds: f64,
    batch_events: u64,
    per_window: u64,
    conns: usize,
}

impl Loads {
    fn events_path(key: &str) -> String {
        format!("/1.0/events?customerKey={key}")
    }

    /// Single events of window `window`: 90% one of the hot names, 10% new names.
    fn single(key: &str, window: u64) -> Source {
        let path = Self::events_path(key);
        Arc::new(move |w, n| {
            let i = window << 40 | (w as u64) << 32 | n;
            Some(Req::post(
                path.clone(),
                data::single_event(33, i, true),
                202,
                1,
            ))
        })
    }

    /// Batches `first..first + count` of name space `space` (`mixed`: 90% hot names), each with
    /// its number of events.
    fn batches(space: u64, mixed: bool, first: u64, count: u64) -> Vec<(Bytes, u64)> {
        (first..first + count)
            .map(|b| {
                let names = (b << 24..).map(|n| (data::event_name(space, n, mixed), n));
                data::batch(names, data::MAX_BATCH_BYTES)
            })
            .collect()
    }

    fn batch_source(key: &str, batches: Vec<(Bytes, u64)>, clients: usize) -> Source {
        let path = Self::events_path(key);
        Arc::new(move |w, n| {
            let (body, events) = batches.get(n as usize * clients + w)?.clone();
            Some(Req::post(path.clone(), body, 202, events))
        })
    }

    /// Pages `first..first + PAGE_SPAN` at limits 100-200, each (page, limit) once in 4,040
    /// requests.
    fn pages(key: &str, first: u64, conns: usize) -> Source {
        let key = key.to_string();
        Arc::new(move |w, n| {
            let i = n * conns as u64 + w as u64;
            let limit = 100 + i % LIMITS;
            let page = first + (i / LIMITS) % PAGE_SPAN;
            Some(Req::get(format!(
                "/1.0/domains?customerKey={key}&page={page}&limit={limit}"
            )))
        })
    }

    /// Deletes, by name, of the names `names` (listed beforehand), each once.
    fn deletes(key: &str, names: Vec<String>, conns: usize) -> Source {
        let key = key.to_string();
        Arc::new(move |w, n| {
            let name = names.get(n as usize * conns + w)?;
            Some(Req {
                method: Method::DELETE,
                path: format!("/1.0/domains?customerKey={key}&where%5Bname%5D={name}"),
                body: None,
                auth: None,
                expect: 204,
                units: 1,
            })
        })
    }

    fn management(org: i64, auth: Arc<str>, create: bool, window: u64) -> Source {
        Arc::new(move |w, n| {
            Some(Req {
                method: if create { Method::POST } else { Method::GET },
                path: format!("/v1/organizations/{org}/sites"),
                body: create
                    .then(|| Bytes::from(format!(r#"{{"name":"bench site {window}-{w}-{n}"}}"#))),
                auth: Some(auth.clone()),
                expect: 200,
                units: 1,
            })
        })
    }
}

pub fn compare(opts: &AbOptions, dir: &Path) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut dbs = Databases {
        admin: opts.database.clone().unwrap_or_default(),
        names: Vec::new(),
    };
    let result = compare_in(opts, dir, &runtime, &mut dbs);
    if opts.database.is_some() {
        runtime.block_on(dbs.drop_all());
    }
    result
}

fn compare_in(
    opts: &AbOptions,
    dir: &Path,
    runtime: &tokio::runtime::Runtime,
    dbs: &mut Databases,
) -> Result<(), String> {
    let ncores = cores();
    let pinned = opts.pin && ncores >= 2 && pin_current_thread(run::CLIENT_CPU);
    let cpu = pinned.then_some(run::SERVER_CPU);
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();

    // The bare servers first, then the binaries in the order given, then the loop.
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    // A bare server of this program's: `args` its mode, answering over plain HTTP.
    let bare_side = |args: &[&str], name: &str, kind: Kind| -> Result<Side, String> {
        let (server, _) = ChildProc::spawn(&me, args, cpu, "ready ", true)?;
        Ok(Side {
            name: name.into(),
            kind,
            target: Some(Target::plain(server.addr)),
            counted: Watched::of([server.pid()]),
            server: Some(server),
            database: None,
        })
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("{dir:?}: {e}"))?;
    let log = dir.join("bare-durable.log");
    let log_arg = log
        .to_str()
        .ok_or("the work directory's path is not UTF-8")?;
    let mut sides = vec![
        bare_side(
            &["--serve-bare"],
            "bare hyper server (202, nothing else)",
            Kind::Bare,
        )?,
        bare_side(
            &["--serve-bare-durable", log_arg],
            "durable bare server (202 once the body is synced, nothing else)",
            Kind::DurableBare,
        )?,
    ];
    let database = match &opts.database {
        Some(admin) => runtime.block_on(postgres::database_processes(admin))?,
        None => Watched::default(),
    };
    for (i, bin) in opts.binaries.iter().enumerate() {
        let settings: Vec<&str> = opts
            .database_set
            .iter()
            .filter_map(|s| s.strip_prefix(&format!("{i}:")))
            .collect();
        let url = match &opts.database {
            Some(_) => {
                let name = format!("ab_{tag}_{i}");
                let url = runtime.block_on(dbs.create(&name))?;
                for setting in &settings {
                    runtime.block_on(dbs.set(&name, setting))?;
                }
                Some(url)
            }
            None => None,
        };
        note(format!("starting {}", bin.display()));
        let mut side = start_binary(
            bin,
            &dir.join(format!("server-{i}")),
            url.as_deref(),
            cpu,
            &opts.serve_args,
        )?;
        if !settings.is_empty() {
            side.name = format!("{} (database {})", side.name, settings.join(", "));
        }
        sides.push(side);
    }
    if opts.database.is_some() {
        let url = runtime.block_on(dbs.create(&format!("ab_{tag}_loop")))?;
        runtime.block_on(postgres::with_schema(&url))?;
        sides.push(Side {
            name: "tokio-postgres loop (request row + domain rows, one tx a batch)".into(),
            kind: Kind::Loop { url: url.clone() },
            server: None,
            target: None,
            counted: Watched::default(),
            database: Some(url),
        });
    }
    let machine = Watched {
        plain: sides
            .iter()
            .filter_map(|s| s.server.as_ref().map(ChildProc::pid))
            .collect(),
        trees: database.trees.clone(),
    };

    let (_, batch_events) = data::batch(
        (0..).map(|n| (data::domain(7, n), n)),
        data::MAX_BATCH_BYTES,
    );
    let loads = Loads {
        seconds: opts.seconds,
        batch_events,
        per_window: opts.ingest_batches.max(1),
        conns: opts.connections,
    };
    // The hot names listed on every binary (one batch of them all), and a second of single
    // events each (connections, statements, caches).
    let hot: Vec<(String, u64)> = (0..data::HOT_DOMAINS)
        .map(|n| (data::domain(data::SPACE_HOT, n), n))
        .collect();
    let hot = data::batch(hot.into_iter(), data::MAX_BATCH_BYTES);
    for side in &sides {
        if let (Kind::Binary { key, .. }, Some(target)) = (&side.kind, &side.target) {
            prime(runtime, target, key, vec![hot.clone()])?;
            runtime.block_on(load::run(
                target,
                opts.connections,
                Duration::from_secs(1),
                Pace::Closed,
                Loads::single(key, 999),
            ));
        }
    }

    let want = |w: Workload| {
        opts.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|x| x == w.name()))
    };
    let mut tables: Vec<Measured> = Vec::new();
    let mut open_rate = None;
    let mut paged = false;
    for workload in WORKLOADS {
        if !want(workload) {
            continue;
        }
        if workload == Workload::Open && open_rate.is_none() {
            note("open: needs the single events' closed loop in the same run (--only single,open)");
            continue;
        }
        if matches!(workload, Workload::Pages | Workload::Deep) && !paged {
            // Enough names for the deepest page, unmeasured.
            note(format!(
                "listing {PAGED_NAMES} names on every binary for the page workloads"
            ));
            let count = PAGED_NAMES.div_ceil(batch_events);
            for side in &sides {
                if let (Kind::Binary { key, .. }, Some(target)) = (&side.kind, &side.target) {
                    prime(runtime, target, key, Loads::batches(35, false, 0, count))?;
                }
            }
            paged = true;
        }
        let n = sides.len();
        let mut m = Measured {
            workload,
            stats: vec![Vec::new(); n],
            cpu: vec![Vec::new(); n],
            beside: vec![Vec::new(); n],
        };
        let taking: Vec<usize> = (0..n).filter(|&i| workload.takes(&sides[i].kind)).collect();
        for round in 0..opts.rounds {
            for k in settle::order(round, taking.len()) {
                let i = taking[k];
                let side = &sides[i];
                if let Some(url) = &side.database {
                    // Every window starts from the table state a vacuum leaves, not from
                    // whatever the autovacuum daemon last reached: see `postgres::vacuum`.
                    runtime.block_on(postgres::vacuum(url))?;
                }
                let (s, beside, used) = window(
                    runtime, &machine, &database, side, workload, round, &loads, open_rate,
                )?;
                if s.errors > 0 {
                    return Err(format!(
                        "{} on {}: {} errors; first: {:?}",
                        workload.name(),
                        side.name,
                        s.errors,
                        s.first_error
                    ));
                }
                let units = m.units(&s).max(1) as f64;
                note(format!(
                    "{} round {round}, {}: {:.0}/s, {:.2} us CPU a unit (database {:.2})",
                    workload.name(),
                    side.name,
                    s.rate_in(workload.events()),
                    used[0] * 1e6 / units,
                    used[1] * 1e6 / units
                ));
                m.stats[i].push(s);
                m.cpu[i].push(used);
                if let Some(b) = beside {
                    m.beside[i].push(b);
                }
            }
        }
        if workload == Workload::Single {
            // 80% of the slowest binary's closed loop.
            open_rate = (0..n)
                .filter(|&i| matches!(sides[i].kind, Kind::Binary { .. }))
                .map(|i| median(&m.rates(i)))
                .min_by(f64::total_cmp)
                .map(|r| (r * 0.8).max(10.0));
        }
        tables.push(m);
    }
    for side in sides.iter_mut() {
        if let (Kind::Binary { .. }, Some(server)) = (&side.kind, side.server.take()) {
            server.stop().map_err(|e| format!("{}: {e}", side.name))?;
        }
    }
    print_tables(
        opts,
        &sides,
        &tables,
        pinned,
        ncores,
        batch_events,
        open_rate,
    );
    Ok(())
}

/// Sends `batches` to a binary, unmeasured: names its workloads need listed.
fn prime(
    runtime: &tokio::runtime::Runtime,
    target: &Target,
    key: &str,
    batches: Vec<(Bytes, u64)>,
) -> Result<(), String> {
    let s = runtime.block_on(load::run(
        target,
        1,
        Duration::from_secs(3600),
        Pace::Closed,
        Loads::batch_source(key, batches, 1),
    ));
    match s.errors {
        0 => Ok(()),
        _ => Err(format!("listing names: {:?}", s.first_error)),
    }
}

/// Runs one window of `workload` on `side`: its stats, those of the ingest beside it (readers),
/// and the CPU seconds of the side's server and of the database from the window's start until
/// everything is idle again.
#[allow(clippy::too_many_arguments)]
fn window(
    runtime: &tokio::runtime::Runtime,
    machine: &Watched,
    database: &Watched,
    side: &Side,
    workload: Workload,
    round: usize,
    loads: &Loads,
    open_rate: Option<f64>,
) -> Result<(Stats, Option<Stats>, [f64; 2]), String> {
    let r = round as u64;
    let conns = loads.conns;
    let timed = Duration::from_secs_f64(loads.seconds);
    let long = Duration::from_secs(3600);
    let (target, key, org, auth) = match (&side.kind, &side.target) {
        (Kind::Binary { key, org, auth }, Some(t)) => (Some(t), key.as_str(), *org, auth.clone()),
        (_, t) => (t.as_ref(), "", 0, Arc::from("")),
    };
    // What the window sends, made before it opens.
    let mut beside_source = None;
    let (clients, duration, pace, source): (usize, Duration, Pace, Option<Source>) = match workload
    {
        Workload::Single => (conns, timed, Pace::Closed, Some(Loads::single(key, r))),
        Workload::Open => (
            conns,
            timed,
            Pace::Open(open_rate.unwrap_or(10.0)),
            Some(Loads::single(key, 500 + r)),
        ),
        Workload::Ingest => {
            let b = Loads::batches(34, false, r * loads.per_window, loads.per_window);
            (
                INGEST_CLIENTS,
                long,
                Pace::Closed,
                Some(Loads::batch_source(key, b, INGEST_CLIENTS)),
            )
        }
        Workload::Mix => {
            let b = Loads::batches(36, true, r * loads.per_window, loads.per_window);
            (
                INGEST_CLIENTS,
                long,
                Pace::Closed,
                Some(Loads::batch_source(key, b, INGEST_CLIENTS)),
            )
        }
        Workload::Page1 => {
            let path = format!("/1.0/domains?customerKey={key}&page=1&limit=200");
            (
                conns,
                timed,
                Pace::Closed,
                Some(Arc::new(move |_, _| Some(Req::get(path.clone())))),
            )
        }
        Workload::Pages => (
            conns,
            timed,
            Pace::Closed,
            Some(Loads::pages(key, 1, conns)),
        ),
        Workload::Deep => (
            conns,
            timed,
            Pace::Closed,
            Some(Loads::pages(key, DEEP_FIRST, conns)),
        ),
        Workload::Readers => {
            let b = Loads::batches(37, false, r * loads.per_window, loads.per_window);
            beside_source = Some(Loads::batch_source(key, b, INGEST_CLIENTS));
            let path = format!("/1.0/domains?customerKey={key}&page=1&limit=200");
            (
                FEW,
                timed,
                Pace::Closed,
                Some(Arc::new(move |_, _| Some(Req::get(path.clone())))),
            )
        }
        Workload::Delete => {
            // One batch of names listed for this window, then deleted one by one.
            let b = Loads::batches(38, false, r, 1);
            let names: Vec<String> = (r << 24..)
                .take(b.first().map_or(0, |(_, n)| *n) as usize)
                .map(|n| data::domain(38, n))
                .collect();
            if let Some(t) = target {
                prime(runtime, t, key, b)?;
            }
            (
                conns,
                long,
                Pace::Closed,
                Some(Loads::deletes(key, names, conns)),
            )
        }
        Workload::MgmtGet => (
            FEW,
            timed,
            Pace::Closed,
            Some(Loads::management(org, auth, false, r)),
        ),
        Workload::MgmtPost => (
            FEW,
            timed,
            Pace::Closed,
            Some(Loads::management(org, auth, true, r)),
        ),
    };
    let w = Window::open(machine, settle::STEP, &[&side.counted, database])?;
    let (stats, beside) = match (&side.kind, target, source) {
        (Kind::Loop { url }, _, _) => (
            runtime.block_on(postgres::batch_ceiling(
                url,
                INGEST_CLIENTS,
                (r * loads.per_window, loads.per_window),
                loads.batch_events,
            ))?,
            None,
        ),
        (_, Some(t), Some(src)) => match beside_source {
            Some(ingest) => {
                let (readers, ingest) = runtime.block_on(async {
                    tokio::join!(
                        load::run(t, clients, duration, pace, src),
                        load::run(t, INGEST_CLIENTS, duration, Pace::Closed, ingest)
                    )
                });
                (readers, Some(ingest))
            }
            None => (
                runtime.block_on(load::run(t, clients, duration, pace, src)),
                None,
            ),
        },
        _ => return Err(format!("{}: nothing to measure", side.name)),
    };
    let used = w.close()?;
    Ok((stats, beside, [used[0], used[1]]))
}

/// The tables: one row per workload and side, then the readers' ingest beside them.
fn print_tables(
    opts: &AbOptions,
    sides: &[Side],
    tables: &[Measured],
    pinned: bool,
    ncores: usize,
    batch_events: u64,
    open_rate: Option<f64>,
) {
    let pg = opts.database.is_some();
    println!();
    println!(
        "parasol-bench --compare-binaries, {}, {ncores} cores, load average {}, {}, {}, plain \
         HTTP, {} rounds of alternating windows ({} s; ingest {} batches of ~{batch_events} \
         events, {INGEST_CLIENTS} clients{}), medians of the rounds (min-max)",
        parasol::timefmt::rfc3339(parasol::timefmt::now()),
        load_average(),
        if pg {
            "PostgreSQL (a database per binary, made and migrated by it)"
        } else {
            "SQLite"
        },
        if pinned {
            "servers pinned to cpu 0, load generator to cpu 1"
        } else {
            "not pinned"
        },
        opts.rounds,
        opts.seconds,
        opts.ingest_batches.max(1),
        match open_rate.filter(|_| tables.iter().any(|m| m.workload == Workload::Open)) {
            Some(r) => format!("; open loop at {r:.0} req/s"),
            None => String::new(),
        }
    );
    println!();
    if pg {
        println!("| workload | server | rate | CPU us per unit, server | CPU us per unit, database | p99 ms | CPU against |");
        println!("|---|---|---:|---:|---:|---:|---|");
    } else {
        println!("| workload | server | rate | CPU us per unit | p99 ms | CPU against |");
        println!("|---|---|---:|---:|---:|---|");
    }
    let first_binary = sides
        .iter()
        .position(|s| matches!(s.kind, Kind::Binary { .. }));
    for m in tables {
        let w = m.workload;
        let total = |i: usize| -> Vec<f64> {
            m.cpu_us(i, 0)
                .iter()
                .zip(m.cpu_us(i, 1))
                .map(|(a, b)| a + if pg { b } else { 0.0 })
                .collect()
        };
        for (i, side) in sides.iter().enumerate() {
            if m.stats[i].is_empty() {
                continue;
            }
            let mut against = Vec::new();
            let binary = matches!(side.kind, Kind::Binary { .. });
            if let Some(f) = first_binary
                .filter(|&f| binary && f != i && w != Workload::Readers && !m.stats[f].is_empty())
            {
                let ratio = median(&total(i)) / median(&total(f));
                against.push(format!(
                    "{:+.1}% vs {}",
                    (ratio - 1.0) * 100.0,
                    sides[f].name
                ));
            }
            if w == Workload::Single && i > 0 {
                against.push(format!(
                    "{:.2}x the bare server's",
                    median(&m.cpu_us(i, 0)) / median(&m.cpu_us(0, 0))
                ));
                if binary {
                    against.push(format!(
                        "{:.2}x the durable bare server's",
                        median(&m.cpu_us(i, 0)) / median(&m.cpu_us(1, 0))
                    ));
                }
            }
            if let Kind::Binary { .. } = side.kind {
                if let Some(l) = sides
                    .iter()
                    .position(|s| matches!(s.kind, Kind::Loop { .. }))
                {
                    if !m.stats[l].is_empty() {
                        let ratios: Vec<f64> = m
                            .rates(i)
                            .iter()
                            .zip(m.rates(l))
                            .map(|(a, b)| a / b * 100.0)
                            .collect();
                        against.push(format!(
                            "rate {:.0}% of the loop's ({:.0}-{:.0}%)",
                            median(&ratios),
                            min(&ratios),
                            max(&ratios)
                        ));
                    }
                }
            }
            let rates = m.rates(i);
            let p99: Vec<f64> = m.stats[i].iter().map(|s| s.pct_ms(0.99)).collect();
            let unit = if w.events() { "events/s" } else { "req/s" };
            let cell = |v: &[f64]| format!("{:.2} ({:.2}-{:.2})", median(v), min(v), max(v));
            let own = m.cpu_us(i, 0);
            // The loop runs in this program; the readers' server also served the ingest beside
            // them: neither has a CPU time of its own per unit.
            let own = if matches!(side.kind, Kind::Loop { .. }) || w == Workload::Readers {
                "-".to_string()
            } else {
                cell(&own)
            };
            if pg {
                println!(
                    "| {} | {} | {:.0} {unit} | {own} | {} | {:.1} | {} |",
                    w.what(opts.connections),
                    side.name,
                    median(&rates),
                    if w == Workload::Readers {
                        "-".to_string()
                    } else {
                        cell(&m.cpu_us(i, 1))
                    },
                    median(&p99),
                    against.join("; ")
                );
            } else {
                println!(
                    "| {} | {} | {:.0} {unit} | {own} | {:.1} | {} |",
                    w.what(opts.connections),
                    side.name,
                    median(&rates),
                    median(&p99),
                    against.join("; ")
                );
            }
            if !m.beside[i].is_empty() {
                let r: Vec<f64> = m.beside[i].iter().map(Stats::rate).collect();
                println!(
                    "| (the ingest beside the readers) | {} | {:.0} events/s | | {}| |",
                    side.name,
                    median(&r),
                    if pg { "| " } else { "" }
                );
            }
        }
    }
}

/// The machine's load averages (1, 5 and 15 minutes), as /proc/loadavg gives them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
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

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
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
    fn the_demo_organization_with_a_key_gives_its_credentials() {
        let v = serde_json::json!({"organizations": [
            {"id": 3, "customerKey": "", "apiKey": "a", "apiSecret": "b"},
            {"id": 4, "customerKey": "k", "apiKey": "c", "apiSecret": "d"},
        ]});
        assert_eq!(demo_org(&v), Some((4, data::basic_auth("c", "d"))));
        assert_eq!(demo_org(&serde_json::json!({"organizations": []})), None);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn page_workloads_ask_each_page_and_limit_once_in_a_cycle() {
        let src = Loads::pages("k", DEEP_FIRST, 4);
        let mut seen = std::collections::HashSet::new();
        for n in 0..(LIMITS * PAGE_SPAN / 4) {
            for w in 0..4 {
                let path = src(w, n).map(|r| r.path).unwrap_or_default();
                assert!(seen.insert(path.clone()), "asked twice: {path}");
            }
        }
        assert!(seen.contains(&format!(
            "/1.0/domains?customerKey=k&page={DEEP_FIRST}&limit=100"
        )));
        let last = DEEP_FIRST + PAGE_SPAN - 1;
        assert!(seen.contains(&format!("/1.0/domains?customerKey=k&page={last}&limit=200")));
        // The deepest page exists once PAGED_NAMES are listed.
        assert!((last - 1) * 200 < PAGED_NAMES);
    }
}
