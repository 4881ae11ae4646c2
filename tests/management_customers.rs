//! The management interface's authentication, scopes, service providers, customers and MSP
//! customers, over HTTPS against the real server.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Instant;

use common::*;
use serde_json::{json, Value};

const CUSTOMER_FIELDS: &[&str] = &[
    "customerId",
    "customerName",
    "packageName",
    "seats",
    "streetAddress",
    "streetAddress2",
    "city",
    "state",
    "countryCode",
    "zipCode",
    "packageId",
    "dealId",
    "adminEmails",
    "ccwDealOwnerEmails",
    "createdAt",
    "modifiedAt",
];
const MSP_CUSTOMER_FIELDS: &[&str] = &["customerId", "customerName", "seats"];
const SERVICE_PROVIDER_FIELDS: &[&str] = &[
    "packageName",
    "seatsTotal",
    "seatsUsed",
    "customerCount",
    "status",
    "rebillAt",
    "expiresAt",
];

fn customer(name: &str) -> Value {
    json!({
        "customerName": name,
        "seats": 25,
        "streetAddress": "1 Infinite Loop",
        "city": "Cupertino",
        "state": "CA",
        "countryCode": "us",
        "packageId": 3,
        "adminEmails": ["it@example.com"]
    })
}

fn sp_customers(w: &World) -> String {
    format!("/v1/serviceproviders/{}/customers", w.sp)
}

fn msp_customers(w: &World) -> String {
    format!("/v1/msps/{}/customers", w.msp)
}

#[tokio::test]
async fn authentication_is_basic_with_issued_credentials() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    let path = format!("/v1/serviceproviders/{}", w.sp);
    let wrong = Cred {
        key: w.sp_cred.key.clone(),
        secret: "not-the-secret".into(),
    };
    let unknown = Cred {
        key: "no-such-key".into(),
        secret: w.sp_cred.secret.clone(),
    };
    let check = |r: &Resp| {
        assert_eq!(r.status, 401, "{}", r.text());
        assert_eq!(
            r.json(),
            json!({"message": "Invalid authentication credentials"})
        );
        assert!(r
            .header("www-authenticate")
            .is_some_and(|v| v.starts_with("Basic")));
        assert_eq!(r.header("content-type"), Some("application/json"));
    };
    check(&s.get(&path).await);
    check(&s.mgmt("GET", &path, &wrong, None).await);
    check(&s.mgmt("GET", &path, &unknown, None).await);
    for header in ["Bearer abc", "Basic !!!", "Basic", "Basic a2V5"] {
        check(
            &s.request("GET", &path, &[("authorization", header)], None)
                .await,
        );
    }
    // Credentials are checked before the scope and before anything about the body.
    check(
        &s.mgmt("POST", "/v1/organizations/999999/sites", &wrong, None)
            .await,
    );
    // The right secret works, and keeps working (the verification is remembered).
    for _ in 0..3 {
        let r = s.mgmt("GET", &path, &w.sp_cred, None).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // The secret is stored only as an argon2 hash.
    let stored: String = s
        .db()
        .query_row(
            "SELECT secret_hash FROM api_credentials WHERE api_key = ?1",
            [&w.sp_cred.key],
            |r| r.get(0),
        )
        .unwrap();
    assert!(stored.starts_with("$argon2id$"), "{stored}");
    assert!(!stored.contains(&w.sp_cred.secret));
    // A revoked credential stops working at once, even though it verified before.
    assert!(run(s.store().revoke_credential(w.sp_cred.key.clone(), 1)).unwrap());
    check(&s.mgmt("GET", &path, &w.sp_cred, None).await);
}

/// A wrong secret costs a full hash verification whether or not the key exists, so response
/// times do not tell which API keys exist.
#[tokio::test]
async fn wrong_secrets_cost_the_same_for_known_and_unknown_keys() {
    let s = TestServer::start().await;
    let w = s.world();
    let path = format!("/v1/serviceproviders/{}", w.sp);
    let known = Cred {
        key: w.sp_cred.key.clone(),
        secret: "wrong".into(),
    };
    let unknown = Cred {
        key: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into(),
        secret: "wrong".into(),
    };
    // Interleaved, so that a load change on the machine affects both series alike; and compared
    // by their fastest answers: other tests hashing at the same time can only slow a request
    // down, so the minimum is the cost of the request itself (a median of 9 once came out 4x
    // apart under such contention, with the dummy verification in place).
    let (mut k, mut u) = (Vec::new(), Vec::new());
    for _ in 0..9 {
        for (c, times) in [(&known, &mut k), (&unknown, &mut u)] {
            let t = Instant::now();
            assert_eq!(s.mgmt("GET", &path, c, None).await.status, 401);
            times.push(t.elapsed());
        }
    }
    let k = k.into_iter().min().unwrap_or_default();
    let u = u.into_iter().min().unwrap_or_default();
    // Without the dummy verification the unknown key answers in well under a tenth of the time.
    let ratio = u.as_secs_f64() / k.as_secs_f64();
    assert!(
        (0.25..4.0).contains(&ratio),
        "known {k:?} vs unknown {u:?} (ratio {ratio:.2})"
    );
}

