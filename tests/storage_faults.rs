//! Storage faults against the real server: a full disk (a small file system, or a file size
//! limit), and I/O errors on writes and syncs injected at random points, while many clients send
//! writes of every kind the writer runs (single events and small batches sharing their group's
//! fate, large batches alone in a transaction, management writes and deletes in savepoints).
//!
//! After each: every request was answered 2xx or 503 (never 500); every 503 has the interface's
//! error body and `Retry-After`; reads kept working; each request answered 2xx is stored whole,
//! every other one left nothing behind; `integrity_check` is ok; and once the storage takes
//! writes again, so does the server, by itself.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use parasol::store::{OrgFields, Parent, Scope};
use serde_json::{json, Value};

/// The kinds of write the clients send, each marked so that what it stored can be found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One event (shares its group's fate).
    Single,
    /// 20 events (shares its group's fate).
    Small,
    /// 300 events: a transaction of its own.
    Large,
    /// 255 events padded to about 1 MB (the size of batch that filled the appliance's disk).
    Megabyte,
    /// A management write (its own savepoint).
    Site,
    /// A delete of a name the same client stored earlier (its own savepoint).
    Delete,
}

const KINDS: &[Kind] = &[
    Kind::Single,
    Kind::Small,
    Kind::Large,
    Kind::Site,
    Kind::Single,
    Kind::Delete,
];

/// One request and how it was answered.
#[derive(Debug, Clone)]
struct Outcome {
    kind: Kind,
    marker: String,
    events: usize,
    status: u16,
}

/// The tenant the clients write to.
struct Tenant {
    org: i64,
    key: String,
    auth: String,
}

fn domain(marker: &str, j: usize) -> String {
    format!("d{j}.{marker}.fault.example")
}

fn batch(marker: &str, n: usize, padding: usize) -> Value {
    let pad = "p".repeat(padding);
    Value::Array(
        (0..n)
            .map(|j| {
                let mut e = event(&domain(marker, j));
                if padding > 0 {
                    e["vendorPadding"] = json!(pad);
                }
                e
            })
            .collect(),
    )
}

/// Creates the tenant (an organization with a customer key and a management credential) in the
/// database at `db`.
fn tenant(db: &Path) -> Tenant {
    let store = tool_store(db);
    run(async {
        let f = OrgFields {
            name: "faults".into(),
            seats: 1,
            ..Default::default()
        };
        let o = store
            .create_organization(Parent::None, f, parasol::timefmt::now())
            .await
            .unwrap();
        let (key, secret, stored) = parasol::demo::new_credential(None).unwrap();
        store
            .create_credential(Scope::Organization(o.id), stored, 0)
            .await
            .unwrap();
        Tenant {
            org: o.id,
            key: o.customer_key,
            auth: basic(&key, &secret),
        }
    })
}

/// Checks a 503's body and headers against its interface's shape.
fn check_unavailable(kind: Kind, r: &Resp) {
    let retry: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("503 without Retry-After: {:?}", r.headers));
    assert!(retry >= 1);
    let b = r.json();
    if kind == Kind::Site {
        assert_eq!(b["statusCode"], 503, "{b}");
        assert_eq!(b["error"], "Service Unavailable", "{b}");
        assert!(b["txId"].is_string(), "{b}");
    } else {
        assert_eq!(b["code"], "ServiceUnavailableError", "{b}");
        assert_eq!(b["statusCode"], 503, "{b}");
    }
    assert!(b["message"].is_string(), "{b}");
}

/// How a write load is going, and the flag that stops it.
#[derive(Default)]
struct Progress {
    stop: AtomicBool,
    answered: AtomicUsize,
    refused: AtomicUsize,
}

