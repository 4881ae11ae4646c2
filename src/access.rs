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

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
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
            AccessLog::Sample(n) => error || self.seen.fetch_add(1, Ordering::Relaxed) % n == 0,
        }
    }

    /// Writes the line of `e`, if the mode and the log level want it.
    pub fn log(&self, e: &Entry<'_>) {
        if !log::log_enabled!(target: TARGET, log::Level::Info) || !self.wants(e.status) {
            return;
        }
        let took = Millis(e.took);
        let client = Client(e.client);
        log::info!(
            target: TARGET,
            "access method={} route={} status={} bytes={} duration_ms={took} client={client} request_id={}",
            e.method.unwrap_or("-"),
            e.route,
            e.status,
            e.bytes,
            e.request_id
        );
    }
}

/// The log target of access lines (the terminal logger does not print it).
const TARGET: &str = "parasol::access";

/// A duration in milliseconds with microsecond precision, or `-`.
struct Millis(Option<Duration>);

impl std::fmt::Display for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(d) => {
                let us = d.as_micros();
                write!(f, "{}.{:03}", us / 1000, us % 1000)
            }
            None => f.write_str("-"),
        }
    }
}

/// A client address, or `-`.
struct Client(Option<SocketAddr>);

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(a) => write!(f, "{a}"),
            None => f.write_str("-"),
        }
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
    fn durations_are_milliseconds_to_the_microsecond() {
        assert_eq!(
            Millis(Some(Duration::from_nanos(412_345))).to_string(),
            "0.412"
        );
        assert_eq!(
            Millis(Some(Duration::from_millis(1500))).to_string(),
            "1500.000"
        );
        assert_eq!(Millis(None).to_string(), "-");
    }
}
