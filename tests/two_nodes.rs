#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Two Parasol nodes on one PostgreSQL database behave as one server: what one node stores the
//! other serves at once; ids, paging links, deletes by id and by name, conflicts and derived
//! fields hold under concurrent requests to both; `--demo` is made once whichever node starts
//! first; a newer schema is refused; the database password never appears in a log line or an
//! error. Every test here needs PostgreSQL (`PARASOL_TEST_POSTGRES`, see `.ci/postgres`) and
//! says so and passes without it.

mod common;

use common::*;
use serde_json::{json, Value};

/// Two in-process servers, each with a data directory of its own, on the first one's database.
async fn two_nodes() -> Option<(TestServer, TestServer)> {
    if !on_postgres() {
        eprintln!("skipped: needs PostgreSQL (PARASOL_TEST_POSTGRES)");
        return None;
    }
    let a = TestServer::start().await;
    let url = database_for(a.dir.path());
    let b = TestServer::start_in(TempDir::new(), move |c| c.database = url).await;
    Some((a, b))
}

fn events_path(key: &str) -> String {
    format!("/1.0/events?customerKey={key}")
}

fn domains_path(key: &str, page: u64, limit: u64) -> String {
    format!("/1.0/domains?customerKey={key}&page={page}&limit={limit}")
}

fn names(v: &Value) -> Vec<String> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn what_one_node_stores_the_other_lists_at_once_with_the_same_ids_and_pages() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let (org, key) = a.create_org("shared");
    // Names posted to both nodes in turn, each listed by the other right after its 202.
    let mut all = Vec::new();
    for i in 0..12 {
        let (to, from) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let name = format!("n{i:02}.example");
        let r = to
            .post_json(&events_path(&key), &json!([event(&name)]))
            .await;
        assert_eq!(r.status, 202, "{}", r.text());
        all.push(name.clone());
        let listed = from.get(&domains_path(&key, 1, 100)).await.json();
        assert_eq!(
            names(&listed),
            all,
            "node {} sees every name at once",
            i % 2
        );
    }
    // The same ids and entries on both, and the same pages; each node's links name itself.
    let on_a = a.get(&domains_path(&key, 2, 5)).await.json();
    let on_b = b.get(&domains_path(&key, 2, 5)).await.json();
    assert_eq!(on_a["data"], on_b["data"]);
    assert_eq!(names(&on_a), all[5..10].to_vec());
    let next_b = on_b["meta"]["next"].as_str().unwrap();
    assert!(next_b.contains(&b.addr.to_string()), "{next_b}");
    let ids: Vec<i64> = on_a["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // A delete by id on one node, by name on the other: both gone everywhere, and a second
    // delete of either answers as for an unknown entry.
    let first_id = a.get(&domains_path(&key, 1, 1)).await.json()["data"][0]["id"]
        .as_i64()
        .unwrap();
    let r = b
        .delete(&format!("/1.0/domains/{first_id}?customerKey={key}"))
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    let r = a
        .delete(&format!("/1.0/domains/n05.example?customerKey={key}"))
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    for node in [&a, &b] {
        let r = node
            .delete(&format!("/1.0/domains/{first_id}?customerKey={key}"))
            .await;
        assert_eq!(r.status, 404);
    }
    let left = names(&b.get(&domains_path(&key, 1, 100)).await.json());
    let expect: Vec<String> = all
        .iter()
        .filter(|n| *n != "n00.example" && *n != "n05.example")
        .cloned()
        .collect();
    assert_eq!(left, expect);
    // Pages past a deletion: page 2 of 5 starts with the sixth remaining entry on both nodes.
    let p2 = names(&a.get(&domains_path(&key, 2, 5)).await.json());
    assert_eq!(p2, expect[5..10].to_vec());

    // A name listed again keeps its id; a new one gets an id above every earlier one, even the
    // deleted first.
    let r = b
        .post_json(
            &events_path(&key),
            &json!([event("n01.example"), event("late.example")]),
        )
        .await;
    assert_eq!(r.status, 202);
    let page = a.get(&domains_path(&key, 1, 100)).await.json();
    let entries = page["data"].as_array().unwrap();
    let last = entries.last().unwrap();
    assert_eq!(last["name"], "late.example");
    assert!(entries
        .iter()
        .all(|e| e["name"] == "late.example" || e["id"].as_i64() < last["id"].as_i64()));
    assert_eq!(
        run(a.store().event_count(org)).unwrap(),
        14,
        "every event stored once"
    );

    // The same new names sent to both nodes at once: each listed once, with one id, and every
    // event of both requests stored.
    for round in 0..5 {
        let body = Value::Array(
            (0..20)
                .map(|i| event(&format!("race{round}-{i}.example")))
                .collect(),
        );
        let path = events_path(&key);
        let (ra, rb) = tokio::join!(a.post_json(&path, &body), b.post_json(&path, &body));
        assert_eq!(
            (ra.status, rb.status),
            (202, 202),
            "{} {}",
            ra.text(),
            rb.text()
        );
    }
    let listed = run(a.store().listed_names(org)).unwrap();
    let races: Vec<&String> = listed.iter().filter(|n| n.starts_with("race")).collect();
    assert_eq!(races.len(), 100, "each raced name listed once");
    assert_eq!(run(b.store().event_count(org)).unwrap(), 14 + 200);
}

