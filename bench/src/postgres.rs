//! The benchmark's PostgreSQL mode (`--database URL`): the server run on PostgreSQL, measured in
//! the same run against a plain tokio-postgres loop that stores the same rows into the same
//! tables at the same concurrency (the PostgreSQL storage ceiling), and two nodes on one database
//! against one node.
//!
//! `URL` names a role that may create databases: each run creates its own (one for the server,
//! one for the loops, same schema) next to the one named, and drops them at the end.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio_postgres::{Client, NoTls};

use crate::data;
use crate::load::{self, Pace, Req, Source, Stats, Target};
use crate::run::{against, fmt_ms, fmt_rate, note, ChildProc, Options};
use crate::settle::{self, Watched, Window};

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let cut = base.rfind('/').unwrap_or(base.len());
    format!("{}/{name}{query}", &base[..cut])
}

/// `url` without its password, for the table.
fn redacted(url: &str) -> String {
    parasol::store::redact(url)
}

pub(crate) async fn connect(url: &str) -> Result<Client, String> {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| format!("{}: {e}", redacted(url)))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// The databases of a run, dropped when it ends.
pub(crate) struct Databases {
    pub(crate) admin: String,
    pub(crate) names: Vec<String>,
}

impl Databases {
    pub(crate) async fn create(&mut self, name: &str) -> Result<String, String> {
        let c = connect(&self.admin).await?;
        c.batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
        self.names.push(name.to_string());
        Ok(with_database(&self.admin, name))
    }

    /// `ALTER DATABASE name SET` the setting `NAME=VALUE`, for the sessions opened after it.
    pub(crate) async fn set(&self, name: &str, setting: &str) -> Result<(), String> {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| format!("--database-set {setting:?}: expected I:NAME=VALUE"))?;
        let sql = format!("ALTER DATABASE {name} SET {key} = '{value}'");
        let c = connect(&self.admin).await?;
        c.batch_execute(&sql)
            .await
            .map_err(|e| format!("{sql}: {e}"))?;
        note(&sql);
        Ok(())
    }

    pub(crate) async fn drop_all(&self) {
        if let Ok(c) = connect(&self.admin).await {
            for n in &self.names {
                let _ = c
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {n} WITH (FORCE)"))
                    .await;
            }
        }
    }
}

/// The database's processes, when it runs on this machine: its postmaster and every backend
/// (found through the backend of a connection to `admin`).
pub(crate) async fn database_processes(admin: &str) -> Result<Watched, String> {
    let admin = connect(admin).await?;
    let backend: i32 = admin
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    let database = Watched {
        plain: Vec::new(),
        trees: u32::try_from(backend)
            .ok()
            .and_then(settle::parent_of)
            .into_iter()
            .collect(),
    };
    if database.trees.is_empty() {
        note("the database's processes are not on this machine: its CPU time is not shown");
    }
    Ok(database)
}

/// Vacuums the database `url`, unmeasured, before a window of the comparison. The windows
/// before it leave dead row versions and index entries behind (listed names refreshed by single
/// events and the mix, rows moved by updates that found no room on their page), and a read of
/// page 1 visits each of them until a vacuum removes them. Left to the autovacuum daemon, whose
/// visits fall wherever its schedule puts them, two sides start a window from different states
/// (page 1 reading three times the buffers on one side as on the other), which the rates then
/// show as a difference of the builds.
pub(crate) async fn vacuum(url: &str) -> Result<(), String> {
    connect(url)
        .await?
        .batch_execute("VACUUM")
        .await
        .map_err(|e| format!("VACUUM on {}: {e}", redacted(url)))
}

/// Gives the (new) database `url` the current build's schema, for the plain loops.
pub(crate) async fn with_schema(url: &str) -> Result<(), String> {
    parasol::store::Store::open_postgres(url, parasol::store::OpenRole::Server)
        .await
        .map_err(|e| e.to_string())?
        .close();
    Ok(())
}

