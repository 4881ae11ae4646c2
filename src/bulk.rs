//! Threads for bulk CPU work (validating large event batches), at a lower scheduling priority
//! than the threads that answer requests and commit writes.
//!
//! A 1 MiB batch takes milliseconds of CPU to parse. On a small box the runtime's threads, the
//! writer and the parsers share one or two cores; at equal priority a stream of large batches
//! takes most of the CPU from the small requests of other connections (a product polling its
//! domain list). The parsers run at nice +5 (about a quarter of a normal thread's share when
//! both want the CPU); with nothing else to run they get all of it, so bulk throughput is
//! unchanged on an idle server. One thread per core: more would not finish sooner, and each
//! batch in progress holds several times its size in parsed form.
//!
//! The resolver exporter's work (reading a list, writing its files) runs at the same priority: no
//! request waits for it, but it has a deadline (a change is in the files within a second), which
//! it would miss at the lowest priority whenever other processes keep every core busy. It keeps
//! out of the way of an ingest by when it runs (after a burst of writes, see `crate::export`).

use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Arc, Mutex};

/// The niceness of the bulk threads.
const NICE: i32 = 5;

type Task = Box<dyn FnOnce() + Send>;

pub struct BulkPool {
    tasks: mpsc::Sender<Task>,
}

impl BulkPool {
    /// Starts one thread per available core.
    pub fn start() -> std::io::Result<BulkPool> {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        BulkPool::with(threads, NICE, "parasol-bulk")
    }

    /// Starts one thread at the bulk threads' priority, for long work that no request waits for
    /// but a deadline does (the resolver exporter's reads of whole lists). Not nice +19: a
    /// thread that weighs 15 against a normal thread's 1024 gets next to nothing while other
    /// processes keep every core busy, and the deadline passes many times over.
    pub fn background(name: &str) -> std::io::Result<BulkPool> {
        BulkPool::with(1, NICE, name)
    }

    fn with(threads: usize, nice: i32, name: &str) -> std::io::Result<BulkPool> {
        let (tx, rx) = mpsc::channel::<Task>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    set_nice(nice);
                    loop {
                        let task = match rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        let Ok(task) = task else { return };
                        // A panic is the task's failure (its caller sees the reply dropped), not
                        // the thread's.
                        let _ = std::panic::catch_unwind(AssertUnwindSafe(task));
                    }
                })?;
        }
        Ok(BulkPool { tasks: tx })
    }

    /// Runs `f` on a bulk thread and waits for its result.
    pub async fn run<T, F>(&self, f: F) -> Result<T, String>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task: Task = Box::new(move || {
            let _ = tx.send(f());
        });
        self.tasks
            .send(task)
            .map_err(|_| "bulk threads stopped".to_string())?;
        rx.await
            .map_err(|_| "bulk task failed (panicked)".to_string())
    }
}

/// Raises this thread's niceness to the bulk threads' (Linux: `setpriority` on a thread id
/// applies to that thread). Failure (a system-call filter, say) only leaves the thread at normal
/// priority.
pub(crate) fn lower_priority() {
    set_nice(NICE);
}

/// Puts this thread under Linux's `SCHED_IDLE` policy, for work that no request and no deadline
/// waits for: it runs at full speed on an idle machine, gets next to nothing while anything else
/// wants the CPU, and any other thread waking up takes the CPU from it at once (a thread at nice
/// +19 keeps it until the next tick from threads under `SCHED_BATCH`, such as the store's
/// writer, which then waits up to a tick for every commit). Failure (a system-call filter, say)
/// leaves it at nice +19, or at normal priority.
pub(crate) fn lowest_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a plain system call on the calling thread (0), with a parameter it only reads.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        log::debug!(
            "cannot put a thread under SCHED_IDLE: {}",
            std::io::Error::last_os_error()
        );
        set_nice(19);
    }
}

fn set_nice(nice: i32) {
    // SAFETY: plain system calls on the calling thread, no memory is passed.
    let r = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice)
    };
    if r != 0 {
        log::debug!(
            "cannot lower a thread's priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_tasks_at_a_lower_priority_and_survives_a_panic() {
        let pool = BulkPool::start().unwrap();
        // SAFETY: getpriority on the calling thread.
        let nice = pool
            .run(|| unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) })
            .await
            .unwrap();
        // SAFETY: as above, for this thread.
        let ours = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        assert_eq!(nice, (ours + NICE).min(19));
        assert!(pool.run(|| -> u8 { panic!("task failure") }).await.is_err());
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        for i in 0..threads * 2 {
            assert_eq!(pool.run(move || i * 2).await.unwrap(), i * 2);
        }
    }
}
