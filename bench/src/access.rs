//! `--access-lines N`: the access log's own cost, apart from any request. Writes N lines of a
//! typical single event's shape through the server's access logger (its formatting on this thread,
//! its batched writes to standard error on the logger's thread) and prints the time a line took.
//! Under `valgrind --tool=callgrind`, the difference between two counts of lines divided by the
//! difference of the counts is the instructions a line costs, start-up excluded.

use std::time::{Duration, Instant};

use parasol::access::{self, AccessLog, AccessLogger, Entry};

/// A logger that lets every level through and drops what reaches it: the access lines are
/// written by the access logger's own sink, which asks the `log` facade only whether INFO is on.
struct Enabled;

impl log::Log for Enabled {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, _: &log::Record<'_>) {}
    fn flush(&self) {}
}

static ENABLED: Enabled = Enabled;

pub fn run(lines: u64) -> Result<(), String> {
    log::set_logger(&ENABLED).map_err(|e| format!("a logger is already set: {e}"))?;
    log::set_max_level(log::LevelFilter::Info);
    let logger = AccessLogger::new(AccessLog::All);
    let client = Some(
        "192.0.2.7:50312"
            .parse()
            .map_err(|e| format!("client address: {e}"))?,
    );
    let started = Instant::now();
    for i in 0..lines {
        logger.log(&Entry {
            method: Some("POST"),
            route: "/1.0/events",
            status: 202,
            bytes: 47 + i % 2,
            took: Some(Duration::from_micros(412 + i % 1000)),
            client,
            request_id: "6f1c2a9e-03b4-7d51-0000-00000000a3f2",
        });
    }
    access::flush();
    let took = started.elapsed();
    println!(
        "{lines} access lines in {:.3} s: {:.0} ns a line (formatting and batched writes to standard error)",
        took.as_secs_f64(),
        took.as_nanos() as f64 / lines.max(1) as f64
    );
    Ok(())
}
