//! The access log: one line per request at `info`, naming what was asked and how it was
//! answered, never what the request carried.
//!
//! A line reads
//! `access method=POST route=/1.0/events status=202 bytes=47 duration_ms=0.41 client=192.0.2.7:50312 request_id=...`
//! (logfmt: `key=value` pairs, values without spaces). `route` is the route's template, as the
//! OpenAPI document writes it, never the raw path: a path may hold a domain name and a query a
//! customer key. Headers and bodies (Basic credentials, passwords) are never looked at here.
//! `request_id` is the answer's `X-Request-Id`, so a partner's "you refused us" with the id (or
//! the management error's `txId`) finds the line. Requests no route took have `route=unmatched`;
//! requests that hyper could not parse (answered 400 by the transport) `method=-` and
//! `duration_ms=-`.
//!
//! The lines have the form and level of the rest of the log (`--log-level warn` drops them), but
//! do not go through the logger one by one: the terminal logger writes (and flushes) each line
//! with a system call of its own, which at the single-event rate cost more than everything else
//! the line does. They are gathered in memory and written in batches (`Sink`), at most
//! `GATHER` after they were made, whole lines at a time; the server writes what is left before
//! it logs that it stopped.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

/// Which requests the access log records (`--access-log`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessLog {
    /// One line per request (the default).
    All,
    /// Only answers with a status of 400 or above.
    Errors,
    /// Every error, and one in `n` other answers.
    Sample(u64),
    /// None.
    Off,
}

impl std::str::FromStr for AccessLog {
    type Err = String;

    fn from_str(s: &str) -> Result<AccessLog, String> {
        let bad = || format!("--access-log {s:?}: expected all, errors, off or 1/N (N >= 1)");
        Ok(match s {
            "all" => AccessLog::All,
            "errors" => AccessLog::Errors,
            "off" => AccessLog::Off,
            _ => {
                let n: u64 = s
                    .strip_prefix("1/")
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n >= 1)
                    .ok_or_else(bad)?;
                if n == 1 {
                    AccessLog::All
                } else {
                    AccessLog::Sample(n)
                }
            }
        })
    }
}

/// Decides which requests get a line (`--access-log`) and writes it.
pub struct AccessLogger {
    mode: AccessLog,
    /// Answers below 400 seen, for `AccessLog::Sample`.
    seen: AtomicU64,
}

/// One answered request, as the access log sees it.
pub struct Entry<'a> {
    /// The request's method; `None` for a request hyper could not parse.
    pub method: Option<&'a str>,
    /// The route template, or `metrics::UNMATCHED`.
    pub route: &'a str,
    pub status: u16,
    /// Bytes of the answer's body.
    pub bytes: u64,
    /// From the request's head to its answer; `None` when not measured.
    pub took: Option<Duration>,
    pub client: Option<SocketAddr>,
    pub request_id: &'a str,
}

impl AccessLogger {
    pub fn new(mode: AccessLog) -> AccessLogger {
        AccessLogger {
            mode,
            seen: AtomicU64::new(0),
        }
    }

    /// Whether a request answered with `status` gets a line.
    fn wants(&self, status: u16) -> bool {
        let error = status >= 400;
        match self.mode {
            AccessLog::Off => false,
            AccessLog::All => true,
            AccessLog::Errors => error,
            AccessLog::Sample(n) => {
                error || self.seen.fetch_add(1, Ordering::Relaxed).is_multiple_of(n)
            }
        }
    }

    /// Writes the line of `e`, if the mode and the log level want it.
    pub fn log(&self, e: &Entry<'_>) {
        if !log::log_enabled!(target: TARGET, log::Level::Info) || !self.wants(e.status) {
            return;
        }
        LINE.with(|line| {
            let mut line = line.borrow_mut();
            line.write(e);
            sink().push(&line.out);
        });
    }
}

thread_local! {
    /// Each thread's line being written (its allocation and time stamp reused).
    static LINE: std::cell::RefCell<Line> = const {
        std::cell::RefCell::new(Line { out: Vec::new(), second: u64::MAX, stamp: Vec::new() })
    };
}

/// A line being written. Written by hand rather than through `format!`: the formatting
/// machinery (a dynamic call per field, padding logic, a date computed from the clock each
/// time) made up most of a line's cost, some 5,000 instructions.
struct Line {
    out: Vec<u8>,
    /// The Unix second `stamp` was written for.
    second: u64,
    /// `YYYY-MM-DDThh:mm:ss` of that second.
    stamp: Vec<u8>,
}

