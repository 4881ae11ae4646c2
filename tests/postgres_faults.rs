#![allow(clippy::unwrap_used, clippy::expect_used)]
//! PostgreSQL's faults as a client sees them, each on a cluster of the test's own
//! (`common::cluster`; it needs `.ci/postgres`'s server binaries, `PARASOL_PG_BIN`, and says so
//! and passes without):
//! - a commit whose answer was lost is settled before it is answered, for ingest and for every
//!   other write (here a DELETE), and "stored" means stored on the synchronous standby too: a
//!   commit left only on the primary (its backend ended while it waited for the standby) is
//!   never answered as a success, and a batch the promoted standby lacks is not answered 202;
//! - an outcome that cannot be settled within `settle_for` is a 503 that says it is unknown;
//! - `/readyz` follows the database, with no client write: 503 within seconds of it stopping,
//!   200 again within seconds of it starting;
//! - the node follows a failover by itself through the multi-host URL;
//! - a database that refuses the node's connections is a 503 with Retry-After, never a 500.

mod common;

use common::cluster::{pg_bin, Cluster};
use common::*;
use serde_json::Value;

/// The pid of a Parasol session (other than `not`) waiting at its COMMIT for the synchronous
/// standby, in a transaction that wrote `table` and not `but_not`: the tables tell a request's
/// transaction from its settle's and from the background's (the paging counts' folding).
fn waiting_for_standby(
    pg: &Cluster,
    table: &str,
    but_not: &str,
    not: Option<&str>,
) -> Option<String> {
    pg.value(&format!(
        "SELECT a.pid FROM pg_stat_activity a
         WHERE a.wait_event = 'SyncRep' AND a.query = 'COMMIT'
           AND a.application_name = 'parasol' AND a.pid::text <> '{}'
           AND EXISTS (SELECT 1 FROM pg_locks l
                       WHERE l.pid = a.pid AND l.relation = '{table}'::regclass)
           AND NOT EXISTS (SELECT 1 FROM pg_locks l
                           WHERE l.pid = a.pid AND l.relation = '{but_not}'::regclass)
         LIMIT 1",
        not.unwrap_or("")
    ))
}

/// Waits for the settle of a request whose commit answer was lost (its transaction found by
/// `table` and `but_not`, as `waiting_for_standby`) to wait for the standby in turn; a request
/// answered before that was answered without settling its outcome: the test fails with that
/// answer.
async fn settle_waiting(
    pg: &Cluster,
    (table, but_not): (&str, &str),
    request: &str,
    answer: tokio::task::JoinHandle<Resp>,
) -> tokio::task::JoinHandle<Resp> {
    let done = wait_for("the settle's own commit waiting for the standby", || {
        if answer.is_finished() {
            return Some(true);
        }
        waiting_for_standby(pg, table, but_not, Some(request)).map(|_| false)
    })
    .await;
    if done {
        let r = answer.await.unwrap();
        panic!(
            "answered {} before its outcome was settled: {}",
            r.status,
            r.text()
        );
    }
    answer
}

/// The request's own transaction (an ingest's or a delete's: both write the domain list).
fn request_waiting(pg: &Cluster) -> Option<String> {
    waiting_for_standby(pg, "domains", "parasol_schema", None)
}

/// `synchronous_standby_names` set to a standby that is not there, and in force: the checkpointer
/// applies a reloaded setting in its own time, and a node's probe commit waiting for the standby
/// shows that it has.
async fn standby_required_but_away(pg: &Cluster) {
    pg.synchronous_standbys("absent");
    wait_for("a probe's commit waiting for the standby", || {
        pg.value(
            "SELECT pid FROM pg_stat_activity
             WHERE wait_event = 'SyncRep' AND application_name = 'parasol probe' LIMIT 1",
        )
    })
    .await;
}

/// Ends the backend `pid` as an operator or a failover manager would (pg_terminate_backend):
/// a commit waiting for the standby stays committed on the primary, its answer is lost.
fn terminate(pg: &Cluster, pid: &str) {
    pg.sql(&format!("SELECT pg_terminate_backend({pid})"));
}

/// The batches stored with a name of `domain`.
fn batches_naming(pg: &Cluster, domain: &str) -> i64 {
    pg.value(&format!(
        "SELECT count(*) FROM event_batches WHERE domains LIKE '%{domain}%'"
    ))
    .unwrap()
    .parse()
    .unwrap()
}

