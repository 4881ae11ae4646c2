//! Tests of the SQLite backend's writer: group commit, the all-or-nothing rule, panics, faults
//! and the WAL's upkeep. They order writes by what they can observe (a write holding the writer
//! until released, the writer's queue length), never by time.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::*;
use crate::testdir::TempDir;

/// Longest a test waits for something it expects to happen.
const WAIT: Duration = Duration::from_secs(60);

fn temp_db() -> (TempDir, Sqlite) {
    let dir = TempDir::new("store");
    let store = Sqlite::open(&dir.join("parasol.db"), Role::Server).unwrap();
    (dir, store)
}

/// Creates table `t` with the given column definition.
async fn create_t(store: &Sqlite, column: &'static str) {
    store
        .write(move |c| {
            c.execute_batch(&format!("CREATE TABLE t ({column})"))?;
            Ok(())
        })
        .await
        .unwrap();
}

async fn count_t(store: &Sqlite) -> i64 {
    store
        .read(|c| Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?))
        .await
        .unwrap()
}

/// A write that holds the writer until the returned sender is used or dropped: writes queued
/// meanwhile wait, then run as one group.
struct Gate {
    open: std::sync::mpsc::Sender<()>,
    done: tokio::task::JoinHandle<Result<()>>,
}

async fn hold_writer(store: &Sqlite) -> Gate {
    let (open, wait) = std::sync::mpsc::channel::<()>();
    let (running, started) = oneshot::channel::<()>();
    let s = store.clone();
    let done = tokio::spawn(async move {
        s.write(move |_| {
            let _ = running.send(());
            let _ = wait.recv();
            Ok(())
        })
        .await
    });
    started.await.unwrap();
    Gate { open, done }
}

impl Gate {
    async fn release(self) {
        drop(self.open);
        self.done.await.unwrap().unwrap();
    }
}

/// Waits until `n` writes are queued behind the writer.
async fn until_queued(store: &Sqlite, n: usize) {
    let deadline = Instant::now() + WAIT;
    while store.queued() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} writes queued",
            store.queued()
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Queues `n` writes of `mode`, the i-th running `job(i, conn)`, behind a write that holds the
/// writer, then lets them run, all in one group; returns their results in order.
async fn one_group<T: Send + 'static>(
    store: &Sqlite,
    n: i64,
    mode: WriteMode,
    job: impl Fn(i64, &Connection) -> Result<T> + Send + Sync + Copy + 'static,
) -> Vec<Result<T>> {
    let gate = hold_writer(store).await;
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let s = store.clone();
            tokio::spawn(async move { s.queue(move |c, _, _| job(i, c), mode, false).await })
        })
        .collect();
    until_queued(store, n as usize).await;
    gate.release().await;
    join_all(tasks).await
}

async fn join_all<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_one_transaction_and_failures_stay_isolated() {
    let (_dir, store) = temp_db();
    create_t(&store, "v INTEGER UNIQUE").await;
    let before = store.commit_count() + 1;
    // Every 10th write fails after writing; only its own row is undone.
    let results = one_group(&store, 200, WriteMode::Savepoint, |i, c| {
        c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
        if i % 10 == 0 {
            c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
        }
        Ok(())
    })
    .await;
    let failed = results.iter().filter(|r| r.is_err()).count();
    assert_eq!(failed, 20);
    assert_eq!(count_t(&store).await, 180);
    // After the gate's transaction, the 200 writes queued behind it in one.
    assert_eq!(store.commit_count() - before, 1, "group commit");
    store.close();
}

