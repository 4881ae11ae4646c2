//! `parasol serve`.

use std::path::PathBuf;

use argh::{ArgsInfo, FromArgs};

use crate::config::{ServerConfig, TlsSource};
use crate::export::ExportConfig;

/// Run the server.
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "serve")]
pub struct ServeArgs {
    /// data directory: database, self-signed certificate, demo credentials; locked while
    /// serving, one server per directory (default ./parasol-data)
    #[argh(option, default = "super::default_data_dir()")]
    pub data_dir: PathBuf,
    /// a PostgreSQL database (postgres://USER:PASS@HOST:PORT/DB[?sslmode=require]) to run on,
    /// shared with other nodes, instead of SQLite in the data directory
    #[argh(option)]
    pub database: Option<String>,
    /// address to listen on (default 127.0.0.1:8443); port 0 picks a free port
    #[argh(option, default = "String::from(\"127.0.0.1:8443\")")]
    pub listen: String,
    /// TLS certificate chain (PEM); without it a self-signed certificate is made in the data directory
    #[argh(option)]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM), with --tls-cert
    #[argh(option)]
    pub tls_key: Option<PathBuf>,
    /// serve plain HTTP instead of HTTPS (labs and tests only)
    #[argh(switch)]
    pub plain_http: bool,
    /// external base URL for the links in meta.next/meta.prev, e.g. https://parasol.example:8443
    #[argh(option)]
    pub public_url: Option<String>,
    /// reputation file: lines "domain,score" with score -1, 0 or 1; reloaded on SIGHUP
    #[argh(option)]
    pub reputation: Option<PathBuf>,
    /// known-good file: lines "domain" or "rank,domain"; reloaded on SIGHUP
    #[argh(option)]
    pub known_good: Option<PathBuf>,
    /// enforce the cloud's published rate limits per customer key (answers 429 with Retry-After)
    #[argh(switch)]
    pub cloud_limits: bool,
    /// on an empty data directory, create a demo world and DIR/demo-credentials.json
    #[argh(switch)]
    pub demo: bool,
    /// keep every organization's effective block list in resolver files in this directory,
    /// rewritten within a second of a change (see docs/blocking-with-your-resolver.md)
    #[argh(option)]
    pub export_dir: Option<PathBuf>,
    /// the files --export-dir keeps, comma-separated: rpz, unbound, dnsmasq, hosts (default all)
    #[argh(option)]
    pub export_formats: Option<String>,
    /// command run by /bin/sh after each round of --export-dir rewrites, e.g.
    /// "unbound-control reload_keep_cache"; never two at once, failures logged
    #[argh(option)]
    pub export_reload_cmd: Option<String>,
    /// serve every organization's effective block list as the response-policy zone
    /// org-<id>.<suffix> to resolvers by zone transfer (AXFR, IXFR, NOTIFY) on this address,
    /// UDP and TCP (e.g. 127.0.0.1:5353; see docs/blocking-with-your-resolver.md)
    #[argh(option)]
    pub rpz_listen: Option<String>,
    /// the zones' suffix under --rpz-listen (default rpz.parasol: zones org-<id>.rpz.parasol)
    #[argh(option)]
    pub rpz_zone_suffix: Option<String>,
    /// send NOTIFY to this ADDR:PORT when a zone changes (repeatable)
    #[argh(option)]
    pub rpz_notify: Vec<String>,
    /// TSIG key file as tsig-keygen writes it: transfers signed with it are allowed
    #[argh(option)]
    pub rpz_tsig_key: Option<PathBuf>,
    /// address range (CIDR) allowed to transfer the zones without a key (repeatable)
    #[argh(option)]
    pub rpz_allow: Vec<String>,
    /// log level: error, warn, info, debug or trace (default info)
    #[argh(option, default = "String::from(\"info\")")]
    pub log_level: String,
    /// access log at info: all (default: a line per request), errors (status 400 and above),
    /// 1/N (every error and one other request in N) or off
    #[argh(option, default = "crate::access::AccessLog::All")]
    pub access_log: crate::access::AccessLog,
    /// serve GET /metrics, /healthz and /readyz on this address too, over plain HTTP; the main
    /// listener's /metrics then answers 404 (e.g. 127.0.0.1:9443)
    #[argh(option)]
    pub metrics_listen: Option<String>,
    /// the console in the browser at /console/ on the main listener, signed in with a
    /// management API key and secret: on (default) or off
    #[argh(option, default = "String::from(\"on\")")]
    pub console: String,
    /// connections served at once (default 1024); when all are taken, a new client gets the
    /// slot of one that has sent no request for --eviction-grace
    #[argh(option, default = "1024")]
    pub max_connections: usize,
    /// seconds a connection may go without a request before it may be closed to make room for
    /// a new client when every slot is taken (default 2)
    #[argh(option, default = "2.0")]
    pub eviction_grace: f64,
    /// mebibytes that requests in flight may hold at once for their bodies and for parsing them,
    /// shared by all connections (default 64)
    #[argh(option, default = "64")]
    pub memory_budget: usize,
    /// seconds a large request waits for its share of --memory-budget before it is refused with
    /// 503 and Retry-After (default 5)
    #[argh(option, default = "5.0")]
    pub budget_wait: f64,
    /// seconds to complete the TLS handshake (default 10)
    #[argh(option, default = "10.0")]
    pub handshake_timeout: f64,
    /// seconds to receive a request's headers, counted from the connection's start or the
    /// previous answer: also how long a keep-alive connection may stay idle (default 30)
    #[argh(option, default = "30.0")]
    pub header_timeout: f64,
    /// seconds to receive a request's body once its headers are in (default 30)
    #[argh(option, default = "30.0")]
    pub body_timeout: f64,
    /// seconds an answer may make no progress (the client reads none of it) before the
    /// connection is closed (default 20)
    #[argh(option, default = "20.0")]
    pub write_timeout: f64,
}

