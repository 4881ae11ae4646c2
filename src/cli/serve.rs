//! `parasol serve`.

use std::path::PathBuf;

use argh::FromArgs;

use crate::config::{ServerConfig, TlsSource};

/// Run the server.
#[derive(FromArgs, Debug)]
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
    /// log level: error, warn, info, debug or trace (default info)
    #[argh(option, default = "String::from(\"info\")")]
    pub log_level: String,
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
    Ok(config)
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
