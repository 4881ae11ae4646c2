//! Storage faults through the store's interface: for each fault class, the error the caller
//! gets (its `ErrorClass`, as `StoreError::Unavailable` with its `FaultKind`), that nothing of
//! a refused write remains, and that the store recovers by itself once the fault has passed.
//!
//! SQLite: the fault VFS's cases (`sqlite::faultvfs`), armed on the test's own database: an I/O
//! error writing or syncing the WAL, no space for the WAL, and faults writing or syncing the
//! database file (checkpoints only: no request fails, nothing is lost). Two of the VFS's cases
//! are not reachable per database and stay with the server-level suite (tests/storage_faults.rs,
//! a process of its own per plan): a fault in pages spilled in the middle of a group (the
//! writer's page cache is shrunk for the whole process, `cache=PAGES`) and a panicking write
//! (`panic@N` counts the writes of the whole process; `sqlite::tests` panics a write of its own).
//!
//! PostgreSQL's classes are in `postgres_faults`, on a cluster of the test's own.

use super::enforcement::listed;
use super::*;
use crate::store::sqlite::faultvfs::armed;

/// A SQLite store on `dir`, with organization `a` and one name stored before any fault.
async fn sqlite_with_a_name(dir: &TempDir) -> (Store, CreatedOrganization) {
    let store = Store::open_sqlite(&dir.join("parasol.db"), OpenRole::Server).unwrap();
    let a = organization(&store, "a").await;
    assert_eq!(
        listed(&store, &a.customer_key, &["before.example"], 1).await,
        1
    );
    (store, a)
}

/// Waits (bounded: a minute, for a machine busy with other work) until `done` holds.
pub(super) async fn within(what: &str, mut done: impl FnMut() -> bool) {
    let limit = std::time::Duration::from_secs(60);
    cluster::wait_within(what, limit, || done().then_some(())).await;
}

/// Waits (bounded) until the store takes writes again by itself.
async fn until_writable(s: &Store) {
    within("the store to take writes again by itself", || {
        s.health().writable
    })
    .await;
}

/// The fault's kind, if `r` is the error of a storage fault.
pub(super) fn fault_kind<T: std::fmt::Debug>(r: Result<T>) -> FaultKind {
    match r {
        Err(StoreError::Unavailable(f)) => f.kind,
        other => panic!("expected a storage fault, got {other:?}"),
    }
}

/// A write refused while `rule` holds on the WAL: the ingest and a management write get
/// `Unavailable(kind)`, reads go on, nothing of either is stored, and once the fault has passed
/// the store takes writes again by itself (its probe), then reopens with exactly what was
/// answered as stored.
fn a_wal_fault_refuses_writes_whole_and_passes(name: &str, rule: &str, kind: FaultKind) {
    runtime().block_on(async {
        let dir = TempDir::new(name);
        let (s, a) = sqlite_with_a_name(&dir).await;
        let fault = armed::arm(&dir.join("parasol.db"), rule);
        let r = s
            .ingest(super::enforcement::request(
                &a.customer_key,
                &[("during.example", true)],
                2,
            ))
            .await;
        assert_eq!(fault_kind(r), kind);
        assert!(fault.struck() > 0);
        let health = s.health();
        assert!(!health.writable);
        assert_eq!(health.last_fault.map(|f| f.0).as_deref(), Some(kind.name()));
        let r = s.create_site(a.id, "Branch".into(), 2).await;
        assert_eq!(fault_kind(r), kind);
        // Reads go on; nothing of either write is there.
        assert_eq!(s.listed_names(a.id).await.unwrap(), ["before.example"]);
        assert_eq!(s.event_count(a.id).await.unwrap(), 1);
        assert_eq!(s.list_sites(a.id, 10, 0).await.unwrap().len(), 1);
        drop(fault);
        until_writable(&s).await;
        assert_eq!(listed(&s, &a.customer_key, &["after.example"], 3).await, 1);
        s.close();
        let s = Store::open_sqlite(&dir.join("parasol.db"), OpenRole::Server).unwrap();
        let names = s.listed_names(a.id).await.unwrap();
        assert_eq!(names, ["before.example", "after.example"]);
        assert_eq!(s.event_count(a.id).await.unwrap(), 2);
        s.close();
    });
}

#[test]
fn sqlite_an_io_error_writing_the_wal_is_unavailable_io_and_stores_nothing() {
    a_wal_fault_refuses_writes_whole_and_passes("wal-write-eio", "wal-write:eio@1+", FaultKind::Io);
}

#[test]
fn sqlite_an_io_error_syncing_the_wal_is_unavailable_io_and_stores_nothing() {
    a_wal_fault_refuses_writes_whole_and_passes("wal-sync-eio", "wal-sync:eio@1+", FaultKind::Io);
}

#[test]
fn sqlite_no_space_for_the_wal_is_unavailable_disk_full_and_stores_nothing() {
    a_wal_fault_refuses_writes_whole_and_passes(
        "wal-write-enospc",
        "wal-write:enospc@1+",
        FaultKind::DiskFull,
    );
}

#[test]
fn sqlite_no_space_to_sync_the_wal_is_unavailable_disk_full_and_stores_nothing() {
    a_wal_fault_refuses_writes_whole_and_passes(
        "wal-sync-enospc",
        "wal-sync:enospc@1+",
        FaultKind::DiskFull,
    );
}

/// The database file is written only by checkpoints, off the request path: while every write
/// and sync of it fails, the checkpoints fail (here the probe's, after one WAL fault) but no
/// request does, and nothing is lost.
#[test]
fn sqlite_faults_writing_the_database_file_fail_checkpoints_only_and_lose_nothing() {
    runtime().block_on(async {
        let dir = TempDir::new("db-faults");
        let (s, a) = sqlite_with_a_name(&dir).await;
        let db = dir.join("parasol.db");
        let writes = armed::arm(&db, "db-write:eio@1+");
        let syncs = armed::arm(&db, "db-sync:enospc@1+");
        // One WAL fault, so that the probe checkpoints (into the failing file) before it writes.
        let wal = armed::arm(&db, "wal-write:eio@1");
        let r = s
            .ingest(super::enforcement::request(
                &a.customer_key,
                &[("x.example", true)],
                2,
            ))
            .await;
        assert_eq!(fault_kind(r), FaultKind::Io);
        drop(wal);
        until_writable(&s).await;
        assert!(writes.struck() + syncs.struck() > 0, "no checkpoint tried");
        let names: Vec<String> = (0..50).map(|i| format!("n{i}.example")).collect();
        for (i, n) in names.iter().enumerate() {
            assert_eq!(listed(&s, &a.customer_key, &[n], 10 + i as i64).await, 1);
        }
        drop((writes, syncs));
        s.close();
        let s = Store::open_sqlite(&db, OpenRole::Server).unwrap();
        let stored = s.listed_names(a.id).await.unwrap();
        assert_eq!(stored.len(), 51);
        assert_eq!(stored[0], "before.example");
        assert_eq!(stored[1..], names[..]);
        s.close();
    });
}