impl Line {
    fn write(&mut self, e: &Entry<'_>) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        if now.as_secs() != self.second {
            self.second = now.as_secs();
            self.stamp = date_time(now.as_secs()).into_bytes();
        }
        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(&self.stamp);
        out.push(b'.');
        push_padded(out, u64::from(now.subsec_nanos()), 9);
        out.extend_from_slice(b"Z [INFO] access method=");
        out.extend_from_slice(e.method.unwrap_or("-").as_bytes());
        out.extend_from_slice(b" route=");
        out.extend_from_slice(e.route.as_bytes());
        out.extend_from_slice(b" status=");
        push_u64(out, u64::from(e.status));
        out.extend_from_slice(b" bytes=");
        push_u64(out, e.bytes);
        out.extend_from_slice(b" duration_ms=");
        push_millis(out, e.took);
        out.extend_from_slice(b" client=");
        match e.client {
            Some(SocketAddr::V4(a)) => {
                for (i, o) in a.ip().octets().iter().enumerate() {
                    if i > 0 {
                        out.push(b'.');
                    }
                    push_u64(out, u64::from(*o));
                }
                out.push(b':');
                push_u64(out, u64::from(a.port()));
            }
            Some(a) => {
                let _ = write!(out, "{a}");
            }
            None => out.push(b'-'),
        }
        out.extend_from_slice(b" request_id=");
        out.extend_from_slice(e.request_id.as_bytes());
        out.push(b'\n');
    }
}

/// `YYYY-MM-DDThh:mm:ss` (UTC) of a Unix time, as the rest of the log writes it.
fn date_time(unix: u64) -> String {
    crate::timefmt::date_time(i64::try_from(unix).unwrap_or(i64::MAX))
}

fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// `n` in exactly `width` digits (at most 20), zeros in front.
fn push_padded(out: &mut Vec<u8>, n: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut n = n;
    for d in digits[..width].iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(&digits[..width]);
}

/// A duration in milliseconds with microsecond precision, or `-`.
fn push_millis(out: &mut Vec<u8>, took: Option<Duration>) {
    match took {
        Some(d) => {
            let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
            push_u64(out, us / 1000);
            out.push(b'.');
            push_padded(out, us % 1000, 3);
        }
        None => out.push(b'-'),
    }
}

/// The log target whose level decides whether access lines are written.
const TARGET: &str = "parasol::access";

/// How long a line may wait in memory before it is written: the batch of lines gathered
/// meanwhile goes out in one system call.
const GATHER: Duration = Duration::from_millis(20);

/// Lines gathered are written at once past this many bytes.
const BATCH_BYTES: usize = 64 * 1024;

/// Access lines waiting to be written to standard error, and the thread that writes them.
struct Sink {
    lines: Mutex<Vec<u8>>,
    wake: Condvar,
    /// The writing thread runs; without it each line is written at once.
    threaded: std::sync::atomic::AtomicBool,
}

/// The process's one sink (standard error is the process's), made with the first line.
static SINK: OnceLock<&'static Sink> = OnceLock::new();

fn sink() -> &'static Sink {
    SINK.get_or_init(|| {
        let sink: &'static Sink = Box::leak(Box::new(Sink {
            lines: Mutex::new(Vec::with_capacity(BATCH_BYTES)),
            wake: Condvar::new(),
            threaded: false.into(),
        }));
        match std::thread::Builder::new()
            .name("parasol-access-log".into())
            .spawn(move || sink.run())
        {
            Ok(_) => sink.threaded.store(true, Ordering::Relaxed),
            Err(e) => {
                log::warn!("cannot start the access log's thread ({e}); lines are written at once")
            }
        }
        sink
    })
}

impl Sink {
    fn push(&self, line: &[u8]) {
        if !self.threaded.load(Ordering::Relaxed) {
            let _ = std::io::stderr().lock().write_all(line);
            return;
        }
        let Ok(mut lines) = self.lines.lock() else {
            return;
        };
        let first = lines.is_empty();
        lines.extend_from_slice(line);
        if first || lines.len() >= BATCH_BYTES {
            self.wake.notify_one();
        }
    }