fn skipped() -> bool {
    if pg_bin().is_none() {
        eprintln!("skipped: needs PostgreSQL's server binaries (PARASOL_PG_BIN, .ci/postgres)");
        return true;
    }
    false
}

async fn server_on(url: String) -> TestServer {
    TestServer::start_with(move |c| c.database = Some(url)).await
}

async fn post_one(client: &Client, key: &str, domain: &str) -> Resp {
    client
        .post_json(
            &format!("/1.0/events?customerKey={key}"),
            &Value::Array(vec![event(domain)]),
        )
        .await
}

/// Waits (`wait_within`, `WAIT`) until `/readyz` answers `status`; that answer.
async fn readyz_within(s: &TestServer, status: u16, what: &str) -> Resp {
    wait_within(what, WAIT, || {
        let r = run(s.get("/readyz"));
        (r.status == status).then_some(r)
    })
    .await
}

fn assert_unknown(r: &Resp) {
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        r.header("retry-after").is_some(),
        "a 503 without Retry-After"
    );
    let message = r.json()["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("unknown"), "{message}");
    assert!(!message.contains("nothing"), "{message}");
}

/// Defect: a commit visible on the primary while the synchronous standby never had it was
/// answered 202 (the settle looked only for the request's row). The batch's backend waits for
/// a standby that is not there and is terminated: its commit stays on the primary alone. A node
/// that cannot settle within `settle_for` answers 503 "unknown"; one whose settle sees the
/// standby confirm (the standby requirement lifted while it waits) answers 202.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_only_on_the_primary_is_not_answered_202_until_the_standby_has_it() {
    if skipped() {
        return;
    }
    let pg = Cluster::start("primary").unwrap();
    let quick = server_on(format!("{}&settle_for=2", pg.url())).await;
    let patient = server_on(format!("{}&settle_for=120", pg.url())).await;
    let (_, key) = quick.create_org("sync");
    assert_eq!(post_one(&quick, &key, "before.example").await.status, 202);
    standby_required_but_away(&pg).await;

    // The standby stays away: the outcome cannot be settled.
    let client = quick.client.clone();
    let k = key.clone();
    let post = tokio::spawn(async move { post_one(&client, &k, "local-only.example").await });
    let pid = wait_for("the batch's commit waiting for the standby", || {
        request_waiting(&pg)
    })
    .await;
    terminate(&pg, &pid);
    assert_unknown(&post.await.unwrap());
    // Visible on the primary: the answer the settle used to give was 202.
    assert_eq!(batches_naming(&pg, "local-only.example"), 1);

    // The standby confirms while the settle waits: stored, 202.
    let client = patient.client.clone();
    let k = key.clone();
    let post = tokio::spawn(async move { post_one(&client, &k, "confirmed.example").await });
    let pid = wait_for("the second batch's commit waiting for the standby", || {
        request_waiting(&pg)
    })
    .await;
    terminate(&pg, &pid);
    let post = settle_waiting(&pg, ("event_batches", "domains"), &pid, post).await;
    pg.synchronous_standbys("");
    let r = post.await.unwrap();
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(batches_naming(&pg, "confirmed.example"), 1);
    quick.stop().await;
    patient.stop().await;
}