/// A row of the table.
struct Line {
    name: String,
    unit: &'static str,
    rate: f64,
    stats: Option<Stats>,
    /// CPU microseconds per unit: the node's, the database's.
    cpu: Option<(f64, f64)>,
    target: String,
}

impl Line {
    fn measured(name: String, unit: &'static str, s: &Stats) -> Line {
        Line {
            name,
            unit,
            rate: s.rate_in(unit == "events/s"),
            stats: Some(s.clone()),
            cpu: None,
            target: String::new(),
        }
    }
}

/// 1 MiB batches of all-new names, as the SQLite run's (`space` keeps runs' names apart), from
/// the `first`-th batch of that space on.
fn batches(space: u64, first: u64, count: u64, batch_events: u64) -> Vec<Bytes> {
    (first..first + count)
        .map(|b| {
            let names = (b * batch_events..).map(|n| (data::domain(space, n), n));
            data::batch(names, data::MAX_BATCH_BYTES).0
        })
        .collect()
}

/// A window of a plain loop: `units` stored in `elapsed` (and as many requests `ok`).
fn loop_stats(units: u64, ok: u64, elapsed: Duration) -> Stats {
    Stats {
        units,
        ok,
        ..Stats::default()
    }
    .finish(elapsed)
}

/// The ceiling of batch ingest, one window: `clients` connections, each storing whole requests
/// in a transaction of its own: the request's row (its three JSON arrays, the same texts the
/// benchmark sends) and its `batch_events` new domain rows (one multi-row insert), into tables
/// of Parasol's own schema; batches `first..first + batches` of the loop's own names. Left out:
/// HTTP, parsing, the acceptance checks, resolving the key, refreshing listed names, the paging
/// counts.
pub(crate) async fn batch_ceiling(
    url: &str,
    clients: usize,
    (first, batches): (u64, u64),
    batch_events: u64,
) -> Result<Stats, String> {
    let now = parasol::timefmt::now();
    let mut work: Vec<Vec<(Vec<String>, [String; 4])>> = vec![Vec::new(); clients];
    for (i, b) in (first..first + batches).enumerate() {
        let names: Vec<String> = (b * batch_events..(b + 1) * batch_events)
            .map(|n| data::domain(9, n))
            .collect();
        let bodies: Vec<String> = (b * batch_events..)
            .zip(&names)
            .map(|(n, d)| data::event_json(d, n))
            .collect();
        let texts = [
            uuid::Uuid::new_v4().to_string(),
            serde_json::to_string(&names).unwrap_or_default(),
            format!("[{}]", vec!["1"; names.len()].join(",")),
            format!("[{}]", bodies.join(",")),
        ];
        work[i % clients].push((names, texts));
    }
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(connect(url).await?);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (c, mine) in conns.into_iter().zip(work) {
        tasks.push(tokio::spawn(async move {
            let req = c
                .prepare(
                    "INSERT INTO event_batches (organization_id, uuid, received_at, event_count,
                         domains, listed, events) VALUES (1, $1, $2, $3, $4, $5, $6)",
                )
                .await?;
            let dom = c
                .prepare(
                    "INSERT INTO domains (organization_id, name, created_at, last_seen_at)
                     SELECT 1, n, $2, $2 FROM unnest($1::text[]) AS n",
                )
                .await?;
            for (names, [uuid, nj, lj, ej]) in &mine {
                c.batch_execute("BEGIN").await?;
                c.execute(&req, &[uuid, &now, &(names.len() as i64), nj, lj, ej])
                    .await?;
                c.execute(&dom, &[names, &now]).await?;
                c.batch_execute("COMMIT").await?;
            }
            Ok::<(), tokio_postgres::Error>(())
        }));
    }
    for t in tasks {
        t.await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    Ok(loop_stats(batches * batch_events, batches, start.elapsed()))
}