/// A duration flag in seconds: finite, above zero, at most a day.
fn seconds(flag: &str, v: f64) -> Result<std::time::Duration, String> {
    if v.is_finite() && v > 0.0 && v <= 86_400.0 {
        Ok(std::time::Duration::from_secs_f64(v))
    } else {
        Err(format!(
            "--{flag} {v}: expected a number of seconds above 0, at most 86400"
        ))
    }
}

fn init_logging(level: &str) -> Result<(), String> {
    let filter: log::LevelFilter = level.parse().map_err(|_| {
        format!("--log-level {level:?}: expected error, warn, info, debug or trace")
    })?;
    let config = simplelog::ConfigBuilder::new()
        .set_time_format_rfc3339()
        .set_target_level(log::LevelFilter::Off)
        .set_thread_level(log::LevelFilter::Off)
        .build();
    simplelog::TermLogger::init(
        filter,
        config,
        simplelog::TerminalMode::Stderr,
        simplelog::ColorChoice::Never,
    )
    .map_err(|e| e.to_string())
}

/// Builds the server configuration from the flags.
pub fn config_from(args: &ServeArgs) -> Result<ServerConfig, String> {
    let tls = match (args.plain_http, &args.tls_cert, &args.tls_key) {
        (true, None, None) => TlsSource::Plain,
        (true, _, _) => {
            return Err("--plain-http cannot be combined with --tls-cert/--tls-key".into())
        }
        (false, Some(cert), Some(key)) => TlsSource::Files {
            cert: cert.clone(),
            key: key.clone(),
        },
        (false, None, None) => TlsSource::SelfSigned,
        (false, _, _) => return Err("--tls-cert and --tls-key go together".into()),
    };
    if let Some(u) = &args.public_url {
        if !(u.starts_with("https://") || u.starts_with("http://")) {
            return Err(format!(
                "--public-url {u:?}: expected an http:// or https:// URL"
            ));
        }
    }
    let mut config = ServerConfig::new(args.data_dir.clone());
    config.tls = tls;
    config.public_url = args.public_url.clone();
    config.reputation = args.reputation.clone();
    config.known_good = args.known_good.clone();
    config.cloud_limits = args.cloud_limits;
    config.demo = args.demo;
    config.database = args.database.clone();
    config.access_log = args.access_log;
    config.metrics_listen = args.metrics_listen.clone();
    config.console = match args.console.as_str() {
        "on" => Some(crate::console::session::SessionLimits::default()),
        "off" => None,
        other => return Err(format!("--console {other:?}: expected on or off")),
    };
    let limits = &mut config.limits;
    if args.max_connections == 0 {
        return Err("--max-connections 0: expected at least 1".into());
    }
    limits.max_connections = args.max_connections;
    if args.memory_budget == 0 || args.memory_budget > 1 << 20 {
        return Err(format!(
            "--memory-budget {}: expected MiB from 1 to 1048576",
            args.memory_budget
        ));
    }
    limits.memory_budget = args.memory_budget << 20;
    limits.eviction_grace = seconds("eviction-grace", args.eviction_grace)?;
    limits.budget_wait = seconds("budget-wait", args.budget_wait)?;
    limits.handshake_timeout = seconds("handshake-timeout", args.handshake_timeout)?;
    limits.header_timeout = seconds("header-timeout", args.header_timeout)?;
    limits.body_timeout = seconds("body-timeout", args.body_timeout)?;
    limits.write_timeout = seconds("write-timeout", args.write_timeout)?;
    config.export = export_from(args)?;
    config.rpz = rpz_from(args)?;
    Ok(config)
}