/// `clients` clients writing until `progress.stop` is set; returns every request and its answer.
async fn write_load(
    run: &'static str,
    client: &Client,
    tenant: &Tenant,
    clients: usize,
    kinds: &'static [Kind],
    progress: Arc<Progress>,
) -> Vec<Outcome> {
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let client = client.clone();
            let (key, auth, org) = (tenant.key.clone(), tenant.auth.clone(), tenant.org);
            let progress = progress.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                // Names this client stored and has not deleted yet.
                let mut stored: Vec<String> = Vec::new();
                let mut i = 0;
                while !progress.stop.load(Ordering::Relaxed) {
                    i += 1;
                    let kind = kinds[(c + i) % kinds.len()];
                    let marker = format!("{run}c{c}-{i}");
                    let events = format!("/1.0/events?customerKey={key}");
                    // The request, its answer, the events it sent, and what marks what it stores
                    // (for a delete: the name it addressed).
                    let (r, events_sent, marker) = match kind {
                        Kind::Single => {
                            let body = event(&domain(&marker, 0));
                            (client.post_json(&events, &body).await, 1, marker)
                        }
                        Kind::Small => {
                            let body = batch(&marker, 20, 0);
                            (client.post_json(&events, &body).await, 20, marker)
                        }
                        Kind::Large => {
                            let body = batch(&marker, 300, 0);
                            (client.post_json(&events, &body).await, 300, marker)
                        }
                        Kind::Megabyte => {
                            let body = batch(&marker, 255, 3700);
                            (client.post_json(&events, &body).await, 255, marker)
                        }
                        Kind::Site => {
                            let path = format!("/v1/organizations/{org}/sites");
                            let body = serde_json::to_vec(&json!({ "name": marker })).unwrap();
                            let headers = [
                                ("authorization", auth.as_str()),
                                ("content-type", "application/json"),
                            ];
                            let r = client.request("POST", &path, &headers, Some(body)).await;
                            (r, 0, marker)
                        }
                        Kind::Delete => {
                            let Some(name) = stored.last().cloned() else {
                                continue;
                            };
                            let path = format!("/1.0/domains?customerKey={key}&where[name]={name}");
                            let r = client.delete(&path).await;
                            if r.status == 204 {
                                stored.pop();
                            }
                            (r, 0, name)
                        }
                    };
                    match (kind, r.status) {
                        (Kind::Single, 202) => stored.push(domain(&marker, 0)),
                        (_, 503) => {
                            check_unavailable(kind, &r);
                            progress.refused.fetch_add(1, Ordering::Relaxed);
                        }
                        (Kind::Site, 200) | (Kind::Delete, 204) | (_, 202) => {}
                        _ => panic!("{kind:?} {marker}: {} {}", r.status, r.text()),
                    }
                    progress.answered.fetch_add(1, Ordering::Relaxed);
                    out.push(Outcome {
                        kind,
                        marker,
                        events: events_sent,
                        status: r.status,
                    });
                }
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

/// The database holds exactly what was answered 2xx: each such request whole, nothing of any
/// other; names deleted with a 204 are gone.
fn verify(db: &Path, org: i64, outcomes: &[Outcome]) {
    let c = open_db(db);
    let check: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let mut deleted = std::collections::HashSet::new();
    for o in outcomes {
        if o.kind == Kind::Delete && o.status == 204 {
            deleted.insert(o.marker.clone());
        }
    }
    for o in outcomes {
        let ok = matches!(o.status, 200..=299);
        match o.kind {
            Kind::Delete => {}
            Kind::Site => {
                let n: i64 = c
                    .query_row(
                        "SELECT count(*) FROM sites WHERE organization_id = ?1 AND name = ?2",
                        rusqlite::params![org, o.marker],
                        |r| r.get(0),
                    )
                    .unwrap();
                assert_eq!(n, i64::from(ok), "site {} answered {}", o.marker, o.status);
            }
            _ => {
                let suffix = format!(".{}.fault.example", o.marker);
                let listed: i64 = c
                    .query_row(
                        "SELECT count(*) FROM domains WHERE organization_id = ?1
                         AND substr(name, -length(?2)) = ?2",
                        rusqlite::params![org, suffix],
                        |r| r.get(0),
                    )
                    .unwrap();
                let requests: i64 = c
                    .query_row(
                        "SELECT count(*) FROM event_batches WHERE organization_id = ?1
                         AND instr(domains, ?2) > 0",
                        rusqlite::params![org, format!("{suffix}\"")],
                        |r| r.get(0),
                    )
                    .unwrap();
                let gone = (0..o.events)
                    .filter(|j| deleted.contains(&domain(&o.marker, *j)))
                    .count() as i64;
                if ok {
                    assert_eq!(
                        (listed + gone, requests),
                        (o.events as i64, 1),
                        "{:?} {} answered {} but is not stored whole",
                        o.kind,
                        o.marker,
                        o.status
                    );
                } else {
                    assert_eq!(
                        (listed, requests),
                        (0, 0),
                        "{:?} {} answered {} but left rows behind",
                        o.kind,
                        o.marker,
                        o.status
                    );
                }
            }
        }
    }
}

/// Counts of answers by status.
fn statuses(outcomes: &[Outcome]) -> std::collections::BTreeMap<u16, usize> {
    let mut m = std::collections::BTreeMap::new();
    for o in outcomes {
        *m.entry(o.status).or_default() += 1;
    }
    m
}

/// Runs the write load until `enough` requests were answered and, with `until_refused`, the
/// fault has struck (a request was refused with 503), or `WAIT * 3`; checks meanwhile that reads
/// keep working; returns the outcomes. (How many writes a fault at the Nth WAL write or sync
/// takes depends on how the writes group into commits: the load runs until it has happened.)
async fn load_until(
    run: &'static str,
    server: &ChildServer,
    tenant: &Tenant,
    clients: usize,
    kinds: &'static [Kind],
    enough: usize,
    until_refused: bool,
) -> Vec<Outcome> {
    let progress = Arc::new(Progress::default());
    let load = {
        let client = server.client.clone();
        let tenant = Tenant {
            org: tenant.org,
            key: tenant.key.clone(),
            auth: tenant.auth.clone(),
        };
        let progress = progress.clone();
        tokio::spawn(
            async move { write_load(run, &client, &tenant, clients, kinds, progress).await },
        )
    };
    let deadline = Instant::now() + WAIT * 3;
    let list = format!("/1.0/domains?customerKey={}", tenant.key);
    let done = || {
        progress.answered.load(Ordering::Relaxed) >= enough
            && (!until_refused || progress.refused.load(Ordering::Relaxed) > 0)
    };
    while !done() && Instant::now() < deadline {
        // Reads are served whatever the storage does with writes.
        let r = server.get(&list).await;
        assert_eq!(r.status, 200, "a read failed: {}", r.text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    progress.stop.store(true, Ordering::Relaxed);
    load.await.unwrap()
}

/// Waits (bounded) until a new event is accepted again; returns after the first 202.
async fn until_writable(server: &ChildServer, tenant: &Tenant) {
    let deadline = Instant::now() + WAIT;
    let path = format!("/1.0/events?customerKey={}", tenant.key);
    let mut n = 0;
    loop {
        n += 1;
        let r = server
            .post_json(&path, &event(&format!("again{n}.recovered.example")))
            .await;
        match r.status {
            202 => return,
            503 => check_unavailable(Kind::Single, &r),
            s => panic!("{s} {}", r.text()),
        }
        assert!(Instant::now() < deadline, "writes never accepted again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ------------------------------------------------------------------ a full disk

/// Sets the soft limit on the size of files the process `pid` may write (`RLIMIT_FSIZE`);
/// `None` lifts it. Writes past it fail with EFBIG, as on a full disk.
fn limit_file_size(pid: u32, bytes: Option<u64>) {
    let limit = libc::rlimit64 {
        rlim_cur: bytes.unwrap_or(libc::RLIM64_INFINITY),
        rlim_max: libc::RLIM64_INFINITY,
    };
    // SAFETY: prlimit64 on a child of this process, with a valid limit and no old-limit output.
    let rc = unsafe {
        libc::prlimit64(
            pid as libc::pid_t,
            libc::RLIMIT_FSIZE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// A small ext4 file system on a loop device, mounted while the value lives (needs root).
struct SmallFs {
    mount: PathBuf,
    _dir: TempDir,
}

impl SmallFs {
    fn new(mib: u64) -> SmallFs {
        let dir = TempDir::new();
        let image = dir.path().join("fs.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        let sh = |cmd: &str| {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{cmd}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        sh(&format!(
            "truncate -s {mib}M {0} && mkfs.ext4 -q -F {0}",
            image.display()
        ));
        sh(&format!(
            "mount -o loop {} {}",
            image.display(),
            mount.display()
        ));
        SmallFs { mount, _dir: dir }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.mount)
            .status();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Fills `dir`'s file system until about `leave` bytes are free, in a file that can be deleted
/// to give the space back.
fn fill(dir: &Path, leave: u64) -> PathBuf {
    let path = dir.join("filler");
    let stat = nix_statvfs(dir);
    let size = stat.saturating_sub(leave);
    let f = std::fs::File::create(&path).unwrap();
    // Real blocks (not a sparse file).
    let chunk = vec![0x5au8; 1 << 20];
    let mut w = std::io::BufWriter::new(f);
    let mut written = 0;
    while written < size {
        use std::io::Write;
        if w.write_all(&chunk).is_err() {
            break;
        }
        written += chunk.len() as u64;
    }
    let _ = w.into_inner().map(|f| f.sync_all());
    path
}

/// Free bytes on `dir`'s file system.
fn nix_statvfs(dir: &Path) -> u64 {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C path and an output struct that lives across the call.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    s.f_bavail * s.f_frsize
}

/// The appliance's failure: clients POST batches of about 1 MB into a small file system until it
/// is full. Every request is stored whole or not at all, then space comes back and so do writes.
/// (As root on a real ext4 file system; otherwise the same with a file size limit.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_filling_up_under_megabyte_batches_stores_each_whole_or_not_at_all() {
    static MEGABYTES: &[Kind] = &[
        Kind::Megabyte,
        Kind::Megabyte,
        Kind::Megabyte,
        Kind::Site,
        Kind::Single,
    ];
    let fs = is_root().then(|| SmallFs::new(320));
    let data_parent = TempDir::new();
    let data = match &fs {
        Some(fs) => fs.mount.join("data"),
        None => data_parent.path().join("data"),
    };
    cli_init(&data);
    let db = data.join("parasol.db");
    let tenant = tenant(&db);
    let server = ChildServer::spawn(&data, &["--plain-http"]);
    let pid = server.child.id();
    // Room for some 20 batches, then the disk is full.
    let filler = match &fs {
        Some(fs) => Some(fill(&fs.mount, 24 << 20)),
        None => {
            let at = file_len(&db).max(file_len(&data.join("parasol.db-wal")));
            limit_file_size(pid, Some(at + (24 << 20)));
            None
        }
    };
    let outcomes = load_until("a", &server, &tenant, 32, MEGABYTES, 400, true).await;
    let seen = statuses(&outcomes);
    assert!(
        seen.get(&503).copied().unwrap_or(0) > 0,
        "the disk never filled: {seen:?}"
    );
    assert!(
        seen.get(&202).copied().unwrap_or(0) > 0,
        "nothing was stored: {seen:?}"
    );
    verify(&db, tenant.org, &outcomes);
    // Space comes back: writes are accepted again without a restart.
    match filler {
        Some(f) => std::fs::remove_file(f).unwrap(),
        None => limit_file_size(pid, None),
    }
    until_writable(&server, &tenant).await;
    let after = load_until("b", &server, &tenant, 8, MEGABYTES, 40, false).await;
    assert!(
        after.iter().all(|o| o.status != 503),
        "{:?}",
        statuses(&after)
    );
    assert!(server.stop().success());
    // What was acknowledged survives the restart's checkpoint; nothing else appeared.
    let mut all = outcomes;
    all.extend(after);
    verify(&db, tenant.org, &all);
}

/// A file size limit reached under every kind of write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_size_limit_reached_under_every_kind_of_write_stores_nothing_in_part() {
    let dir = TempDir::new();
    cli_init(dir.path());
    let db = dir.path().join("parasol.db");
    let tenant = tenant(&db);
    let server = ChildServer::spawn(dir.path(), &["--plain-http"]);
    let pid = server.child.id();
    let at = file_len(&db).max(file_len(&dir.path().join("parasol.db-wal")));
    limit_file_size(pid, Some(at + (3 << 20)));
    let outcomes = load_until("a", &server, &tenant, 24, KINDS, 1500, true).await;
    let seen = statuses(&outcomes);
    assert!(
        seen.get(&503).copied().unwrap_or(0) > 0,
        "the limit was never reached: {seen:?}"
    );
    verify(&db, tenant.org, &outcomes);
    limit_file_size(pid, None);
    until_writable(&server, &tenant).await;
    assert!(server.stop().success());
    verify(&db, tenant.org, &outcomes);
}

// ------------------------------------------------------------------ I/O errors at random points

/// A number in `lo..hi` that differs from run to run (printed, so a failure can be replayed).
fn random_in(lo: u64, hi: u64) -> u64 {
    let r = uuid::Uuid::new_v4().as_u128() as u64;
    lo + r % (hi - lo)
}

/// Runs the write load on a server whose storage fails as `plan` says, then checks that nothing
/// was stored in part and that the server writes again once the fault has passed.
async fn injected(plan: &str, expect_refusals: bool) {
    eprintln!("fault plan: {plan}");
    let dir = TempDir::new();
    cli_init(dir.path());
    let db = dir.path().join("parasol.db");
    let tenant = tenant(&db);
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"));
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--plain-http",
            "--data-dir",
        ])
        .arg(dir.path())
        .env("PARASOL_FAULT_INJECTION", plan);
    let server = ChildServer::spawn_command(command, dir.path());
    let outcomes = load_until("a", &server, &tenant, 24, KINDS, 600, expect_refusals).await;
    let seen = statuses(&outcomes);
    if expect_refusals {
        assert!(
            seen.get(&503).copied().unwrap_or(0) > 0,
            "{plan}: no request failed: {seen:?}"
        );
    }
    verify(&db, tenant.org, &outcomes);
    until_writable(&server, &tenant).await;
    assert!(server.stop().success());
    verify(&db, tenant.org, &outcomes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_io_error_writing_the_wal_fails_whole_groups_only() {
    let n = random_in(20, 120);
    injected(&format!("wal-write:eio@{n}-{}", n + 3), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_io_error_syncing_the_wal_fails_whole_groups_only() {
    let n = random_in(20, 120);
    injected(&format!("wal-sync:eio@{n},wal-sync:eio@{}", n + 7), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_space_for_the_wal_fails_whole_groups_only() {
    let n = random_in(20, 120);
    injected(&format!("wal-write:enospc@{n}-{}", n + 10), true).await;
}

/// The fault strikes in the middle of a group: with a cache of a few pages, every large write
/// spills pages to the WAL before its group commits, and the disk is full for some of those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_space_for_pages_spilled_in_the_middle_of_a_group_fails_it_whole() {
    let n = random_in(10, 60);
    injected(&format!("cache=8,wal-write:enospc@{n}-{}", n + 400), true).await;
}

/// The database file is written and synced by checkpoints, off the request path: a fault there
/// fails no request, and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_errors_in_checkpoints_lose_nothing() {
    let n = random_in(2, 20);
    injected(
        &format!("db-write:eio@{n}-{},db-sync:eio@{}", n + 5, n),
        false,
    )
    .await;
}

/// A write that panics (a bug) fails its group with 503; the server keeps serving and writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_write_fails_its_group_and_the_server_writes_on() {
    let n = random_in(20, 200);
    injected(&format!("panic@{n}"), true).await;
}
