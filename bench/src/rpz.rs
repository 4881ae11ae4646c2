//! `parasol-bench --rpz`: the resolver feeds' figures, in one run.
//!
//! One server (`--export-dir` and `--rpz-listen`) on a data directory of `ORGS` organizations of
//! `SMALL` names each and one of `--domains` names (default 1,000,000), and BIND 9's `named`
//! serving the same large zone as a primary, pinned to the same core:
//! - freshness: the time from an event's 202 to the organization's `.rpz` file replaced and to
//!   its zone's serial moved (SOA queries), for a small organization and for the large one, idle
//!   and with both cores kept busy by two other processes (`sh -c 'while :; do :; done'`), and
//!   how many organizations' files each change rewrote;
//! - AXFR of the large zone from Parasol and from `named`, taken in turn: time and server CPU;
//!   Parasol's peak RSS over its idle RSS during its transfers;
//! - IXFR of one change on the large zone: server CPU per transfer, over many, less the CPU the
//!   server uses idle over the same time;
//! - single events (closed loop, names already listed) in windows alone and in windows while a
//!   secondary pulls the large zone over and over, taken in turn: the rate's ratio.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};

use crate::data;
use crate::load::{self, Pace, Req, Source, Target};
use crate::run::{self, cores, note, pin_current_thread, proc_cpu_secs, ChildProc, Options};
use parasol::store::{CustomerKey, Ingest, Ingested, OrgFields, Parent, Store};

/// Small organizations, and their names each (fewer with `--quick`).
const ORGS: u64 = 10_000;
const QUICK_ORGS: u64 = 200;
const SMALL: u64 = 100;
/// Name families of the prepared lists and of the changes.
const SPACE_SMALL: u64 = 40;
const SPACE_BIG: u64 = 41;
const SPACE_FRESH: u64 = 42;
/// How long a change may take to show before the trial counts as failed.
const GIVE_UP: Duration = Duration::from_secs(60);
/// IXFRs of one change measured together.
const IXFRS: u32 = 400;

struct World {
    small: Vec<(i64, String)>,
    big: (i64, String),
    single_key: String,
}

