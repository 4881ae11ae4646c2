//! The benchmark run: starts the real server as a child process on a fresh data directory, drives
//! it over HTTPS with the load generator in `load`, measures the ceilings of its parts in the same
//! run (`baseline`), and prints a table of rates, latencies, errors and peak memory with ratios
//! against those ceilings. The server and its baselines run on one core, the load generator on
//! another, where the machine has two.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;

use crate::load::{self, Pace, Req, Source, Stats, Target};
use crate::{baseline, data};

/// What to run and how big.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `parasol` binary to start as the server.
    pub binary: PathBuf,
    /// Entries pre-loaded into the list workload's customer.
    pub domains: u64,
    /// Lines of the reputation file.
    pub reputation_lines: u64,
    /// Duration of each timed workload.
    pub seconds: f64,
    /// Connections of the single-event, list and delete workloads.
    pub connections: usize,
    /// Concurrent clients of the ingest workloads.
    pub ingest_clients: usize,
    /// 1 MiB batches per ingest workload.
    pub ingest_batches: u64,
    /// Deep page number of the list workload.
    pub deep_page: u64,
    /// Pin the server to this core and the load generator to the other (when there are two).
    pub pin: bool,
    /// Keep the data directory afterwards.
    pub keep: bool,
    /// Start the server with `--export-dir`.
    pub exports: bool,
    /// Run only these workloads (ingest, single, list, readers, delete, management); the
    /// baselines always run.
    pub only: Option<Vec<String>>,
    /// Run the server on PostgreSQL (`crate::postgres`): a URL of a role that may create
    /// databases.
    pub database: Option<String>,
    /// More arguments for `parasol serve`.
    pub serve_args: Vec<String>,
    /// The PostgreSQL mode's rounds: a window of the plain loop and one of the node, in turn.
    pub rounds: usize,
}

impl Options {
    /// The full benchmark of the performance issue.
    pub fn full(binary: PathBuf) -> Options {
        Options {
            binary,
            domains: 1_000_000,
            reputation_lines: 1_000_000,
            seconds: 8.0,
            connections: 64,
            ingest_clients: 4,
            ingest_batches: 48,
            deep_page: 5000,
            pin: true,
            keep: false,
            only: None,
            database: None,
            exports: false,
            serve_args: Vec::new(),
            rounds: 6,
        }
    }

    /// A smoke run of a few seconds (CI).
    pub fn quick(binary: PathBuf) -> Options {
        Options {
            domains: 20_000,
            reputation_lines: 20_000,
            seconds: 0.5,
            connections: 16,
            ingest_clients: 2,
            ingest_batches: 4,
            deep_page: 90,
            rounds: 2,
            ..Options::full(binary)
        }
    }
}

pub(crate) const SERVER_CPU: usize = 0;
pub(crate) const CLIENT_CPU: usize = 1;

/// Runs an in-process baseline on a thread of its own, pinned to `cpu` (the server's) if given.
pub(crate) fn on_cpu<T: Send + 'static>(
    cpu: Option<usize>,
    what: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    std::thread::spawn(move || {
        if let Some(cpu) = cpu {
            pin_current_thread(cpu);
        }
        f()
    })
    .join()
    .map_err(|_| format!("{what} panicked"))?
}

