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
const STEP: Duration = Duration::from_millis(200);

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

    /// Waits until the processes watched have used at most 2% of a core over 200 ms (at most
    /// 60 s, then goes on with a note).
    pub(crate) fn settle(&self) -> Result<(), String> {
        let deadline = Instant::now() + AT_MOST;
        let read = || {
            self.cpu_secs()
                .ok_or_else(|| "cannot read the CPU time of the processes watched".to_string())
        };
        let mut before = read()?;
        while Instant::now() < deadline {
            std::thread::sleep(STEP);
            let now = read()?;
            if now - before <= IDLE_CPU_SECS {
                return Ok(());
            }
            before = now;
        }
        note("the machine was still busy after 60 s; going on");
        Ok(())
    }
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
