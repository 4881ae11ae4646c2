//! A histogram of `u64` observations against fixed upper bounds, kept in atomics and written in
//! the Prometheus text format: the server's request latencies (`metrics`) and the store's
//! transaction sizes and durations (`store::metrics`) both use it, so it sits below both.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A histogram of `u64` observations (nanoseconds, or counts) against fixed upper bounds.
pub struct Histogram {
    /// Upper bounds, ascending, in the unit of the observations.
    bounds: &'static [u64],
    /// Observations per bucket (not cumulative); the last counts those above every bound.
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: &'static [u64]) -> Histogram {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: u64) {
        let i = self.bounds.partition_point(|&b| b < value);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    pub fn observe_duration(&self, d: Duration) {
        self.observe(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Writes the `_bucket`, `_sum` and `_count` samples of `name` with `labels` (already
    /// rendered, `a="x",b="y"`, or empty), dividing observations by `scale` (1e9 for seconds
    /// from nanoseconds, 1 for counts).
    pub fn render(&self, out: &mut String, name: &str, labels: &str, scale: f64) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut running = 0u64;
        // Loaded once each, so that `_count` equals the `+Inf` bucket even while requests are
        // observed concurrently.
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        for (i, bound) in self.bounds.iter().enumerate() {
            running += counts[i];
            let le = *bound as f64 / scale;
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {running}");
        }
        running += counts[self.bounds.len()];
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {running}");
        let sum = self.sum.load(Ordering::Relaxed) as f64 / scale;
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {running}", braces(labels));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_end_at_their_count() {
        let h = Histogram::new(&[10, 20, 40]);
        for v in [1, 10, 11, 20, 39, 41, 1000] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render(&mut out, "x", "a=\"b\"", 10.0);
        assert_eq!(
            out,
            "x_bucket{a=\"b\",le=\"1\"} 2\nx_bucket{a=\"b\",le=\"2\"} 4\nx_bucket{a=\"b\",le=\"4\"} 5\n\
             x_bucket{a=\"b\",le=\"+Inf\"} 7\nx_sum{a=\"b\"} 112.2\nx_count{a=\"b\"} 7\n"
        );
        let mut out = String::new();
        h.render(&mut out, "y", "", 1.0);
        assert!(out.contains("y_bucket{le=\"10\"} 2\n") && out.contains("\ny_count 7\n"));
    }
}