/// The RPZ primary's configuration from the `--rpz-*` flags; the others mean nothing without
/// `--rpz-listen`, which needs a key or an address range to admit anyone.
fn rpz_from(args: &ServeArgs) -> Result<Option<crate::rpz::RpzConfig>, String> {
    let Some(listen) = &args.rpz_listen else {
        if args.rpz_zone_suffix.is_some()
            || !args.rpz_notify.is_empty()
            || args.rpz_tsig_key.is_some()
            || !args.rpz_allow.is_empty()
        {
            return Err("the --rpz-* flags need --rpz-listen".into());
        }
        return Ok(None);
    };
    let address = |flag: &str, s: &str| {
        s.trim()
            .parse::<std::net::SocketAddr>()
            .map_err(|_| format!("{flag} {s:?}: expected ADDRESS:PORT, e.g. 127.0.0.1:5353"))
    };
    let config = crate::rpz::RpzConfig {
        listen: address("--rpz-listen", listen)?,
        suffix: crate::rpz::parse_suffix(
            args.rpz_zone_suffix
                .as_deref()
                .unwrap_or(crate::rpz::DEFAULT_SUFFIX),
        )?,
        notify: args
            .rpz_notify
            .iter()
            .map(|s| address("--rpz-notify", s))
            .collect::<Result<_, _>>()?,
        tsig_key: args.rpz_tsig_key.clone(),
        allow: args
            .rpz_allow
            .iter()
            .map(|s| crate::rpz::access::Cidr::parse(s))
            .collect::<Result<_, _>>()?,
    };
    if config.tsig_key.is_none() && config.allow.is_empty() {
        return Err("--rpz-listen needs --rpz-tsig-key or --rpz-allow (or both)".into());
    }
    Ok(Some(config))
}

/// The exporter's configuration from `--export-dir`, `--export-formats` and
/// `--export-reload-cmd`; the last two mean nothing without the first.
fn export_from(args: &ServeArgs) -> Result<Option<ExportConfig>, String> {
    let Some(dir) = &args.export_dir else {
        if args.export_formats.is_some() || args.export_reload_cmd.is_some() {
            return Err("--export-formats and --export-reload-cmd need --export-dir".into());
        }
        return Ok(None);
    };
    let mut export = ExportConfig::new(dir.clone());
    if let Some(f) = &args.export_formats {
        export.formats = crate::export::formats::parse_list(f)?;
    }
    match args.export_reload_cmd.as_deref().map(str::trim) {
        Some("") => return Err("--export-reload-cmd must not be empty".into()),
        Some(cmd) => export.reload_cmd = Some(cmd.to_string()),
        None => {}
    }
    Ok(Some(export))
}

/// Keeps glibc's allocator from holding on to memory the server has freed: at most four arenas
/// (by default each thread that allocates, tokio's blocking pool included, may get one of up to
/// eight per core, and each keeps its high-water mark), and a fixed mmap threshold, so that large
/// short-lived buffers (1 MiB request bodies, argon2's 19 MiB) are returned to the system when
/// freed instead of raising the threshold and staying in an arena.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 4);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1024 * 1024);
    }
}

