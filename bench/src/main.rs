//! `parasol-bench`: the benchmark harness, a program of its own beside the product (see `run` and
//! bench/README.md, which gives its method). It starts the `parasol` binary found next to itself (or
//! `--server-binary`) as the server, and itself with `--serve-hello` as the hello baseline.

mod ab;
mod access;
mod baseline;
mod console;
mod cost;
mod data;
mod exports;
mod hostile;
mod load;
mod postgres;
mod rpz;
mod run;
mod settle;

use std::path::PathBuf;
use std::time::Duration;

use argh::FromArgs;

use run::Options;

/// Benchmark: start a server on a fresh data directory, load it over HTTPS, and print a table
/// with ratios against a hello HTTPS server and a plain SQLite insert loop measured in the same run.
#[derive(FromArgs, Debug)]
pub struct BenchArgs {
    /// smoke run with small sizes, a few seconds (CI)
    #[argh(switch)]
    pub quick: bool,
    /// domains pre-loaded for the list workload (default 1000000; 20000 with --quick)
    #[argh(option)]
    pub domains: Option<u64>,
    /// lines of the reputation file (default 1000000; 20000 with --quick)
    #[argh(option)]
    pub reputation_lines: Option<u64>,
    /// seconds per timed workload (default 8; 0.5 with --quick)
    #[argh(option)]
    pub seconds: Option<f64>,
    /// connections of the single-event, list and delete workloads (default 64; 16 with --quick)
    #[argh(option)]
    pub connections: Option<usize>,
    /// concurrent clients of the ingest workloads (default 4; 2 with --quick)
    #[argh(option)]
    pub ingest_clients: Option<usize>,
    /// number of 1 MiB batches of the all-new ingest workloads (default 48; 4 with --quick); the
    /// 90%-repeat mix sends three times as many
    #[argh(option)]
    pub ingest_batches: Option<u64>,
    /// the deep page of the list workload (default 5000; 90 with --quick)
    #[argh(option)]
    pub deep_page: Option<u64>,
    /// do not pin the server and the load generator to separate cores
    #[argh(switch)]
    pub no_pin: bool,
    /// keep the temporary data directory
    #[argh(switch)]
    pub keep: bool,
    /// run only these workloads, comma-separated: ingest, single, list, readers, delete,
    /// management (the baselines always run)
    #[argh(option)]
    pub only: Option<String>,
    /// run the server with --export-dir (a directory beside its data), so that the resolver
    /// exporter keeps every organization's files current during the workloads: its cost on the
    /// write path is the difference to a run without this switch
    #[argh(switch)]
    pub exports: bool,
    /// instead of the benchmark: the exporter's cost on the write path, two servers (without and
    /// with --export-dir) taking the ingest and single-event workloads in alternating windows
    #[argh(switch)]
    pub compare_exports: bool,
    /// instead of the benchmark: write this many access lines through the server's access logger
    /// (to standard error; send it away) and print the time a line; under callgrind, two counts
    /// give the instructions a line costs
    #[argh(option)]
    pub access_lines: Option<u64>,
    /// the resolver feeds: freshness of files and zone serials (idle and busy), AXFR against
    /// BIND's named, IXFR CPU, RSS while serving transfers, single events during a transfer
    #[argh(switch)]
    pub rpz: bool,
    /// the console's pages at --domains names (default 1000000): server time of each page from
    /// the access log (median, p99, max) and server CPU per request, on SQLite and, with
    /// --database, on PostgreSQL
    #[argh(switch)]
    pub console: bool,
    /// one more argument for `parasol serve` (repeat it for several), e.g. `--serve-arg
    /// --access-log --serve-arg off` to measure the access log's cost
    #[argh(option)]
    pub serve_arg: Vec<String>,
    /// the parasol binary to benchmark (default: `parasol` in this program's directory, e.g.
    /// target/release/parasol)
    #[argh(option)]
    pub server_binary: Option<PathBuf>,
    /// run the server on PostgreSQL instead: a URL (postgres://USER:PASS@HOST:PORT/DB) of a role
    /// that may create databases; measures ingest and single events against a plain
    /// tokio-postgres loop, and two nodes on one database against one
    #[argh(option)]
    pub database: Option<String>,
    /// with --database: rounds of a window of the plain loop and one of the node, taken in turn
    /// (default 6; 2 with --quick)
    #[argh(option)]
    pub rounds: Option<usize>,
    /// instead of the benchmark: hostile load (stalled 1 MiB uploads, amplification bodies) beside
    /// a normal client; prints the server's peak and after-load RSS and the client's service
    #[argh(switch)]
    pub hostile: bool,
    /// with --hostile: stalled 1 MiB uploads (default 1000)
    #[argh(option, default = "1000")]
    pub stalled: usize,
    /// with --hostile: new stalled uploads a second, 0 for all at once (default 250)
    #[argh(option, default = "250.0")]
    pub connect_rate: f64,
    /// with --hostile: clients sending 1 MiB bodies of [{},{},...] one after another (default 32)
    #[argh(option, default = "32")]
    pub amplifiers: usize,
    /// with --hostile: seconds the hostile load lasts (default 20)
    #[argh(option, default = "20.0")]
    pub hold_seconds: f64,
    /// with --hostile: seconds after the hostile clients leave before the RSS is read again (default 5)
    #[argh(option, default = "5.0")]
    pub cool_seconds: f64,
    /// with --hostile: milliseconds between the normal client's GETs (default 100)
    #[argh(option, default = "100")]
    pub normal_interval_ms: u64,
    /// with --hostile: a flag for `parasol serve` (repeat for several)
    #[argh(option)]
    pub server_arg: Vec<String>,
    /// with --hostile: fail unless the peak RSS is at most --max-peak-mib, every normal GET succeeds
    /// and their p99 is under --max-p99-ms
    #[argh(switch)]
    pub check: bool,
    /// with --hostile --check: peak RSS bound in MiB (default 150)
    #[argh(option, default = "150.0")]
    pub max_peak_mib: f64,
    /// with --hostile --check: the normal client's p99 bound in milliseconds (default 500)
    #[argh(option, default = "500.0")]
    pub max_p99_ms: f64,
    /// instead of the benchmark: the cost guard, instructions per request of a fixed mix with the
    /// server under valgrind's callgrind, compared with --cost-baseline (see .ci/cost-guard)
    #[argh(switch)]
    pub cost: bool,
    /// with --cost: the baseline file (default bench/cost/baseline.json)
    #[argh(option, default = "PathBuf::from(\"bench/cost/baseline.json\")")]
    pub cost_baseline: PathBuf,
    /// with --cost: rewrite the baseline file from this run instead of comparing
    #[argh(switch)]
    pub cost_update: bool,
    /// with --cost: only the event kinds, on the demo world (for older builds whose database
    /// the current store cannot prepare); printed, not compared
    #[argh(switch)]
    pub cost_demo: bool,
    /// with --cost: keep callgrind's dump files (one a phase, named by it) in this directory,
    /// for `callgrind_annotate --inclusive=yes` with a build that keeps its symbols
    #[argh(option)]
    pub cost_keep: Option<PathBuf>,
    /// instead of the benchmark: these parasol binaries (comma-separated, e.g. an old commit's
    /// build and the current one) beside a bare hyper server, over plain HTTP in alternating
    /// windows (--rounds, default 3; --seconds per window, default 3; --ingest-batches per
    /// window, default 8; --only single,open,ingest,mix,list,pages,deep,readers,delete,
    /// management): rate and CPU per unit of each workload; with --database, each binary on a
    /// database of its own and ingest also against a plain tokio-postgres loop
    #[argh(option)]
    pub compare_binaries: Option<String>,
    /// with --compare-binaries and --database: a setting for one binary's database,
    /// I:NAME=VALUE (I counting the binaries from 0; ALTER DATABASE ... SET NAME = VALUE), e.g.
    /// 1:synchronous_commit=local to compare commits that wait for a synchronous standby with
    /// commits that do not, the same build twice (repeat for several)
    #[argh(option)]
    pub database_set: Vec<String>,
    /// internal: run only the bare plain-HTTP server of --compare-binaries
    #[argh(switch)]
    pub serve_bare: bool,
    /// internal: run only the durable bare server of --compare-binaries, its log at PATH
    #[argh(option)]
    pub serve_bare_durable: Option<PathBuf>,
    /// internal: run only the hello baseline server with DIR/tls's certificate
    #[argh(option)]
    pub serve_hello: Option<PathBuf>,
}