pub fn run(opts: &Options, dir: &Path, quick: bool) -> Result<(), String> {
    let ncores = cores();
    let pinned = opts.pin && ncores >= 2 && pin_current_thread(run::CLIENT_CPU);
    let server_cpu = pinned.then_some(run::SERVER_CPU);
    let orgs = if quick { QUICK_ORGS } else { ORGS };
    let data_dir = dir.join("data");
    let export_dir = dir.join("exports");
    std::fs::create_dir_all(&data_dir).map_err(|e| e.to_string())?;
    note(format!(
        "rpz: preparing {orgs} organizations of {SMALL} names and one of {}",
        opts.domains
    ));
    let world = prepare(&data_dir.join("parasol.db"), orgs, opts.domains)?;
    let names = parasol::tls::CertNames::for_listener(([127, 0, 0, 1], 0).into());
    let (cert, _key) = parasol::tls::ensure_self_signed(&data_dir, &names)?;
    let rpz_port = free_port()?;
    let rpz: SocketAddr = ([127, 0, 0, 1], rpz_port).into();
    let args = [
        "serve".to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        data_dir.to_string_lossy().into_owned(),
        "--export-dir".into(),
        export_dir.to_string_lossy().into_owned(),
        "--rpz-listen".into(),
        rpz.to_string(),
        "--rpz-allow".into(),
        "127.0.0.1/32".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (server, _) = ChildProc::spawn(&opts.binary, &args, server_cpu, "ready: serving ", false)?;
    let target = Target::new(server.addr(), &cert)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // The first change after start, made while the first pass over every organization is under
    // way: a name posted to the organization the pass reaches last (the highest id), its file and
    // zone still to be made.
    let (last_org, last_key) = world
        .small
        .iter()
        .max_by_key(|(org, _)| *org)
        .ok_or("no small organization")?;
    let (first_file, first_serial, _) = fresh(
        &runtime,
        &target,
        rpz,
        &export_dir,
        *last_org,
        last_key,
        u64::MAX,
        false,
    )?;
    let line = server
        .wait_for_log("export: wrote the files of", Duration::from_secs(900))
        .ok_or("the exporter's first round did not finish within 900 s")?;
    // The server's CPU from its start to the end of the first round (the start itself is a
    // small part: opening the store, reading the zones' journals).
    let first_cpu = proc_cpu_secs(server.pid()).unwrap_or(0.0);
    // What the lists and zones held take: RSS once the first round is over, and the peak through
    // it (the first round builds every list and zone at once).
    let mib = |field| run::proc_status_kib(server.pid(), field).unwrap_or(0) as f64 / 1024.0;
    let (first_rss, first_peak) = (mib("VmRSS:"), mib("VmHWM:"));
    note(format!("rpz: {line}"));
    let suffix = "rpz.parasol";
    let big_zone = format!("org-{}.{suffix}.", world.big.0);
    let mut rows: Vec<String> = vec![format!(
        "| first round, {} organizations: server CPU from start to its end | {first_cpu:.2} CPU s ({:.2} ms per organization) | in proportion to the data | {} |",
        orgs + 2,
        first_cpu * 1000.0 / (orgs + 2) as f64,
        line.split("] ").nth(1).unwrap_or(&line)
    )];
    rows.push(format!(
        "| the first change after start, made during the first pass (to the organization it reaches last): 202 -> file / -> serial | {first_file:.0} / {first_serial:.0} ms | 1 s | load {} |",
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    ));
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    rows.push(format!(
        "| RSS after the first round (every list and zone held); peak through it | {first_rss:.1} MiB; {first_peak:.1} MiB | | VmRSS, VmHWM |"
    ));

    // 1. Freshness, idle then busy.
    let mut trial = 0u64;
    for busy in [false, true] {
        let hogs = if busy { Hogs::start(2)? } else { Hogs::none() };
        let mut files = Vec::new();
        let mut serials = Vec::new();
        let mut rewritten = Vec::new();
        let mut big_files = Vec::new();
        let mut big_serials = Vec::new();
        let trials = if quick { 3 } else { 8 };
        for i in 0..trials {
            let (org, key) = &world.small[(data::mix(trial) % world.small.len() as u64) as usize];
            let (f, s, n) = fresh(&runtime, &target, rpz, &export_dir, *org, key, trial, true)?;
            files.push(f);
            serials.push(s);
            rewritten.push(n);
            trial += 1;
            if i % 2 == 0 {
                let (org, key) = &world.big;
                let (f, s, _) =
                    fresh(&runtime, &target, rpz, &export_dir, *org, key, trial, false)?;
                big_files.push(f);
                big_serials.push(s);
                trial += 1;
            }
            // Changes arrive at random moments of the exporter's cycle, not in step with it.
            std::thread::sleep(Duration::from_millis(700 + data::mix(trial) % 900));
        }
        let state = if busy { "busy" } else { "idle" };
        let la = load();
        drop(hogs);
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        rows.push(format!(
            "| freshness, {state}, small org: to file / to serial (median, max) | {:.0} / {:.0} ms, max {:.0} / {:.0} ms | 1,000 / 1,000 ms idle, 2,000 busy | organizations rewritten per change: {:?}; load {} |",
            median(&files), median(&serials), max(&files), max(&serials), rewritten,
            la.split(' ').take(3).collect::<Vec<_>>().join(" ")
        ));
        rows.push(format!(
            "| freshness, {state}, {}-name org: to file / to serial (median, max) | {:.0} / {:.0} ms, max {:.0} / {:.0} ms | 1,000 / 1,000 ms idle, 2,000 busy | {} trials |",
            opts.domains, median(&big_files), median(&big_serials), max(&big_files), max(&big_serials), big_files.len()
        ));
        note(rows[rows.len() - 2].clone());
        note(rows[rows.len() - 1].clone());
    }

    // Where the large organization's rounds went (the server logs rounds of half a second or
    // more).
    let slow = server.log_lines("its round took");
    let phases: Vec<&str> = slow
        .iter()
        .filter_map(|l| l.split("its round took ").nth(1))
        .collect();
    rows.push(format!(
        "| rounds of half a second or more (the server's log) | {} | | {} |",
        phases.len(),
        phases.join("; ")
    ));
    note(rows[rows.len() - 1].clone());

    // 2. AXFR against named, in turn.
    note("rpz: writing the large zone for named");
    let zone_file = dir.join("named").join("zone.db");
    std::fs::create_dir_all(dir.join("named")).map_err(|e| e.to_string())?;
    let expected = write_zone_file(rpz, &big_zone, &zone_file)?;
    let named = Named::start(&dir.join("named"), &zone_file, &big_zone, server_cpu)?;
    let (mut ours, mut theirs, mut our_cpu, mut their_cpu) = (vec![], vec![], vec![], vec![]);
    let rss_before = run::proc_status_kib(server.pid(), "VmRSS:").unwrap_or(0) as f64 / 1024.0;
    server.reset_peak();
    for _ in 0..if quick { 2 } else { 4 } {
        for (who, addr, pid, times, cpus) in [
            ("parasol", rpz, server.pid(), &mut ours, &mut our_cpu),
            (
                "named",
                named.addr,
                named.pid(),
                &mut theirs,
                &mut their_cpu,
            ),
        ] {
            let cpu0 = proc_cpu_secs(pid).unwrap_or(0.0);
            let t = Instant::now();
            let got = axfr_count(addr, &big_zone, expected)?;
            times.push(t.elapsed().as_secs_f64());
            cpus.push(proc_cpu_secs(pid).unwrap_or(0.0) - cpu0);
            if got != expected {
                return Err(format!("{who}: AXFR of {got} records, {expected} expected"));
            }
        }
    }
    let peak = server.peak_rss_mib();
    rows.push(format!(
        "| AXFR of the {}-name zone ({expected} records): Parasol / named (median time; server CPU) | {:.2} s / {:.2} s (ratio {:.2}); {:.2} / {:.2} CPU s | Parasol at least as fast | {} rounds each, in turn, same core |",
        opts.domains, median(&ours), median(&theirs), median(&theirs) / median(&ours),
        median(&our_cpu), median(&their_cpu), ours.len()
    ));
    rows.push(format!(
        "| peak RSS serving transfers over idle RSS | {:.1} MiB ({:.1} -> {:.1}) | 50 MiB | VmHWM reset before the transfers |",
        peak - rss_before, rss_before, peak
    ));
    note(rows[rows.len() - 2].clone());
    note(rows[rows.len() - 1].clone());
    named.stop();

    // 3. IXFR of one change on the large zone.
    let before = soa_serial(rpz, &big_zone).ok_or("no SOA for the large zone")?;
    post_one(
        &runtime,
        &target,
        &world.big.1,
        &data::domain(SPACE_FRESH, 1 << 30),
    )?;
    let deadline = Instant::now() + GIVE_UP;
    let after = loop {
        match soa_serial(rpz, &big_zone) {
            Some(s) if s != before => break s,
            _ if Instant::now() > deadline => return Err("the serial did not move".into()),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    // Let the round's own work end before counting.
    std::thread::sleep(Duration::from_secs(2));
    let records = ixfr_records(rpz, &big_zone, before)?;
    // SOA new, SOA old, SOA new, the name and its wildcard, SOA new.
    if records != 6 {
        return Err(format!(
            "an IXFR of one change gave {records} records, 6 expected"
        ));
    }
    let cpu0 = proc_cpu_secs(server.pid()).unwrap_or(0.0);
    let t = Instant::now();
    for _ in 0..IXFRS {
        ixfr_records(rpz, &big_zone, before)?;
    }
    let took = t.elapsed();
    let busy_cpu = proc_cpu_secs(server.pid()).unwrap_or(0.0) - cpu0;
    let cpu0 = proc_cpu_secs(server.pid()).unwrap_or(0.0);
    std::thread::sleep(took);
    let idle_cpu = proc_cpu_secs(server.pid()).unwrap_or(0.0) - cpu0;
    let per = (busy_cpu - idle_cpu).max(0.0) / f64::from(IXFRS) * 1e3;
    rows.push(format!(
        "| IXFR of one change on the {}-name zone (serial {before} -> {after}): server CPU each | {per:.3} ms | 1 ms | {IXFRS} transfers on new connections in {:.2} s: {busy_cpu:.2} CPU s, less {idle_cpu:.2} idle |",
        opts.domains, took.as_secs_f64()
    ));
    note(rows[rows.len() - 1].clone());

    // 4. Single events alone and while a secondary pulls the large zone, in turn.
    let single = {
        let key = world.single_key.clone();
        Arc::new(move |w: usize, n: u64| {
            let i = ((w as u64) << 20 | n) % data::HOT_DOMAINS;
            let body = data::event_json(&data::domain(data::SPACE_HOT, i), n);
            Some(Req::post(
                format!("/1.0/events?customerKey={key}"),
                Bytes::from(body),
                202,
                1,
            ))
        }) as Source
    };
    let window = Duration::from_secs_f64(opts.seconds.max(2.0));
    let (mut alone, mut pulled, mut pulls) = (vec![], vec![], 0u64);
    let (mut cpu_alone, mut cpu_pulled) = (vec![], vec![]);
    for _ in 0..opts.rounds.max(2) {
        for with_pull in [false, true] {
            let stop = Arc::new(AtomicBool::new(false));
            let puller = with_pull.then(|| {
                let stop = stop.clone();
                let zone = big_zone.clone();
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if axfr_count(rpz, &zone, expected).is_ok() {
                            n += 1;
                        }
                    }
                    n
                })
            });
            let cpu0 = proc_cpu_secs(server.pid()).unwrap_or(0.0);
            let stats = runtime.block_on(load::run(
                &target,
                opts.connections,
                window,
                Pace::Closed,
                single.clone(),
            ));
            let cpu = proc_cpu_secs(server.pid()).unwrap_or(0.0) - cpu0;
            stop.store(true, Ordering::Relaxed);
            if let Some(p) = puller {
                pulls += p.join().unwrap_or(0);
            }
            if stats.errors > 0 {
                return Err(format!("{} single events failed", stats.errors));
            }
            let rate = stats.rate();
            let cpu_us = cpu / (rate * window.as_secs_f64()).max(1.0) * 1e6;
            if with_pull {
                pulled.push(rate);
                cpu_pulled.push(cpu_us);
            } else {
                alone.push(rate);
                cpu_alone.push(cpu_us);
            }
        }
    }
    let ratios: Vec<f64> = alone.iter().zip(&pulled).map(|(a, p)| p / a).collect();
    rows.push(format!(
        "| single events while a secondary pulls the {}-name zone / alone (median of rounds) | {:.1}% ({} / {} ev/s; {:.0} / {:.0} us CPU per event) | 95% | {} rounds of {:.0} s, {} conns, {pulls} full transfers during them |",
        opts.domains, median(&ratios) * 100.0, run::fmt_rate(median(&pulled)), run::fmt_rate(median(&alone)),
        median(&cpu_pulled), median(&cpu_alone), ratios.len(), window.as_secs_f64(), opts.connections
    ));
    note(rows[rows.len() - 1].clone());
    server.stop()?;

    println!("| figure | measured | target | notes |");
    println!("|---|---|---|---|");
    for r in &rows {
        println!("{r}");
    }
    println!(
        "\ncores: {ncores}, server pinned: {pinned}, load at the end: {}",
        load().trim()
    );
    Ok(())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Creates the organizations and their lists through the store.
fn prepare(db: &Path, orgs: u64, big: u64) -> Result<World, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let store =
        Store::open_sqlite(db, parasol::store::OpenRole::Server).map_err(|e| e.to_string())?;
    let world = runtime.block_on(async {
        let now = parasol::timefmt::now();
        let e = |e: parasol::store::StoreError| e.to_string();
        let org = async |name: String| {
            let f = OrgFields {
                name,
                seats: 10,
                ..Default::default()
            };
            store
                .create_organization(Parent::None, f, now)
                .await
                .map(|o| (o.id, o.customer_key))
                .map_err(e)
        };
        let load = async |key: &str, names: Vec<String>| {
            let key = CustomerKey::parse(key).ok_or("a malformed customer key")?;
            let request = Ingest {
                key,
                batch_id: uuid::Uuid::new_v4(),
                now,
                batch: data::prepared(names, 0),
                new_domain_budget: None,
            };
            match store.ingest(request).await.map_err(e)? {
                Ingested::Stored { .. } => Ok::<(), String>(()),
                other => Err(format!("pre-loading refused: {other:?}")),
            }
        };
        let mut small = Vec::new();
        for i in 0..orgs {
            let (id, key) = org(format!("rpz small {i}")).await?;
            let names = (0..SMALL).map(|n| data::domain(SPACE_SMALL, i * SMALL + n));
            load(&key, names.collect()).await?;
            small.push((id, key));
        }
        let big_org = org("rpz large".into()).await?;
        let mut done = 0;
        while done < big {
            let n = 50_000.min(big - done);
            load(
                &big_org.1,
                (done..done + n)
                    .map(|i| data::domain(SPACE_BIG, i))
                    .collect(),
            )
            .await?;
            done += n;
        }
        let single = org("rpz single events".into()).await?;
        let hot = (0..data::HOT_DOMAINS).map(|n| data::domain(data::SPACE_HOT, n));
        load(&single.1, hot.collect()).await?;
        Ok::<World, String>(World {
            small,
            big: big_org,
            single_key: single.1,
        })
    });
    store.close();
    world
}