#[tokio::test]
async fn concurrent_management_requests_to_both_nodes_keep_ids_conflicts_and_derived_fields() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let w = a.world();
    let customers = format!("/v1/serviceproviders/{}/customers", w.sp);
    let customer = |name: String| {
        json!({"customerName": name, "seats": 3, "packageId": 2, "adminEmails": ["a@example.com"],
               "streetAddress": "1 Main St", "city": "Springfield", "state": "IL",
               "countryCode": "us"})
    };
    // Twenty customers created at once, half on each node: twenty distinct ids, and the
    // provider's derived fields count them all (the world's own customer has 10 seats).
    let mut calls = Vec::new();
    for i in 0..20 {
        let node = if i % 2 == 0 {
            a.client.clone()
        } else {
            b.client.clone()
        };
        let cred = w.sp_cred.clone();
        let path = customers.clone();
        let body = customer(format!("c{i}"));
        calls.push(tokio::spawn(async move {
            node.mgmt("POST", &path, &cred, Some(&body)).await
        }));
    }
    let mut ids = Vec::new();
    for c in calls {
        let r = c.await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        ids.push(r.json()["customerId"].as_i64().unwrap());
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 20);
    for node in [&a, &b] {
        let sp = node
            .mgmt(
                "GET",
                &format!("/v1/serviceproviders/{}", w.sp),
                &w.sp_cred,
                None,
            )
            .await
            .json();
        assert_eq!(sp["customerCount"], 21);
        assert_eq!(sp["seatsUsed"], 10 + 20 * 3);
    }

    // The same e-mail address sent to both nodes at once: exactly one user, one 409.
    let users = format!("/v1/organizations/{}/users", w.lone_org);
    let user = json!({"firstname": "A", "lastname": "B", "email": "Same@Example.com",
                      "password": "A-long-password-1!", "roleId": 2, "timezone": "UTC"});
    let mut statuses = Vec::new();
    for round in 0..3 {
        let body = json!({"email": format!("dup{round}@example.com")});
        let mut u = user.clone();
        u["email"] = body["email"].clone();
        let (ra, rb) = tokio::join!(
            a.mgmt("POST", &users, &w.lone_org_cred, Some(&u)),
            b.mgmt("POST", &users, &w.lone_org_cred, Some(&u))
        );
        let mut pair = [ra.status, rb.status];
        pair.sort_unstable();
        statuses.push(pair);
    }
    assert!(statuses.iter().all(|p| *p == [200, 409]), "{statuses:?}");

    // One customer deleted on both nodes at once: one 200, one 404; it is gone from both, and
    // so is its customer key.
    let victim = ids[0];
    let path = format!("{customers}/{victim}");
    let (ra, rb) = tokio::join!(
        a.mgmt("DELETE", &path, &w.sp_cred, None),
        b.mgmt("DELETE", &path, &w.sp_cred, None)
    );
    let mut pair = [ra.status, rb.status];
    pair.sort_unstable();
    assert_eq!(pair, [200, 404]);
    for node in [&a, &b] {
        assert_eq!(node.mgmt("GET", &path, &w.sp_cred, None).await.status, 404);
        let sp = node
            .mgmt(
                "GET",
                &format!("/v1/serviceproviders/{}", w.sp),
                &w.sp_cred,
                None,
            )
            .await
            .json();
        assert_eq!(sp["customerCount"], 20);
    }

    // A site being deleted on one node while an internal network is put into it on the other:
    // either the network is refused (400) and the site gone, or the site stays (409) with it.
    let sites = format!("/v1/organizations/{}/sites", w.lone_org);
    for round in 0..4 {
        let site = a
            .mgmt(
                "POST",
                &sites,
                &w.lone_org_cred,
                Some(&json!({"name": format!("s{round}")})),
            )
            .await
            .json()["siteId"]
            .as_i64()
            .unwrap();
        let net =
            json!({"name": "lan", "ipAddress": "10.0.0.0", "prefixLength": 24, "siteId": site});
        let (one_site, networks) = (
            format!("{sites}/{site}"),
            format!("/v1/organizations/{}/internalnetworks", w.lone_org),
        );
        let (del, put) = tokio::join!(
            a.mgmt("DELETE", &one_site, &w.lone_org_cred, None),
            b.mgmt("POST", &networks, &w.lone_org_cred, Some(&net))
        );
        match (del.status, put.status) {
            (200, 400) | (409, 200) => {}
            other => panic!("site delete and network create ended {other:?}"),
        }
    }
}