fn main() {
    std::process::exit(run_args(argh::from_env()));
}

/// Runs the benchmark; returns the exit status.
fn run_args(args: BenchArgs) -> i32 {
    if let Some(dir) = &args.serve_hello {
        let (cert, key) = parasol::tls::self_signed_paths(dir);
        return match baseline::serve_hello(&cert, &key) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("parasol-bench --serve-hello: {e}");
                1
            }
        };
    }
    if args.serve_bare {
        return match baseline::serve_bare() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("parasol-bench --serve-bare: {e}");
                1
            }
        };
    }
    if let Some(log) = &args.serve_bare_durable {
        return match baseline::serve_bare_durable(log) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("parasol-bench --serve-bare-durable: {e}");
                1
            }
        };
    }
    if let Some(list) = &args.compare_binaries {
        let opts = ab::AbOptions {
            binaries: list.split(',').map(PathBuf::from).collect(),
            rounds: args.rounds.unwrap_or(3).max(1),
            seconds: args.seconds.unwrap_or(3.0),
            connections: args.connections.unwrap_or(64).max(1),
            ingest_batches: args.ingest_batches.unwrap_or(8),
            pin: !args.no_pin,
            only: args
                .only
                .as_ref()
                .map(|o| o.split(',').map(|w| w.trim().to_string()).collect()),
            serve_args: args.serve_arg.clone(),
            database: args.database.clone(),
            database_set: args.database_set.clone(),
        };
        let dir = std::env::temp_dir().join(format!("parasol-ab-{}", uuid::Uuid::new_v4()));
        let result = ab::compare(&opts, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        return match result {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("parasol-bench --compare-binaries: {e}");
                1
            }
        };
    }
    if let Some(lines) = args.access_lines {
        return match access::run(lines) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("parasol-bench --access-lines: {e}");
                1
            }
        };
    }
    let binary = match args.server_binary.clone().map_or_else(server_beside_us, Ok) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("parasol-bench: {e}");
            return 1;
        }
    };
    if args.cost {
        let opts = cost::CostOptions {
            binary,
            baseline: args.cost_baseline.clone(),
            update: args.cost_update,
            demo: args.cost_demo,
            keep: args.cost_keep.clone(),
        };
        return match cost::run(&opts) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                eprintln!("parasol-bench --cost: {e}");
                2
            }
        };
    }
    if args.hostile {
        let h = hostile::Hostile {
            binary,
            stalled: args.stalled,
            connect_rate: args.connect_rate.max(0.0),
            amplifiers: args.amplifiers,
            hold: Duration::from_secs_f64(args.hold_seconds.max(0.0)),
            cool: Duration::from_secs_f64(args.cool_seconds.max(0.0)),
            normal_interval: Duration::from_millis(args.normal_interval_ms.max(1)),
            normal_timeout: Duration::from_secs(5),
            server_args: args.server_arg.clone(),
            check: args.check.then_some((args.max_peak_mib, args.max_p99_ms)),
        };
        return match hostile::run(h) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("parasol-bench --hostile: {e}");
                1
            }
        };
    }
    let base = if args.quick {
        Options::quick(binary)
    } else {
        Options::full(binary)
    };
    let opts = Options {
        domains: args.domains.unwrap_or(base.domains),
        reputation_lines: args.reputation_lines.unwrap_or(base.reputation_lines),
        seconds: args.seconds.unwrap_or(base.seconds),
        connections: args.connections.unwrap_or(base.connections).max(1),
        ingest_clients: args.ingest_clients.unwrap_or(base.ingest_clients).max(1),
        ingest_batches: args.ingest_batches.unwrap_or(base.ingest_batches).max(1),
        deep_page: args.deep_page.unwrap_or(base.deep_page).max(1),
        pin: !args.no_pin,
        exports: args.exports,
        keep: args.keep,
        only: args
            .only
            .as_ref()
            .map(|o| o.split(',').map(|w| w.trim().to_string()).collect()),
        database: args.database.clone(),
        serve_args: args.serve_arg.clone(),
        rounds: args.rounds.unwrap_or(base.rounds).max(1),
        ..base
    };
    if args.rpz {
        let dir = std::env::temp_dir().join(format!("parasol-rpz-{}", uuid::Uuid::new_v4()));
        let result = rpz::run(&opts, &dir, args.quick);
        let _ = std::fs::remove_dir_all(&dir);
        return match result {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("parasol-bench --rpz: {e}");
                1
            }
        };
    }
    if args.console {
        let dir = std::env::temp_dir().join(format!("parasol-console-{}", uuid::Uuid::new_v4()));
        let result = console::run(&opts, &dir, args.quick);
        let _ = std::fs::remove_dir_all(&dir);
        return match result {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("parasol-bench --console: {e}");
                1
            }
        };
    }
    if args.compare_exports {
        let dir = std::env::temp_dir().join(format!("parasol-bench-{}", uuid::Uuid::new_v4()));
        let result = std::fs::create_dir_all(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))
            .and_then(|()| exports::compare(&opts, &dir));
        if opts.keep {
            eprintln!("bench: data kept in {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return match result {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("parasol-bench: {e}");
                1
            }
        };
    }
    match run::run(opts) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("parasol-bench: {e}");
            1
        }
    }
}

/// The `parasol` binary in this program's own directory: cargo builds both into the same one
/// (`target/release/` for `bench/run`, `target/debug/` for `cargo run -p parasol-bench`).
fn server_beside_us() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let server = me.with_file_name("parasol");
    if server.is_file() {
        Ok(server)
    } else {
        Err(format!(
            "no parasol binary at {}: build it beside this one (`cargo build --locked -p parasol \
             -p parasol-bench`, with --release for bench/run's) or pass --server-binary",
            server.display()
        ))
    }
}