#[tokio::test]
async fn a_failing_write_alone_in_its_transaction_leaves_nothing() {
    let (_dir, store) = temp_db();
    create_t(&store, "v INTEGER UNIQUE").await;
    // One write at a time: each runs without a savepoint.
    let failed = store
        .write(|c| {
            c.execute("INSERT INTO t (v) VALUES (1)", [])?;
            Err::<(), _>(StoreError::Conflict("on purpose".into()))
        })
        .await;
    assert_eq!(failed, Err(StoreError::Conflict("on purpose".into())));
    store
        .write(|c| {
            c.execute("INSERT INTO t (v) VALUES (2)", [])?;
            Ok(())
        })
        .await
        .unwrap();
    let rows: Vec<i64> = store
        .read(|c| {
            let mut s = c.prepare("SELECT v FROM t ORDER BY v")?;
            let v = s
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(v)
        })
        .await
        .unwrap();
    assert_eq!(rows, vec![2], "the failed write's row is gone");
    store.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_shared_write_fails_its_whole_group_and_stores_nothing() {
    let (_dir, store) = temp_db();
    create_t(&store, "v INTEGER").await;
    let results = one_group(&store, 10, WriteMode::Shared, |i, c| {
        c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
        if i == 5 {
            return Err(StoreError::Internal("trouble".into()));
        }
        Ok(())
    })
    .await;
    assert!(results.iter().all(|r| r.is_err()));
    assert_eq!(
        count_t(&store).await,
        0,
        "nothing of the failed group was stored"
    );
    store
        .write(|c| {
            c.execute("INSERT INTO t (v) VALUES (99)", [])?;
            Ok(())
        })
        .await
        .unwrap();
    store.close();
}

/// The rule that makes a 202 mean "stored whole": when SQLite has left the transaction in the
/// middle of a group (as it does on a disk-full or I/O error, rolling everything back), the
/// writer runs no further write of the group (each would commit on its own in autocommit) and
/// fails them all. Simulated here by a write that rolls the transaction back itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_whose_transaction_sqlite_ended_fails_whole_in_every_mode() {
    for mode in [WriteMode::Savepoint, WriteMode::Shared] {
        let (_dir, store) = temp_db();
        create_t(&store, "v INTEGER").await;
        let results = one_group(&store, 30, mode, |i, c| {
            c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
            if i == 12 {
                // What SQLite does on SQLITE_FULL or an I/O error.
                c.execute_batch("ROLLBACK")?;
            }
            Ok(())
        })
        .await;
        assert!(
            results
                .iter()
                .all(|r| r.as_ref().is_err_and(StoreError::is_unavailable)),
            "{mode:?}: {results:?}"
        );
        assert_eq!(count_t(&store).await, 0, "{mode:?}: nothing stored");
        // The writer goes on.
        store
            .write(|c| Ok(c.execute("INSERT INTO t (v) VALUES (99)", []).map(|_| ())?))
            .await
            .unwrap();
        assert_eq!(count_t(&store).await, 1);
        store.close();
    }
}

/// A write that meets a storage fault fails its whole group, even where its savepoint could
/// have been rolled back alone, and the store reports itself not writable until a write
/// succeeds again (here the checkpointer's probe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_fault_fails_the_group_and_the_store_recovers_by_itself() {
    let (_dir, store) = temp_db();
    create_t(&store, "v INTEGER").await;
    let results = one_group(&store, 20, WriteMode::Savepoint, |i, c| {
        c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
        if i == 7 {
            return Err(StoreError::fault(FaultKind::DiskFull, "simulated"));
        }
        Ok(())
    })
    .await;
    assert!(results
        .iter()
        .all(|r| r.as_ref().is_err_and(StoreError::is_unavailable)));
    assert_eq!(count_t(&store).await, 0);
    let health = store.health();
    assert!(!health.writable);
    assert_eq!(health.faults, 1);
    assert_eq!(health.last_fault.map(|f| f.0).as_deref(), Some("disk_full"));
    // Nothing else writes: the checkpointer's probe finds the storage writable again.
    let deadline = Instant::now() + WAIT;
    while !store.health().writable {
        assert!(Instant::now() < deadline, "never writable again");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.close();
}

