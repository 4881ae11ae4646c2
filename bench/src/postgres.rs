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
    parasol::store::postgres::redact(url)
}

async fn connect(url: &str) -> Result<Client, String> {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| format!("{}: {e}", redacted(url)))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// The databases of a run, dropped when it ends.
struct Databases {
    admin: String,
    names: Vec<String>,
}

impl Databases {
    async fn create(&mut self, name: &str) -> Result<String, String> {
        let c = connect(&self.admin).await?;
        c.batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
        self.names.push(name.to_string());
        Ok(with_database(&self.admin, name))
    }

    async fn drop_all(&self) {
        if let Ok(c) = connect(&self.admin).await {
            for n in &self.names {
                let _ = c
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {n} WITH (FORCE)"))
                    .await;
            }
        }
    }
}

/// A row of the table.
struct Line {
    name: String,
    unit: &'static str,
    rate: f64,
    stats: Option<Stats>,
    target: String,
}

impl Line {
    fn measured(name: String, unit: &'static str, s: &Stats) -> Line {
        let rate = if unit == "events/s" {
            s.rate()
        } else {
            s.req_rate()
        };
        Line {
            name,
            unit,
            rate,
            stats: Some(s.clone()),
            target: String::new(),
        }
    }
}

/// 1 MiB batches of all-new names, as the SQLite run's (`space` keeps runs' names apart).
fn batches(space: u64, count: u64, batch_events: u64) -> Vec<Bytes> {
    (0..count)
        .map(|b| {
            let names = (b * batch_events..).map(|n| (data::domain(space, n), n));
            data::batch(names, data::MAX_BATCH_BYTES).0
        })
        .collect()
}

