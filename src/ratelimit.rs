//! `--cloud-limits`: the cloud's published per-customer-key limits, so that integrators can test
//! their back-off: 5 requests per second, 1 MB of requests per minute, 200 new domains per
//! minute. Each is a token bucket that refills continuously; an exhausted bucket answers 429 with
//! `Retry-After` (whole seconds until enough tokens are back).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

const REQUESTS_PER_SECOND: f64 = 5.0;
const BYTES_PER_MINUTE: f64 = 1_048_576.0;
const NEW_DOMAINS_PER_MINUTE: f64 = 200.0;

struct Buckets {
    requests: f64,
    bytes: f64,
    new_domains: f64,
    at: Instant,
}

impl Buckets {
    fn full(now: Instant) -> Self {
        Buckets {
            requests: REQUESTS_PER_SECOND,
            bytes: BYTES_PER_MINUTE,
            new_domains: NEW_DOMAINS_PER_MINUTE,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.requests = (self.requests + dt * REQUESTS_PER_SECOND).min(REQUESTS_PER_SECOND);
        self.bytes = (self.bytes + dt * BYTES_PER_MINUTE / 60.0).min(BYTES_PER_MINUTE);
        self.new_domains =
            (self.new_domains + dt * NEW_DOMAINS_PER_MINUTE / 60.0).min(NEW_DOMAINS_PER_MINUTE);
    }
}

/// Seconds until `missing` tokens come back at `per_second`, at least 1.
fn wait_secs(missing: f64, per_second: f64) -> u64 {
    ((missing / per_second).ceil() as u64).max(1)
}

/// Per-key limits; a disabled limiter allows everything.
pub struct RateLimiter {
    enabled: bool,
    keys: Mutex<HashMap<String, Buckets>>,
}

impl RateLimiter {
    pub fn new(enabled: bool) -> Self {
        RateLimiter {
            enabled,
            keys: Mutex::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn with<T>(&self, key: &str, f: impl FnOnce(&mut Buckets) -> T) -> T {
        let now = Instant::now();
        let mut map = match self.keys.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let b = map
            .entry(key.to_string())
            .or_insert_with(|| Buckets::full(now));
        b.refill(now);
        f(b)
    }

    /// Takes one request and `bytes` from the key's buckets, or says how long to wait.
    pub fn admit(&self, key: &str, bytes: usize) -> Result<(), u64> {
        if !self.enabled {
            return Ok(());
        }
        self.with(key, |b| {
            if b.requests < 1.0 {
                return Err(wait_secs(1.0 - b.requests, REQUESTS_PER_SECOND));
            }
            let bytes = (bytes as f64).min(BYTES_PER_MINUTE);
            if b.bytes < bytes {
                return Err(wait_secs(bytes - b.bytes, BYTES_PER_MINUTE / 60.0));
            }
            b.requests -= 1.0;
            b.bytes -= bytes;
            Ok(())
        })
    }

    /// How many new domains the key may add now (`None`: unlimited).
    pub fn new_domain_allowance(&self, key: &str) -> Option<u64> {
        if !self.enabled {
            return None;
        }
        Some(self.with(key, |b| b.new_domains.floor().max(0.0) as u64))
    }

    /// Records `n` domains added.
    pub fn spend_new_domains(&self, key: &str, n: u64) {
        if self.enabled && n > 0 {
            self.with(key, |b| b.new_domains -= n as f64);
        }
    }

    /// Seconds until `n` new domains would be allowed; a minute (the budget's period) for more
    /// than the budget ever holds.
    pub fn new_domains_wait(&self, key: &str, n: u64) -> u64 {
        if n as f64 > NEW_DOMAINS_PER_MINUTE {
            return 60;
        }
        self.with(key, |b| {
            wait_secs(n as f64 - b.new_domains, NEW_DOMAINS_PER_MINUTE / 60.0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_allows_everything() {
        let r = RateLimiter::new(false);
        for _ in 0..100 {
            assert!(r.admit("k", 1_000_000).is_ok());
        }
        assert_eq!(r.new_domain_allowance("k"), None);
    }

    #[test]
    fn requests_bytes_and_domains_are_bounded_per_key() {
        let r = RateLimiter::new(true);
        for _ in 0..5 {
            assert!(r.admit("a", 10).is_ok());
        }
        assert_eq!(r.admit("a", 10), Err(1));
        assert!(r.admit("b", 10).is_ok(), "keys are independent");
        assert!(r.admit("c", 700_000).is_ok());
        let wait = r.admit("c", 700_000).unwrap_err();
        assert!((20..=60).contains(&wait), "{wait}");
        assert_eq!(r.new_domain_allowance("d"), Some(200));
        r.spend_new_domains("d", 150);
        assert_eq!(r.new_domain_allowance("d"), Some(50));
        assert!(r.new_domains_wait("d", 60) >= 3);
    }
}
