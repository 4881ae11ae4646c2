//! `parasol migrate --from DIR --to postgres://...`: moving an appliance to a cluster (see
//! `store::transfer`). On a terminal it shows the copy's progress (rows copied, rate, time
//! left) on one line; otherwise it prints only the result.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use argh::{ArgsInfo, FromArgs};
use serde_json::{json, Value};

use crate::store::transfer::{self, Progress};

/// Copy a data directory's SQLite database into an empty PostgreSQL database and verify the copy
/// (rows and a checksum per table); run again after an interruption, it starts over (an
/// interrupted copy leaves nothing) or, if the copy was finished, verifies it again.
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "migrate")]
pub struct MigrateCmd {
    /// the appliance's data directory (holding parasol.db; read only, from one snapshot: stop
    /// its server first, or later writes are not copied)
    #[argh(option)]
    pub from: PathBuf,
    /// the empty PostgreSQL database to copy into (postgres://USER:PASS@HOST:PORT/DB)
    #[argh(option)]
    pub to: String,
}

/// The progress line: rows copied of all, the rate so far, and the time left at that rate.
pub fn progress_line(p: Progress, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-3);
    let rate = p.copied as f64 / secs;
    let left = if rate > 0.0 {
        format!("{:.0} s", p.total.saturating_sub(p.copied) as f64 / rate)
    } else {
        "-".into()
    };
    format!(
        "copying: {} of {} rows ({:.0} rows/s, about {left} left)",
        p.copied, p.total, rate
    )
}

pub fn migrate(c: MigrateCmd) -> Result<Value, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))?;
    let redacted = crate::store::redact(&c.to);
    let terminal = std::io::stdout().is_terminal();
    let started = Instant::now();
    let mut last = Instant::now() - Duration::from_secs(1);
    let report = runtime.block_on(transfer::sqlite_to_postgres(&c.from, &c.to, |p| {
        if terminal && (last.elapsed() >= Duration::from_millis(200) || p.copied == p.total) {
            last = Instant::now();
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\r\x1b[2K{}", progress_line(p, started.elapsed()));
            let _ = out.flush();
        }
    }));
    if terminal {
        println!();
    }
    let report = report.map_err(|e| format!("{redacted}: {e}"))?;
    Ok(json!({
        "from": c.from.join("parasol.db"),
        "to": redacted,
        "copied": report.copied,
        "verified": true,
        "tables": report.tables,
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_says_rows_rate_and_time_left() {
        let p = Progress {
            copied: 2500,
            total: 10_000,
        };
        assert_eq!(
            progress_line(p, Duration::from_secs(5)),
            "copying: 2500 of 10000 rows (500 rows/s, about 15 s left)"
        );
        let none = Progress {
            copied: 0,
            total: 10,
        };
        assert!(progress_line(none, Duration::ZERO).ends_with("about - left)"));
    }
}
