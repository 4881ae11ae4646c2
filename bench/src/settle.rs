//! Letting the machine settle between a benchmark's windows, and counting the CPU time of the
//! processes that served one. A window starts once the processes watched are idle, so that the
//! work one window left behind (a database's background writing, a server's folding of counts)
//! is neither charged to the next window nor slows it down; and a window's CPU time is counted
//! from its start until they are idle again, so that such leftover work is charged to the window
//! that caused it.
//!
//! The processes watched are given by pid, each with its reaped children (a PostgreSQL
//! postmaster's backends, which come and go with connections, are counted through it).

use std::time::{Duration, Instant};

use crate::run::note;

/// The longest wait for idleness; then the window starts anyway (and says so).
const AT_MOST: Duration = Duration::from_secs(60);

/// Idle: at most this much CPU time over `STEP`, all watched processes together (2% of a core).
const IDLE_CPU_SECS: f64 = 0.004;
pub(crate) const STEP: Duration = Duration::from_millis(200);

/// Processes whose CPU time a benchmark counts: `plain` by their own time, `trees` with all
/// their children's, live (read from /proc) and reaped (counted in the parent's).
#[derive(Clone, Default)]
pub(crate) struct Watched {
    pub plain: Vec<u32>,
    pub trees: Vec<u32>,
}

impl Watched {
    /// The CPU seconds used so far by the processes watched, or `None` if one of them cannot be
    /// read (it has ended, or /proc is not there).
    pub(crate) fn cpu_secs(&self) -> Option<f64> {
        let mut total = 0.0;
        for &pid in &self.plain {
            total += stat_secs(pid, false)?;
        }
        for &pid in &self.trees {
            total += tree_cpu_secs(pid)?;
        }
        Some(total)
    }

    /// The processes `pids`, each by its own CPU time.
    pub(crate) fn of(pids: impl IntoIterator<Item = u32>) -> Watched {
        Watched {
            plain: pids.into_iter().collect(),
            trees: Vec::new(),
        }
    }

    /// Waits until the processes watched have used at most 2% of a core over 200 ms (at most
    /// 60 s, then goes on with a note).
    pub(crate) fn settle(&self) -> Result<(), String> {
        self.settle_for(STEP)
    }

    /// Waits until the processes watched have used at most 2% of a core over each 200 ms of the
    /// last `quiet` (at most 60 s, then goes on with a note). A `quiet` longer than a step keeps
    /// a pause in a server's own periodic work (an exporter waiting between two rounds) from
    /// passing for idleness.
    pub(crate) fn settle_for(&self, quiet: Duration) -> Result<(), String> {
        let deadline = Instant::now() + AT_MOST;
        let read = || {
            self.cpu_secs()
                .ok_or_else(|| "cannot read the CPU time of the processes watched".to_string())
        };
        let mut before = read()?;
        let mut still = Duration::ZERO;
        while Instant::now() < deadline {
            std::thread::sleep(STEP);
            let now = read()?;
            if now - before <= IDLE_CPU_SECS {
                still += STEP;
                if still >= quiet {
                    return Ok(());
                }
            } else {
                still = Duration::ZERO;
            }
            before = now;
        }
        note("the machine was still busy after 60 s; going on");
        Ok(())
    }
}

/// One measured window: opened once `machine` has settled, with the CPU time of the processes
/// counted read then; closed once `machine` has settled again, giving what each group counted
/// used from the window's start until then (leftover work charged to the window that caused it).
pub(crate) struct Window<'a> {
    machine: &'a Watched,
    quiet: Duration,
    counted: Vec<&'a Watched>,
    before: Vec<Option<f64>>,
}

impl<'a> Window<'a> {
    /// Settles `machine` for `quiet` (see `Watched::settle_for`), then starts counting.
    pub(crate) fn open(
        machine: &'a Watched,
        quiet: Duration,
        counted: &[&'a Watched],
    ) -> Result<Window<'a>, String> {
        machine.settle_for(quiet)?;
        Ok(Window {
            machine,
            quiet,
            counted: counted.to_vec(),
            before: counted.iter().map(|w| w.cpu_secs()).collect(),
        })
    }

    /// Settles `machine` again; the CPU seconds of each group counted since `open` (NaN where a
    /// reading failed).
    pub(crate) fn close(self) -> Result<Vec<f64>, String> {
        self.machine.settle_for(self.quiet)?;
        Ok(self
            .counted
            .iter()
            .zip(self.before)
            .map(|(w, b)| w.cpu_secs().zip(b).map_or(f64::NAN, |(a, b)| a - b))
            .collect())
    }
}

/// The order in which round `round` visits `n` sides: rotated by one each round, so that none
/// always goes first (for two sides: A B, then B A, ...).
pub(crate) fn order(round: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |k| (k + round) % n)
}

/// The fields of /proc/PID/stat after the command name (which is in parentheses and may hold
/// spaces): field 3 (state) first.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    Some(rest.split(' ').map(str::to_string).collect())
}

/// User and system CPU seconds of `pid`, with its reaped children's if `children`.
fn stat_secs(pid: u32, children: bool) -> Option<f64> {
    let f = stat_fields(pid)?;
    // utime, stime, cutime, cstime: fields 14 to 17.
    let n = |i: usize| f.get(i - 3)?.parse::<u64>().ok();
    let mut ticks = n(14)? + n(15)?;
    if children {
        ticks += n(16)? + n(17)?;
    }
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

/// CPU seconds of `pid` and of all its children, live and reaped (one level: the children's own
/// children are counted once reaped).
fn tree_cpu_secs(pid: u32) -> Option<f64> {
    let mut total = stat_secs(pid, true)?;
    let parent = pid.to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // A child that ends meanwhile is skipped (its time moves to the parent's count).
        if let Some(f) = stat_fields(child) {
            if f.get(1) == Some(&parent) {
                total += stat_secs(child, false).unwrap_or(0.0);
            }
        }
    }
    Some(total)
}

/// The parent of `pid` (for a PostgreSQL backend, the postmaster).
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_rotate_the_sides() {
        let rounds: Vec<Vec<usize>> = (0..3).map(|r| order(r, 3).collect()).collect();
        assert_eq!(rounds, [[0, 1, 2], [1, 2, 0], [2, 0, 1]]);
        let two: Vec<Vec<usize>> = (0..2).map(|r| order(r, 2).collect()).collect();
        assert_eq!(two, [[0, 1], [1, 0]]);
    }
}
