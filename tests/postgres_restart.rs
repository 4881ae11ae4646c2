#![allow(clippy::unwrap_used, clippy::expect_used)]
//! PostgreSQL restarted under concurrent ingest: every request answered 202 is stored whole,
//! every other one (503 with Retry-After while the database is away) not at all, and the node
//! takes requests again by itself once the database is back. A test binary of its own, since it
//! restarts the cluster every PostgreSQL test shares; it needs `.ci/postgres`'s cluster
//! (`PARASOL_TEST_POSTGRES`, `PARASOL_PG_DIR`, `PARASOL_PG_BIN`) and says so and passes without.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use serde_json::Value;

const CLIENTS: usize = 6;
const EVENTS: usize = 5;
/// Requests a client sends at most (the loop is bounded whatever happens).
const MAX_REQUESTS: usize = 5000;

/// What one request sent and how it was answered.
struct Sent {
    names: Vec<String>,
    status: u16,
    retry_after: Option<String>,
}

/// Restarts the cluster (fast shutdown: sessions are ended, as in a failover or an upgrade) and
/// waits until it takes connections again.
fn restart_postgres(dir: &str, bin: &str) {
    let data = format!("{dir}/data");
    // SAFETY: geteuid only reads the process's user id.
    let mut command = if unsafe { libc::geteuid() } == 0 {
        let owner = std::process::Command::new("stat")
            .args(["-c", "%U", &data])
            .output()
            .unwrap();
        let owner = String::from_utf8_lossy(&owner.stdout).trim().to_string();
        let mut c = std::process::Command::new("runuser");
        c.args(["-u", &owner, "--", &format!("{bin}/pg_ctl")]);
        c
    } else {
        std::process::Command::new(format!("{bin}/pg_ctl"))
    };
    let out = command
        .args([
            "-D",
            &data,
            "-l",
            &format!("{dir}/server.log"),
            "-m",
            "fast",
            "-w",
            "-t",
            "60",
        ])
        .arg("restart")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pg_ctl restart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_during_concurrent_ingest_loses_no_202_and_stores_nothing_else() {
    let (Some(_), Ok(dir), Ok(bin)) = (
        postgres_admin_url(),
        std::env::var("PARASOL_PG_DIR"),
        std::env::var("PARASOL_PG_BIN"),
    ) else {
        eprintln!("skipped: needs .ci/postgres's cluster (PARASOL_TEST_POSTGRES, PARASOL_PG_DIR)");
        return;
    };
    let s = TestServer::start().await;
    let (org, key) = s.create_org("restart");
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let accepted = Arc::new(AtomicUsize::new(0));
    let restarted = Arc::new(AtomicBool::new(false));
    // Clients that have had a 202 since the restart: the node reconnected by itself.
    let back = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for w in 0..CLIENTS {
        let (client, key, sent) = (s.client.clone(), key.clone(), sent.clone());
        let (accepted, restarted, back, stop) = (
            accepted.clone(),
            restarted.clone(),
            back.clone(),
            stop.clone(),
        );
        clients.push(tokio::spawn(async move {
            let mut counted_back = false;
            for i in 0..MAX_REQUESTS {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let after_restart = restarted.load(Ordering::SeqCst);
                let names: Vec<String> = (0..EVENTS)
                    .map(|e| format!("c{w}-r{i}-e{e}.example"))
                    .collect();
                let body = Value::Array(names.iter().map(|n| event(n)).collect());
                let r = client
                    .post_json(&format!("/1.0/events?customerKey={key}"), &body)
                    .await;
                if r.status == 202 {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    if after_restart && !counted_back {
                        counted_back = true;
                        back.fetch_add(1, Ordering::SeqCst);
                    }
                }
                sent.lock().unwrap().push(Sent {
                    names,
                    status: r.status,
                    retry_after: r.header("retry-after").map(str::to_string),
                });
            }
        }));
    }
    // Restart once ingest is well under way.
    wait_within("30 requests accepted", WAIT * 3, || {
        (accepted.load(Ordering::SeqCst) >= 30).then_some(())
    })
    .await;
    let before = accepted.load(Ordering::SeqCst);
    tokio::task::spawn_blocking(move || restart_postgres(&dir, &bin))
        .await
        .unwrap();
    restarted.store(true, Ordering::SeqCst);
    // Every client gets a 202 again: nothing but the pool's own reconnection brought it back.
    wait_within(
        "every client accepted again after the restart",
        WAIT * 3,
        || (back.load(Ordering::SeqCst) == CLIENTS).then_some(()),
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }

    let sent = std::mem::take(&mut *sent.lock().unwrap());
    let listed: HashSet<String> = run(s.store().listed_names(org))
        .unwrap()
        .into_iter()
        .collect();
    let all_sent: HashSet<&String> = sent.iter().flat_map(|r| &r.names).collect();
    assert!(
        listed.iter().all(|n| all_sent.contains(n)),
        "a name nobody sent is listed"
    );
    let mut stored = 0i64;
    let mut refused = 0;
    for r in &sent {
        let present = r.names.iter().filter(|n| listed.contains(*n)).count();
        assert!(
            present == 0 || present == EVENTS,
            "a request stored in part: {present} of {EVENTS} ({})",
            r.status
        );
        match r.status {
            202 => assert_eq!(present, EVENTS, "a 202'd request is missing"),
            503 => {
                assert_eq!(present, 0, "a request answered 503 was stored");
                assert!(r.retry_after.is_some(), "a 503 without Retry-After");
                refused += 1;
            }
            other => panic!("unexpected status {other} during the restart"),
        }
        if present == EVENTS {
            stored += 1;
        }
    }
    assert_eq!(
        run(s.store().event_count(org)).unwrap(),
        stored * EVENTS as i64,
        "the stored events are exactly those of the stored requests"
    );
    eprintln!(
        "{} requests: {} accepted ({before} before the restart), {refused} answered 503",
        sent.len(),
        stored
    );
    s.stop().await;
}