#[tokio::test]
async fn service_provider_record_and_derived_fields() {
    let s = TestServer::start().await;
    let w = s.world();
    let path = format!("/v1/serviceproviders/{}", w.sp);
    let r = s.mgmt("GET", &path, &w.sp_cred, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let b = r.json();
    assert_fields(&b, SERVICE_PROVIDER_FIELDS);
    assert_eq!(b["packageName"], "DNS Security Advantage");
    assert_eq!(b["seatsTotal"], 500);
    assert_eq!(b["status"], "Active");
    assert_eq!(
        (b["customerCount"].clone(), b["seatsUsed"].clone()),
        (json!(1), json!(10))
    );
    for field in ["rebillAt", "expiresAt"] {
        let t = b[field].as_str().unwrap();
        assert!(t.ends_with('Z') && t.len() == 20, "{t}");
    }

    // Create, update and delete move customerCount and seatsUsed.
    let c = s
        .mgmt(
            "POST",
            &sp_customers(&w),
            &w.sp_cred,
            Some(&customer("New")),
        )
        .await
        .json();
    let id = c["customerId"].as_i64().unwrap();
    let b = s.mgmt("GET", &path, &w.sp_cred, None).await.json();
    assert_eq!(
        (b["customerCount"].clone(), b["seatsUsed"].clone()),
        (json!(2), json!(35))
    );
    let mut upd = customer("New");
    upd["seats"] = json!(5);
    let r = s
        .mgmt(
            "PUT",
            &format!("{}/{id}", sp_customers(&w)),
            &w.sp_cred,
            Some(&upd),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let b = s.mgmt("GET", &path, &w.sp_cred, None).await.json();
    assert_eq!(b["seatsUsed"], 15);
    let r = s
        .mgmt(
            "DELETE",
            &format!("{}/{id}", sp_customers(&w)),
            &w.sp_cred,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let b = s.mgmt("GET", &path, &w.sp_cred, None).await.json();
    assert_eq!(
        (b["customerCount"].clone(), b["seatsUsed"].clone()),
        (json!(1), json!(10))
    );
}

#[tokio::test]
async fn customer_create_read_list_with_exact_fields() {
    let s = TestServer::start().await;
    let w = s.world();
    let mut input = customer("Umbrella");
    // Output-only fields are ignored on input.
    input["customerId"] = json!(424242);
    input["packageName"] = json!("Something Else");
    input["createdAt"] = json!("1999-01-01T00:00:00Z");
    let r = s
        .mgmt("POST", &sp_customers(&w), &w.sp_cred, Some(&input))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let c = r.json();
    assert_fields(&c, CUSTOMER_FIELDS);
    let id = c["customerId"].as_i64().unwrap();
    assert_ne!(id, 424242);
    assert_eq!(c["customerName"], "Umbrella");
    assert_eq!(c["packageId"], 3);
    assert_eq!(c["packageName"], "Secure Internet Gateway Essentials");
    assert_eq!(c["countryCode"], "US");
    assert_eq!(c["seats"], 25);
    assert_eq!(c["adminEmails"], json!(["it@example.com"]));
    // Optional fields not supplied come back as null, ccwDealOwnerEmails as [].
    for f in ["streetAddress2", "zipCode", "dealId"] {
        assert_eq!(c[f], Value::Null, "{f}");
    }
    assert_eq!(c["ccwDealOwnerEmails"], json!([]));
    assert_ne!(c["createdAt"], "1999-01-01T00:00:00Z");
    assert_eq!(c["createdAt"], c["modifiedAt"]);

    let got = s
        .mgmt(
            "GET",
            &format!("{}/{id}", sp_customers(&w)),
            &w.sp_cred,
            None,
        )
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json(), c);

    let list = s.mgmt("GET", &sp_customers(&w), &w.sp_cred, None).await;
    assert_eq!(list.status, 200);
    let list = list.json();
    let items = list.as_array().expect("a bare array");
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["customerId"], w.sp_org);
    assert_eq!(items[1], c);
    for item in items {
        assert_fields(item, CUSTOMER_FIELDS);
    }

    // All optional fields supplied come back as given.
    let mut full = customer("Full");
    full["streetAddress2"] = json!("Suite 5");
    full["zipCode"] = json!("95014");
    full["dealId"] = json!("D-17");
    full["ccwDealOwnerEmails"] = json!(["owner@example.com", "second@example.org"]);
    let c = s
        .mgmt("POST", &sp_customers(&w), &w.sp_cred, Some(&full))
        .await
        .json();
    assert_eq!(c["streetAddress2"], "Suite 5");
    assert_eq!(c["zipCode"], "95014");
    assert_eq!(c["dealId"], "D-17");
    assert_eq!(
        c["ccwDealOwnerEmails"],
        json!(["owner@example.com", "second@example.org"])
    );
}

#[tokio::test]
async fn a_customer_is_an_organization_with_a_default_site_and_a_customer_key() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    // decisions.md: both kinds of customer (of a service provider, of an MSP).
    for (path, cred, body) in [
        (sp_customers(&w), &w.sp_cred, customer("Org")),
        (
            msp_customers(&w),
            &w.msp_cred,
            json!({"customerName": "Msp Org", "seats": 5}),
        ),
    ] {
        let r = s.mgmt("POST", &path, cred, Some(&body)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let id = r.json()["customerId"].as_i64().unwrap();
        let db = s.db();
        let (sites, default_sites): (i64, i64) = db
            .query_row(
                "SELECT count(*), sum(is_default) FROM sites WHERE organization_id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((sites, default_sites), (1, 1), "{path}");
        let key: String = db
            .query_row(
                "SELECT key FROM customer_keys WHERE organization_id = ?1 AND revoked_at IS NULL",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        // The key works on the enforcement interface.
        let events = format!("/1.0/events?customerKey={key}");
        let r = s.post_json(&events, &event("listed.example")).await;
        assert_eq!(r.status, 202, "{}", r.text());
        // The customer id is usable as an organization id by the parent's credential, and the
        // built-in roles are visible to the new organization.
        let r = s
            .mgmt("GET", &format!("/v1/organizations/{id}/roles"), cred, None)
            .await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let labels: Vec<Value> = r
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|role| role["label"].clone())
            .collect();
        assert_eq!(
            labels,
            [
                "Full Admin",
                "Read Only",
                "Block Page Bypass",
                "Reporting Only",
                "Investigate Only",
                "Security Administrator"
            ]
        );
        let r = s
            .mgmt("GET", &format!("/v1/organizations/{id}/sites"), cred, None)
            .await;
        assert_eq!(r.json().as_array().map(Vec::len), Some(1), "{path}");
        // Deleting the customer revokes its key.
        let r = s.mgmt("DELETE", &format!("{path}/{id}"), cred, None).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let r = s.post_json(&events, &event("again.example")).await;
        assert_eq!(r.status, 403, "{path}: {}", r.text());
    }
}

#[tokio::test]
async fn deleting_a_customer_removes_its_organization_and_revokes_its_key() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    let c = s
        .mgmt(
            "POST",
            &sp_customers(&w),
            &w.sp_cred,
            Some(&customer("Doomed")),
        )
        .await
        .json();
    let id = c["customerId"].as_i64().unwrap();
    let key: String = s
        .db()
        .query_row(
            "SELECT key FROM customer_keys WHERE organization_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    let events = format!("/1.0/events?customerKey={key}");
    let batch: Vec<Value> = (0..20).map(|i| event(&format!("d{i}.example"))).collect();
    // Another customer's requests before, between and after the doomed one's.
    let (other, other_key) = s.create_org("other");
    let other_events = format!("/1.0/events?customerKey={other_key}");
    for _ in 0..2 {
        let r = s.post_json(&other_events, &event("kept.example")).await;
        assert_eq!(r.status, 202);
        assert_eq!(s.post_json(&events, &json!(batch)).await.status, 202);
    }
    // An organization credential of the customer, too.
    let (okey, osecret, stored) = parasol::demo::new_credential(None).unwrap();
    run(s
        .store()
        .create_credential(parasol::store::Scope::Organization(id), stored, 1))
    .unwrap();
    let org_cred = Cred {
        key: okey,
        secret: osecret,
    };

    let path = format!("{}/{id}", sp_customers(&w));
    let r = s.mgmt("DELETE", &path, &w.sp_cred, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut deleted = r.json();
    assert_fields(&deleted, CUSTOMER_FIELDS);
    // The deleted record is the record as it was.
    deleted["modifiedAt"] = c["modifiedAt"].clone();
    assert_eq!(deleted, c);

    assert_eq!(s.mgmt("GET", &path, &w.sp_cred, None).await.status, 404);
    assert_eq!(s.mgmt("DELETE", &path, &w.sp_cred, None).await.status, 404);
    // The customer key is dead.
    let r = s.post_json(&events, &event("again.example")).await;
    assert_eq!(r.status, 403, "{}", r.text());
    let r = s.get(&format!("/1.0/domains?customerKey={key}")).await;
    assert_eq!(r.status, 403);
    // Its organization's credential is gone too.
    let r = s
        .mgmt(
            "GET",
            &format!("/v1/organizations/{id}/roles"),
            &org_cred,
            None,
        )
        .await;
    assert_eq!(r.status, 401);
    // Nothing of the organization is left: its stored requests once the server's background
    // purge has deleted them (`store::purge`), the rest at once.
    let r = s.post_json(&other_events, &event("kept.example")).await;
    assert_eq!(r.status, 202);
    let db = s.db();
    let purged = || -> bool {
        db.query_row("SELECT count(*) FROM event_purges", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap()
            == 0
    };
    let limit = std::time::Duration::from_secs(60);
    let what = "the deleted customer's requests to be purged";
    wait_within(what, limit, || purged().then_some(())).await;
    assert_eq!(
        run(s.store().event_count(other)).unwrap(),
        3,
        "another customer's requests are kept"
    );
    for table in [
        "domains",
        "event_batches",
        "sites",
        "customer_keys",
        "api_credentials",
        "domain_counts",
    ] {
        let n: i64 = db
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE organization_id = ?1"),
                [id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 0, "{table}");
    }
    // Other organizations are untouched.
    let r = s
        .mgmt(
            "GET",
            &format!("{}/{}", sp_customers(&w), w.sp_org),
            &w.sp_cred,
            None,
        )
        .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn customer_update_is_a_full_replacement() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    let mut full = customer("Before");
    full["zipCode"] = json!("12345");
    full["dealId"] = json!("D-1");
    let c = s
        .mgmt("POST", &sp_customers(&w), &w.sp_cred, Some(&full))
        .await
        .json();
    let id = c["customerId"].as_i64().unwrap();
    // Move the record's timestamps into the past so that a change is visible in whole seconds.
    s.db()
        .execute(
            "UPDATE organizations SET created_at = 1000, modified_at = 1000 WHERE id = ?1",
            [id],
        )
        .unwrap();
    let path = format!("{}/{id}", sp_customers(&w));
    let mut upd = customer("After");
    upd["packageId"] = json!(4);
    upd["adminEmails"] = json!(["new@example.com", "second@example.com"]);
    let r = s.mgmt("PUT", &path, &w.sp_cred, Some(&upd)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let u = r.json();
    assert_fields(&u, CUSTOMER_FIELDS);
    assert_eq!(u["customerId"], id);
    assert_eq!(u["customerName"], "After");
    assert_eq!(u["packageName"], "Secure Internet Gateway Advantage");
    assert_eq!(
        u["adminEmails"],
        json!(["new@example.com", "second@example.com"])
    );
    // Left out of the replacement: cleared.
    assert_eq!(u["zipCode"], Value::Null);
    assert_eq!(u["dealId"], Value::Null);
    assert_eq!(u["createdAt"], "1970-01-01T00:16:40Z");
    assert_ne!(u["modifiedAt"], "1970-01-01T00:16:40Z");
    assert_eq!(s.mgmt("GET", &path, &w.sp_cred, None).await.json(), u);

    // The same required fields as create.
    let mut partial = customer("x");
    partial.as_object_mut().unwrap().remove("city");
    let r = s.mgmt("PUT", &path, &w.sp_cred, Some(&partial)).await;
    assert_mgmt_error(&r, 400, "city");
    // Validation comes before the existence of the addressed customer.
    let missing = format!("{}/987654", sp_customers(&w));
    let r = s.mgmt("PUT", &missing, &w.sp_cred, Some(&partial)).await;
    assert_mgmt_error(&r, 400, "city");
    let r = s.mgmt("PUT", &missing, &w.sp_cred, Some(&upd)).await;
    assert_mgmt_error(&r, 404, "");
}

#[tokio::test]
async fn customer_validation_names_the_field() {
    let s = TestServer::start().await;
    let w = s.world();
    let path = sp_customers(&w);
    for field in [
        "customerName",
        "seats",
        "streetAddress",
        "city",
        "state",
        "countryCode",
        "packageId",
        "adminEmails",
    ] {
        let mut c = customer("x");
        c.as_object_mut().unwrap().remove(field);
        let r = s.mgmt("POST", &path, &w.sp_cred, Some(&c)).await;
        assert_mgmt_error(&r, 400, field);
        // null counts as absent.
        let mut c = customer("x");
        c[field] = Value::Null;
        let r = s.mgmt("POST", &path, &w.sp_cred, Some(&c)).await;
        assert_mgmt_error(&r, 400, field);
    }
    let cases: Vec<(&str, Value)> = vec![
        ("customerName", json!(12)),
        ("customerName", json!("")),
        ("customerName", json!("x".repeat(256))),
        ("seats", json!("25")),
        ("seats", json!(0)),
        ("seats", json!(-3)),
        ("seats", json!(2.5)),
        ("streetAddress", json!(["a"])),
        ("streetAddress2", json!(5)),
        ("city", json!(true)),
        ("state", json!({})),
        ("countryCode", json!("USA")),
        ("countryCode", json!("U1")),
        ("zipCode", json!(12345)),
        ("packageId", json!("3")),
        ("packageId", json!(99)),
        ("dealId", json!(7)),
        ("adminEmails", json!("it@example.com")),
        ("adminEmails", json!([])),
        ("adminEmails", json!(["not-an-address"])),
        ("adminEmails", json!(["a@b"])),
        ("adminEmails", json!([5])),
        ("ccwDealOwnerEmails", json!(["nope"])),
        ("ccwDealOwnerEmails", json!("a@b.c")),
    ];
    for (field, value) in cases {
        let mut c = customer("x");
        c[field] = value.clone();
        let r = s.mgmt("POST", &path, &w.sp_cred, Some(&c)).await;
        assert_mgmt_error(&r, 400, field);
    }
    // An unknown packageId (an existence check) is named before bad fields after it in the
    // spec's table, on create and on update.
    let existing = format!("{path}/{}", w.sp_org);
    for (method, p) in [("POST", &path), ("PUT", &existing)] {
        for (later, value) in [
            ("dealId", json!(5)),
            ("adminEmails", json!([])),
            ("ccwDealOwnerEmails", json!("x")),
        ] {
            let mut c = customer("x");
            c["packageId"] = json!(999);
            c[later] = value;
            let r = s.mgmt(method, p, &w.sp_cred, Some(&c)).await;
            assert_mgmt_error(&r, 400, "packageId");
        }
    }
    // Bodies that are not a JSON object.
    for body in [&b"[]"[..], b"\"x\"", b"{", b"", b"null"] {
        let r = s
            .request(
                "POST",
                &path,
                &[
                    ("authorization", &w.sp_cred.auth()),
                    ("content-type", "application/json"),
                ],
                Some(body.to_vec()),
            )
            .await;
        assert_mgmt_error(&r, 400, "");
    }
    // Content-Type is required (415), after credentials and scope.
    let body = serde_json::to_vec(&customer("x")).unwrap();
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let auth = w.sp_cred.auth();
        let mut h = vec![("authorization", auth.as_str())];
        if let Some(ct) = ct {
            h.push(("content-type", ct));
        }
        let r = s.request("POST", &path, &h, Some(body.clone())).await;
        assert_mgmt_error(&r, 415, "");
        let other = format!("/v1/serviceproviders/{}/customers", w.sp + 100);
        let r = s.request("POST", &other, &h, Some(body.clone())).await;
        assert_mgmt_error(&r, 404, "");
    }
    let r = s
        .request(
            "POST",
            &path,
            &[
                ("authorization", &w.sp_cred.auth()),
                ("content-type", "application/json; charset=utf-8"),
            ],
            Some(body),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Nothing was created by the refused requests.
    let list = s.mgmt("GET", &path, &w.sp_cred, None).await.json();
    assert_eq!(list.as_array().unwrap().len(), 2);
}

async fn page(s: &TestServer, w: &World, path: &str, q: &str) -> Vec<i64> {
    let r = s
        .mgmt("GET", &format!("{path}?{q}"), &w.sp_cred, None)
        .await;
    assert_eq!(r.status, 200, "{q}: {}", r.text());
    r.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["customerId"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn lists_page_by_id() {
    let s = TestServer::start().await;
    let w = s.world();
    let path = sp_customers(&w);
    let mut ids = vec![w.sp_org];
    for i in 0..6 {
        let c = s
            .mgmt("POST", &path, &w.sp_cred, Some(&customer(&format!("c{i}"))))
            .await
            .json();
        ids.push(c["customerId"].as_i64().unwrap());
    }
    assert_eq!(page(&s, &w, &path, "").await, ids);
    assert_eq!(page(&s, &w, &path, "limit=2").await, ids[0..2]);
    assert_eq!(page(&s, &w, &path, "limit=2&page=2").await, ids[2..4]);
    assert_eq!(page(&s, &w, &path, "limit=2&page=4").await, ids[6..7]);
    assert_eq!(
        page(&s, &w, &path, "limit=2&page=5").await,
        Vec::<i64>::new()
    );
    assert_eq!(page(&s, &w, &path, "limit=5&page=0").await, ids[0..5]);
    assert_eq!(page(&s, &w, &path, "page=1&limit=200").await, ids);
    assert_eq!(
        page(&s, &w, &path, "page=99999999999999").await,
        Vec::<i64>::new()
    );
    for q in [
        "limit=0",
        "limit=201",
        "limit=-1",
        "limit=abc",
        "page=-1",
        "page=1.5",
        "page=x",
    ] {
        let r = s
            .mgmt("GET", &format!("{path}?{q}"), &w.sp_cred, None)
            .await;
        assert_mgmt_error(&r, 400, q.split('=').next().unwrap());
    }
    // The default page size is 100.
    let store = s.store();
    run(async {
        for i in 0..100 {
            let f = parasol::store::OrgFields {
                name: format!("bulk{i}"),
                seats: 1,
                ..Default::default()
            };
            store
                .create_organization(parasol::store::Parent::ServiceProvider(w.sp), f, 1)
                .await
                .unwrap();
        }
    });
    assert_eq!(page(&s, &w, &path, "").await.len(), 100);
    assert_eq!(page(&s, &w, &path, "page=2").await.len(), 7);
}

#[tokio::test]
async fn msp_customers_crud_with_exact_fields() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    let path = msp_customers(&w);
    let r = s
        .mgmt(
            "POST",
            &path,
            &w.msp_cred,
            Some(&json!({"customerName": "Hooli", "seats": 40, "customerId": 5})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let c = r.json();
    assert_fields(&c, MSP_CUSTOMER_FIELDS);
    assert_eq!(c["customerName"], "Hooli");
    assert_eq!(c["seats"], 40);
    let id = c["customerId"].as_i64().unwrap();
    assert_ne!(id, 5);
    let one = format!("{path}/{id}");
    assert_eq!(s.mgmt("GET", &one, &w.msp_cred, None).await.json(), c);

    let list = s.mgmt("GET", &path, &w.msp_cred, None).await.json();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["customerId"], w.msp_org);
    assert_eq!(list[1], c);
    list.iter()
        .for_each(|c| assert_fields(c, MSP_CUSTOMER_FIELDS));
    let r = s
        .mgmt("GET", &format!("{path}?limit=1&page=2"), &w.msp_cred, None)
        .await
        .json();
    assert_eq!(r, json!([c]));

    let r = s
        .mgmt(
            "PUT",
            &one,
            &w.msp_cred,
            Some(&json!({"customerName": "Hooli XYZ", "seats": 41})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"customerId": id, "customerName": "Hooli XYZ", "seats": 41})
    );

    for (body, field) in [
        (json!({"seats": 1}), "customerName"),
        (json!({"customerName": "x"}), "seats"),
        (json!({"customerName": 1, "seats": 1}), "customerName"),
        (json!({"customerName": "x", "seats": 0}), "seats"),
        (json!({"customerName": "x", "seats": "1"}), "seats"),
    ] {
        let r = s.mgmt("POST", &path, &w.msp_cred, Some(&body)).await;
        assert_mgmt_error(&r, 400, field);
        let r = s.mgmt("PUT", &one, &w.msp_cred, Some(&body)).await;
        assert_mgmt_error(&r, 400, field);
    }
    let r = s
        .request(
            "PUT",
            &one,
            &[("authorization", &w.msp_cred.auth())],
            Some(b"{}".to_vec()),
        )
        .await;
    assert_mgmt_error(&r, 415, "");
    let r = s
        .mgmt(
            "PUT",
            &format!("{path}/{}", w.sp_org),
            &w.msp_cred,
            Some(&json!({"customerName": "x", "seats": 1})),
        )
        .await;
    assert_mgmt_error(&r, 404, "");

    let r = s.mgmt("DELETE", &one, &w.msp_cred, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"customerId": id, "customerName": "Hooli XYZ", "seats": 41})
    );
    assert_eq!(s.mgmt("GET", &one, &w.msp_cred, None).await.status, 404);
    let n: i64 = s
        .db()
        .query_row(
            "SELECT count(*) FROM organizations WHERE id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 0);
}

/// Every credential kind, asked for something outside its reach, gets the same 404 as for
/// something that does not exist.
#[tokio::test]
async fn scopes_answer_404_outside_their_reach() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    // A second provider and MSP, each with a customer.
    let other = s.world();
    let missing_like = |r: &Resp| {
        assert_mgmt_error(r, 404, "");
        r.json()["message"].clone()
    };
    let reference = missing_like(
        &s.mgmt("GET", "/v1/serviceproviders/99999", &w.sp_cred, None)
            .await,
    );
    let sp = |id: i64| format!("/v1/serviceproviders/{id}");
    let spc = |id: i64, c: i64| format!("/v1/serviceproviders/{id}/customers/{c}");
    let mspc = |id: i64, c: i64| format!("/v1/msps/{id}/customers/{c}");
    let org = |id: i64| format!("/v1/organizations/{id}/roles");

    let outside: Vec<(&Cred, String)> = vec![
        // Service-provider credential: not another provider, not MSPs, not other organizations.
        (&w.sp_cred, sp(other.sp)),
        (&w.sp_cred, format!("{}/customers", sp(other.sp))),
        (&w.sp_cred, spc(w.sp, other.sp_org)),
        (&w.sp_cred, spc(w.sp, w.msp_org)),
        (&w.sp_cred, spc(w.sp, w.lone_org)),
        (&w.sp_cred, format!("/v1/msps/{}/customers", w.msp)),
        (&w.sp_cred, mspc(w.msp, w.msp_org)),
        (&w.sp_cred, org(w.msp_org)),
        (&w.sp_cred, org(w.lone_org)),
        (&w.sp_cred, org(other.sp_org)),
        // MSP credential: its customers and their organizations only.
        (&w.msp_cred, sp(w.sp)),
        (&w.msp_cred, format!("{}/customers", sp(w.sp))),
        (&w.msp_cred, format!("/v1/msps/{}/customers", other.msp)),
        (&w.msp_cred, mspc(w.msp, other.msp_org)),
        (&w.msp_cred, mspc(w.msp, w.sp_org)),
        (&w.msp_cred, org(w.sp_org)),
        (&w.msp_cred, org(other.msp_org)),
        (&w.msp_cred, org(w.lone_org)),
        // Organization credentials: only their own organization.
        (&w.sp_org_cred, sp(w.sp)),
        (&w.sp_org_cred, format!("{}/customers", sp(w.sp))),
        (&w.sp_org_cred, spc(w.sp, w.sp_org)),
        (&w.sp_org_cred, org(w.msp_org)),
        (&w.sp_org_cred, org(w.lone_org)),
        (&w.msp_org_cred, format!("/v1/msps/{}/customers", w.msp)),
        (&w.msp_org_cred, mspc(w.msp, w.msp_org)),
        (&w.msp_org_cred, org(w.sp_org)),
        (&w.lone_org_cred, org(w.sp_org)),
        (&w.lone_org_cred, org(other.lone_org)),
        (&w.lone_org_cred, org(999_999)),
    ];
    for (cred, path) in &outside {
        let r = s.mgmt("GET", path, cred, None).await;
        assert_eq!(missing_like(&r), reference, "GET {path}");
    }
    // Writes outside the reach change nothing. Under a parent the credential does not reach,
    // they are 404 before any look at the body; under its own parent, another tenant's customer
    // is answered exactly like a customer id that does not exist, whatever the body.
    let msp_body = json!({"customerName": "x", "seats": 1});
    let writes: Vec<(&Cred, &str, String, String, Value)> = vec![
        (
            &w.msp_cred,
            "POST",
            format!("{}/customers", sp(w.sp)),
            format!("{}/customers", sp(99_999)),
            customer("x"),
        ),
        (
            &w.sp_cred,
            "PUT",
            spc(w.sp, w.msp_org),
            spc(w.sp, 99_999),
            customer("x"),
        ),
        (
            &w.sp_cred,
            "DELETE",
            spc(w.sp, w.lone_org),
            spc(w.sp, 99_999),
            customer("x"),
        ),
        (
            &w.sp_cred,
            "DELETE",
            spc(other.sp, other.sp_org),
            spc(99_999, 1),
            customer("x"),
        ),
        (
            &w.sp_org_cred,
            "DELETE",
            spc(w.sp, w.sp_org),
            spc(99_999, 1),
            customer("x"),
        ),
        (
            &w.sp_cred,
            "DELETE",
            mspc(w.msp, w.msp_org),
            mspc(99_999, 1),
            msp_body.clone(),
        ),
        (
            &w.msp_cred,
            "DELETE",
            mspc(other.msp, other.msp_org),
            mspc(99_999, 1),
            msp_body.clone(),
        ),
        (
            &w.msp_cred,
            "PUT",
            mspc(w.msp, w.sp_org),
            mspc(w.msp, 99_999),
            msp_body.clone(),
        ),
    ];
    for (cred, method, path, missing, body) in &writes {
        let auth = cred.auth();
        let bodies: [Attempt; 3] = [
            (vec![("authorization", auth.as_str())], b"not json".to_vec()),
            (
                vec![
                    ("authorization", auth.as_str()),
                    ("content-type", "application/json"),
                ],
                b"{}".to_vec(),
            ),
            (
                vec![
                    ("authorization", auth.as_str()),
                    ("content-type", "application/json"),
                ],
                serde_json::to_vec(body).unwrap(),
            ),
        ];
        for (headers, b) in bodies {
            let r = s.request(method, path, &headers, Some(b.clone())).await;
            let m = s.request(method, missing, &headers, Some(b)).await;
            assert_eq!(
                (r.status, r.json()["message"].clone()),
                (m.status, m.json()["message"].clone()),
                "{method} {path}"
            );
        }
        let r = s
            .request(
                method,
                path,
                &bodies_last(&auth),
                Some(serde_json::to_vec(body).unwrap()),
            )
            .await;
        assert_eq!(missing_like(&r), reference, "{method} {path}");
    }
    let n: i64 = s
        .db()
        .query_row("SELECT count(*) FROM organizations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 6);

    // Inside the reach, each credential kind succeeds.
    let inside: Vec<(&Cred, String)> = vec![
        (&w.sp_cred, sp(w.sp)),
        (&w.sp_cred, spc(w.sp, w.sp_org)),
        (&w.sp_cred, org(w.sp_org)),
        (&w.msp_cred, mspc(w.msp, w.msp_org)),
        (&w.msp_cred, org(w.msp_org)),
        (&w.sp_org_cred, org(w.sp_org)),
        (&w.msp_org_cred, org(w.msp_org)),
        (&w.lone_org_cred, org(w.lone_org)),
    ];
    for (cred, path) in &inside {
        let r = s.mgmt("GET", path, cred, None).await;
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    }
}

/// Request headers and body of one attempt.
type Attempt<'a> = (Vec<(&'a str, &'a str)>, Vec<u8>);

fn bodies_last(auth: &str) -> Vec<(&str, &str)> {
    vec![
        ("authorization", auth),
        ("content-type", "application/json"),
    ]
}

#[tokio::test]
async fn unknown_routes_and_methods_in_the_management_shape() {
    let s = TestServer::start().await;
    let w = s.world();
    for p in [
        "/v1",
        "/v1/nothing",
        "/v1/serviceproviders",
        "/v1/serviceproviders/abc",
        "/v1/organizations/1/nothing",
        "/v1/organizations/1/sites/x",
    ] {
        let r = s.mgmt("GET", p, &w.sp_cred, None).await;
        assert_mgmt_error(&r, 404, "");
    }
    for (m, p, allow) in [
        ("POST", sp(w.sp), "GET, HEAD"),
        ("DELETE", sp_customers(&w), "GET, HEAD, POST"),
        (
            "PATCH",
            format!("{}/1", sp_customers(&w)),
            "GET, HEAD, PUT, DELETE",
        ),
        ("POST", "/v1/organizations/1/roles".to_string(), "GET, HEAD"),
    ] {
        // Route and method come before credentials.
        let r = s.request(m, &p, &[], None).await;
        assert_mgmt_error(&r, 405, "");
        assert_eq!(r.header("allow"), Some(allow), "{m} {p}");
    }
    fn sp(id: i64) -> String {
        format!("/v1/serviceproviders/{id}")
    }
}