/// A port free for both UDP and TCP on 127.0.0.1.
fn free_port() -> Result<u16, String> {
    for _ in 0..100 {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = tcp.local_addr().map_err(|e| e.to_string())?.port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err("no free port for both UDP and TCP".into())
}

fn post_one(
    runtime: &tokio::runtime::Runtime,
    target: &Target,
    key: &str,
    domain: &str,
) -> Result<(), String> {
    runtime.block_on(async {
        let mut sender = target.connect().await?;
        let body = Bytes::from(format!("[{}]", data::event_json(domain, 0)));
        let req = Req::post(format!("/1.0/events?customerKey={key}"), body, 202, 1);
        match target.send(&mut sender, req).await? {
            (202, _) => Ok(()),
            (s, b) => Err(format!("POST: {s} {}", String::from_utf8_lossy(&b))),
        }
    })
}

/// One change's freshness: posts a new name to the organization, then watches its `.rpz` file
/// (replaced: a new inode) and its zone's serial. Returns both delays in milliseconds, and how
/// many organizations' `.rpz` files were replaced (with `count`).
#[allow(clippy::too_many_arguments)]
fn fresh(
    runtime: &tokio::runtime::Runtime,
    target: &Target,
    rpz: SocketAddr,
    export_dir: &Path,
    org: i64,
    key: &str,
    trial: u64,
    count: bool,
) -> Result<(f64, f64, usize), String> {
    let zone = format!("org-{org}.rpz.parasol.");
    let file = export_dir.join(format!("org-{org}.rpz"));
    let inodes_before = if count {
        inodes(export_dir)
    } else {
        Vec::new()
    };
    let ino = |f: &Path| std::fs::metadata(f).map(|m| m.ino()).unwrap_or(0);
    let (ino0, serial0) = (ino(&file), soa_serial(rpz, &zone));
    let name = data::domain(SPACE_FRESH, trial);
    post_one(runtime, target, key, &name)?;
    let t0 = Instant::now();
    let (mut to_file, mut to_serial) = (None, None);
    while to_file.is_none() || to_serial.is_none() {
        if t0.elapsed() > GIVE_UP {
            return Err(format!(
                "organization {org}: the change did not show within {GIVE_UP:?}"
            ));
        }
        if to_file.is_none() && ino(&file) != ino0 {
            to_file = Some(t0.elapsed());
        }
        if to_serial.is_none() && soa_serial(rpz, &zone) != serial0 {
            to_serial = Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if count {
        let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
        if !text.contains(&name) {
            return Err(format!("{}: {name} missing", file.display()));
        }
    }
    let rewritten = if count {
        let after = inodes(export_dir);
        after.iter().filter(|a| !inodes_before.contains(a)).count()
    } else {
        0
    };
    let ms = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
    Ok((ms(to_file), ms(to_serial), rewritten))
}

/// The inodes of the `.rpz` files, sorted.
fn inodes(dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".rpz"))
                .filter_map(|e| e.metadata().ok().map(|m| m.ino()))
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

fn query(zone: &str, qtype: RecordType) -> Result<Message, String> {
    let name = Name::from_ascii(zone).map_err(|e| e.to_string())?;
    let mut m = Message::query();
    let mut q = Query::query(name, qtype);
    q.query_class = DNSClass::IN;
    m.add_query(q);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    m.metadata.id = (data::mix(u64::from(nanos)) & 0xffff) as u16;
    Ok(m)
}

/// The zone's serial by a SOA query over UDP, if it answers.
fn soa_serial(addr: SocketAddr, zone: &str) -> Option<u32> {
    let socket = UdpSocket::bind("127.0.0.1:0").ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let bytes = query(zone, RecordType::SOA).ok()?.to_vec().ok()?;
    socket.send_to(&bytes, addr).ok()?;
    let mut buf = [0u8; 4096];
    let (n, _) = socket.recv_from(&mut buf).ok()?;
    let m = Message::from_vec(&buf[..n]).ok()?;
    m.answers.iter().find_map(|r| match &r.data {
        RData::SOA(soa) => Some(soa.serial),
        _ => None,
    })
}

fn send_tcp(addr: SocketAddr, m: &Message) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    let bytes = m.to_vec().map_err(|e| e.to_string())?;
    let mut out = (bytes.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&bytes);
    s.write_all(&out).map_err(|e| e.to_string())?;
    Ok(s)
}

fn read_message(s: &mut impl Read, buf: &mut Vec<u8>) -> Result<(), String> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len).map_err(|e| e.to_string())?;
    buf.resize(usize::from(u16::from_be_bytes(len)), 0);
    s.read_exact(buf).map_err(|e| e.to_string())
}

