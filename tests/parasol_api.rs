#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Parasol's own endpoints (`/parasol/v1/organizations/{id}/...`): the decision on a name and the
//! allow list, over HTTPS with the management interface's credentials, scopes and error shape.

mod common;

use common::*;
use serde_json::{json, Value};

fn decision(org: i64, name: &str) -> String {
    format!("/parasol/v1/organizations/{org}/decision?name={name}")
}

fn allowlist(org: i64) -> String {
    format!("/parasol/v1/organizations/{org}/allowlist")
}

async fn list_names(s: &TestServer, org: i64, cred: &Cred) -> Vec<Value> {
    let r = s.mgmt("GET", &allowlist(org), cred, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json().as_array().unwrap().clone()
}

/// The decision answers as `parasol blocklist check` does, and follows the allow list edited over
/// HTTP: an entry covers its name and everything below it, wins over the domain list, and goes
/// away with DELETE. Names are normalised like `dstDomain` on every endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_follow_the_domain_list_and_the_allow_list() {
    let s = TestServer::start().await;
    let w = s.world();
    let org = w.lone_org;
    let cred = &w.lone_org_cred;
    let key = run(s.store().list_customer_keys(org)).unwrap()[0]
        .key
        .clone();
    let r = s
        .post_json(
            &format!("/1.0/events?customerKey={key}"),
            &json!([event("bad.example"), event("xn--bcher-kva.test")]),
        )
        .await;
    assert_eq!(r.status, 202);

    let r = s
        .mgmt("GET", &decision(org, "WWW.Bad.Example."), cred, None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.json(),
        json!({"name": "www.bad.example", "blocked": true, "listedAs": "bad.example", "allowedBy": null})
    );
    // An IDN, percent-encoded in the query, is looked up in its punycode form.
    let r = s
        .mgmt("GET", &decision(org, "b%C3%BCcher.test"), cred, None)
        .await;
    assert_eq!(r.json()["listedAs"], "xn--bcher-kva.test");
    let r = s
        .mgmt("GET", &decision(org, "fine.example"), cred, None)
        .await;
    assert_eq!(
        r.json(),
        json!({"name": "fine.example", "blocked": false, "listedAs": null, "allowedBy": null})
    );

    assert!(list_names(&s, org, cred).await.is_empty());
    let add = |name: &str| json!({ "name": name });
    let r = s
        .mgmt(
            "POST",
            &allowlist(org),
            cred,
            Some(&add("Good.Bad.Example")),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"name": "good.bad.example", "added": true}));
    let r = s
        .mgmt(
            "POST",
            &allowlist(org),
            cred,
            Some(&add("good.bad.example.")),
        )
        .await;
    assert_eq!(
        r.json(),
        json!({"name": "good.bad.example", "added": false})
    );
    let r = s
        .mgmt("GET", &decision(org, "x.good.bad.example"), cred, None)
        .await;
    assert_eq!(
        r.json(),
        json!({"name": "x.good.bad.example", "blocked": false, "listedAs": "bad.example", "allowedBy": "good.bad.example"})
    );
    assert_eq!(
        s.mgmt("GET", &decision(org, "www.bad.example"), cred, None)
            .await
            .json()["blocked"],
        true
    );
    // The CLI sees what HTTP did, and the other way round.
    let (ok, v, err) = parasol(
        s.dir.path(),
        &[
            "allow",
            "add",
            "--org",
            &org.to_string(),
            "--name",
            "a.example",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(v["added"], true);
    assert_eq!(
        list_names(&s, org, cred).await,
        vec![
            json!({"name": "a.example"}),
            json!({"name": "good.bad.example"})
        ]
    );
    // Pages, as the management interface's lists have them.
    let r = s
        .mgmt(
            "GET",
            &format!("{}?page=2&limit=1", allowlist(org)),
            cred,
            None,
        )
        .await;
    assert_eq!(r.json(), json!([{"name": "good.bad.example"}]));
    let r = s
        .mgmt("GET", &format!("{}?limit=0", allowlist(org)), cred, None)
        .await;
    assert_mgmt_error(&r, 400, "limit");

    let r = s
        .mgmt(
            "DELETE",
            &format!("{}/GOOD.bad.example", allowlist(org)),
            cred,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"name": "good.bad.example"}));
    let r = s
        .mgmt(
            "DELETE",
            &format!("{}/good.bad.example", allowlist(org)),
            cred,
            None,
        )
        .await;
    assert_mgmt_error(&r, 404, "Not found");
    assert_eq!(
        s.mgmt("GET", &decision(org, "x.good.bad.example"), cred, None)
            .await
            .json()["blocked"],
        true
    );
    let (_, v, _) = parasol(
        s.dir.path(),
        &[
            "blocklist",
            "check",
            "--org",
            &org.to_string(),
            "--name",
            "x.good.bad.example",
        ],
    );
    assert_eq!(
        v,
        s.mgmt("GET", &decision(org, "x.good.bad.example"), cred, None)
            .await
            .json()
    );
}