/// A panic in a write (a bug) fails that write and the others of its group, undoes all of them,
/// and leaves a writer that goes on writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_write_fails_its_group_and_the_writer_goes_on() {
    let (_dir, store) = temp_db();
    create_t(&store, "v INTEGER").await;
    let results = one_group(&store, 10, WriteMode::Savepoint, |i, c| {
        c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
        assert!(i != 4, "a bug in write {i}");
        Ok(())
    })
    .await;
    assert!(
        results.iter().all(|r| matches!(
            r,
            Err(StoreError::Unavailable(f)) if f.kind == FaultKind::WriterDown
        )),
        "{results:?}"
    );
    assert_eq!(count_t(&store).await, 0);
    for i in 0..3 {
        store
            .write(move |c| {
                Ok(c.execute("INSERT INTO t (v) VALUES (?1)", [i])
                    .map(|_| ())?)
            })
            .await
            .unwrap();
    }
    assert_eq!(count_t(&store).await, 3);
    assert!(store.health().writable);
    store.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_still_commit_and_answer_while_the_writer_gathers() {
    // With clients counted and concurrent writes, the writer waits for more before small
    // commits: every write still commits, none is lost or answered twice.
    let (_dir, store) = temp_db();
    create_t(&store, "v INTEGER").await;
    store.clients().store(64, Ordering::Relaxed);
    let tasks: Vec<_> = (0..200i64)
        .map(|i| {
            let s = store.clone();
            tokio::spawn(async move {
                s.queue(
                    move |c, _, _| {
                        Ok(c.execute("INSERT INTO t (v) VALUES (?1)", [i]).map(|_| i)?)
                    },
                    WriteMode::Shared,
                    false,
                )
                .await
            })
        })
        .collect();
    let done: Vec<i64> = join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(done, (0..200).collect::<Vec<_>>());
    assert_eq!(count_t(&store).await, 200);
    store.close();
}

/// A write that fails in a group (its savepoint rolled back, the others committed) takes what
/// it recorded in the writer's cache with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_leaves_nothing_in_the_writer_cache() {
    let (_dir, store) = temp_db();
    store
        .write(|c| {
            c.execute(
                "INSERT INTO organizations (id, name, created_at, modified_at) VALUES (7, 'o', 0, 0)",
                [],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    let gate = hold_writer(&store).await;
    let (s1, s2) = (store.clone(), store.clone());
    // Queued behind the gate, in this order, so they share one transaction, each in a savepoint.
    let failing = tokio::spawn(async move {
        s1.write_events(WriteMode::Savepoint, |c, cache, _| {
            c.execute(
                "INSERT INTO customer_keys (key, organization_id, created_at) VALUES ('k', 7, 0)",
                [],
            )?;
            assert_eq!(cache.organization_of_key(c, "k")?, Some(7));
            Err::<(), _>(StoreError::Conflict("on purpose".into()))
        })
        .await
    });
    until_queued(&store, 1).await;
    let other = tokio::spawn(async move {
        s2.write_events(WriteMode::Savepoint, |_, _, _| Ok(()))
            .await
    });
    until_queued(&store, 2).await;
    gate.release().await;
    assert!(failing.await.unwrap().is_err());
    other.await.unwrap().unwrap();
    let after = store
        .write_events(WriteMode::Savepoint, |c, cache, _| {
            cache.organization_of_key(c, "k")
        })
        .await
        .unwrap();
    assert_eq!(after, None, "the rolled-back key is not remembered");
    store.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_restarted_under_a_continuous_stream_of_commits() {
    let (dir, store) = temp_db();
    create_t(&store, "v BLOB").await;
    let wal = dir.join("parasol.db-wal");
    // Readers running all along, as on a busy server: each holds a WAL snapshot for a while.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (s, stop) = (store.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                count_t(&s).await;
            }
        })
    };
    // Commits without a pause until the writer has restarted the WAL a few times (the test
    // build asks for a restart once 1 MiB of frames are in it) and three times the 4 MiB the
    // file is cut back to have been committed. How many commits that takes depends on this
    // machine's speed, so the loop waits for the restarts rather than counting time.
    const LIMIT: u64 = 4 * 1024 * 1024;
    let mut largest = 0u64;
    let mut written = 0u64;
    let deadline = Instant::now() + WAIT;
    while store.inner.shared.wal_restarts.load(Ordering::Relaxed) < 3 || written < 3 * LIMIT {
        assert!(
            Instant::now() < deadline,
            "{written} bytes committed, no restarts"
        );
        store
            .write(|c| {
                c.execute("INSERT INTO t (v) VALUES (zeroblob(16384))", [])?;
                Ok(())
            })
            .await
            .unwrap();
        written += 16384;
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    }
    // Without restarts the file would hold every commit (more than `written`: each commit
    // also rewrites index pages); with them it is reused from its start.
    assert!(
        largest < written,
        "the WAL file reached {largest} bytes for {written} bytes of commits"
    );
    stop.store(true, Ordering::Relaxed);
    reader.await.unwrap();
    store.close();
}