#[tokio::test]
async fn the_demo_world_is_made_once_whichever_node_starts_first() {
    if !on_postgres() {
        eprintln!("skipped: needs PostgreSQL (PARASOL_TEST_POSTGRES)");
        return;
    }
    let (d1, d2) = (TempDir::new(), TempDir::new());
    let url = database_for(d1.path()).unwrap();
    // Both started at once on one empty database.
    let spawn = |dir: &std::path::Path| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"));
        c.args(["serve", "--demo", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .args(["--database", &url]);
        c
    };
    let (c1, c2) = (spawn(d1.path()), spawn(d2.path()));
    let t1 = std::thread::spawn({
        let dir = d1.path().to_path_buf();
        move || ChildServer::spawn_command(c1, &dir)
    });
    let t2 = std::thread::spawn({
        let dir = d2.path().to_path_buf();
        move || ChildServer::spawn_command(c2, &dir)
    });
    let (n1, n2) = (t1.join().unwrap(), t2.join().unwrap());
    let files: Vec<bool> = [d1.path(), d2.path()]
        .iter()
        .map(|d| d.join("demo-credentials.json").exists())
        .collect();
    assert_eq!(
        files.iter().filter(|f| **f).count(),
        1,
        "exactly one node made the world and wrote its credentials: {files:?}"
    );
    let store = dir_store(d1.path());
    assert_eq!(run(store.list_service_providers()).unwrap().len(), 1);
    assert_eq!(run(store.list_msps()).unwrap().len(), 1);
    assert_eq!(run(store.list_organizations()).unwrap().len(), 2);
    // The other node said why it printed nothing.
    let other = if files[0] { &n2 } else { &n1 };
    other.wait_for_log("the node that made it holds them");
    // The maker's credentials work on both nodes.
    let maker = if files[0] { d1.path() } else { d2.path() };
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(maker.join("demo-credentials.json")).unwrap(),
    )
    .unwrap();
    let key = doc["organizations"][0]["customerKey"].as_str().unwrap();
    for node in [&n1, &n2] {
        let r = node.get(&format!("/1.0/domains?customerKey={key}")).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // The password of the URL never reached a log line.
    let password = url.split("://").nth(1).unwrap().split('@').next().unwrap();
    let password = password.split(':').nth(1).unwrap();
    for node in [&n1, &n2] {
        let lines = node.stderr_lines.lock().unwrap().clone();
        assert!(lines.iter().any(|l| l.contains("***@")), "{lines:?}");
        assert!(!lines.iter().any(|l| l.contains(password)), "{lines:?}");
    }
    assert!(n1.stop().success());
    assert!(n2.stop().success());
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_errors_never_show_the_password() {
    if !on_postgres() {
        eprintln!("skipped: needs PostgreSQL (PARASOL_TEST_POSTGRES)");
        return;
    }
    let dir = TempDir::new();
    cli_init(dir.path());
    let url = database_for(dir.path()).unwrap();
    let s = TestServer::start_in(TempDir::new(), {
        let url = url.clone();
        move |c| c.database = Some(url)
    })
    .await;
    s.stop().await;
    // A database a newer Parasol wrote: both the server and a command refuse it.
    let scratch = TempDir::new();
    let probe = TestServerDb(url.clone());
    probe.execute("UPDATE parasol_schema SET version = version + 1");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(scratch.path())
        .args(["--database", &url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("newer than this binary supports"), "{err}");
    let (ok, _, err) = parasol(dir.path(), &["credential", "list"]);
    assert!(
        !ok && err.contains("newer than this binary supports"),
        "{err}"
    );

    // A wrong password: refused, and the error shows the URL without any password.
    let wrong = url.replacen("@", "x@", 1);
    let password = url.split("://").nth(1).unwrap().split('@').next().unwrap();
    let password = password.split(':').nth(1).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(["credential", "list", "--database", &wrong])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("***@"), "{err}");
    assert!(!err.contains(password), "{err}");
    // The password may come from PGPASSWORD instead of the URL (which the process list shows).
    let bare = url.replacen(&format!(":{password}@"), "@", 1);
    assert!(!bare.contains(password));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(["credential", "list", "--database", &bare])
        .env("PGPASSWORD", password)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("newer than this binary supports"),
        "connected: {err}"
    );
    // An empty database is no Parasol database for a command (only init or serve make one).
    let empty = TempDir::new();
    let empty_url = database_for(empty.path()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(["credential", "list", "--database", &empty_url])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("holds no Parasol schema"),
        "{err}"
    );
}

/// A connection to a test database by URL, for the one statement a test needs.
/// A database of schema version 5 (before `commit_tokens` and the paging counts' residue sums)
/// is upgraded by the first node that starts on it: its counts get the sums of its lists, and
/// every write then carries its commit token.
#[tokio::test]
async fn a_version_5_database_is_upgraded_and_its_writes_carry_commit_tokens() {
    if !on_postgres() {
        eprintln!("skipped: needs PostgreSQL (PARASOL_TEST_POSTGRES)");
        return;
    }
    let dir = TempDir::new();
    cli_init(dir.path());
    let url = database_for(dir.path()).unwrap();
    let start = || {
        let url = url.clone();
        TestServer::start_in(TempDir::new(), move |c| c.database = Some(url))
    };
    // A list written first, then the database taken back to version 5: version 7 is version 5,
    // the table of commit tokens and the sums beside the counts.
    let s = start().await;
    let (_, key) = s.create_org("upgraded");
    let names: Vec<Value> = (0..40)
        .map(|i| event(&format!("n{i}.upgraded.example")))
        .collect();
    let r = s
        .post_json(
            &format!("/1.0/events?customerKey={key}"),
            &Value::Array(names),
        )
        .await;
    assert_eq!(r.status, 202);
    s.stop().await;
    let db = TestServerDb(url.clone());
    db.execute(
        "DROP TABLE commit_tokens;
         ALTER TABLE domain_counts DROP COLUMN residue_sum, DROP COLUMN square_sum;
         ALTER TABLE domain_count_deltas DROP COLUMN residue_sum, DROP COLUMN square_sum;
         UPDATE parasol_schema SET version = 5",
    );
    let s = start().await;
    assert_eq!(db.version(), parasol::store::SCHEMA_VERSION);
    // The sums of every level are those of the list's entries.
    let residues =
        db.one_i64("SELECT sum(id % 2147483647 * 48271 % 2147483647)::bigint FROM domains");
    for level in [0, 1] {
        let sums = db.one_i64(&format!(
            "SELECT (SELECT sum(residue_sum) FROM domain_counts WHERE level = {level})::bigint"
        ));
        assert_eq!(sums, residues, "level {level}");
    }
    // Writes insert their token: without the table they fail (500).
    assert_eq!(post_one(&s, &key).await, 202);
    let r = s
        .delete(&format!("/1.0/domains/upgraded.example?customerKey={key}"))
        .await;
    assert_eq!(r.status, 204);
    s.stop().await;
}

async fn post_one(s: &TestServer, key: &str) -> u16 {
    let body = serde_json::Value::Array(vec![event("upgraded.example")]);
    s.post_json(&format!("/1.0/events?customerKey={key}"), &body)
        .await
        .status
}

struct TestServerDb(String);

impl TestServerDb {
    fn execute(&self, sql: &str) {
        let (url, sql) = (self.0.clone(), sql.to_string());
        run(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            let task = tokio::spawn(conn);
            client.batch_execute(&sql).await.unwrap();
            drop(client);
            let _ = task.await;
        })
    }

    /// The one integer `sql` returns.
    fn one_i64(&self, sql: &str) -> i64 {
        let (url, sql) = (self.0.clone(), sql.to_string());
        run(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            let task = tokio::spawn(conn);
            let row = client.query_one(&sql, &[]).await.unwrap();
            drop(client);
            let _ = task.await;
            row.get(0)
        })
    }

    /// The schema version.
    fn version(&self) -> i64 {
        self.one_i64("SELECT version::bigint FROM parasol_schema")
    }
}

