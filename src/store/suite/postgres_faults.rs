//! PostgreSQL's fault classes through `Store`, each on a cluster of the test's own (the file the
//! integration suites use too, included by the suite; it needs `.ci/postgres`'s server binaries,
//! `PARASOL_PG_BIN`, as CI's PostgreSQL pass sets it, and says so and passes without): a
//! stopped server; connections refused by the database (55000), by the role's connection limit
//! (53300) and by the authentication rules (28000); a backend terminated while it works; a
//! commit whose answer was lost (settled: stored is success, unknown within `settle_for` is
//! `Unavailable(outcome_unknown)`). Each asserts the error the caller gets, that nothing of a
//! refused write is stored, and that the store takes writes again by itself.
//!
//! Not provoked here: a lost commit answer whose commit did not happen. On one server a COMMIT
//! that reached it is committed there (its answer can only be lost after), and one that did not
//! reach it fails as a lost connection before any commit: only a failover to a standby that
//! never had the commit shows it, which tests/postgres_faults.rs does with a real standby
//! (503, and the batch absent from the new primary).

use super::cluster::{pg_bin, Cluster};
use super::enforcement::{listed, request};
use super::faults::{fault_kind, within};
use super::*;

/// Runs `test` on a cluster of its own with a database `parasol` owned by the unprivileged role
/// `app` (limits and authentication rules that spare superusers hold for it), and a store from
/// `app_store` (`extra`: more URL parameters), closed after; skipped (said) without the server
/// binaries.
fn on_own_cluster(
    test: &str,
    extra: &str,
    body: impl AsyncFnOnce(&Cluster, &Store, &CreatedOrganization),
) {
    if pg_bin().is_none() {
        eprintln!("{test}: skipped, needs PostgreSQL's server binaries (PARASOL_PG_BIN)");
        return;
    }
    let pg = Cluster::start("primary").unwrap();
    pg.sql("CREATE ROLE app LOGIN");
    pg.sql("CREATE DATABASE parasol OWNER app");
    runtime().block_on(async {
        let (s, a) = app_store(&pg, extra).await;
        body(&pg, &s, &a).await;
        s.close();
    });
}

/// A store of role `app` on the cluster's database (`extra`: more URL parameters), with
/// organization `a` and one name stored before any fault.
async fn app_store(pg: &Cluster, extra: &str) -> (Store, CreatedOrganization) {
    let url = format!(
        "postgres://app@127.0.0.1:{}/parasol?sslmode=disable{extra}",
        pg.port
    );
    let s = Store::open_postgres(&url, OpenRole::Server).await.unwrap();
    let a = organization(&s, "a").await;
    if listed(&s, &a.customer_key, &["before.example"], 1).await != 1 {
        panic!("before.example was listed already");
    }
    (s, a)
}

/// Ends `app`'s sessions (`pg_terminate_backend`), as an operator or a failover manager does.
fn terminate_sessions(pg: &Cluster) {
    pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app'");
}

/// Stores `name` under `a`'s key: at the latest on the third try, as a connection the pool
/// held from before a fault may meet it once more; the tries before fail as `Unavailable`.
async fn stored_soon(s: &Store, a: &CreatedOrganization, name: &str) {
    for _ in 0..3 {
        match s.ingest(request(&a.customer_key, &[(name, true)], 3)).await {
            Ok(Ingested::Stored { .. }) => return,
            r => assert!(r.as_ref().is_err_and(StoreError::is_unavailable), "{r:?}"),
        }
    }
    panic!("{name} not stored in three tries after the fault");
}

/// While the store is refused: an ingest, a management write and a page read get
/// `Unavailable` (with `detail` in the fault's words, for the server's refusals), readiness
/// turns false by itself; nothing is stored; once `lift` has run, the store takes writes again
/// by itself and holds exactly what was answered stored.
async fn refused_then_back(
    s: &Store,
    a: &CreatedOrganization,
    detail: Option<&str>,
    lift: impl FnOnce(),
) {
    let mut details = Vec::new();
    for _ in 0..2 {
        let r = s
            .ingest(request(&a.customer_key, &[("refused.example", true)], 2))
            .await;
        details.push(format!("{r:?}"));
        fault_kind(r);
    }
    let r = s.create_site(a.id, "Branch".into(), 2).await;
    details.push(format!("{r:?}"));
    fault_kind(r);
    let key = CustomerKey::parse(&a.customer_key).unwrap();
    let r = s.list_domains(key, 1, 10).await;
    details.push(format!("{r:?}"));
    fault_kind(r);
    if let Some(code) = detail {
        assert!(details.iter().any(|d| d.contains(code)), "{details:#?}");
    }
    within("readiness to turn false by itself", || !s.health().writable).await;
    lift();
    within("the store to take writes again by itself", || {
        s.health().writable
    })
    .await;
    stored_soon(s, a, "after.example").await;
    let names = s.listed_names(a.id).await.unwrap();
    assert!(!names.contains(&"refused.example".to_string()), "{names:?}");
    assert_eq!(s.list_sites(a.id, 10, 0).await.unwrap().len(), 1);
}

#[test]
fn postgres_a_stopped_server_is_unavailable_disconnected_and_the_store_comes_back_by_itself() {
    on_own_cluster("stopped", "", async |pg, s, a| {
        pg.stop("fast");
        let r = s
            .ingest(request(&a.customer_key, &[("refused.example", true)], 2))
            .await;
        assert_eq!(fault_kind(r), FaultKind::Disconnected);
        refused_then_back(s, a, None, || pg.start_again()).await;
        assert_eq!(
            s.listed_names(a.id).await.unwrap(),
            ["before.example", "after.example"]
        );
    });
}