/// Defect: a DELETE whose commit answer was lost was answered 503 although it had committed
/// (only ingest settled its lost commits). Now every write carries a token row and is settled
/// through it: success when stored (the settle confirmed by the standby), and, when the outcome
/// cannot be learnt within `settle_for`, a 503 that says it is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_whose_commit_answer_was_lost_is_answered_as_it_ended() {
    if skipped() {
        return;
    }
    let pg = Cluster::start("primary").unwrap();
    let quick = server_on(format!("{}&settle_for=2", pg.url())).await;
    let patient = server_on(format!("{}&settle_for=120", pg.url())).await;
    let (_, key) = patient.create_org("deletes");
    for d in ["kept.example", "gone.example"] {
        assert_eq!(post_one(&patient, &key, d).await.status, 202);
    }
    let listed = |s: &TestServer| {
        let (client, key) = (s.client.clone(), key.clone());
        async move {
            let r = client.get(&format!("/1.0/domains?customerKey={key}")).await;
            assert_eq!(r.status, 200);
            r.json()["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    standby_required_but_away(&pg).await;

    let client = patient.client.clone();
    let k = key.clone();
    let delete = tokio::spawn(async move {
        client
            .delete(&format!("/1.0/domains/gone.example?customerKey={k}"))
            .await
    });
    let pid = wait_for("the delete's commit waiting for the standby", || {
        request_waiting(&pg)
    })
    .await;
    terminate(&pg, &pid);
    let delete = settle_waiting(&pg, ("commit_tokens", "domain_count_deltas"), &pid, delete).await;
    pg.synchronous_standbys("");
    let r = delete.await.unwrap();
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(listed(&patient).await, vec!["kept.example"]);

    // Not settled in time: unknown, and said so.
    standby_required_but_away(&pg).await;
    let client = quick.client.clone();
    let k = key.clone();
    let delete = tokio::spawn(async move {
        client
            .delete(&format!("/1.0/domains/kept.example?customerKey={k}"))
            .await
    });
    let pid = wait_for("the second delete's commit waiting for the standby", || {
        request_waiting(&pg)
    })
    .await;
    terminate(&pg, &pid);
    assert_unknown(&delete.await.unwrap());
    pg.synchronous_standbys("");
    quick.stop().await;
    patient.stop().await;
}

/// Defect: `/readyz` changed only with a client's write: 200 while PostgreSQL was down on a node
/// that had not written, and 503 after it came back until a write went through. Now the node's
/// probe follows the database by itself; nothing is written by any client here.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readiness_follows_the_database_without_any_write() {
    if skipped() {
        return;
    }
    let pg = Cluster::start("primary").unwrap();
    let s = server_on(pg.url()).await;
    assert_eq!(s.get("/readyz").await.status, 200);
    pg.stop("fast");
    let r = readyz_within(&s, 503, "/readyz to answer 503 with the database stopped").await;
    assert!(r.header("retry-after").is_some());
    assert_eq!(r.json()["reason"], "disconnected", "{}", r.text());
    pg.start_again();
    readyz_within(&s, 200, "/readyz to answer 200 with the database back").await;
    s.stop().await;
}

/// A real standby under synchronous replication, and a failover: the batch acknowledged before
/// it is on the promoted standby; a batch whose commit reached only the old primary (its wait
/// for the stopped standby ended by pg_terminate_backend, the settle still waiting when the
/// primary dies) is not answered 202 and is not on the new primary; and the node, given both
/// servers in one multi-host URL, takes batches on the new primary by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_loses_no_202_and_the_node_follows_the_new_primary() {
    if skipped() {
        return;
    }
    let primary = Cluster::start("primary").unwrap();
    let standby = primary.standby("standby1");
    // Restarted with the setting, so that it is in force from the start (a reload reaches the
    // checkpointer, which applies it, in its own time).
    primary.synchronous_standbys("standby1");
    primary.stop("fast");
    primary.start_again();
    wait_for("the standby to replicate synchronously", || {
        (primary
            .value("SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'")
            .as_deref()
            == Some("sync"))
        .then_some(())
    })
    .await;
    let url = format!(
        "postgres://parasol@/postgres?host=127.0.0.1,127.0.0.1&port={},{}\
         &target_session_attrs=read-write&sslmode=disable&settle_for=120",
        primary.port, standby.port
    );
    let s = server_on(url).await;
    let (_, key) = s.create_org("failover");
    assert_eq!(post_one(&s, &key, "acknowledged.example").await.status, 202);

    standby.stop("fast");
    let client = s.client.clone();
    let k = key.clone();
    let post = tokio::spawn(async move { post_one(&client, &k, "lost.example").await });
    let pid = wait_for("the batch's commit waiting for the standby", || {
        request_waiting(&primary)
    })
    .await;
    terminate(&primary, &pid);
    let post = settle_waiting(&primary, ("event_batches", "domains"), &pid, post).await;
    // The primary's box is lost; the standby, which never had the batch, is promoted.
    primary.stop("immediate");
    standby.start_again();
    standby.promote();
    let r = post.await.unwrap();
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    assert_eq!(batches_naming(&standby, "lost.example"), 0);
    assert_eq!(batches_naming(&standby, "acknowledged.example"), 1);

    // The node follows the new primary by itself.
    wait_within("a 202 after the failover", WAIT, || {
        let r = run(post_one(&s, &key, "after.example"));
        match r.status {
            202 => Some(()),
            503 => None,
            _ => panic!("{} after the failover: {}", r.status, r.text()),
        }
    })
    .await;
    assert!(batches_naming(&standby, "after.example") >= 1);
    s.stop().await;
}