#[tokio::test]
async fn events_racing_their_customers_deletion_on_another_node_leave_nothing_behind() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let w = a.world();
    let key = run(a.store().list_customer_keys(w.sp_org)).unwrap()[0]
        .key
        .clone();
    // Requests for the customer go to node A while node B deletes it.
    let sender = {
        let (client, key) = (a.client.clone(), key.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for i in 0..200 {
                let body = json!([event(&format!("race{i}.example")), event("same.example")]);
                let r = client
                    .post_json(&format!("/1.0/events?customerKey={key}"), &body)
                    .await;
                statuses.push(r.status);
                if r.status == 403 {
                    break;
                }
            }
            statuses
        })
    };
    // Once some are stored, the deletion.
    wait_for("10 events stored", || {
        (run(a.store().event_count(w.sp_org)).unwrap() >= 10).then_some(())
    })
    .await;
    let path = format!("/v1/serviceproviders/{}/customers/{}", w.sp, w.sp_org);
    assert_eq!(b.mgmt("DELETE", &path, &w.sp_cred, None).await.status, 200);
    let statuses = sender.await.unwrap();
    assert!(
        statuses.iter().all(|s| *s == 202 || *s == 403),
        "{statuses:?}"
    );
    assert_eq!(statuses.last(), Some(&403), "the key stopped working");
    // Nothing of the organization is left once the purge is through: no entry, no request.
    let store = b.store();
    assert!(run(store.listed_names(w.sp_org)).unwrap().is_empty());
    while run(store.purge_step()).unwrap().is_some() {}
    assert_eq!(run(store.event_count(w.sp_org)).unwrap(), 0);
}