#[test]
fn new_databases_get_the_large_page_size_and_old_ones_keep_theirs() {
    let dir = TempDir::new("store");
    let c = open_migrated(&dir.join("new.db")).unwrap();
    let size: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    assert_eq!(size, DB_PAGE_BYTES);
    // A database made with SQLite's default pages (as earlier versions did) opens and works.
    let old = dir.join("old.db");
    {
        let c = Connection::open(&old).unwrap();
        c.execute_batch("PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; CREATE TABLE t (x);")
            .unwrap();
    }
    let c = open_migrated(&old).unwrap();
    let size: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    assert_eq!(size, 4096);
    c.execute("INSERT INTO t (x) VALUES (1)", []).unwrap();
}

/// The scheduling policy (`/proc/<tid>/stat` field 41) of this process's threads named `name`.
fn policies_of(name: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name start at field 3.
        let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
        if let Some(policy) = after.split(' ').nth(41 - 3) {
            out.push(policy.parse().unwrap());
        }
    }
    out
}

#[tokio::test]
async fn the_writer_runs_under_batch_scheduling() {
    let (_dir, store) = temp_db();
    // A write has run on the writer thread, so it has set its policy.
    store.write(|_| Ok(())).await.unwrap();
    // (Other tests' writers run in this process too: one just started may not have set its
    // policy yet.)
    let deadline = Instant::now() + WAIT;
    let mut policies = policies_of("parasol-writer");
    while !policies.iter().all(|&p| p == libc::SCHED_BATCH as u32) {
        assert!(Instant::now() < deadline, "{policies:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
        policies = policies_of("parasol-writer");
    }
    assert!(!policies.is_empty(), "no writer thread found");
    // Only the writer: the checkpointer keeps the normal policy (at a lower priority).
    assert!(policies_of("parasol-checkpo")
        .iter()
        .all(|&p| p == libc::SCHED_OTHER as u32));
    store.close();
}

#[tokio::test]
async fn writes_after_close_fail_cleanly() {
    let (_dir, store) = temp_db();
    store.close();
    assert_eq!(store.write(|_| Ok(())).await, Err(StoreError::Closed));
}

#[tokio::test]
async fn a_tool_refuses_a_directory_without_a_database() {
    let dir = TempDir::new("store");
    let path = dir.join("typo/parasol.db");
    assert!(matches!(
        Sqlite::open(&path, Role::Tool),
        Err(StoreError::NoDatabase(_))
    ));
    assert!(!dir.join("typo").exists());
}

/// A writer that has stopped takes no writes: the health says so (`/readyz` answers 503 with
/// `writer_down`) whatever the last write did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_writer_is_reported_down() {
    let (_dir, store) = temp_db();
    create_t(&store, "x").await;
    let health = store.health();
    assert!(health.writable && health.last_fault.is_none());
    store.close();
    let health = store.health();
    assert!(!health.writable);
    assert_eq!(
        health.last_fault.map(|f| f.0).as_deref(),
        Some("writer_down")
    );
}

/// Each committed group is measured: its size, its transaction's and its commit's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_are_measured() {
    let (_dir, store) = temp_db();
    create_t(&store, "x").await;
    let gate = hold_writer(&store).await;
    let tasks: Vec<_> = (0..5)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .write(move |c| {
                        c.execute("INSERT INTO t VALUES (?1)", [i])?;
                        Ok(())
                    })
                    .await
            })
        })
        .collect();
    until_queued(&store, 5).await;
    gate.release().await;
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let m = store.metrics();
    let mut out = String::new();
    m.group_size.render(&mut out, "g", "", 1.0);
    assert!(out.contains("g_bucket{le=\"4\"} 2\n"), "{out}");
    assert!(
        out.contains("g_bucket{le=\"8\"} 3\n"),
        "the group of five: {out}"
    );
    assert_eq!(m.commit.count(), 3);
    assert_eq!(m.transaction.count(), 3);
    store.close();
}