#[test]
fn postgres_refused_connections_are_unavailable_whatever_refuses_them() {
    on_own_cluster("refused", "", async |pg, s, a| {
        // The database does not take connections (SQLSTATE 55000).
        pg.sql("ALTER DATABASE parasol ALLOW_CONNECTIONS false");
        terminate_sessions(pg);
        refused_then_back(s, a, Some("SQLSTATE 55000"), || {
            pg.sql("ALTER DATABASE parasol ALLOW_CONNECTIONS true");
        })
        .await;
        // Too many connections for the role (53300).
        pg.sql("ALTER ROLE app CONNECTION LIMIT 0");
        terminate_sessions(pg);
        refused_then_back(s, a, Some("SQLSTATE 53300"), || {
            pg.sql("ALTER ROLE app CONNECTION LIMIT -1");
        })
        .await;
        // The authentication rules reject the role (28000).
        let hba = pg.path().join("data/pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).unwrap();
        let reject = "host all app 127.0.0.1/32 reject\n";
        std::fs::write(&hba, format!("{reject}{rules}")).unwrap();
        pg.sql("SELECT pg_reload_conf()");
        terminate_sessions(pg);
        refused_then_back(s, a, Some("SQLSTATE 28000"), || {
            std::fs::write(&hba, &rules).unwrap();
            pg.sql("SELECT pg_reload_conf()");
        })
        .await;
    });
}

/// A session of `app` (application `parasol`, not the probe's) waiting for `event`, other than
/// `not`; its pid.
fn waiting(pg: &Cluster, event: &str, not: &str) -> Option<String> {
    pg.value(&format!(
        "SELECT pid FROM pg_stat_activity
         WHERE usename = 'app' AND application_name = 'parasol' AND wait_event = '{event}'
           AND pid::text <> '{not}' LIMIT 1"
    ))
}

/// Waits (bounded) for `waiting` to find a session; its pid.
async fn session_waiting(pg: &Cluster, event: &str, not: &str) -> String {
    let mut pid = None;
    within(&format!("a session waiting for {event}"), || {
        pid = waiting(pg, event, not);
        pid.is_some()
    })
    .await;
    pid.unwrap()
}

/// Ends (`pg_terminate_backend`) the session `session_waiting` finds waiting for `event`; its pid.
async fn end_session_waiting(pg: &Cluster, event: &str) -> String {
    let pid = session_waiting(pg, event, "").await;
    pg.sql(&format!("SELECT pg_terminate_backend({pid})"));
    pid
}

/// Stores `name` under `key` in a task of its own, to be ended while it waits.
fn ingest_in_background(
    s: &Store,
    key: &str,
    name: &str,
    now: i64,
) -> tokio::task::JoinHandle<Result<Ingested>> {
    let (s, ingest) = (s.clone(), request(key, &[(name, true)], now));
    tokio::spawn(async move { s.ingest(ingest).await })
}

#[test]
fn postgres_a_backend_terminated_in_a_write_is_unavailable_and_stores_nothing() {
    on_own_cluster("terminated", "", async |pg, s, a| {
        // Idle sessions ended: the pool connects again, the next write is stored.
        terminate_sessions(pg);
        stored_soon(s, a, "idle.example").await;
        // A session ended in the middle of its write (held on a lock, so that it is there to end).
        let admin_url = pg.url().replace("/postgres?", "/parasol?");
        let (admin, conn) = tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        admin
            .batch_execute("BEGIN; LOCK TABLE domains IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        let write = ingest_in_background(s, &a.customer_key, "ended.example", 3);
        end_session_waiting(pg, "relation").await;
        let r = write.await.unwrap();
        admin.batch_execute("ROLLBACK").await.unwrap();
        assert!(r.as_ref().is_err_and(StoreError::is_unavailable), "{r:?}");
        assert!(!r.unwrap_err().is_unsettled());
        assert_eq!(
            s.listed_names(a.id).await.unwrap(),
            ["before.example", "idle.example"]
        );
        assert_eq!(listed(s, &a.customer_key, &["later.example"], 4).await, 1);
    });
}

#[test]
fn postgres_a_lost_commit_answer_is_settled_stored_is_success_unknown_is_said() {
    on_own_cluster("lost-commit", "&settle_for=2", async |pg, s, a| {
        let (patient, _) = app_store(pg, "&settle_for=120").await;
        // Every commit waits for a synchronous standby that is not there; a backend ended while
        // it waits has committed on the server, but its answer is lost.
        pg.synchronous_standbys("absent");
        within("the setting in force (the probe's commit waiting)", || {
            pg.value(
                "SELECT pid FROM pg_stat_activity
                 WHERE wait_event = 'SyncRep' AND application_name = 'parasol probe' LIMIT 1",
            )
            .is_some()
        })
        .await;
        let write = ingest_in_background(s, &a.customer_key, "unknown.example", 2);
        end_session_waiting(pg, "SyncRep").await;
        let r = write.await.unwrap();
        assert!(r.as_ref().is_err_and(StoreError::is_unsettled), "{r:?}");

        // Settled while the settle waits: the standby requirement lifted, it is stored: success,
        // for an ingest and for a management write alike, each stored once.
        let writer = patient.clone();
        let id = a.id;
        let site = tokio::spawn(async move { writer.create_site(id, "Branch".into(), 3).await });
        let pid = end_session_waiting(pg, "SyncRep").await;
        session_waiting(pg, "SyncRep", &pid).await;
        pg.synchronous_standbys("");
        let created = site.await.unwrap().unwrap();
        assert_eq!(created.name, "Branch");
        assert_eq!(patient.list_sites(a.id, 10, 0).await.unwrap().len(), 2);
        let names = patient.listed_names(a.id).await.unwrap();
        assert_eq!(names, ["before.example", "unknown.example"]);
        patient.close();
    });
}