    /// The writing thread: waits for a first line, lets more gather for `GATHER` or until a batch
    /// is full, then writes them all.
    fn run(&self) {
        let mut out = Vec::with_capacity(BATCH_BYTES);
        loop {
            let Ok(lines) = self.lines.lock() else {
                return;
            };
            let Ok(lines) = self.wake.wait_while(lines, |l| l.is_empty()) else {
                return;
            };
            let Ok((lines, _)) = self
                .wake
                .wait_timeout_while(lines, GATHER, |l| l.len() < BATCH_BYTES)
            else {
                return;
            };
            drop(lines);
            self.write_out(&mut out);
        }
    }

    /// Writes every line gathered so far, whole lines under standard error's lock (so that no
    /// other log line lands inside one).
    fn write_out(&self, out: &mut Vec<u8>) {
        if let Ok(mut lines) = self.lines.lock() {
            std::mem::swap(&mut *lines, out);
        }
        if !out.is_empty() {
            let _ = std::io::stderr().lock().write_all(out);
            out.clear();
        }
    }
}

/// Writes the access lines still in memory (the server calls it as it stops).
pub fn flush() {
    if let Some(sink) = SINK.get() {
        sink.write_out(&mut Vec::new());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_log_modes_parse() {
        assert_eq!("all".parse(), Ok(AccessLog::All));
        assert_eq!("errors".parse(), Ok(AccessLog::Errors));
        assert_eq!("off".parse(), Ok(AccessLog::Off));
        assert_eq!("1/100".parse(), Ok(AccessLog::Sample(100)));
        assert_eq!("1/1".parse(), Ok(AccessLog::All));
        for bad in ["", "1/0", "1/x", "some", "2/3"] {
            assert!(bad.parse::<AccessLog>().is_err(), "{bad}");
        }
    }

    #[test]
    fn modes_pick_the_lines() {
        let pick = |mode: AccessLog, statuses: &[u16]| -> Vec<u16> {
            let l = AccessLogger::new(mode);
            statuses.iter().copied().filter(|s| l.wants(*s)).collect()
        };
        let s = [200, 202, 404, 204, 503, 200, 200, 400];
        assert_eq!(pick(AccessLog::All, &s), s);
        assert!(pick(AccessLog::Off, &s).is_empty());
        assert_eq!(pick(AccessLog::Errors, &s), [404, 503, 400]);
        // Every error; the first, fourth, ... success.
        assert_eq!(pick(AccessLog::Sample(3), &s), [200, 404, 503, 200, 400]);
    }

    #[test]
    fn lines_are_written_as_the_rest_of_the_log_writes_them() {
        assert_eq!(date_time(1_795_712_073), "2026-11-26T16:54:33");
        assert_eq!(date_time(0), "1970-01-01T00:00:00");
        let mut line = Line {
            out: Vec::new(),
            second: u64::MAX,
            stamp: Vec::new(),
        };
        line.write(&Entry {
            method: Some("DELETE"),
            route: "/1.0/domains/{domainIdOrName}",
            status: 204,
            bytes: 0,
            took: Some(Duration::from_nanos(412_345)),
            client: Some("192.0.2.7:50312".parse().unwrap()),
            request_id: "id-1",
        });
        let text = String::from_utf8(line.out.clone()).unwrap();
        let (stamp, rest) = text.split_once(' ').unwrap();
        assert!(
            time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339)
                .is_ok(),
            "{stamp}"
        );
        assert_eq!(stamp.len(), "2026-11-26T16:54:33.282009338Z".len());
        assert_eq!(
            rest,
            "[INFO] access method=DELETE route=/1.0/domains/{domainIdOrName} status=204 bytes=0 duration_ms=0.412 client=192.0.2.7:50312 request_id=id-1\n"
        );
        line.write(&Entry {
            method: None,
            route: "unmatched",
            status: 400,
            bytes: 12345,
            took: None,
            client: Some("[::1]:8".parse().unwrap()),
            request_id: "id-2",
        });
        let text = String::from_utf8(line.out).unwrap();
        assert!(text.ends_with(
            " access method=- route=unmatched status=400 bytes=12345 duration_ms=- client=[::1]:8 request_id=id-2\n"
        ), "{text}");
        let mut out = Vec::new();
        push_millis(&mut out, Some(Duration::from_millis(1500)));
        assert_eq!(out, b"1500.000");
    }
}