/// The hot names of the single-event ceiling, listed once before its windows.
async fn single_ceiling_setup(url: &str) -> Result<(), String> {
    let setup = connect(url).await?;
    let hot: Vec<String> = (0..data::HOT_DOMAINS)
        .map(|n| data::domain(data::SPACE_HOT, n))
        .collect();
    setup
        .execute(
            "INSERT INTO domains (organization_id, name, created_at, last_seen_at)
             SELECT 1, n, $2, $2 FROM unnest($1::text[]) AS n",
            &[&hot, &(parasol::timefmt::now() - 1)],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The ceiling of single events, window `window`: `conns` connections, each storing one request
/// a transaction: its row, and for one in ten a new domain row, for the others its hot name's
/// `lastSeenAt` refreshed if older than this second (as the server does).
async fn single_ceiling(
    url: &str,
    conns: usize,
    secs: Duration,
    window: u64,
) -> Result<Stats, String> {
    let mut clients = Vec::new();
    for _ in 0..conns {
        clients.push(connect(url).await?);
    }
    let start = Instant::now();
    let deadline = start + secs;
    let mut tasks = Vec::new();
    for (w, c) in clients.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let row = c
                .prepare(
                    "INSERT INTO event_batches (organization_id, uuid, received_at, event_count,
                         domains, listed, events) VALUES (1, $1, $2, 1, $3, '[1]', $4)",
                )
                .await?;
            let new = c
                .prepare(
                    "INSERT INTO domains (organization_id, name, created_at, last_seen_at)
                     VALUES (1, $1, $2, $2)",
                )
                .await?;
            let touch = c
                .prepare(
                    "UPDATE domains SET last_seen_at = $2
                     WHERE organization_id = 1 AND name = $1 AND last_seen_at < $2",
                )
                .await?;
            let mut n = 0u64;
            while Instant::now() < deadline {
                let i = single_index(window, w, n);
                let r = data::mix(i ^ 25 << 48);
                let (is_new, name) = if r.is_multiple_of(10) {
                    (true, data::domain(25, i))
                } else {
                    (false, data::domain(data::SPACE_HOT, r % data::HOT_DOMAINS))
                };
                let names = serde_json::to_string(&[&name]).unwrap_or_default();
                let body = format!("[{}]", data::event_json(&name, i));
                let uuid = uuid::Uuid::new_v4().to_string();
                let now = parasol::timefmt::now();
                c.batch_execute("BEGIN").await?;
                c.execute(&row, &[&uuid, &now, &names, &body]).await?;
                if is_new {
                    c.execute(&new, &[&name, &now]).await?;
                } else {
                    c.execute(&touch, &[&name, &now]).await?;
                }
                c.batch_execute("COMMIT").await?;
                n += 1;
            }
            Ok::<u64, tokio_postgres::Error>(n)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    Ok(loop_stats(total, total, start.elapsed()))
}

/// The number of worker `w`'s `n`-th single event of window `window`, which names its event and
/// (one in ten) its new domain: distinct over the whole run.
fn single_index(window: u64, w: usize, n: u64) -> u64 {
    window << 48 | (w as u64) << 32 | n
}

/// Starts a node on `database` with data directory `dir`; its target (trusting its own
/// self-signed certificate).
fn start_node(
    opts: &Options,
    dir: &Path,
    database: &str,
    cpu: Option<usize>,
) -> Result<(ChildProc, Target), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let names = parasol::tls::CertNames::for_listener(([127, 0, 0, 1], 0).into());
    let (cert, _key) = parasol::tls::ensure_self_signed(dir, &names)?;
    let dir_arg = dir.to_str().ok_or("temp path is not UTF-8")?;
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir_arg,
        "--database",
        database,
        "--log-level",
        "warn",
    ];
    // The ready line is logged at info; warn keeps the log short, so the line is asked for.
    let args: Vec<&str> = args
        .iter()
        .map(|a| if *a == "warn" { "info" } else { a })
        .collect();
    let (node, _) = ChildProc::spawn(&opts.binary, &args, cpu, "ready: serving ", false)?;
    let target = Target::new(node.addr(), &cert)?;
    Ok((node, target))
}