#[tokio::test]
async fn tls_to_the_database_verifies_the_servers_certificate() {
    let (Some(_), Ok(ca)) = (postgres_admin_url(), std::env::var("PARASOL_PG_CA")) else {
        eprintln!("skipped: needs .ci/postgres's cluster with TLS (PARASOL_PG_CA)");
        return;
    };
    let dir = TempDir::new();
    let url = database_for(dir.path()).unwrap();
    let url = url.split('?').next().unwrap().to_string();
    // Verified against the cluster's CA: the node serves, over TLS.
    let tls = format!("{url}?sslmode=require&sslrootcert={ca}&application_name=parasol-tls-test");
    let s = TestServer::start_in(TempDir::new(), {
        let tls = tls.clone();
        move |c| c.database = Some(tls)
    })
    .await;
    let (_, key) = s.create_org("tls");
    let r = s
        .post_json(
            &format!("/1.0/events?customerKey={key}"),
            &json!([event("tls.example")]),
        )
        .await;
    assert_eq!(r.status, 202);
    let ssl_sessions = {
        let admin = postgres_admin_url().unwrap();
        run(async move {
            let (c, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
                .await
                .unwrap();
            let t = tokio::spawn(conn);
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
                     WHERE a.application_name = 'parasol-tls-test' AND s.ssl",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            drop(c);
            let _ = t.await;
            n
        })
    };
    assert!(ssl_sessions > 0, "the node's connections use TLS");
    s.stop().await;
    // A CA that did not sign the server's certificate: refused, whatever `require` means to
    // libpq (rustls always verifies), and the error says what to do.
    let other_ca = dir.path().join("other-ca.pem");
    let names = parasol::tls::CertNames::for_listener(([127, 0, 0, 1], 0).into());
    let (cert, _) = parasol::tls::ensure_self_signed(dir.path(), &names).unwrap();
    std::fs::copy(cert, &other_ca).unwrap();
    let wrong = format!("{url}?sslmode=require&sslrootcert={}", other_ca.display());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(["credential", "list", "--database", &wrong])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("sslrootcert"), "{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
}