/// Invalid names are 400 naming the field, before anything is looked up or stored; a missing
/// name, a body that is not JSON or lacks `name`, and a wrong Content-Type are refused as the
/// management interface refuses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_names_and_bodies_are_refused() {
    let s = TestServer::start().await;
    let w = s.world();
    let (org, cred) = (w.lone_org, &w.lone_org_cred);
    for bad in [
        "http%3A%2F%2Fx.example%2F",
        "1.2.3.4",
        "localhost",
        "a..b",
        "-x.example",
    ] {
        let r = s.mgmt("GET", &decision(org, bad), cred, None).await;
        assert_mgmt_error(&r, 400, "name must be a domain name");
        let r = s
            .mgmt("DELETE", &format!("{}/{bad}", allowlist(org)), cred, None)
            .await;
        assert_mgmt_error(&r, 400, "name must be a domain name");
    }
    for q in [
        format!("/parasol/v1/organizations/{org}/decision"),
        decision(org, ""),
    ] {
        let r = s.mgmt("GET", &q, cred, None).await;
        assert_mgmt_error(&r, 400, "name is required");
    }
    for body in [json!({"name": "1.2.3.4"}), json!({"name": "x y.example"})] {
        let r = s.mgmt("POST", &allowlist(org), cred, Some(&body)).await;
        assert_mgmt_error(&r, 400, "name must be a domain name");
    }
    for (body, needle) in [
        (json!({}), "name is required"),
        (json!({"name": 5}), "name must be a string"),
        (json!(["x.example"]), "JSON object"),
    ] {
        let r = s.mgmt("POST", &allowlist(org), cred, Some(&body)).await;
        assert_mgmt_error(&r, 400, needle);
    }
    let r = s
        .request(
            "POST",
            &allowlist(org),
            &[
                ("authorization", &cred.auth()),
                ("content-type", "text/plain"),
            ],
            Some(br#"{"name": "x.example"}"#.to_vec()),
        )
        .await;
    assert_mgmt_error(&r, 415, "Content-Type");
    assert!(list_names(&s, org, cred).await.is_empty());
}

/// Credentials and scopes are the management interface's: no or wrong credentials are a 401 with
/// its exact body; an organization outside the credential's scope, or one that does not exist,
/// is a 404 like an unknown path; a provider reaches its customers' organizations, an MSP its
/// own; unknown paths under `/parasol/` and wrong methods answer in the management shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_and_scopes_are_the_management_interfaces() {
    let s = TestServer::start().await;
    let w = s.world();
    let path = decision(w.sp_org, "x.example");
    let r = s.get(&path).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.json(),
        json!({"message": "Invalid authentication credentials"})
    );
    assert!(r.header("www-authenticate").unwrap().starts_with("Basic"));
    let wrong = Cred {
        key: w.sp_cred.key.clone(),
        secret: "wrong".into(),
    };
    assert_eq!(s.mgmt("GET", &path, &wrong, None).await.status, 401);

    for (cred, org, status) in [
        (&w.sp_cred, w.sp_org, 200),
        (&w.sp_org_cred, w.sp_org, 200),
        (&w.msp_cred, w.msp_org, 200),
        (&w.sp_cred, w.msp_org, 404),
        (&w.msp_cred, w.sp_org, 404),
        (&w.msp_cred, w.lone_org, 404),
        (&w.sp_org_cred, w.msp_org, 404),
        (&w.lone_org_cred, 987_654, 404),
    ] {
        for (method, p, body) in [
            ("GET", decision(org, "x.example"), None),
            ("GET", allowlist(org), None),
            ("POST", allowlist(org), Some(json!({"name": "x.example"}))),
            ("DELETE", format!("{}/x.example", allowlist(org)), None),
        ] {
            let r = s.mgmt(method, &p, cred, body.as_ref()).await;
            if status == 404 {
                assert_mgmt_error(&r, 404, "Not found");
            } else {
                assert_eq!(r.status, status, "{method} {p}: {}", r.text());
            }
        }
    }
    // What was added in scope was deleted again; nothing was added out of scope.
    for org in [w.sp_org, w.msp_org, w.lone_org] {
        assert!(run(s.store().allow_list(org)).unwrap().is_empty(), "{org}");
    }

    let cred = &w.lone_org_cred;
    let org = w.lone_org;
    for p in [
        "/parasol/v1/organizations".to_string(),
        format!("/parasol/v1/organizations/{org}/things"),
        format!("/parasol/v2/organizations/{org}/decision"),
        "/parasol/".to_string(),
    ] {
        let r = s.mgmt("GET", &p, cred, None).await;
        assert_mgmt_error(&r, 404, "Not found");
    }
    let r = s
        .mgmt(
            "PUT",
            &allowlist(org),
            cred,
            Some(&json!({"name": "x.example"})),
        )
        .await;
    assert_mgmt_error(&r, 405, "Method not allowed");
    assert_eq!(r.header("allow"), Some("GET, HEAD, POST"));
    let r = s
        .mgmt("DELETE", &decision(org, "x.example"), cred, None)
        .await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
}