/// Runs the PostgreSQL benchmark and prints its table.
pub fn run(
    opts: &Options,
    admin: &str,
    server_cpu: Option<usize>,
    pinned: bool,
    ncores: usize,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("parasol-bench-pg-{}", uuid::Uuid::new_v4()));
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let mut dbs = Databases {
        admin: admin.to_string(),
        names: Vec::new(),
    };
    let result = runtime.block_on(async {
        let r = measure(opts, &dir, &tag, &mut dbs, (server_cpu, pinned, ncores)).await;
        dbs.drop_all().await;
        r
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn measure(
    opts: &Options,
    dir: &Path,
    tag: &str,
    dbs: &mut Databases,
    (server_cpu, pinned, ncores): (Option<usize>, bool, usize),
) -> Result<(), String> {
    let secs = Duration::from_secs_f64(opts.seconds);
    let window = secs / 2;
    let rounds = opts.rounds.max(1);
    let (conns, ic) = (opts.connections, opts.ingest_clients);
    let per_window = opts.ingest_batches;
    let (_, batch_events) = data::batch(
        (0..).map(|n| (data::domain(7, n), n)),
        data::MAX_BATCH_BYTES,
    );

    let database = database_processes(&dbs.admin).await?;
    let ceiling_url = dbs.create(&format!("bench_ceiling_{tag}")).await?;
    with_schema(&ceiling_url).await?;
    single_ceiling_setup(&ceiling_url).await?;
    let server_url = dbs.create(&format!("bench_server_{tag}")).await?;
    note("pre-loading organizations and the hot names");
    let world = data::prepare_postgres(&server_url).await?;
    // The node's connections: as many as the load's, the concurrency the ceiling loop had.
    let node_url = format!(
        "{server_url}{}pool_size={}",
        if server_url.contains('?') { "&" } else { "?" },
        conns.max(ic)
    );
    let (node_a, target_a) = start_node(opts, &dir.join("a"), &node_url, server_cpu)?;
    let node = Watched {
        plain: vec![node_a.pid()],
        trees: Vec::new(),
    };
    let machine = Watched {
        plain: node.plain.clone(),
        trees: database.trees.clone(),
    };
    let sides = Sides {
        node: &node,
        database: &database,
        machine: &machine,
    };
    let enf = |key: &str| format!("/1.0/events?customerKey={key}");
    let batch_source = |batches: Arc<Vec<Bytes>>, key: &str, clients: usize| -> Source {
        let path = enf(key);
        Arc::new(move |w, n| {
            let i = n as usize * clients + w;
            let body = batches.get(i)?.clone();
            Some(Req::post(path.clone(), body, 202, batch_events))
        })
    };
    let single_source = |space: u64, window: u64| -> Source {
        let path = enf(&world.mixed_key);
        Arc::new(move |w, n| {
            let i = single_index(window, w, n);
            Some(Req::post(
                path.clone(),
                data::single_event(space, i, true),
                202,
                1,
            ))
        })
    };
    let long = Duration::from_secs(3600);

    // ------------------------------------------------------------ ceiling and one node, in turn
    note(format!(
        "ingest: {rounds} rounds of a ceiling window and a node window, {per_window} batches each"
    ));
    let ingest = alternate(
        &sides,
        rounds,
        true,
        |r| batch_ceiling(&ceiling_url, ic, (r * per_window, per_window), batch_events),
        |r| {
            let b = Arc::new(batches(10, r * per_window, per_window, batch_events));
            load::run(
                &target_a,
                ic,
                long,
                Pace::Closed,
                batch_source(b, &world.ingest_key, ic),
            )
        },
    )
    .await?;
    note(format!(
        "single events: {rounds} rounds of a ceiling window and a node window, {} s each",
        window.as_secs_f64()
    ));
    let single = alternate(
        &sides,
        rounds,
        false,
        |r| single_ceiling(&ceiling_url, conns, window, r),
        |r| load::run(&target_a, conns, window, Pace::Closed, single_source(23, r)),
    )
    .await?;
    let mut lines = vec![
        ingest.ceiling_line(format!(
            "tokio-postgres loop, tx of 1 request row + {batch_events} new domains, {ic} conns, \
             {rounds} windows of {per_window} batches"
        )),
        single.ceiling_line(format!(
            "tokio-postgres loop, tx of 1 single-event request row (10% with a new domain), \
             {conns} conns, {rounds} windows of {} s",
            window.as_secs_f64()
        )),
        ingest.node_line(
            format!(
                "one node: ingest new domains, 1 MiB x {batch_events} ev, {ic} clients, in turn \
                 with the loop's windows"
            ),
            70.0,
        ),
        single.node_line(
            format!(
                "one node: single events, 90% listed names, {conns} conns, in turn with the \
                 loop's windows"
            ),
            50.0,
        ),
    ];
    let (one_ingest, ceiling_ingest) = (ingest.node_all(), ingest.ceiling_all());
    let (one_single, ceiling_single) = (single.node_all(), single.ceiling_all());

    // ------------------------------------------------------------ two nodes, one database
    let (node_b, target_b) = start_node(opts, &dir.join("b"), &node_url, server_cpu)?;
    machine.settle()?;
    note("two nodes: ingest");
    let two_batches = Arc::new(batches(12, 0, opts.ingest_batches, batch_events));
    let half = ic.div_ceil(2);
    let (even, odd): (Vec<Bytes>, Vec<Bytes>) = {
        let mut e = Vec::new();
        let mut o = Vec::new();
        for (i, b) in two_batches.iter().enumerate() {
            if i % 2 == 0 {
                e.push(b.clone())
            } else {
                o.push(b.clone())
            }
        }
        (e, o)
    };
    let (ia, ib) = tokio::join!(
        load::run(
            &target_a,
            half,
            long,
            Pace::Closed,
            batch_source(Arc::new(even), &world.ingest_key, half)
        ),
        load::run(
            &target_b,
            half,
            long,
            Pace::Closed,
            batch_source(Arc::new(odd), &world.ingest_key, half)
        )
    );
    let ingest_two = combined_parallel(&[&ia, &ib]);
    let mut l = Line::measured(
        format!("two nodes: ingest new domains, {half} clients each"),
        "events/s",
        &ingest_two,
    );
    l.target = format!(
        "{:.0}% of one node; {:.0}% of storage ceiling",
        l.rate / one_ingest.rate() * 100.0,
        l.rate / ceiling_ingest.rate() * 100.0
    );
    lines.push(l);
    machine.settle()?;
    note("two nodes: single events");
    let half_conns = conns.div_ceil(2);
    let (sa, sb) = tokio::join!(
        load::run(
            &target_a,
            half_conns,
            secs,
            Pace::Closed,
            single_source(26, 0)
        ),
        load::run(
            &target_b,
            half_conns,
            secs,
            Pace::Closed,
            single_source(27, 0)
        )
    );
    let single_two = combined_parallel(&[&sa, &sb]);
    let mut l = Line::measured(
        format!("two nodes: single events, {half_conns} conns each"),
        "req/s",
        &single_two,
    );
    l.target = format!(
        "{:.0}% of one node; {:.0}% of single-event storage",
        l.rate / one_single.req_rate() * 100.0,
        l.rate / ceiling_single.req_rate() * 100.0
    );
    lines.push(l);
    node_b.stop().map_err(|e| format!("node b: {e}"))?;
    node_a.stop().map_err(|e| format!("node a: {e}"))?;

    // ------------------------------------------------------------ the table
    let date = parasol::timefmt::rfc3339(parasol::timefmt::now());
    println!();
    println!(
        "parasol-bench on PostgreSQL ({}), {date}, {} cores, {}",
        redacted(&dbs.admin),
        ncores,
        if pinned {
            "the nodes pinned to cpu 0, the load generator to cpu 1, PostgreSQL and the loops unpinned"
        } else {
            "not pinned"
        }
    );
    println!(
        "{} events per 1 MiB batch; the loops and one node measured in alternating windows \
         (loop, node, node, loop, ...), each started once the node and the database were idle, \
         CPU counted from a window's start until they were idle again; two nodes {}-second runs",
        batch_events, opts.seconds
    );
    println!();
    println!(
        "| workload | rate | unit | p50 ms | p99 ms | errors | CPU us per unit, node / database | target |"
    );
    println!("|---|---:|---|---:|---:|---:|---|---|");
    for l in &lines {
        let cpu = l
            .cpu
            .map(|(n, d)| format!("{} / {}", fmt_us(n), fmt_us(d)))
            .unwrap_or_default();
        match &l.stats {
            Some(s) => println!(
                "| {} | {} | {} | {} | {} | {} | {cpu} | {} |",
                l.name,
                fmt_rate(l.rate),
                l.unit,
                fmt_ms(s.pct_ms(0.5)),
                fmt_ms(s.pct_ms(0.99)),
                s.errors,
                l.target
            ),
            None => println!(
                "| {} | {} | {} | | | | {cpu} | {} |",
                l.name,
                fmt_rate(l.rate),
                l.unit,
                l.target
            ),
        }
    }
    for l in &lines {
        if let Some(e) = l.stats.as_ref().and_then(|s| s.first_error.clone()) {
            println!("note: {}: first error: {e}", l.name);
        }
    }
    Ok(())
}

/// CPU microseconds, or "-" where not measured.
fn fmt_us(us: f64) -> String {
    if us.is_finite() {
        format!("{us:.1}")
    } else {
        "-".into()
    }
}

/// The processes whose CPU time the windows count.
struct Sides<'a> {
    node: &'a Watched,
    database: &'a Watched,
    /// Both: let settle before and after each window.
    machine: &'a Watched,
}

/// One workload's windows: the ceiling loop's and the node's, one of each a round.
struct Compared {
    /// Counted in events (ingest), else in requests.
    events: bool,
    ceiling: Vec<Stats>,
    node: Vec<Stats>,
    /// CPU seconds from each window's start until idle, all windows of a side:
    /// `[ceiling, node]` x `[node, database]`.
    cpu: [[f64; 2]; 2],
}

/// Runs `rounds` rounds of one ceiling window (`ceiling(round)`) and one node window
/// (`node(round)`), in turn: ceiling then node, then node then ceiling, ..., so that neither
/// always goes first and the machine's drift over minutes falls on both alike.
async fn alternate<C, N>(
    sides: &Sides<'_>,
    rounds: usize,
    events: bool,
    mut ceiling: impl FnMut(u64) -> C,
    mut node: impl FnMut(u64) -> N,
) -> Result<Compared, String>
where
    C: std::future::Future<Output = Result<Stats, String>>,
    N: std::future::Future<Output = Stats>,
{
    let mut c = Compared {
        events,
        ceiling: Vec::new(),
        node: Vec::new(),
        cpu: [[0.0; 2]; 2],
    };
    for round in 0..rounds {
        for side in settle::order(round, 2) {
            let w = Window::open(sides.machine, settle::STEP, &[sides.node, sides.database])?;
            let s = if side == 0 {
                ceiling(round as u64).await?
            } else {
                node(round as u64).await
            };
            for (total, used) in c.cpu[side].iter_mut().zip(w.close()?) {
                *total += used;
            }
            note(format!(
                "round {round}, {}: {:.0} {}/s",
                ["loop", "node"][side],
                c.rate(&s),
                if events { "events" } else { "requests" }
            ));
            if side == 0 {
                c.ceiling.push(s);
            } else {
                c.node.push(s);
            }
        }
    }
    Ok(c)
}

impl Compared {
    fn rate(&self, s: &Stats) -> f64 {
        s.rate_in(self.events)
    }

    fn unit(&self) -> &'static str {
        if self.events {
            "events/s"
        } else {
            "req/s"
        }
    }

    fn ceiling_all(&self) -> Stats {
        Stats::combined(self.ceiling.clone())
    }

    fn node_all(&self) -> Stats {
        Stats::combined(self.node.clone())
    }

    /// CPU microseconds per unit of side `side` (0: ceiling, 1: node): the node's, the database's.
    fn cpu_us(&self, side: usize) -> (f64, f64) {
        let s = if side == 0 {
            self.ceiling_all()
        } else {
            self.node_all()
        };
        let units = if self.events { s.units } else { s.ok }.max(1) as f64;
        (
            self.cpu[side][0] * 1e6 / units,
            self.cpu[side][1] * 1e6 / units,
        )
    }

    fn ceiling_line(&self, name: String) -> Line {
        let all = self.ceiling_all();
        let rates: Vec<f64> = self.ceiling.iter().map(|s| self.rate(s)).collect();
        let (low, _, high) = spread(rates);
        let rate = self.rate(&all);
        Line {
            name,
            unit: self.unit(),
            rate,
            stats: None,
            cpu: Some((f64::NAN, self.cpu_us(0).1)),
            target: format!(
                "{}: {} (windows {}-{})",
                if self.events {
                    "storage ceiling"
                } else {
                    "single-event storage"
                },
                fmt_rate(rate),
                fmt_rate(low),
                fmt_rate(high)
            ),
        }
    }

    /// The node's line: its rate over all windows against the ceiling's over all windows, and
    /// the median of the rounds' ratios with their range, each against `target` percent.
    fn node_line(&self, name: String, target: f64) -> Line {
        let all = self.node_all();
        let mut l = Line::measured(name, self.unit(), &all);
        let ratio = l.rate / self.rate(&self.ceiling_all()) * 100.0;
        let ratios: Vec<f64> = self
            .ceiling
            .iter()
            .zip(&self.node)
            .map(|(c, n)| self.rate(n) / self.rate(c) * 100.0)
            .collect();
        let (low, median, high) = spread(ratios);
        let (shown, met) = against(ratio, 1, |p| p >= target);
        let (m_shown, m_met) = against(median, 1, |p| p >= target);
        l.cpu = Some(self.cpu_us(1));
        l.target = format!(
            "{shown}% of the loop over all windows (>= {target:.0}%): {met}; median of the \
             rounds' {m_shown}% (>= {target:.0}%): {m_met} ({low:.1}-{high:.1}%)"
        );
        l
    }
}

/// The smallest, the median and the largest of `v` (NaN if empty).
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    (v[0], (v[(n - 1) / 2] + v[n / 2]) / 2.0, v[n - 1])
}

/// Two workloads run side by side as one: their requests added, over the longer duration.
fn combined_parallel(parts: &[&Stats]) -> Stats {
    let elapsed = parts.iter().map(|s| s.elapsed).max().unwrap_or_default();
    let mut total = Stats::combined(parts.iter().map(|s| (*s).clone()));
    total.elapsed = elapsed;
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_gives_the_smallest_the_median_and_the_largest() {
        assert_eq!(spread(vec![3.0, 1.0, 2.0]), (1.0, 2.0, 3.0));
        assert_eq!(spread(vec![4.0, 1.0, 3.0, 2.0]), (1.0, 2.5, 4.0));
        let (low, median, high) = spread(Vec::new());
        assert!(low.is_nan() && median.is_nan() && high.is_nan());
    }

    #[test]
    fn single_events_are_numbered_apart_across_windows_and_workers() {
        let mut seen = std::collections::HashSet::new();
        for window in 0..3 {
            for w in 0..3 {
                for n in 0..3 {
                    assert!(seen.insert(single_index(window, w, n)));
                }
            }
        }
    }
}