/// The ceiling of batch ingest: `clients` connections, each storing whole requests in a
/// transaction of its own: the request's row (its three JSON arrays, the same texts the
/// benchmark sends) and its `batch_events` new domain rows (one multi-row insert), into tables
/// of Parasol's own schema. Left out: HTTP, parsing, the acceptance checks, resolving the key,
/// refreshing listed names, the paging counts. Returns events per second.
async fn batch_ceiling(
    url: &str,
    clients: usize,
    batches: u64,
    batch_events: u64,
) -> Result<f64, String> {
    let now = parasol::timefmt::now();
    let mut work: Vec<Vec<(Vec<String>, [String; 4])>> = vec![Vec::new(); clients];
    for b in 0..batches {
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
        work[b as usize % clients].push((names, texts));
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
    Ok((batches * batch_events) as f64 / start.elapsed().as_secs_f64())
}

/// The ceiling of single events: `conns` connections, each storing one request a transaction:
/// its row, and for one in ten a new domain row, for the others its hot name's `lastSeenAt`
/// refreshed if older than this second (as the server does). Returns requests per second.
async fn single_ceiling(url: &str, conns: usize, secs: Duration) -> Result<f64, String> {
    let setup = connect(url).await?;
    let now = parasol::timefmt::now();
    let hot: Vec<String> = (0..data::HOT_DOMAINS)
        .map(|n| data::domain(data::SPACE_HOT, n))
        .collect();
    setup
        .execute(
            "INSERT INTO domains (organization_id, name, created_at, last_seen_at)
             SELECT 1, n, $2, $2 FROM unnest($1::text[]) AS n",
            &[&hot, &(now - 1)],
        )
        .await
        .map_err(|e| e.to_string())?;
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
                let i = (w as u64) << 32 | n;
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
    Ok(total as f64 / start.elapsed().as_secs_f64())
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
    let (conns, ic) = (opts.connections, opts.ingest_clients);
    let (_, batch_events) = data::batch(
        (0..).map(|n| (data::domain(7, n), n)),
        data::MAX_BATCH_BYTES,
    );
    let mut lines: Vec<Line> = Vec::new();

    // ------------------------------------------------------------ the ceilings
    let ceiling_url = dbs.create(&format!("bench_ceiling_{tag}")).await?;
    parasol::store::Store::open_postgres(&ceiling_url, parasol::store::OpenRole::Server)
        .await
        .map_err(|e| e.to_string())?
        .close();
    note("baseline: plain tokio-postgres loop, 1 MiB requests");
    let batch_rate = batch_ceiling(&ceiling_url, ic, opts.ingest_batches, batch_events).await?;
    lines.push(Line {
        name: format!(
            "tokio-postgres loop, tx of 1 request row + {batch_events} new domains, {ic} conns"
        ),
        unit: "events/s",
        rate: batch_rate,
        stats: None,
        target: format!("storage ceiling: {}", fmt_rate(batch_rate)),
    });
    note("baseline: plain tokio-postgres loop, single events");
    let single_rate = single_ceiling(&ceiling_url, conns, secs).await?;
    lines.push(Line {
        name: format!(
            "tokio-postgres loop, tx of 1 single-event request row (10% with a new domain), {conns} conns"
        ),
        unit: "req/s",
        rate: single_rate,
        stats: None,
        target: format!("single-event storage: {} req/s", fmt_rate(single_rate)),
    });

    // ------------------------------------------------------------ one node
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
    let enf = |key: &str| format!("/1.0/events?customerKey={key}");
    let batch_source = |batches: Arc<Vec<Bytes>>, key: &str, clients: usize| -> Source {
        let path = enf(key);
        Arc::new(move |w, n| {
            let i = n as usize * clients + w;
            let body = batches.get(i)?.clone();
            Some(Req::post(path.clone(), body, 202, batch_events))
        })
    };
    let single_source = |space: u64| -> Source {
        let path = enf(&world.mixed_key);
        Arc::new(move |w, n| {
            let i = (w as u64) << 32 | n;
            let r = data::mix(i ^ space << 48);
            let name = if r.is_multiple_of(10) {
                data::domain(space, i)
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
    let long = Duration::from_secs(3600);
    note("one node: ingest");
    let one_batches = Arc::new(batches(10, opts.ingest_batches, batch_events));
    let ingest_one = load::run(
        &target_a,
        ic,
        long,
        Pace::Closed,
        batch_source(one_batches, &world.ingest_key, ic),
    )
    .await;
    let mut l = Line::measured(
        format!("one node: ingest new domains, 1 MiB x {batch_events} ev, {ic} clients"),
        "events/s",
        &ingest_one,
    );
    let (shown, met) = against(l.rate / batch_rate * 100.0, 1, |p| p >= 70.0);
    l.target = format!("{shown}% of storage ceiling (>= 70%): {met}");
    lines.push(l);
    note("one node: single events");
    let single_one = load::run(&target_a, conns, secs, Pace::Closed, single_source(23)).await;
    let mut l = Line::measured(
        format!("one node: single events, 90% listed names, {conns} conns"),
        "req/s",
        &single_one,
    );
    let (shown, met) = against(l.rate / single_rate * 100.0, 1, |p| p >= 50.0);
    l.target = format!("{shown}% of single-event storage (>= 50%): {met}");
    lines.push(l);

    // ------------------------------------------------------------ two nodes, one database
    let (node_b, target_b) = start_node(opts, &dir.join("b"), &node_url, server_cpu)?;
    note("two nodes: ingest");
    let two_batches = Arc::new(batches(12, opts.ingest_batches, batch_events));
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
        l.rate / ingest_one.rate() * 100.0,
        l.rate / batch_rate * 100.0
    );
    lines.push(l);
    note("two nodes: single events");
    let half_conns = conns.div_ceil(2);
    let (sa, sb) = tokio::join!(
        load::run(&target_a, half_conns, secs, Pace::Closed, single_source(26)),
        load::run(&target_b, half_conns, secs, Pace::Closed, single_source(27))
    );
    let single_two = combined_parallel(&[&sa, &sb]);
    let mut l = Line::measured(
        format!("two nodes: single events, {half_conns} conns each"),
        "req/s",
        &single_two,
    );
    l.target = format!(
        "{:.0}% of one node; {:.0}% of single-event storage",
        l.rate / single_one.req_rate() * 100.0,
        l.rate / single_rate * 100.0
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
        "{}-second runs; {} events per 1 MiB batch",
        opts.seconds, batch_events
    );
    println!();
    println!("| workload | rate | unit | p50 ms | p99 ms | errors | target |");
    println!("|---|---:|---|---:|---:|---:|---|");
    for l in &lines {
        match &l.stats {
            Some(s) => println!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                l.name,
                fmt_rate(l.rate),
                l.unit,
                fmt_ms(s.pct_ms(0.5)),
                fmt_ms(s.pct_ms(0.99)),
                s.errors,
                l.target
            ),
            None => println!(
                "| {} | {} | {} | | | | {} |",
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

/// Two workloads run side by side as one: their requests added, over the longer duration.
fn combined_parallel(parts: &[&Stats]) -> Stats {
    let elapsed = parts.iter().map(|s| s.elapsed).max().unwrap_or_default();
    let mut total = Stats::combined(parts.iter().map(|s| (*s).clone()));
    total.elapsed = elapsed;
    total
}
