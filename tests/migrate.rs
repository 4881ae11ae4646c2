#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `parasol migrate`: an appliance's SQLite data directory copied into an empty PostgreSQL
//! database and verified, served the same by a node on it afterwards (the same records, pages
//! and ids, and no id given twice); run again, it verifies; interrupted, it leaves the database
//! empty and the next run succeeds; a database that is not empty is refused; progress shows on a
//! terminal only. Needs PostgreSQL (`PARASOL_TEST_POSTGRES`) and says so and passes without.

mod common;

use std::path::Path;

use common::*;
use parasol::store::{CustomerKey, Ingest, OrgFields, Parent, PreparedBatch, PreparedEvent};
use serde_json::{json, Value};

fn migrate(from: &Path, to: &str) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(["migrate", "--from"])
        .arg(from)
        .args(["--to", to])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An empty database of its own (kept with `dir`).
fn empty_database(dir: &TempDir) -> String {
    database_for(dir.path()).unwrap()
}

#[tokio::test]
async fn an_appliance_moves_to_postgres_with_its_lists_keys_and_ids() {
    if !on_postgres() {
        eprintln!("skipped: needs PostgreSQL (PARASOL_TEST_POSTGRES)");
        return;
    }
    // The appliance: SQLite, with tenants, devices, users, lists with deletions, an allow list,
    // a revoked key and a deleted organization whose stored requests wait for the purge.
    let s = TestServer::start_with(|c| c.database = None).await;
    let w = s.world();
    let (org, key) = s.create_org("moving");
    for batch in 0..3 {
        let events: Vec<Value> = (0..40)
            .map(|i| event(&format!("b{batch}-{i}.example")))
            .collect();
        let r = s
            .post_json(
                &format!("/1.0/events?customerKey={key}"),
                &Value::Array(events),
            )
            .await;
        assert_eq!(r.status, 202);
    }
    let page = s
        .get(&format!("/1.0/domains?customerKey={key}&limit=200"))
        .await
        .json();
    let last_id = page["data"][119]["id"].as_i64().unwrap();
    // The list's last entry deleted: its id must never come back.
    assert_eq!(
        s.delete(&format!("/1.0/domains/{last_id}?customerKey={key}"))
            .await
            .status,
        204
    );
    assert_eq!(
        s.delete(&format!("/1.0/domains/b1-7.example?customerKey={key}"))
            .await
            .status,
        204
    );
    let users = format!("/v1/organizations/{}/users", w.lone_org);
    let user = json!({"firstname": "A", "lastname": "B", "email": "Mixed.Case@Example.com",
                      "password": "A-long-password-1!", "roleId": 3, "timezone": "UTC"});
    assert_eq!(
        s.mgmt("POST", &users, &w.lone_org_cred, Some(&user))
            .await
            .status,
        200
    );
    let store = s.store();
    let now = parasol::timefmt::now();
    run(store.allow_add(org, "ok.b0-1.example".into(), now)).unwrap();
    let (doomed, doomed_key) = s.create_org("doomed");
    assert_eq!(
        s.post_json(
            &format!("/1.0/events?customerKey={doomed_key}"),
            &json!([event("x.example")])
        )
        .await
        .status,
        202
    );
    run(store.delete_organization(doomed)).unwrap();
    let spare = run(store.create_customer_key(org, now)).unwrap();
    assert!(run(store.revoke_customer_key(spare.clone(), now)).unwrap());
    store.close();
    let before_pages: Vec<Value> = {
        let mut v = Vec::new();
        for p in 1..=3 {
            v.push(
                s.get(&format!("/1.0/domains?customerKey={key}&page={p}&limit=50"))
                    .await
                    .json()["data"]
                    .clone(),
            );
        }
        v
    };
    let sp_path = format!("/v1/serviceproviders/{}/customers/{}", w.sp, w.sp_org);
    let before_customer = s.mgmt("GET", &sp_path, &w.sp_cred, None).await.json();
    let before_users = s.mgmt("GET", &users, &w.lone_org_cred, None).await.json();
    let dir = s.stop().await;

    // The copy: not on a terminal, so standard output is the result alone.
    let target_dir = TempDir::new();
    let url = empty_database(&target_dir);
    let (ok, out, err) = migrate(dir.path(), &url);
    assert!(ok, "{err}");
    assert!(
        !out.contains("copying:"),
        "no progress off a terminal: {out}"
    );
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["copied"], true);
    assert_eq!(report["verified"], true);
    let tables = report["tables"].as_array().unwrap();
    let rows = |t: &str| {
        tables.iter().find(|x| x["table"] == t).unwrap()["rows"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(rows("domains"), 118);
    assert_eq!(rows("event_purges"), 1);
    assert!(tables
        .iter()
        .all(|t| t["checksum"].as_str().unwrap().len() == 16));
    let password = url.split("://").nth(1).unwrap().split('@').next().unwrap();
    let password = password.split(':').nth(1).unwrap();
    assert!(!out.contains(password) && !err.contains(password));

    // Run again: the copy is there; it is verified, not copied twice.
    let (ok, out, err) = migrate(dir.path(), &url);
    assert!(ok, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (report["copied"].clone(), report["verified"].clone()),
        (json!(false), json!(true))
    );
    // A node on the copy serves what the appliance served.
    let node = TestServer::start_in(TempDir::new(), {
        let url = url.clone();
        move |c| c.database = Some(url)
    })
    .await;
    for (p, before) in before_pages.iter().enumerate() {
        let now = node
            .get(&format!(
                "/1.0/domains?customerKey={key}&page={}&limit=50",
                p + 1
            ))
            .await
            .json();
        assert_eq!(&now["data"], before, "page {}", p + 1);
    }
    assert_eq!(
        node.mgmt("GET", &sp_path, &w.sp_cred, None).await.json(),
        before_customer
    );
    assert_eq!(
        node.mgmt("GET", &users, &w.lone_org_cred, None)
            .await
            .json(),
        before_users
    );
    // The e-mail rule holds on the copied user; the revoked key stays revoked.
    let mut again = user.clone();
    again["email"] = json!("mixed.case@example.COM");
    assert_eq!(
        node.mgmt("POST", &users, &w.lone_org_cred, Some(&again))
            .await
            .status,
        409
    );
    assert_eq!(
        node.get(&format!("/1.0/domains?customerKey={spare}"))
            .await
            .status,
        403
    );
    // New ids go on past every id the appliance ever gave, the deleted last entry's included.
    let r = node
        .post_json(
            &format!("/1.0/events?customerKey={key}"),
            &json!([event("new.example")]),
        )
        .await;
    assert_eq!(r.status, 202);
    let all = node
        .get(&format!("/1.0/domains?customerKey={key}&page=2&limit=100"))
        .await
        .json();
    let newest = all["data"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(newest["name"], "new.example");
    assert!(newest["id"].as_i64().unwrap() > last_id);
    let created = run(node.store().create_organization(
        Parent::None,
        OrgFields {
            name: "after".into(),
            seats: 1,
            ..Default::default()
        },
        now,
    ))
    .unwrap();
    assert!(created.id > doomed, "organization ids are not reused");
    node.stop().await;

    // A database holding something else is refused.
    let other = TempDir::new();
    let other_url = empty_database(&other);
    let probe = TestServer::start_in(TempDir::new(), {
        let other_url = other_url.clone();
        move |c| c.database = Some(other_url)
    })
    .await;
    probe.create_org("unrelated");
    probe.stop().await;
    let (ok, _, err) = migrate(dir.path(), &other_url);
    assert!(!ok && err.contains("not a copy of this source"), "{err}");
}

#[tokio::test]
async fn an_interrupted_copy_leaves_nothing_and_the_next_run_succeeds_with_progress_on_a_terminal()
{
    if !on_postgres() {
        eprintln!("skipped: needs PostgreSQL (PARASOL_TEST_POSTGRES)");
        return;
    }
    // An appliance with enough stored requests that the copy takes a while.
    let dir = TempDir::new();
    cli_init_sqlite(dir.path());
    let store = tool_store(&dir.path().join("parasol.db"));
    let now = parasol::timefmt::now();
    let org = run(store.create_organization(
        Parent::None,
        OrgFields {
            name: "big".into(),
            seats: 1,
            ..Default::default()
        },
        now,
    ))
    .unwrap();
    let key = CustomerKey::parse(&org.customer_key).unwrap();
    let body = format!("[{}]", vec![r#"{"dstDomain":"x"}"#; 300].join(","));
    for b in 0..400 {
        let events = (0..300)
            .map(|i| PreparedEvent {
                domain: format!("d{b}-{i}.example"),
                listed: i % 3 == 0,
            })
            .collect();
        let request = Ingest {
            key,
            batch_id: uuid::Uuid::new_v4(),
            now,
            batch: PreparedBatch::new(events, body.clone()),
            new_domain_budget: None,
        };
        run(store.ingest(request)).unwrap();
    }
    store.close();

    let target = TempDir::new();
    let url = empty_database(&target);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(["migrate", "--from"])
        .arg(dir.path())
        .args(["--to", &url])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Interrupted (SIGKILL: nothing of its own runs) once its COPY is under way, as seen by the
    // database itself.
    let copying = || -> bool {
        let admin = postgres_admin_url().unwrap();
        run(async move {
            let (c, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
                .await
                .unwrap();
            let t = tokio::spawn(conn);
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY %'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            drop(c);
            let _ = t.await;
            n > 0
        })
    };
    wait_for_blocking("the copy to start", || {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the copy ended before it was interrupted"
        );
        copying().then_some(())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for_blocking("the interrupted COPY to end", || (!copying()).then_some(()));
    // Nothing of it is left: the database is as empty as before.
    let empty = {
        let url = url.clone();
        run(async move {
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            let t = tokio::spawn(conn);
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = 'public'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            drop(c);
            let _ = t.await;
            n == 0
        })
    };
    assert!(empty, "an interrupted copy left something behind");

    // Run again, on a terminal (script(1) gives it one): it shows its progress and succeeds.
    let out = std::process::Command::new("script")
        .args(["-qec"])
        .arg(format!(
            "{} migrate --from {} --to '{url}'",
            env!("CARGO_BIN_EXE_parasol"),
            dir.path().display()
        ))
        .arg("/dev/null")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("copying: "), "{text}");
    assert!(text.contains("rows/s, about"), "{text}");
    assert!(text.contains("\"verified\": true"), "{text}");
}

/// `parasol init` on SQLite whatever the backend of the run.
fn cli_init_sqlite(dir: &Path) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(["init", "--data-dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success());
}