/// Defect: while PostgreSQL refused the node's connections with SQLSTATE 55000 ("database is
/// not currently accepting connections"), events and the domain list were answered 500 without
/// Retry-After (every SQLSTATE not listed was internal). Here the database stops taking
/// connections and the node's sessions are ended: reads and writes are 503 with Retry-After,
/// `/readyz` 503; once connections are allowed again the node takes writes by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_refusing_connections_is_503_with_retry_after_never_500() {
    if skipped() {
        return;
    }
    let pg = Cluster::start("primary").unwrap();
    pg.sql("CREATE DATABASE parasol");
    let s = server_on(pg.url().replace("/postgres?", "/parasol?")).await;
    let (_, key) = s.create_org("refused");
    assert_eq!(post_one(&s, &key, "before.example").await.status, 202);
    pg.sql("ALTER DATABASE parasol ALLOW_CONNECTIONS false");
    pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'parasol'");
    for r in [
        post_one(&s, &key, "refused.example").await,
        s.get(&format!("/1.0/domains?customerKey={key}")).await,
    ] {
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(
            r.header("retry-after").is_some(),
            "a 503 without Retry-After"
        );
    }
    let r = readyz_within(
        &s,
        503,
        "/readyz to answer 503 while connections are refused",
    )
    .await;
    assert_eq!(r.json()["reason"], "disconnected", "{}", r.text());
    pg.sql("ALTER DATABASE parasol ALLOW_CONNECTIONS true");
    readyz_within(
        &s,
        200,
        "/readyz to answer 200 with connections allowed again",
    )
    .await;
    assert_eq!(post_one(&s, &key, "after.example").await.status, 202);
    let r = s.get(&format!("/1.0/domains?customerKey={key}")).await;
    let names: Vec<String> = r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["before.example", "after.example"]);
    s.stop().await;
}

/// Defect: `/readyz` said "locked by another process" (SQLite's words for its busy fault) on
/// PostgreSQL while commits waited for a synchronous standby that was not there. Its 503 now
/// says what PostgreSQL is doing, and it answers 200 again once commits are confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readiness_names_a_commit_waiting_for_its_synchronous_standby() {
    if skipped() {
        return;
    }
    let pg = Cluster::start("primary").unwrap();
    let s = server_on(pg.url()).await;
    assert_eq!(s.get("/readyz").await.status, 200);
    standby_required_but_away(&pg).await;
    let r = readyz_within(&s, 503, "/readyz to answer 503 with commits waiting").await;
    assert!(r.header("retry-after").is_some());
    let v = r.json();
    assert_eq!(v["reason"], "busy", "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(message.contains("synchronous standby"), "{v}");
    assert!(!message.contains("locked by another process"), "{v}");
    pg.synchronous_standbys("");
    readyz_within(&s, 200, "/readyz to answer 200 with no standby required").await;
    s.stop().await;
}

/// The lines of `server`'s log that contain `needle`.
fn log_lines(server: &ChildServer, needle: &str) -> Vec<String> {
    server
        .stderr_lines
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(needle))
        .cloned()
        .collect()
}

/// The node's storage faults so far (`parasol_store_faults_total`).
async fn faults_seen(server: &ChildServer) -> u64 {
    let metrics = server.get("/metrics").await.text();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("parasol_store_faults_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("parasol_store_faults_total in /metrics")
}

/// Defect: while the database was away (a failover, a restart) the background purge of deleted
/// organizations' stored requests logged an ERROR every second. It now logs one warning when it
/// starts failing and one when it works again. The database stays away for several of the
/// node's probes (each failed probe counts a storage fault): the purge, which tried every
/// second before, has failed again meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_background_job_logs_an_unavailable_database_once_and_its_return_once() {
    if skipped() {
        return;
    }
    let pg = Cluster::start("primary").unwrap();
    let dir = TempDir::new();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"));
    command
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--plain-http", "--database"])
        .arg(pg.url())
        .arg("--data-dir")
        .arg(dir.path());
    let s = ChildServer::spawn_command(command, dir.path());
    let purge = "deleted organization";
    pg.stop("fast");
    s.wait_for_log("deleting a deleted organization's stored requests");
    let before = faults_seen(&s).await;
    wait_for("five more failed probes of the stopped database", || {
        (run(faults_seen(&s)) >= before + 5).then_some(())
    })
    .await;
    pg.start_again();
    s.wait_for_log("stored requests works again");
    let lines = log_lines(&s, purge);
    assert_eq!(lines.len(), 2, "one line failing, one back: {lines:#?}");
    assert!(lines.iter().all(|l| l.contains("WARN")), "{lines:#?}");
    assert!(lines[0].contains("storage unavailable"), "{lines:#?}");
    assert_eq!(s.stop().code(), Some(0));
}
