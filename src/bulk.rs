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
//! Work that no request waits for at all (the resolver exporter reading a list and writing its
//! files) runs lower still, at nice +19: it must not take the CPU from the bulk threads either,
//! which carry the ingest that makes it necessary.

use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Arc, Mutex};

/// The niceness of the bulk threads.
const NICE: i32 = 5;
/// The niceness of background work that no request waits for (the resolver exporter's reads and
/// files): below the bulk threads too, so that it takes from a busy server only a few percent of a
/// core (a nice 19 thread weighs 15 against a nice 5 thread's 335 and a normal thread's 1024).
const BACKGROUND_NICE: i32 = 19;

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

    /// Starts one thread at the background priority, for work no request waits for.
    pub fn background(name: &str) -> std::io::Result<BulkPool> {
        BulkPool::with(1, BACKGROUND_NICE, name)
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

/// Lowers this thread's priority to that of background work (see `BACKGROUND_NICE`).
pub(crate) fn background_priority() {
    set_nice(BACKGROUND_NICE);
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