/// An AXFR read to its end, `expected` answer records: counted from the messages' headers (the
/// client decodes nothing, so that its work is small beside the server's).
fn axfr_count(addr: SocketAddr, zone: &str, expected: u64) -> Result<u64, String> {
    let stream = send_tcp(addr, &query(zone, RecordType::AXFR)?)?;
    let mut s = std::io::BufReader::with_capacity(256 * 1024, stream);
    let mut buf = Vec::new();
    let mut total = 0u64;
    while total < expected {
        read_message(&mut s, &mut buf)?;
        if buf.len() < 12 || buf[3] & 0x0f != 0 {
            return Err(format!("{addr}: AXFR refused or malformed"));
        }
        total += u64::from(u16::from_be_bytes([buf[6], buf[7]]));
    }
    Ok(total)
}

/// An IXFR from `serial`: how many answer records it held.
fn ixfr_records(addr: SocketAddr, zone: &str, serial: u32) -> Result<usize, String> {
    let mut m = query(zone, RecordType::IXFR)?;
    let name = Name::from_ascii(zone).map_err(|e| e.to_string())?;
    let localhost = Name::from_ascii("localhost.").map_err(|e| e.to_string())?;
    m.add_authority(Record::from_rdata(
        name,
        0,
        RData::SOA(hickory_proto::rr::rdata::SOA::new(
            localhost.clone(),
            localhost,
            serial,
            0,
            0,
            0,
            0,
        )),
    ));
    let mut s = send_tcp(addr, &m)?;
    let mut buf = Vec::new();
    let mut records = 0;
    let mut soas = 0;
    loop {
        read_message(&mut s, &mut buf)?;
        let m = Message::from_vec(&buf).map_err(|e| e.to_string())?;
        for r in &m.answers {
            records += 1;
            if r.record_type() == RecordType::SOA {
                soas += 1;
            }
        }
        // An IXFR of one version: SOA new, SOA old, (removed), SOA new, added, SOA new.
        if soas >= 4 || (records == 1 && soas == 1) {
            return Ok(records);
        }
    }
}