/// Pins the calling thread (and the threads it starts later) to one core.
pub(crate) fn pin_current_thread(cpu: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A child process (the server or the hello baseline), stopped with SIGTERM when dropped.
pub(crate) struct ChildProc {
    child: Child,
    pub(crate) addr: SocketAddr,
    /// Its output lines (the first 20,000), shown when it fails to start or to stop. Apart from
    /// the line that gives its address, only the modes that say so read them (`--rpz` waits for
    /// a line, `--console` reads the access log's durations).
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

impl ChildProc {
    /// Starts `binary args`, pinned to `cpu` if given, and waits for a line containing `marker`
    /// followed by the address (on standard error for the server, standard output for hello).
    pub(crate) fn spawn(
        binary: &Path,
        args: &[&str],
        cpu: Option<usize>,
        marker: &'static str,
        from_stdout: bool,
    ) -> Result<(ChildProc, Duration), String> {
        let mut cmd = Command::new(binary);
        cmd.args(args).stdin(Stdio::null());
        if from_stdout {
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        } else {
            cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        }
        if let Some(cpu) = cpu {
            use std::os::unix::process::CommandExt;
            // SAFETY: only sched_setaffinity, which is async-signal-safe, runs between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                    Ok(())
                });
            }
        }
        let start = Instant::now();
        let mut child = cmd.spawn().map_err(|e| format!("{binary:?}: {e}"))?;
        let out: Box<dyn std::io::Read + Send> = if from_stdout {
            Box::new(child.stdout.take().ok_or("no stdout")?)
        } else {
            Box::new(child.stderr.take().ok_or("no stderr")?)
        };
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = log.clone();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(rest) = line.split(marker).nth(1) {
                    let _ = tx.send(rest.trim().to_string());
                }
                if let Ok(mut l) = sink.lock() {
                    if l.len() < 20_000 {
                        l.push(line);
                    }
                }
            }
        });
        let found = rx.recv_timeout(Duration::from_secs(120));
        let elapsed = start.elapsed();
        let Ok(found) = found else {
            let _ = child.kill();
            let _ = child.wait();
            // A database URL's password is not shown.
            let shown: Vec<String> = args.iter().map(|a| parasol::store::redact(a)).collect();
            return Err(format!(
                "{} did not start: {:?}",
                shown.join(" "),
                log.lock().map(|l| l.clone()).unwrap_or_default()
            ));
        };
        let hostport = found.rsplit("://").next().unwrap_or(&found);
        let addr: SocketAddr = hostport
            .parse()
            .map_err(|e| format!("address {found:?}: {e}"))?;
        Ok((ChildProc { child, addr, log }, elapsed))
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (at most `limit`) for an output line containing `needle`; returns it.
    pub(crate) fn wait_for_log(&self, needle: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(l) = self
                .log
                .lock()
                .ok()
                .and_then(|l| l.iter().find(|l| l.contains(needle)).cloned())
            {
                return Some(l);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Its output lines so far (the first 20,000).
    pub(crate) fn lines(&self) -> Vec<String> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The lines of the server's log so far that contain `needle`.
    pub(crate) fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log
            .lock()
            .map(|l| l.iter().filter(|l| l.contains(needle)).cloned().collect())
            .unwrap_or_default()
    }

    /// Resets the kernel's peak-RSS mark (VmHWM) so the next reading covers one workload.
    pub(crate) fn reset_peak(&self) {
        let _ = std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5");
    }

    /// Peak resident memory since the last reset, in MiB.
    pub(crate) fn peak_rss_mib(&self) -> f64 {
        proc_status_kib(self.pid(), "VmHWM:").map_or(f64::NAN, |k| k as f64 / 1024.0)
    }

    pub(crate) fn stop(mut self) -> Result<(), String> {
        // SAFETY: kill with a pid we started and still own (not yet waited for).
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return if status.success() {
                    Ok(())
                } else {
                    Err(format!(
                        "exited with {status}; log: {:?}",
                        self.log.lock().map(|l| l.clone()).unwrap_or_default()
                    ))
                };
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return Err("did not stop within 40 s of SIGTERM".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// CPU time (user and system) the process has used so far, in seconds.
pub(crate) fn proc_cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ');
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| (utime + stime) as f64 / ticks as f64)
}

/// CPU seconds used between two `proc_cpu_secs` readings.
fn cpu_between(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    after.zip(before).map(|(a, b)| a - b)
}

/// Server CPU microseconds per unit, from the CPU seconds used over the units' workload.
fn cpu_us_per_unit(cpu_secs: Option<f64>, units: u64) -> f64 {
    match cpu_secs {
        Some(c) if units > 0 => c * 1e6 / units as f64,
        _ => f64::NAN,
    }
}

pub(crate) fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// One row of the table.
struct Row {
    name: String,
    unit: &'static str,
    stats: Option<Stats>,
    rss: f64,
    /// The server's CPU time per unit (event or request), microseconds: a steadier measure than
    /// the rate on a machine whose speed drifts.
    cpu_us: f64,
    /// Target and verdict text.
    target: String,
}

impl Row {
    fn new(name: impl Into<String>, unit: &'static str, stats: &Stats, rss: f64) -> Row {
        Row {
            name: name.into(),
            unit,
            stats: Some(stats.clone()),
            rss,
            cpu_us: f64::NAN,
            target: String::new(),
        }
    }

    /// Units of the row's workload: events for events/s rows, otherwise requests.
    fn units(&self) -> u64 {
        match &self.stats {
            Some(s) if self.unit == "events/s" => s.units,
            Some(s) => s.ok,
            None => 0,
        }
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// A figure against its target: `value` with `decimals` decimals, and the verdict. The figure is
/// rounded toward the side of the target its verdict is on, so a figure that misses never prints
/// as the target itself (39.96% of hello shows as 39.9%, not 40.0%), nor the reverse.
pub(crate) fn against(
    value: f64,
    decimals: usize,
    meets: impl Fn(f64) -> bool,
) -> (String, &'static str) {
    let met = meets(value);
    if !value.is_finite() {
        // Nothing was measured.
        return ("-".into(), verdict(met));
    }
    let scale = 10f64.powi(decimals as i32);
    let scaled = value * scale;
    let shown = [scaled.round(), scaled.floor(), scaled.ceil()]
        .into_iter()
        .map(|s| s / scale)
        .find(|&s| meets(s) == met)
        .unwrap_or(value);
    (format!("{shown:.decimals$}"), verdict(met))
}

pub(crate) fn fmt_rate(v: f64) -> String {
    if v >= 100_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10_000.0 {
        format!("{:.1}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

pub(crate) fn fmt_ms(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// Where an open loop's requests over the target's bound came from, for its row: their share,
/// and the stretches of the run in which most requests were that slow (a stall and its backlog).
fn fmt_spells(s: &Stats) -> String {
    let spells = s.slow_spells();
    let share = format!(
        "over {} ms: {:.2}% of requests",
        load::SLOW_MS,
        spells.share * 100.0
    );
    match spells.longest {
        None => format!("{share}, no stretch of mostly slow ones"),
        Some((from, len)) => format!(
            "{share}, {} stretch{} of mostly slow ones (longest {} ms from {} s)",
            spells.count,
            if spells.count == 1 { "" } else { "es" },
            len.as_millis(),
            fmt_secs(from)
        ),
    }
}

/// Seconds as the table shows a duration: "2", "0.075".
fn fmt_secs(d: Duration) -> String {
    let s = format!("{:.3}", d.as_secs_f64());
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The database's size as SQLite sees it (pages in use, the WAL's newer pages included).
fn db_logical_bytes(db: &Path) -> u64 {
    let Ok(c) =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    let get = |p: &str| c.query_row(&format!("PRAGMA {p}"), [], |r| r.get::<_, i64>(0));
    match (get("page_count"), get("page_size"), get("freelist_count")) {
        (Ok(n), Ok(size), Ok(free)) => ((n - free).max(0) * size) as u64,
        _ => 0,
    }
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// Runs workloads against the server and collects their rows.
struct Measure<'a> {
    runtime: &'a tokio::runtime::Runtime,
    server: &'a ChildProc,
    target: &'a Target,
    rows: Vec<Row>,
    notes: Vec<String>,
    /// Highest peak RSS of the server seen so far, MiB.
    peak: f64,
}

impl Measure<'_> {
    fn measure(
        &mut self,
        name: String,
        unit: &'static str,
        conns: usize,
        duration: Duration,
        pace: Pace,
        source: Source,
    ) -> Stats {
        note(&name);
        self.server.reset_peak();
        let (s, cpu) = self.window(self.target, self.server, conns, duration, pace, source);
        let rss = self.server.peak_rss_mib();
        self.peak = self.peak.max(rss);
        if let Some(e) = &s.first_error {
            self.notes
                .push(format!("{name}: {} errors; first: {e}", s.errors));
        }
        let mut row = Row::new(name, unit, &s, rss);
        row.cpu_us = cpu_us_per_unit(cpu, row.units());
        self.rows.push(row);
        s
    }

    /// One timed run of `source` against `target`, served by `process`: what it measured, and
    /// the CPU seconds the process used meanwhile.
    fn window(
        &self,
        target: &Target,
        process: &ChildProc,
        conns: usize,
        duration: Duration,
        pace: Pace,
        source: Source,
    ) -> (Stats, Option<f64>) {
        let before = proc_cpu_secs(process.pid());
        let s = self
            .runtime
            .block_on(load::run(target, conns, duration, pace, source));
        let after = proc_cpu_secs(process.pid());
        (s, cpu_between(before, after))
    }
}

/// Closed-loop windows in which the single events' maximum is taken, each after a window of the
/// hello server's (see `run_in`).
const INTERLEAVED_ROUNDS: u32 = 4;

/// `source` with each worker's request numbers started at `by`: a workload run in several
/// windows names new domains in each, as one long run would.
fn numbered_from(source: Source, by: u64) -> Source {
    Arc::new(move |w, n| source(w, n + by))
}

/// Runs the benchmark and prints the table.
pub fn run(opts: Options) -> Result<(), String> {
    let ncores = cores();
    let pinned = opts.pin && ncores >= 2 && pin_current_thread(CLIENT_CPU);
    let server_cpu = pinned.then_some(SERVER_CPU);
    if let Some(url) = &opts.database {
        return crate::postgres::run(&opts, url, server_cpu, pinned, ncores);
    }
    let dir = std::env::temp_dir().join(format!("parasol-bench-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{dir:?}: {e}"))?;
    let result = run_in(&opts, &dir, ncores, pinned, server_cpu);
    if opts.keep {
        eprintln!("bench: data kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

pub(crate) fn note(msg: impl AsRef<str>) {
    eprintln!("bench: {}", msg.as_ref());
}

fn run_in(
    opts: &Options,
    dir: &Path,
    ncores: usize,
    pinned: bool,
    server_cpu: Option<usize>,
) -> Result<(), String> {
    let data_dir = dir.join("data");
    std::fs::create_dir_all(&data_dir).map_err(|e| e.to_string())?;
    let db = data_dir.join("parasol.db");
    let rep_file = dir.join("reputation.csv");

    note(format!(
        "writing a {}-line reputation file and pre-loading {} domains",
        opts.reputation_lines, opts.domains
    ));
    data::write_reputation(&rep_file, opts.reputation_lines)?;
    let t = Instant::now();
    let world = data::prepare(&db, opts.domains)?;
    let preload_secs = t.elapsed().as_secs_f64();
    let preload_bytes = file_size(&db);
    // The names of the loopback listener the server is given below: it keeps this certificate.
    let names = parasol::tls::CertNames::for_listener(([127, 0, 0, 1], 0).into());
    let (cert, _key) = parasol::tls::ensure_self_signed(&data_dir, &names)?;

    // Bodies are made before any clock starts.
    let (sample_batch, batch_events) = data::batch(
        (0..).map(|n| (data::domain(7, n), n)),
        data::MAX_BATCH_BYTES,
    );
    drop(sample_batch);
    let make_batches = |space: u64, mixed: bool, count: u64| -> Vec<Bytes> {
        (0..count)
            .map(|b| {
                let names = (b * batch_events..).map(|n| (data::event_name(space, n, mixed), n));
                data::batch(names, data::MAX_BATCH_BYTES).0
            })
            .collect()
    };
    let new_batches = Arc::new(make_batches(10, false, opts.ingest_batches));
    // The mix runs about twice as fast: three times the batches, so that it too lasts long enough
    // to include its share of checkpoints and WAL restarts (a one-second run read 10-25% high).
    let mixed_batches = Arc::new(make_batches(11, true, 3 * opts.ingest_batches));
    let reader_ingest_batches = Arc::new(make_batches(12, false, opts.ingest_batches));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let secs = Duration::from_secs_f64(opts.seconds);
    let conns = opts.connections;
    let mut rows: Vec<Row> = Vec::new();
    let bin = &opts.binary;

    // ---------------------------------------------------------------- baselines
    note("baseline: hello server");
    let single_body = |n: u64| -> Bytes { Bytes::from(data::event_json(&data::domain(20, n), n)) };
    let hello_source = || -> Source {
        Arc::new(move |w, n| {
            Some(Req::post(
                "/1.0/events".into(),
                single_body((w as u64) << 32 | n),
                200,
                1,
            ))
        })
    };
    // This program itself, in its hello-server mode (see `main`).
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let hello_args = [
        "--serve-hello",
        data_dir.to_str().ok_or("temp path is not UTF-8")?,
    ];
    let (hello, _) = ChildProc::spawn(&me, &hello_args, server_cpu, "ready ", true)?;
    let hello_target = Target::new(hello.addr, &cert)?;
    let hello_cpu = proc_cpu_secs(hello.pid());
    let hello_stats = runtime.block_on(load::run(
        &hello_target,
        conns,
        secs,
        Pace::Closed,
        hello_source(),
    ));
    let hello_rss = hello.peak_rss_mib();
    let hello_cpu_after = proc_cpu_secs(hello.pid());
    let hello_rate = hello_stats.req_rate();
    let mut r = Row::new(
        format!("hello HTTPS server, POST, {conns} conns"),
        "req/s",
        &hello_stats,
        hello_rss,
    );
    r.target = "HTTP ceiling".into();
    r.cpu_us = cpu_us_per_unit(cpu_between(hello_cpu, hello_cpu_after), r.units());
    rows.push(r);
    // The latency baseline of the open-loop target: the same server at 80% of its own maximum,
    // i.e. what this machine's scheduling alone does to the tail of a server with no work to do.
    let hello_open_rate = (hello_rate * 0.8).max(10.0);
    let hello_open = runtime.block_on(load::run(
        &hello_target,
        conns,
        secs,
        Pace::Open(hello_open_rate),
        hello_source(),
    ));
    let mut r = Row::new(
        format!(
            "hello HTTPS server, open loop {} req/s (80%)",
            fmt_rate(hello_open_rate)
        ),
        "req/s",
        &hello_open,
        f64::NAN,
    );
    r.target = format!(
        "latency baseline; sent late p99 {} ms; {}",
        fmt_ms(hello_open.late_pct_ms(0.99)),
        fmt_spells(&hello_open)
    );
    rows.push(r);

    note("baseline: plain rusqlite inserts");
    let ceiling_dir = dir.to_path_buf();
    let batches = opts.ingest_batches;
    let ceiling = on_cpu(server_cpu, "storage ceiling", move || {
        baseline::storage_ceiling(&ceiling_dir, batches, batch_events)
    })?;
    rows.push(Row {
        name: format!("rusqlite loop, tx of 1 request row + {batch_events} new domains, FULL+WAL"),
        unit: "events/s",
        stats: None,
        rss: f64::NAN,
        cpu_us: f64::NAN,
        target: format!("storage ceiling: {}", fmt_rate(ceiling)),
    });

    note("baseline: plain rusqlite single-event rows");
    let single_dir = dir.to_path_buf();
    // 60,000 requests in the full run: under a second of the loop on the benchmark's VM.
    let single_requests = opts.ingest_batches * 1250;
    let (single_storage_rate, single_storage_cpu) =
        on_cpu(server_cpu, "single-event storage", move || {
            baseline::single_event_storage(&single_dir, single_requests)
        })?;
    rows.push(Row {
        name: format!(
            "rusqlite loop, tx of {} single-event request rows (10% with a new domain), FULL+WAL",
            baseline::SINGLE_GROUP
        ),
        unit: "req/s",
        stats: None,
        rss: f64::NAN,
        cpu_us: single_storage_cpu,
        target: format!(
            "single-event storage: {} req/s",
            fmt_rate(single_storage_rate)
        ),
    });

    note("baseline: append + fsync");
    let fsync_dir = dir.to_path_buf();
    let fsync_secs = secs.min(Duration::from_secs(2));
    let fsync = on_cpu(server_cpu, "fsync probe", move || {
        baseline::fsync_latency(&fsync_dir, fsync_secs)
    })?;
    let mut r = Row::new(
        format!(
            "append {} KiB + fsync, one at a time",
            parasol::store::DB_PAGE_BYTES / 1024
        ),
        "fsyncs/s",
        &fsync,
        f64::NAN,
    );
    r.target = "disk commit latency".into();
    rows.push(r);

    // ---------------------------------------------------------------- the server
    note(format!("starting {} serve", bin.display()));
    let rep_arg = rep_file.to_str().ok_or("temp path is not UTF-8")?;
    let data_arg = data_dir.to_str().ok_or("temp path is not UTF-8")?;
    let export_dir = dir.join("exports");
    let export_arg = export_dir.to_str().ok_or("temp path is not UTF-8")?;
    let mut serve_args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data_arg,
        "--reputation",
        rep_arg,
        "--log-level",
        "info",
    ];
    if opts.exports {
        serve_args.extend(["--export-dir", export_arg]);
    }
    serve_args.extend(opts.serve_args.iter().map(String::as_str));
    let (server, first_start) =
        ChildProc::spawn(bin, &serve_args, server_cpu, "ready: serving ", false)?;
    if opts.exports {
        // The first round writes every organization's files (the list workload's million names
        // among them); the workloads measure the exporter keeping up with changes, not that.
        note("waiting for the exporter's first round");
        let written = server.wait_for_log("export: wrote the files of", Duration::from_secs(600));
        note(written.ok_or("the exporter's first round did not finish within 600 s")?);
    }
    let target = Target::new(server.addr, &cert)?;

    let mut m = Measure {
        runtime: &runtime,
        server: &server,
        target: &target,
        rows: Vec::new(),
        notes: Vec::new(),
        peak: server.peak_rss_mib(),
    };
    m.rows.append(&mut rows);

    let enf = |key: &str| format!("/1.0/events?customerKey={key}");
    let batch_source = |batches: Arc<Vec<Bytes>>, key: &str, clients: usize, cycle: bool| {
        let path = enf(key);
        let src: Source = Arc::new(move |w, n| {
            let i = n as usize * clients + w;
            let i = if cycle { i % batches.len() } else { i };
            let body = batches.get(i)?.clone();
            Some(Req::post(path.clone(), body, 202, batch_events))
        });
        src
    };

    let list_path = |key: &str, page: u64| -> String {
        format!("/1.0/domains?customerKey={key}&page={page}&limit=200")
    };
    let list_source = |page: u64| -> Source {
        let path = list_path(&world.list_key, page);
        Arc::new(move |_, _| Some(Req::get(path.clone())))
    };
    let want = |w: &str| opts.only.as_ref().is_none_or(|o| o.iter().any(|x| x == w));
    let mut per_event: Option<f64> = None;

    // 1. ingest, all new domains; then the 90%-repeat mix.
    let ic = opts.ingest_clients;
    if want("ingest") {
        let long = Duration::from_secs(3600);
        let db_before = db_logical_bytes(&db);
        let ingest_new = m.measure(
            format!("ingest new domains, 1 MiB x {batch_events} ev, {ic} clients"),
            "events/s",
            ic,
            long,
            Pace::Closed,
            batch_source(new_batches.clone(), &world.ingest_key, ic, false),
        );
        let db_after = db_logical_bytes(&db);
        per_event =
            Some(db_after.saturating_sub(db_before) as f64 / ingest_new.units.max(1) as f64);
        let ingest_ratio = ingest_new.rate() / ceiling;
        if let Some(r) = m.rows.last_mut() {
            let (shown, met) = against(ingest_ratio * 100.0, 1, |p| p >= 70.0);
            r.target = format!("{shown}% of storage ceiling (>= 70%): {met}");
        }
        let ingest_mix = m.measure(
            format!("ingest 90% repeat / 10% new, {ic} clients"),
            "events/s",
            ic,
            long,
            Pace::Closed,
            batch_source(mixed_batches, &world.mixed_key, ic, false),
        );
        if let Some(r) = m.rows.last_mut() {
            let (shown, met) = against(ingest_mix.rate() / 1000.0, 1, |k| k >= 200.0);
            r.target = format!("{shown}k/s (>= 200k/s): {met}");
        }
    }
    if want("single") {
        // 2. single events: closed loop for the maximum, then open loop at 80% of it.
        // Like the realistic ingest: 90% of the events name one of the already-listed domains.
        let single_source = |space: u64, mixed: bool| -> Source {
            let path = enf(&world.mixed_key);
            Arc::new(move |w, n| {
                let i = (w as u64) << 32 | n;
                Some(Req::post(
                    path.clone(),
                    data::single_event(space, i, mixed),
                    202,
                    1,
                ))
            })
        };
        let new = m.measure(
            format!("single events, all new domains, {conns} conns"),
            "req/s",
            conns,
            secs,
            Pace::Closed,
            single_source(23, false),
        );
        if let Some(r) = m.rows.last_mut() {
            r.target = format!("{:.0}% of hello", new.req_rate() / hello_rate * 100.0);
        }
        // The maximum, in windows taken in turn with the hello server's (which has been idle
        // since the baselines): the VM's speed drifts by 10-20% over minutes, so a ratio of two
        // rates measured minutes apart moved by more than the changes it was meant to show.
        // Each window opens its connections before its clock starts.
        note(format!(
            "single events, closed loop, {INTERLEAVED_ROUNDS} windows each after one of hello's"
        ));
        let window = secs / INTERLEAVED_ROUNDS;
        let (mut hellos, mut singles, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let (mut hello_cpu_s, mut single_cpu_s) = (Some(0.0), Some(0.0));
        server.reset_peak();
        for round in 0..u64::from(INTERLEAVED_ROUNDS) {
            let from = round << 24;
            let (h, h_cpu) = m.window(
                &hello_target,
                &hello,
                conns,
                window,
                Pace::Closed,
                numbered_from(hello_source(), from),
            );
            let (s, s_cpu) = m.window(
                &target,
                &server,
                conns,
                window,
                Pace::Closed,
                numbered_from(single_source(21, true), from),
            );
            ratios.push(s.req_rate() / h.req_rate());
            hello_cpu_s = hello_cpu_s.zip(h_cpu).map(|(a, b)| a + b);
            single_cpu_s = single_cpu_s.zip(s_cpu).map(|(a, b)| a + b);
            hellos.push(h);
            singles.push(s);
        }
        let rss = server.peak_rss_mib();
        m.peak = m.peak.max(rss);
        let (hello_near, single) = (Stats::combined(hellos), Stats::combined(singles));
        let windows = format!("{INTERLEAVED_ROUNDS} x {} s", fmt_secs(window));
        let mut r = Row::new(
            format!("hello HTTPS server, POST, {conns} conns, {windows} taken in turn with the next row's"),
            "req/s",
            &hello_near,
            f64::NAN,
        );
        r.cpu_us = cpu_us_per_unit(hello_cpu_s, r.units());
        let near_cpu_us = r.cpu_us;
        r.target = format!(
            "HTTP ceiling beside the single events ({:.0}% of the first hello row)",
            hello_near.req_rate() / hello_rate * 100.0
        );
        m.rows.push(r);
        let mut r = Row::new(
            format!("single events, 90% repeat, closed loop, {conns} conns, {windows}"),
            "req/s",
            &single,
            rss,
        );
        r.cpu_us = cpu_us_per_unit(single_cpu_s, r.units());
        let single_ratio = single.req_rate() / hello_near.req_rate();
        let (shown, met) = against(single_ratio * 100.0, 1, |p| p >= 40.0);
        let (low, high) = ratios
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
        r.target = format!(
            "{shown}% of hello in the windows beside them (>= 40%): {met}; windows {:.1}-{:.1}%; against the first hello row {:.1}%; CPU a request: hello's {:.1} + the storage loop's {:.1} + {:.1} us",
            low * 100.0,
            high * 100.0,
            single.req_rate() / hello_rate * 100.0,
            near_cpu_us,
            single_storage_cpu,
            r.cpu_us - near_cpu_us - single_storage_cpu
        );
        m.rows.push(r);
        let open_rate = (single.req_rate() * 0.8).max(10.0);
        let open = m.measure(
            format!(
                "single events, open loop {} req/s (80%)",
                fmt_rate(open_rate)
            ),
            "req/s",
            conns,
            secs,
            Pace::Open(open_rate),
            single_source(22, true),
        );
        if let Some(r) = m.rows.last_mut() {
            // The target: within 10 ms of what this machine's scheduling alone does to the tail
            // of a server with nothing to do, the hello server's own open loop at 80% of its
            // maximum in the same run.
            let p99 = open.pct_ms(0.99);
            let hello_p99 = hello_open.pct_ms(0.99);
            let (shown, met) = against(p99 - hello_p99, 1, |ms| ms <= 10.0);
            r.target = format!(
                "p99 {} ms, {shown} ms above hello's own at 80% ({} ms) (<= 10 ms): {met}; {}; sent late p99 {} ms (all {conns} conns busy); disk fsync p99 {} ms",
                fmt_ms(p99),
                fmt_ms(hello_p99),
                fmt_spells(&open),
                fmt_ms(open.late_pct_ms(0.99)),
                fmt_ms(fsync.pct_ms(0.99))
            );
        }
        // The same at half the maximum: how much of the tail is queueing near saturation.
        let half_rate = (single.req_rate() * 0.5).max(10.0);
        let half = m.measure(
            format!(
                "single events, open loop {} req/s (50%)",
                fmt_rate(half_rate)
            ),
            "req/s",
            conns,
            secs,
            Pace::Open(half_rate),
            single_source(24, true),
        );
        if let Some(r) = m.rows.last_mut() {
            r.target = format!(
                "p99 {} ms (no target); sent late p99 {} ms; {}",
                fmt_ms(half.pct_ms(0.99)),
                fmt_ms(half.late_pct_ms(0.99)),
                fmt_spells(&half)
            );
        }
    }
    hello.stop().ok();
    if want("list") {
        // 3. list: the first page of an unchanged list (served from the server's page cache, as
        // to a product polling it), then shallow and deep pages each requested in turn, more
        // distinct pages than the cache holds, so that every answer is read from the database.
        let page1 = m.measure(
            format!(
                "list page 1 of {} domains, unchanged (page cache), {conns} conns",
                opts.domains
            ),
            "req/s",
            conns,
            secs,
            Pace::Closed,
            list_source(1),
        );
        let p1_ratio = page1.req_rate() / hello_rate;
        if let Some(r) = m.rows.last_mut() {
            let (shown, met) = against(p1_ratio * 100.0, 1, |p| p >= 30.0);
            r.target = format!("{shown}% of hello (>= 30%): {met}");
        }
        let span = (opts.deep_page / 2).clamp(1, 1000);
        let uncached = if span > 256 { ", uncached" } else { "" };
        let pages_source = |first: u64| -> Source {
            let key = world.list_key.clone();
            Arc::new(move |w, n| {
                let page = first + (n * conns as u64 + w as u64) % span;
                Some(Req::get(list_path(&key, page)))
            })
        };
        let shallow = m.measure(
            format!("list pages 1-{span} in turn{uncached}, {conns} conns"),
            "req/s",
            conns,
            secs,
            Pace::Closed,
            pages_source(1),
        );
        let deep_first = opts.deep_page + 1 - span;
        let deep = m.measure(
            format!(
                "list pages {deep_first}-{} in turn{uncached}, {conns} conns",
                opts.deep_page
            ),
            "req/s",
            conns,
            secs,
            Pace::Closed,
            pages_source(deep_first),
        );
        let deep_cost = shallow.req_rate() / deep.req_rate().max(1e-9);
        if let Some(r) = m.rows.last_mut() {
            let (shown, met) = against(deep_cost, 2, |c| c <= 2.0);
            r.target = format!("{shown}x the shallow pages' cost (<= 2x): {met}");
        }
    }

    if want("readers") {
        // 4. readers alone and while an ingest runs.
        let readers = 8usize;
        let alone = m.measure(
            format!("readers alone (page 1), {readers} conns"),
            "req/s",
            readers,
            secs,
            Pace::Closed,
            list_source(1),
        );
        note("readers while ingest runs");
        server.reset_peak();
        let ingest_src = batch_source(reader_ingest_batches, &world.ingest_key, ic, true);
        let (during, bg) = runtime.block_on(async {
            tokio::join!(
                load::run(&target, readers, secs, Pace::Closed, list_source(1)),
                load::run(&target, ic, secs, Pace::Closed, ingest_src)
            )
        });
        let rss = server.peak_rss_mib();
        m.peak = m.peak.max(rss);
        let keep = during.req_rate() / alone.req_rate().max(1e-9);
        let mut r = Row::new(
            format!("readers during ingest ({} ev/s)", fmt_rate(bg.rate())),
            "req/s",
            &during,
            rss,
        );
        let (shown, met) = against(keep * 100.0, 1, |p| p >= 50.0);
        r.target = format!("keep {shown}% of alone (>= 50%): {met}");
        m.rows.push(r);
        if bg.errors > 0 || during.errors > 0 {
            m.notes.push(format!(
                "readers during ingest: {} reader errors, {} ingest errors; first: {:?} {:?}",
                during.errors, bg.errors, during.first_error, bg.first_error
            ));
        }
    }
    if want("delete") {
        // 5. delete by name, from the end of the big list.
        let total = opts.domains;
        let delete_key = world.list_key.clone();
        let c = conns as u64;
        let del = m.measure(
            format!("delete by name, {conns} conns"),
            "req/s",
            conns,
            secs,
            Pace::Closed,
            Arc::new(move |w, n| {
                let i = n * c + w as u64;
                let idx = total.checked_sub(i + 1)?;
                Some(Req {
                    method: Method::DELETE,
                    path: format!(
                        "/1.0/domains?customerKey={delete_key}&where%5Bname%5D={}",
                        data::domain(data::SPACE_LIST, idx)
                    ),
                    body: None,
                    auth: None,
                    expect: 204,
                    units: 1,
                })
            }),
        );
        if let Some(r) = m.rows.last_mut() {
            r.target = format!("{:.0}% of hello", del.req_rate() / hello_rate * 100.0);
        }
    }
    let peak_enforcement = m.peak;
    if want("management") {
        // 6. management: list and create sites and users under one organization.
        let auth: Arc<str> = Arc::from(world.mgmt_auth.as_str());
        let org = world.mgmt_org;
        let mgmt = |what: &'static str, create: bool| -> Source {
            let auth = auth.clone();
            Arc::new(move |w, n| {
                let path = format!("/v1/organizations/{org}/{what}");
                let body = match (create, what) {
                    (false, _) => None,
                    (true, "sites") => Some(format!(r#"{{"name":"bench site {w}-{n}"}}"#)),
                    (true, _) => Some(format!(
                        r#"{{"firstname":"Bench","lastname":"User {w}-{n}","email":"u{w}-{n}@bench.example","password":"Bench-password-{n}!","roleId":2,"timezone":"UTC"}}"#
                    )),
                };
                Some(Req {
                    method: if create { Method::POST } else { Method::GET },
                    path,
                    body: body.map(Bytes::from),
                    auth: Some(auth.clone()),
                    expect: 200,
                    units: 1,
                })
            })
        };
        let mc = 8usize;
        for (what, create) in [
            ("sites", true),
            ("sites", false),
            ("users", true),
            ("users", false),
        ] {
            let verb = if create { "POST" } else { "GET" };
            let s = m.measure(
                format!("management {verb} /v1/organizations/ID/{what}, {mc} conns"),
                "req/s",
                mc,
                secs,
                Pace::Closed,
                mgmt(what, create),
            );
            if let Some(r) = m.rows.last_mut() {
                r.target = if s.ok == 0 {
                    "not served yet (see errors)".into()
                } else {
                    format!("{:.0}% of hello", s.req_rate() / hello_rate * 100.0)
                };
            }
        }
    }

    let Measure {
        rows,
        notes,
        peak: peak_overall,
        ..
    } = m;

    // Start-up with the full data directory and reputation file.
    server.stop().map_err(|e| format!("server: {e}"))?;
    let mut starts = Vec::new();
    let mut start_rss = 0f64;
    for _ in 0..3 {
        let (s, t) = ChildProc::spawn(bin, &serve_args, server_cpu, "ready: serving ", false)?;
        start_rss = start_rss.max(s.peak_rss_mib());
        starts.push(t.as_secs_f64());
        s.stop().map_err(|e| format!("server: {e}"))?;
    }
    starts.sort_by(f64::total_cmp);
    let startup = starts[starts.len() / 2];

    // ---------------------------------------------------------------- the table
    let date = parasol::timefmt::rfc3339(parasol::timefmt::now());
    println!();
    println!(
        "parasol-bench, {date}, {} cores, {}",
        ncores,
        if pinned {
            format!("server (and baselines) pinned to cpu {SERVER_CPU}, load generator to cpu {CLIENT_CPU}")
        } else {
            "not pinned (fewer than 2 cores or --no-pin)".to_string()
        }
    );
    println!(
        "{} domains pre-loaded in {:.1} s; reputation file {} lines; {}-second runs; {} events per 1 MiB batch; {}",
        opts.domains,
        preload_secs,
        opts.reputation_lines,
        opts.seconds,
        batch_events,
        if opts.exports {
            "exports on (--export-dir, every format)"
        } else {
            "exports off"
        }
    );
    println!();
    println!(
        "| workload | rate | unit | p50 ms | p99 ms | max ms | errors | server CPU us per unit | peak RSS MiB | target |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---|");
    let blank_nan = |v: f64, digits: usize| {
        if v.is_nan() {
            String::new()
        } else {
            format!("{v:.digits$}")
        }
    };
    for r in &rows {
        match &r.stats {
            Some(s) => {
                let rate = if r.unit == "events/s" {
                    s.rate()
                } else {
                    s.req_rate()
                };
                let (cpu, rss) = (blank_nan(r.cpu_us, 1), blank_nan(r.rss, 0));
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.name,
                    fmt_rate(rate),
                    r.unit,
                    fmt_ms(s.pct_ms(0.5)),
                    fmt_ms(s.pct_ms(0.99)),
                    fmt_ms(s.max_ms()),
                    s.errors,
                    cpu,
                    rss,
                    r.target
                );
            }
            None => println!(
                "| {} | | {} | | | | | {} | | {} |",
                r.name,
                r.unit,
                blank_nan(r.cpu_us, 1),
                r.target
            ),
        }
    }
    let per_row = preload_bytes as f64 / opts.domains.max(1) as f64;
    let per_event = per_event.map_or("-".to_string(), |b| format!("{b:.0}"));
    let (shown, met) = against(peak_enforcement, 0, |mib| mib < 100.0);
    println!(
        "| peak RSS of the server, enforcement workloads, {} domains | | | | | | | | {shown} | < 100 MiB: {met} |",
        opts.domains,
    );
    let (shown, met) = against(peak_overall, 0, |mib| mib < 100.0);
    println!(
        "| peak RSS of the server, management included (argon2: 19 MiB a hash) | | | | | | | | {shown} | < 100 MiB: {met} |",
    );
    let (shown, met) = against(startup, 3, |secs| secs < 1.0);
    println!(
        "| start-up, {} domains + {}-line reputation file (median of 3) | {shown} s | | | | | | | {:.0} | < 1 s: {met} |",
        opts.domains,
        opts.reputation_lines,
        start_rss,
    );
    println!(
        "| first start-up (after pre-load) | {:.3} s | | | | | | | | |",
        first_start.as_secs_f64()
    );
    println!(
        "| database size | {per_row:.0} B per listed domain with its event (pre-load); {per_event} B per new domain + event (ingest) | | | | | | | | |"
    );
    println!(
        "| binary size | {:.1} MiB | | | | | | | | |",
        file_size(bin) as f64 / (1024.0 * 1024.0)
    );
    if !notes.is_empty() {
        println!();
        for n in &notes {
            println!("note: {n}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{against, fmt_secs, fmt_spells, numbered_from, Source, Stats};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_workload_run_in_windows_numbers_each_window_on() {
        let source: Source = Arc::new(|w, n| {
            Some(crate::load::Req::get(format!(
                "/{}",
                crate::data::domain(21, (w as u64) << 32 | n)
            )))
        });
        let path = |s: &Source, w, n| s(w, n).map(|r| r.path).unwrap();
        let second = numbered_from(source.clone(), 1 << 24);
        assert_eq!(path(&second, 3, 0), path(&source, 3, 1 << 24));
        assert_eq!(path(&second, 0, 7), path(&source, 0, (1 << 24) + 7));
        assert_ne!(path(&second, 3, 0), path(&source, 3, 0));
    }

    #[test]
    fn an_open_loops_slow_requests_are_described_with_their_stretches() {
        let stats = |intervals: Vec<(u32, u32)>| Stats {
            intervals,
            ..Stats::default()
        };
        assert_eq!(
            fmt_spells(&stats(vec![(100, 1), (100, 0)])),
            "over 20 ms: 0.50% of requests, no stretch of mostly slow ones"
        );
        assert_eq!(
            fmt_spells(&stats(vec![(100, 60), (100, 0), (100, 0), (50, 50), (50, 50)])),
            "over 20 ms: 40.00% of requests, 2 stretches of mostly slow ones (longest 100 ms from 0.15 s)"
        );
        assert_eq!(
            fmt_spells(&stats(vec![(10, 0), (10, 10)])),
            "over 20 ms: 50.00% of requests, 1 stretch of mostly slow ones (longest 50 ms from 0.05 s)"
        );
    }

    #[test]
    fn durations_are_shown_in_seconds_without_trailing_zeros() {
        assert_eq!(fmt_secs(Duration::from_secs(2)), "2");
        assert_eq!(fmt_secs(Duration::from_millis(75)), "0.075");
        assert_eq!(fmt_secs(Duration::from_millis(2500)), "2.5");
    }

    #[test]
    fn a_figure_is_never_shown_on_the_other_side_of_its_target() {
        let at_least_40 = |p: f64| p >= 40.0;
        assert_eq!(against(39.96, 1, at_least_40), ("39.9".into(), "MISSED"));
        assert_eq!(against(40.0, 1, at_least_40), ("40.0".into(), "met"));
        assert_eq!(against(35.44, 1, at_least_40), ("35.4".into(), "MISSED"));
        assert_eq!(against(41.26, 1, at_least_40), ("41.3".into(), "met"));
        let at_most_2 = |c: f64| c <= 2.0;
        assert_eq!(against(2.004, 2, at_most_2), ("2.01".into(), "MISSED"));
        assert_eq!(against(1.996, 2, at_most_2), ("2.00".into(), "met"));
        let under_100 = |mib: f64| mib < 100.0;
        assert_eq!(against(99.6, 0, under_100), ("99".into(), "met"));
        assert_eq!(against(86.4, 0, under_100), ("86".into(), "met"));
        let under_20 = |ms: f64| ms < 20.0;
        assert_eq!(against(19.97, 1, under_20), ("19.9".into(), "met"));
        assert_eq!(against(20.0, 1, under_20), ("20.0".into(), "MISSED"));
        assert_eq!(against(f64::NAN, 2, under_20), ("-".into(), "MISSED"));
    }
}