/// Runs the server until SIGTERM or SIGINT; returns the exit status.
pub fn run(args: ServeArgs) -> i32 {
    tune_allocator();
    ignore_file_size_signal();
    if let Err(e) = init_logging(&args.log_level) {
        eprintln!("parasol: {e}");
        return 2;
    }
    let config = match config_from(&args) {
        Ok(c) => c,
        Err(e) => {
            log::error!("{e}");
            return 2;
        }
    };
    let listener = match std::net::TcpListener::bind(&args.listen) {
        Ok(l) => l,
        Err(e) => {
            log::error!("cannot listen on {}: {e}", args.listen);
            return 1;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            log::error!("cannot start the runtime: {e}");
            return 1;
        }
    };
    let result = runtime
        .block_on(async move { crate::server::run(config, listener, shutdown_signal()).await });
    match result {
        Ok(()) => 0,
        Err(e) => {
            log::error!("{e}");
            1
        }
    }
}

/// A write past the process's file size limit (`ulimit -f`, systemd's `LimitFSIZE=`) fails with
/// EFBIG, which the store answers like a full disk (503, nothing stored), instead of the default
/// SIGXFSZ that would kill the server.
fn ignore_file_size_signal() {
    // SAFETY: installs the ignore disposition for one signal, before any thread is started.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed here, when called (inside the
/// runtime, before the server starts), not when the future is first polled: the server announces
/// "ready" before its accept loop polls this future, and a SIGTERM sent on seeing that line (as
/// the benchmark does) killed the process outright instead of stopping it gracefully.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => log::info!("SIGTERM received"),
                    _ = int.recv() => log::info!("SIGINT received"),
                }
            }
            _ => {
                log::warn!("cannot watch SIGTERM/SIGINT; stop with SIGKILL");
                std::future::pending::<()>().await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use argh::FromArgs;

    /// decisions.md's command-line contract: `serve` alone serves HTTPS (a self-signed
    /// certificate) on 127.0.0.1:8443 from ./parasol-data.
    #[test]
    fn serve_defaults() {
        let args = super::ServeArgs::from_args(&["parasol", "serve"], &[]).unwrap();
        assert_eq!(args.listen, "127.0.0.1:8443");
        assert_eq!(args.data_dir, std::path::Path::new("./parasol-data"));
        assert_eq!(args.log_level, "info");
        let config = super::config_from(&args).unwrap();
        assert!(matches!(config.tls, crate::config::TlsSource::SelfSigned));
        assert!(!config.demo && !config.cloud_limits);
        assert!(config.public_url.is_none() && config.reputation.is_none());
        assert!(config.export.is_none());
        // The flags' defaults are the library's.
        let l = crate::config::Limits::default();
        let c = &config.limits;
        assert_eq!(
            (
                c.max_connections,
                c.memory_budget,
                c.eviction_grace,
                c.budget_wait
            ),
            (
                l.max_connections,
                l.memory_budget,
                l.eviction_grace,
                l.budget_wait
            )
        );
        assert_eq!(
            (
                c.handshake_timeout,
                c.header_timeout,
                c.body_timeout,
                c.write_timeout
            ),
            (
                l.handshake_timeout,
                l.header_timeout,
                l.body_timeout,
                l.write_timeout
            )
        );
    }

    #[test]
    fn limit_flags_are_read_and_checked() {
        let parse = |extra: &[&str]| {
            let args = super::ServeArgs::from_args(&["parasol", "serve"], extra).unwrap();
            super::config_from(&args)
        };
        let c = parse(&[
            "--max-connections",
            "10",
            "--memory-budget",
            "8",
            "--write-timeout",
            "0.5",
        ])
        .unwrap();
        assert_eq!(c.limits.max_connections, 10);
        assert_eq!(c.limits.memory_budget, 8 << 20);
        assert_eq!(
            c.limits.write_timeout,
            std::time::Duration::from_millis(500)
        );
        for bad in [
            &["--max-connections", "0"][..],
            &["--memory-budget", "0"],
            &["--write-timeout", "0"],
            &["--header-timeout", "-1"],
            &["--body-timeout", "NaN"],
            &["--eviction-grace", "100000"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    /// `--export-dir` alone exports every resolver format without a reload command; the other
    /// two export flags need it, and their values are checked before the server starts.
    #[test]
    fn export_flags() {
        let config = |args: &[&str]| {
            let parsed = super::ServeArgs::from_args(&["parasol", "serve"], args).unwrap();
            super::config_from(&parsed)
        };
        let e = config(&["--export-dir", "/x"]).unwrap().export.unwrap();
        assert_eq!(e, crate::export::ExportConfig::new("/x"));
        let e = config(&[
            "--export-dir",
            "/x",
            "--export-formats",
            "unbound,rpz",
            "--export-reload-cmd",
            "rndc reload",
        ])
        .unwrap()
        .export
        .unwrap();
        use crate::export::Format;
        assert_eq!(e.formats, vec![Format::Unbound, Format::Rpz]);
        assert_eq!(e.reload_cmd.as_deref(), Some("rndc reload"));
        for (args, needle) in [
            (&["--export-formats", "rpz"][..], "need --export-dir"),
            (&["--export-reload-cmd", "true"][..], "need --export-dir"),
            (
                &["--export-dir", "/x", "--export-formats", "bind"][..],
                "\"bind\"",
            ),
            (
                &["--export-dir", "/x", "--export-formats", "plain"][..],
                "plain",
            ),
            (
                &["--export-dir", "/x", "--export-reload-cmd", " "][..],
                "empty",
            ),
        ] {
            let e = config(args).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }

    /// `--rpz-listen` with a key file or an address range; the other `--rpz-*` flags need it,
    /// and their values are checked before the server starts.
    #[test]
    fn rpz_flags() {
        let config = |args: &[&str]| {
            let parsed = super::ServeArgs::from_args(&["parasol", "serve"], args).unwrap();
            super::config_from(&parsed)
        };
        assert!(config(&[]).unwrap().rpz.is_none());
        let r = config(&[
            "--rpz-listen",
            "127.0.0.1:5353",
            "--rpz-allow",
            "10.0.0.0/8",
            "--rpz-notify",
            "127.0.0.1:53",
            "--rpz-notify",
            "[::1]:53",
            "--rpz-zone-suffix",
            "Policy.Example.",
        ])
        .unwrap()
        .rpz
        .unwrap();
        assert_eq!(r.listen, "127.0.0.1:5353".parse().unwrap());
        assert_eq!(r.suffix, "policy.example");
        assert_eq!(r.notify.len(), 2);
        assert_eq!(
            r.allow,
            vec![crate::rpz::access::Cidr::parse("10.0.0.0/8").unwrap()]
        );
        let r = config(&["--rpz-listen", "[::1]:53", "--rpz-tsig-key", "/k"])
            .unwrap()
            .rpz
            .unwrap();
        assert_eq!(r.suffix, crate::rpz::DEFAULT_SUFFIX);
        assert_eq!(r.tsig_key.as_deref(), Some(std::path::Path::new("/k")));
        for (args, needle) in [
            (&["--rpz-allow", "10.0.0.0/8"][..], "need --rpz-listen"),
            (&["--rpz-tsig-key", "/k"][..], "need --rpz-listen"),
            (
                &["--rpz-listen", "127.0.0.1:5353"][..],
                "--rpz-tsig-key or --rpz-allow",
            ),
            (
                &["--rpz-listen", "localhost", "--rpz-tsig-key", "/k"][..],
                "ADDRESS:PORT",
            ),
            (
                &["--rpz-listen", "127.0.0.1:53", "--rpz-allow", "10.0.0.0/33"][..],
                "--rpz-allow",
            ),
            (
                &[
                    "--rpz-listen",
                    "127.0.0.1:53",
                    "--rpz-allow",
                    "::1",
                    "--rpz-notify",
                    "x",
                ][..],
                "--rpz-notify",
            ),
            (
                &[
                    "--rpz-listen",
                    "127.0.0.1:53",
                    "--rpz-allow",
                    "::1",
                    "--rpz-zone-suffix",
                    "a..b",
                ][..],
                "--rpz-zone-suffix",
            ),
        ] {
            let e = config(args).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }

    /// The handlers must be in place once `shutdown_signal` has returned, before anything polls
    /// its future: the server logs "ready" first, and a SIGTERM sent on that cue would otherwise
    /// kill the process (here: the test binary) instead of being seen.
    #[tokio::test]
    async fn shutdown_handlers_are_installed_before_the_future_is_polled() {
        let stop = super::shutdown_signal();
        // SAFETY: raise only sends a signal to this process.
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        tokio::time::timeout(std::time::Duration::from_secs(5), stop)
            .await
            .expect("the SIGTERM was seen");
    }
}