/// Writes the large zone as Parasol serves it (by AXFR) into a zone file for `named`; returns
/// the records an AXFR holds.
fn write_zone_file(rpz: SocketAddr, zone: &str, path: &Path) -> Result<u64, String> {
    let mut s = std::io::BufReader::with_capacity(
        256 * 1024,
        send_tcp(rpz, &query(zone, RecordType::AXFR)?)?,
    );
    let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    let mut buf = Vec::new();
    let (mut total, mut soas) = (0u64, 0);
    while soas < 2 {
        read_message(&mut s, &mut buf)?;
        let m = Message::from_vec(&buf).map_err(|e| e.to_string())?;
        for r in &m.answers {
            total += 1;
            if r.record_type() == RecordType::SOA {
                soas += 1;
                if soas == 2 {
                    break;
                }
            }
            writeln!(w, "{r}").map_err(|e| e.to_string())?;
        }
    }
    w.flush().map_err(|e| e.to_string())?;
    Ok(total)
}

/// BIND 9's `named` serving one zone as a primary, in the foreground, pinned like the server.
struct Named {
    child: Child,
    addr: SocketAddr,
}

impl Named {
    fn start(
        dir: &Path,
        zone_file: &Path,
        zone: &str,
        cpu: Option<usize>,
    ) -> Result<Named, String> {
        let port = free_port()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let conf = dir.join("named.conf");
        let d = dir.display();
        let text = format!(
            "options {{\n  directory \"{d}\";\n  pid-file \"{d}/named.pid\";\n  \
             listen-on port {port} {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n  \
             recursion no;\n  dnssec-validation no;\n  notify no;\n  allow-transfer {{ any; }};\n  \
             max-transfer-time-out 600;\n}};\ncontrols {{ }};\n\
             zone \"{}\" {{ type primary; file \"{}\"; }};\n",
            zone.trim_end_matches('.'),
            zone_file.display()
        );
        std::fs::write(&conf, text).map_err(|e| e.to_string())?;
        let named = ["/usr/sbin/named", "named"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("named"));
        let mut cmd = match cpu {
            Some(c) => {
                let mut cmd = Command::new("taskset");
                cmd.args(["-c", &c.to_string()]).arg(&named);
                cmd
            }
            None => Command::new(&named),
        };
        cmd.args(["-g", "-n", "1", "-c"]).arg(&conf);
        let log = std::fs::File::create(dir.join("named.log")).map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("named (apt-get install bind9): {e}"))?;
        let n = Named { child, addr };
        note("rpz: waiting for named to load the zone");
        let deadline = Instant::now() + Duration::from_secs(600);
        while soa_serial(addr, zone).is_none() {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(dir.join("named.log")).unwrap_or_default();
                return Err(format!("named did not serve the zone: {log}"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(n)
    }

    /// `named` itself (under `taskset`, which execs it: the same process).
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stop(mut self) {
        // SAFETY: kill with a pid we started and still own (not yet waited for).
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// Processes that keep cores busy (`sh -c 'while :; do :; done'`), ended when dropped.
struct Hogs(Vec<Child>);

impl Hogs {
    fn none() -> Hogs {
        Hogs(Vec::new())
    }

    /// `n` of them, free to run on every core (not on the client's alone, whose affinity a child
    /// would inherit).
    fn start(n: usize) -> Result<Hogs, String> {
        let mut v = Vec::new();
        let all = format!("0-{}", cores().max(1) - 1);
        for _ in 0..n {
            let c = Command::new("taskset")
                .args(["-c", &all, "sh", "-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .spawn()
                .map_err(|e| format!("sh: {e}"))?;
            v.push(c);
        }
        Ok(Hogs(v))
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
