//! Every rule of the enforcement interface (spec + decisions.md), over HTTPS against the real
//! server.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use parasol::store::{CustomerKey, Ingest, Ingested, PreparedBatch, PreparedEvent};
use serde_json::{json, Value};

fn events_path(key: &str) -> String {
    format!("/1.0/events?customerKey={key}")
}

fn domains_path(key: &str) -> String {
    format!("/1.0/domains?customerKey={key}")
}

async fn listed(s: &TestServer, key: &str) -> Vec<String> {
    let r = s.get(&format!("{}&limit=200", domains_path(key))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

fn event_count(s: &TestServer, org: i64) -> i64 {
    run(s.store().event_count(org)).unwrap()
}

fn assert_enf_error(r: &Resp, status: u16, code: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let b = r.json();
    assert_eq!(b["code"], code, "{b}");
    assert_eq!(b["statusCode"], status, "{b}");
    assert!(b["message"].is_string(), "{b}");
}

#[tokio::test]
async fn single_event_is_accepted_with_the_cloud_id_form() {
    let s = TestServer::start().await;
    let (org, key) = s.create_org("a");
    let r = s
        .post_json(&events_path(&key), &event("Internetbadguys.com"))
        .await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let id = r.json()["id"].as_str().unwrap().to_string();
    // 8,4,4,4-12 hex: a UUID whose first three hyphens are commas.
    let parts: Vec<&str> = id.split(',').collect();
    assert_eq!(parts.len(), 4, "{id}");
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>()[..3],
        [8, 4, 4]
    );
    let last: Vec<&str> = parts[3].split('-').collect();
    assert_eq!(
        (last.len(), last[0].len(), last[1].len()),
        (2, 4, 12),
        "{id}"
    );
    assert!(uuid::Uuid::parse_str(&id.replacen(',', "-", 3)).is_ok());
    assert_eq!(listed(&s, &key).await, ["internetbadguys.com"]);
    assert_eq!(event_count(&s, org), 1);
}

/// Batch ids are version-4 UUIDs that never repeat, also past the 256 ids that each thread's
/// pool of kernel randomness holds (`src/ids.rs`); management txIds (request ids: a random
/// prefix per process and a counter) are UUID-shaped and never repeat either.
#[tokio::test]
async fn batch_ids_are_random_and_never_repeat_nor_do_tx_ids() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    let mut seen = std::collections::HashSet::new();
    for n in 0..300 {
        let r = s
            .post_json(&events_path(&key), &event(&format!("id{n}.example")))
            .await;
        assert_eq!(r.status, 202, "{}", r.text());
        let id = r.json()["id"].as_str().unwrap().replacen(',', "-", 3);
        let u = uuid::Uuid::parse_str(&id).unwrap();
        assert_eq!(u.get_version_num(), 4, "{id}");
        assert!(seen.insert(u), "batch id {id} repeated after {n} requests");
    }
    for _ in 0..20 {
        let tx = s.get("/v1/nothing").await.json()["txId"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(seen.insert(uuid::Uuid::parse_str(&tx).unwrap()), "{tx}");
    }
}

#[tokio::test]
async fn arrays_trailing_slash_and_one_id_per_request() {
    let s = TestServer::start().await;
    let (org, key) = s.create_org("a");
    let body = json!([
        event("one.example"),
        event("two.example"),
        event("three.example")
    ]);
    let r = s
        .post_json(&format!("/1.0/events/?customerKey={key}"), &body)
        .await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert!(r.json()["id"].is_string());
    assert_eq!(r.json().as_object().unwrap().len(), 1);
    assert_eq!(
        listed(&s, &key).await,
        ["one.example", "two.example", "three.example"]
    );
    assert_eq!(event_count(&s, org), 3);
}

#[tokio::test]
async fn alternative_spellings_and_unknown_fields() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let (org, key) = s.create_org("a");
    let mut e = event("alt.example");
    let o = e.as_object_mut().unwrap();
    let device = o.remove("deviceId").unwrap();
    let url = o.remove("dstUrl").unwrap();
    o.insert("deviceID".into(), device);
    o.insert("dstURL".into(), url);
    o.insert("dstIP".into(), json!("192.0.2.10"));
    o.insert(
        "externalURL".into(),
        json!("https://intel.example/report/1"),
    );
    o.insert("vendorSpecific".into(), json!({"score": 97}));
    let r = s.post_json(&events_path(&key), &e).await;
    assert_eq!(r.status, 202, "{}", r.text());
    // Unknown fields are stored with the event.
    let body: String = s
        .db()
        .query_row(
            "SELECT events ->> '$[0]' FROM event_batches WHERE organization_id = ?1",
            [org],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        body.contains("vendorSpecific") && body.contains("deviceID"),
        "{body}"
    );

    // Both spellings with different values: 400 naming the spelling sent.
    e["deviceId"] = json!("another-device");
    let r = s.post_json(&events_path(&key), &e).await;
    assert_enf_error(&r, 400, "BadRequestError");
    assert_eq!(
        r.json()["errors"],
        json!({"deviceID": "conflicts with deviceId"})
    );
    // The same for each pair; the same value under both spellings is fine.
    let mut e = event("alt2.example");
    e["dstURL"] = e["dstUrl"].clone();
    e["dstIp"] = json!("192.0.2.10");
    e["dstIP"] = json!("192.0.2.10");
    e["externalUrl"] = json!("https://intel.example/1");
    e["externalURL"] = json!("https://intel.example/1");
    assert_eq!(s.post_json(&events_path(&key), &e).await.status, 202);
    for (alt, other, canonical) in [
        ("dstURL", json!("http://other.example/"), "dstUrl"),
        ("dstIP", json!("192.0.2.11"), "dstIp"),
        (
            "externalURL",
            json!("https://intel.example/2"),
            "externalUrl",
        ),
    ] {
        let mut bad = e.clone();
        bad[alt] = other;
        let r = s.post_json(&events_path(&key), &bad).await;
        assert_enf_error(&r, 400, "BadRequestError");
        assert_eq!(
            r.json()["errors"],
            json!({ alt: format!("conflicts with {canonical}") }),
            "{alt}"
        );
    }
    assert_eq!(
        event_count(&s, org),
        2,
        "nothing stored from a refused body"
    );
}

/// decisions.md: `null` means absent, for one spelling of a two-spelling field too: `null`
/// under one spelling beside a string under the other is accepted (openapi.yaml declares the
/// four fields nullable: tests/openapi_routes.rs), and `null` under both is "is required".
#[tokio::test]
async fn null_under_one_spelling_is_absent() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    for (n, (field, other)) in [
        ("deviceId", "deviceID"),
        ("deviceID", "deviceId"),
        ("dstUrl", "dstURL"),
        ("dstURL", "dstUrl"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut e = event(&format!("null{n}.example"));
        let o = e.as_object_mut().unwrap();
        let sent = if field.starts_with("device") {
            "deviceId"
        } else {
            "dstUrl"
        };
        let value = o.remove(sent).unwrap();
        o.insert(field.into(), Value::Null);
        o.insert(other.into(), value);
        let r = s.post_json(&events_path(&key), &e).await;
        assert_eq!(
            r.status,
            202,
            "{field}: null, {other}: a string: {}",
            r.text()
        );
        e.as_object_mut().unwrap().insert(other.into(), Value::Null);
        let r = s.post_json(&events_path(&key), &e).await;
        assert_enf_error(&r, 400, "BadRequestError");
    }
}

#[tokio::test]
async fn required_fields_types_and_fixed_values() {
    let s = TestServer::start().await;
    let (org, key) = s.create_org("a");
    let required = [
        "deviceId",
        "deviceVersion",
        "eventTime",
        "alertTime",
        "dstDomain",
        "dstUrl",
        "protocolVersion",
        "providerName",
    ];
    for field in required {
        let mut e = event("x.example");
        e.as_object_mut().unwrap().remove(field);
        let r = s.post_json(&events_path(&key), &e).await;
        assert_enf_error(&r, 400, "BadRequestError");
        let b = r.json();
        assert_eq!(
            b["message"],
            "There were one or more missing or required fields"
        );
        assert_eq!(b["errors"], json!({ field: "is required" }), "{field}");
        // Key order of the error body: code, message, errors, statusCode.
        let keys: Vec<&String> = b.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["code", "message", "errors", "statusCode"]);
        e[field] = Value::Null;
        let r = s.post_json(&events_path(&key), &e).await;
        assert_eq!(
            r.json()["errors"],
            json!({ field: "is required" }),
            "{field} null"
        );
    }
    let cases = [
        ("deviceVersion", json!(7), "must be a string"),
        ("protocolVersion", json!("1.0"), "must be 1.0a"),
        (
            "providerName",
            json!("Some Vendor"),
            "must be Security Platform",
        ),
        ("dstIp", json!("300.1.1.1"), "is invalid"),
        ("dstIp", json!("2001:db8::1"), "is invalid"),
        ("disableDstSafeguards", json!("yes"), "must be a boolean"),
        ("eventSeverity", json!(5), "must be a string"),
        ("dstUrl", json!(""), "is invalid"),
        // decisions.md: dstUrl without control characters.
        ("dstUrl", json!("http://x.example/a\u{0001}b"), "is invalid"),
        ("dstUrl", json!("http://x.example/\n"), "is invalid"),
        ("dstUrl", json!("http://x.example/\u{7f}"), "is invalid"),
    ];
    for (field, value, msg) in cases {
        let mut e = event("x.example");
        e[field] = value;
        let r = s.post_json(&events_path(&key), &e).await;
        assert_enf_error(&r, 400, "BadRequestError");
        assert_eq!(r.json()["errors"], json!({ field: msg }), "{field}");
    }
    // null for an optional field means absent.
    let mut e = event("nulls.example");
    e["dstIp"] = Value::Null;
    e["eventSeverity"] = Value::Null;
    e["disableDstSafeguards"] = Value::Null;
    assert_eq!(s.post_json(&events_path(&key), &e).await.status, 202);
    assert_eq!(event_count(&s, org), 1, "only the last event was stored");
}

#[tokio::test]
async fn timestamps() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    for ok in [
        "2026-11-22T10:00:00Z",
        "2026-11-22T10:00:00.0Z",
        "2026-11-22T10:00:00.123Z",
        "2026-11-22T12:00:00+02:00",
    ] {
        let mut e = event("t.example");
        e["eventTime"] = json!(ok);
        e["alertTime"] = json!(ok);
        assert_eq!(
            s.post_json(&events_path(&key), &e).await.status,
            202,
            "{ok}"
        );
    }
    for bad in [
        "2026-11-22",
        "2026-11-22 10:00:00Z",
        "2026-11-22T10:00:00",
        "2026-13-01T00:00:00Z",
        "1732269600",
        "2026-11-22T10:00:00+0200",
    ] {
        let mut e = event("t.example");
        e["alertTime"] = json!(bad);
        let r = s.post_json(&events_path(&key), &e).await;
        assert_eq!(
            r.json()["errors"],
            json!({"alertTime": "is invalid"}),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn domain_validation_and_normalisation() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    for (sent, stored) in [
        ("WWW.Example.COM.", "www.example.com"),
        ("bücher.test", "xn--bcher-kva.test"),
        ("b%C3%BCcher.example", "xn--bcher-kva.example"),
    ] {
        let r = s.post_json(&events_path(&key), &event(sent)).await;
        assert_eq!(r.status, 202, "{sent}: {}", r.text());
        assert!(
            listed(&s, &key).await.contains(&stored.to_string()),
            "{sent} -> {stored}"
        );
    }
    for bad in [
        "http://evil.example",
        "evil.example/path",
        "192.0.2.1",
        "localhost",
        "exa mple.com",
        "-x.example",
        "x..example",
        "example.123",
        // An ACE label that is not valid punycode: no IDN.
        "xn--zz.example",
    ] {
        let r = s.post_json(&events_path(&key), &event(bad)).await;
        assert_enf_error(&r, 400, "BadRequestError");
        assert_eq!(
            r.json()["errors"],
            json!({"dstDomain": "is invalid"}),
            "{bad}"
        );
    }
    // More than 255 characters as sent.
    let long = format!("{}example", "a.".repeat(125));
    assert_eq!(long.len(), 257);
    let r = s.post_json(&events_path(&key), &event(&long)).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["errors"],
        json!({"dstDomain": "must be at most 255 characters"})
    );
    // 255 characters as sent, but the name is longer than DNS allows (253).
    let n255 = format!("{}aaaa.ex", "a.".repeat(124));
    assert_eq!(n255.len(), 255);
    assert_eq!(
        s.post_json(&events_path(&key), &event(&n255)).await.json()["errors"],
        json!({"dstDomain": "is invalid"})
    );
    let n253 = format!("{}aa.ex", "a.".repeat(124));
    assert_eq!(
        s.post_json(&events_path(&key), &event(&n253)).await.status,
        202
    );
}

#[tokio::test]
async fn batches_are_all_or_nothing_with_per_element_errors() {
    let s = TestServer::start().await;
    let (org, key) = s.create_org("a");
    let mut bad = event("bad one");
    bad.as_object_mut().unwrap().remove("deviceVersion");
    let body = json!([
        event("ok1.example"),
        event("ok2.example"),
        event("ok3.example"),
        bad,
        "not an object"
    ]);
    let r = s.post_json(&events_path(&key), &body).await;
    assert_enf_error(&r, 400, "BadRequestError");
    assert_eq!(
        r.json()["errors"],
        json!({"[3].deviceVersion": "is required", "[3].dstDomain": "is invalid", "[4]": "must be an object"})
    );
    assert!(
        listed(&s, &key).await.is_empty(),
        "nothing stored from a refused batch"
    );
    assert_eq!(event_count(&s, org), 0);
}

/// Large batches are validated and written off the request threads (at a lower priority): the
/// same answers and the same all-or-nothing rule as small ones.
#[tokio::test]
async fn large_batches_are_all_or_nothing_too() {
    let s = TestServer::start().await;
    let (org, key) = s.create_org("a");
    let mut batch: Vec<Value> = (0..400)
        .map(|i| event(&format!("big{i}.example")))
        .collect();
    batch.push(event("not a domain"));
    let r = s
        .post_json(&events_path(&key), &Value::Array(batch.clone()))
        .await;
    assert_enf_error(&r, 400, "BadRequestError");
    assert_eq!(r.json()["errors"], json!({"[400].dstDomain": "is invalid"}));
    assert_eq!(event_count(&s, org), 0);
    batch.pop();
    let r = s
        .post_json(&events_path(&key), &Value::Array(batch.clone()))
        .await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(event_count(&s, org), 400);
    let r = s
        .get(&format!("{}&page=2&limit=200", domains_path(&key)))
        .await;
    assert_eq!(r.json()["data"][199]["name"], "big399.example");
    assert!(run(s.store().revoke_customer_key(key.clone(), 1)).unwrap());
    let r = s.post_json(&events_path(&key), &Value::Array(batch)).await;
    assert_enf_error(&r, 403, "InvalidCredentials");
    assert_eq!(event_count(&s, org), 400);
}

/// decisions.md: a refused batch lists every bad element. A client with one systematic mistake
/// (here the provider name) in a batch of thousands learns of every element; an element with
/// many problems past the first thousand entries is named by its first.
#[tokio::test]
async fn a_refused_batch_names_every_bad_element() {
    let s = TestServer::start().await;
    let (org, key) = s.create_org("a");
    let n = 2500;
    let mut batch: Vec<Value> = (0..n)
        .map(|i| {
            let mut e = event(&format!("e{i}.example"));
            e["providerName"] = json!("Other Platform");
            e
        })
        .collect();
    batch.push(json!({}));
    let r = s.post_json(&events_path(&key), &Value::Array(batch)).await;
    assert_enf_error(&r, 400, "BadRequestError");
    let errors = r.json()["errors"].as_object().unwrap().clone();
    assert_eq!(errors.len(), n + 1, "one entry per bad element");
    for i in [0, 999, 1000, n - 1] {
        assert_eq!(
            errors[&format!("[{i}].providerName")],
            "must be Security Platform"
        );
    }
    assert_eq!(errors[&format!("[{n}].deviceId")], "is required");
    assert_eq!(event_count(&s, org), 0);
}

#[tokio::test]
async fn malformed_bodies() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    let ct = [("content-type", "application/json")];
    for (body, msg) in [
        (&b"[]"[..], Some("no events")),
        (b"{\"deviceId\": ", None),
        (b"\"a string\"", None),
        (b"42", None),
        (b"", None),
    ] {
        let r = s
            .request("POST", &events_path(&key), &ct, Some(body.to_vec()))
            .await;
        assert_enf_error(&r, 400, "BadRequestError");
        if let Some(m) = msg {
            assert_eq!(r.json()["message"], m);
        }
    }
}

#[tokio::test]
async fn content_type_is_required_after_credentials() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    let body = Some(serde_json::to_vec(&event("ct.example")).unwrap());
    let r = s
        .request("POST", &events_path(&key), &[], body.clone())
        .await;
    assert_enf_error(&r, 415, "UnsupportedMediaType");
    let r = s
        .request(
            "POST",
            &events_path(&key),
            &[("content-type", "text/plain")],
            body.clone(),
        )
        .await;
    assert_enf_error(&r, 415, "UnsupportedMediaType");
    let r = s
        .request(
            "POST",
            &events_path(&key),
            &[("content-type", "application/json; charset=utf-8")],
            body.clone(),
        )
        .await;
    assert_eq!(r.status, 202);
    // Credentials are checked before the content type, and before the body.
    let bad = "/1.0/events?customerKey=2b3c8f2e-8c1d-4f7e-9a0b-1c2d3e4f5a6b";
    assert_enf_error(
        &s.request("POST", bad, &[("content-type", "text/plain")], body)
            .await,
        403,
        "InvalidCredentials",
    );
    assert_enf_error(
        &s.request(
            "POST",
            bad,
            &[("content-type", "application/json")],
            Some(b"{oops".to_vec()),
        )
        .await,
        403,
        "InvalidCredentials",
    );
    // 415 comes before the body's own problems (decisions.md's order of checks).
    assert_enf_error(
        &s.request(
            "POST",
            &events_path(&key),
            &[("content-type", "text/plain")],
            Some(b"{oops".to_vec()),
        )
        .await,
        415,
        "UnsupportedMediaType",
    );
    // GET and DELETE ignore Content-Type, whether absent or of another type.
    assert_eq!(
        s.request(
            "GET",
            &domains_path(&key),
            &[("content-type", "text/plain")],
            None
        )
        .await
        .status,
        200
    );
    let id = s.get(&domains_path(&key)).await.json()["data"][0]["id"].clone();
    let by_id = format!("/1.0/domains/{id}?customerKey={key}");
    let r = s
        .request("DELETE", &by_id, &[("content-type", "text/plain")], None)
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    s.post_json(&events_path(&key), &event("ct2.example")).await;
    let r = s
        .request(
            "DELETE",
            &format!("/1.0/domains/ct2.example?customerKey={key}"),
            &[],
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(listed(&s, &key).await.is_empty());
}

#[tokio::test]
async fn customer_keys_missing_malformed_unknown_revoked() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    let (_, other) = s.create_org("b");
    let revoke = |k: &str| {
        assert!(run(s.store().revoke_customer_key(k.to_string(), 1)).unwrap());
    };
    revoke(&other);
    let candidates = [
        "/1.0/domains".to_string(),
        "/1.0/domains?customerKey=".to_string(),
        "/1.0/domains?customerKey=not-a-uuid".to_string(),
        format!("/1.0/domains?customerKey={}", key.replace('-', "")),
        "/1.0/domains?customerKey=2b3c8f2e-8c1d-4f7e-9a0b-1c2d3e4f5a6b".to_string(),
        domains_path(&other),
    ];
    let mut messages = std::collections::HashSet::new();
    for p in &candidates {
        let r = s.get(p).await;
        assert_enf_error(&r, 403, "InvalidCredentials");
        messages.insert(r.json()["message"].as_str().unwrap().to_string());
        let r = s
            .post_json(
                &p.replace("/1.0/domains", "/1.0/events"),
                &event("k.example"),
            )
            .await;
        assert_enf_error(&r, 403, "InvalidCredentials");
        let r = s.delete(&p.replace("/1.0/domains", "/1.0/domains/1")).await;
        assert_enf_error(&r, 403, "InvalidCredentials");
    }
    assert_eq!(
        messages.len(),
        1,
        "the message never tells which: {messages:?}"
    );
    // Upper-case keys are the same key.
    assert_eq!(s.get(&domains_path(&key.to_uppercase())).await.status, 200);
    // A key revoked while in use stops working at once, also for the page just served with it.
    assert_eq!(s.get(&domains_path(&key)).await.status, 200);
    revoke(&key);
    assert_enf_error(&s.get(&domains_path(&key)).await, 403, "InvalidCredentials");
    assert_eq!(
        s.post_json(&events_path(&key), &event("k.example"))
            .await
            .status,
        403
    );
}

/// Pages are served from a cache while nothing changed: every change, through the API or by
/// another process writing the database, shows in the next answer.
#[tokio::test]
async fn pages_are_fresh_after_every_change() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let (org, key) = s.create_org("a");
    let page = |p: u32| format!("{}&page={p}&limit=2", domains_path(&key));
    let names = |r: &Resp| names_with(r, "lastSeenAt");
    let only = |v: Vec<(String, i64)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert!(names(&s.get(&page(1)).await).is_empty());
    s.post_json(
        &events_path(&key),
        &json!([event("a.example"), event("b.example")]),
    )
    .await;
    let first = s.get(&page(1)).await;
    assert_eq!(only(names(&first)), ["a.example", "b.example"]);
    assert_eq!(first.json()["meta"]["next"], false);
    // The same answer again, byte for byte.
    assert_eq!(s.get(&page(1)).await.text(), first.text());
    // A third entry: page 1 now links to page 2.
    s.post_json(&events_path(&key), &event("c.example")).await;
    let r = s.get(&page(1)).await;
    assert!(r.json()["meta"]["next"].is_string(), "{}", r.text());
    assert_eq!(only(names(&s.get(&page(2)).await)), ["c.example"]);
    // Deleted through the API.
    assert_eq!(
        s.delete(&format!("/1.0/domains/a.example?customerKey={key}"))
            .await
            .status,
        204
    );
    assert_eq!(
        only(names(&s.get(&page(1)).await)),
        ["b.example", "c.example"]
    );
    assert!(names(&s.get(&page(2)).await).is_empty());
    // Changed by another process, through the database.
    s.db()
        .execute(
            "UPDATE domains SET last_seen_at = 1234 WHERE organization_id = ?1 AND name = 'b.example'",
            [org],
        )
        .unwrap();
    assert_eq!(
        names(&s.get(&page(1)).await)[0],
        ("b.example".to_string(), 1234)
    );
    // Pages of another tenant, and another page size, never answer for this one.
    let (_, other) = s.create_org("b");
    assert!(names(
        &s.get(&format!("{}&page=1&limit=2", domains_path(&other)))
            .await
    )
    .is_empty());
    let r = s
        .get(&format!("{}&page=1&limit=1", domains_path(&key)))
        .await;
    assert_eq!(only(names(&r)), ["b.example"]);
}

#[tokio::test]
async fn acceptance_checks_follow_the_reputation_files() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let files = TempDir::new();
    let rep = files.path().join("reputation.csv");
    let good = files.path().join("top.csv");
    std::fs::write(
        &rep,
        "# domain,score\nmalware.example,-1\nunknown.example,0\nsafe.example,1\nbad.safe.example,-1\n",
    )
    .unwrap();
    std::fs::write(
        &good,
        "1,popular.example\n2,cdn.example # comment\nplain-listed.example\n",
    )
    .unwrap();
    let (r2, g2) = (rep.clone(), good.clone());
    let s = TestServer::start_with(move |c| {
        c.reputation = Some(r2);
        c.known_good = Some(g2);
    })
    .await;
    let (org, key) = s.create_org("a");
    let send = |d: &str, bypass: bool| {
        let mut e = event(d);
        if bypass {
            e["disableDstSafeguards"] = json!(true);
        }
        e
    };
    let cases = [
        ("malware.example", false, true),
        ("unknown.example", false, true),
        ("never-seen.example", false, true),
        ("safe.example", false, false),
        ("www.safe.example", false, false),
        ("x.bad.safe.example", false, true),
        ("popular.example", false, false),
        ("img.cdn.example", false, false),
        ("plain-listed.example", false, false),
        ("popular.example", true, true),
        ("www.safe.example", true, true),
    ];
    for (domain, bypass, expect_listed) in cases {
        let r = s.post_json(&events_path(&key), &send(domain, bypass)).await;
        assert_eq!(r.status, 202, "a rejected domain still gets 202: {domain}");
        let on_list = listed(&s, &key).await.contains(&domain.to_string());
        assert_eq!(on_list, expect_listed, "{domain} bypass={bypass}");
    }
    assert_eq!(
        event_count(&s, org),
        cases.len() as i64,
        "every event is stored, listed or not"
    );

    // One request with all of them: its row records each event, its name and the checks'
    // verdict, in the order sent.
    let batch: Vec<Value> = cases.iter().map(|(d, b, _)| send(d, *b)).collect();
    let r = s.post_json(&events_path(&key), &json!(batch)).await;
    assert_eq!(r.status, 202, "{}", r.text());
    let (count, domains, verdicts, events): (i64, String, String, String) = s
        .db()
        .query_row(
            "SELECT event_count, domains, listed, events FROM event_batches
             WHERE organization_id = ?1 ORDER BY id DESC LIMIT 1",
            [org],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(count, cases.len() as i64);
    let names: Vec<&str> = cases.iter().map(|c| c.0).collect();
    assert_eq!(
        serde_json::from_str::<Vec<String>>(&domains).unwrap(),
        names
    );
    let expected: Vec<u8> = cases.iter().map(|c| u8::from(c.2)).collect();
    assert_eq!(
        serde_json::from_str::<Vec<u8>>(&verdicts).unwrap(),
        expected
    );
    assert_eq!(
        serde_json::from_str::<Value>(&events).unwrap(),
        json!(batch)
    );
}

#[tokio::test]
async fn one_entry_per_name_keeps_its_id() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    s.post_json(&events_path(&key), &event("repeat.example"))
        .await;
    let first = s.get(&domains_path(&key)).await.json()["data"][0].clone();
    // decisions.md: lastSeenAt is in epoch seconds (not milliseconds, not a string).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let seen = first["lastSeenAt"].as_i64().expect("an integer");
    assert!((now - 60..=now + 60).contains(&seen), "{seen} vs {now}");
    s.db()
        .execute(
            "UPDATE domains SET last_seen_at = 1000 WHERE name = 'repeat.example'",
            [],
        )
        .unwrap();
    s.post_json(
        &events_path(&key),
        &json!([event("REPEAT.example"), event("repeat.example.")]),
    )
    .await;
    let data = s.get(&domains_path(&key)).await.json()["data"].clone();
    assert_eq!(data.as_array().unwrap().len(), 1);
    assert_eq!(data[0]["id"], first["id"]);
    assert!(
        data[0]["lastSeenAt"].as_i64().unwrap() > 1000,
        "lastSeenAt refreshed"
    );
    assert!(data[0]["lastSeenAt"].as_i64().unwrap() >= first["lastSeenAt"].as_i64().unwrap());
}

#[tokio::test]
async fn paging_meta_links_and_limits() {
    let s = TestServer::start_with(|_| {}).await;
    let (org, key) = s.create_org("a");
    let batch: Vec<Value> = (0..450)
        .map(|i| event(&format!("d{i:03}.example")))
        .collect();
    assert_eq!(
        s.post_json(&events_path(&key), &Value::Array(batch))
            .await
            .status,
        202
    );

    // Default page: 200 entries, meta first, no total count member.
    let r = s.get(&domains_path(&key)).await;
    assert_eq!(r.status, 200);
    assert!(
        r.text().starts_with("{\"meta\":"),
        "meta comes first: {}",
        &r.text()[..40]
    );
    let b = r.json();
    assert_eq!(
        b["meta"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["page", "limit", "prev", "next"]
    );
    assert_eq!(b["meta"]["page"], 1);
    assert_eq!(b["meta"]["limit"], 200);
    assert_eq!(b["meta"]["prev"], false);
    let next = b["meta"]["next"].as_str().unwrap();
    assert_eq!(
        next,
        format!(
            "https://{}/1.0/domains?customerKey={key}&page=2&limit=200",
            s.addr
        )
    );
    let entry = &b["data"][0];
    assert_eq!(
        entry.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["id", "name", "lastSeenAt"]
    );
    assert!(entry["lastSeenAt"].is_i64());

    // Following next visits every entry once, in id order.
    let mut ids = Vec::new();
    let mut url = format!("{}&limit=7", domains_path(&key));
    let mut pages = 0;
    loop {
        let b = s.get(&url).await.json();
        pages += 1;
        ids.extend(
            b["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].as_i64().unwrap()),
        );
        match b["meta"]["next"].as_str() {
            Some(n) => url = n.split(&s.addr.to_string()).nth(1).unwrap().to_string(),
            None => break,
        }
        if pages > 1 {
            assert!(b["meta"]["prev"]
                .as_str()
                .unwrap()
                .contains(&format!("page={}", pages - 1)));
        }
    }
    assert_eq!(pages, 65);
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(ids, sorted);
    assert_eq!(ids.len(), 450);

    // Deleting entries keeps page arithmetic right (positions are recomputed, not offsets).
    for id in ids.iter().step_by(3) {
        assert_eq!(
            s.delete(&format!("/1.0/domains/{id}?customerKey={key}"))
                .await
                .status,
            204
        );
    }
    let third = s
        .get(&format!("{}&page=3&limit=100", domains_path(&key)))
        .await
        .json();
    let remaining: Vec<i64> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(_, id)| *id)
        .collect();
    let got: Vec<i64> = third["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(got, remaining[200..300]);
    assert_eq!(third["meta"]["next"], false);

    // A page past the end: 200, empty, next false.
    let past = s
        .get(&format!("{}&page=99&limit=200", domains_path(&key)))
        .await;
    assert_eq!(past.status, 200);
    assert_eq!(past.json()["data"], json!([]));
    assert_eq!(past.json()["meta"]["next"], false);
    assert!(past.json()["meta"]["prev"]
        .as_str()
        .unwrap()
        .contains("page=98"));

    for (q, msg) in [
        (
            "limit=201",
            "Limit must be a number less than or equal to 200",
        ),
        (
            "limit=0",
            "Limit must be a number greater than or equal to 1",
        ),
        (
            "limit=-3",
            "Limit must be a number greater than or equal to 1",
        ),
        ("limit=ten", "Limit must be a number"),
        ("limit=1.5", "Limit must be a number"),
        ("page=0", "Page must be a number greater than or equal to 1"),
        ("page=x", "Page must be a number"),
    ] {
        let r = s.get(&format!("{}&{q}", domains_path(&key))).await;
        assert_enf_error(&r, 400, "BadRequestError");
        assert_eq!(r.json()["message"], msg, "{q}");
        // Credentials come first: an unknown key with the same bad parameter is a 403.
        let unknown = domains_path("2b3c8f2e-8c1d-4f7e-9a0b-1c2d3e4f5a6b");
        let r = s.get(&format!("{unknown}&{q}")).await;
        assert_enf_error(&r, 403, "InvalidCredentials");
    }
    assert_eq!(
        s.get(&format!("{}&limit=200", domains_path(&key)))
            .await
            .status,
        200
    );
    let _ = org;
}

/// A page whose offset (`(page - 1) * limit`) passes 2^63 is past the end like any other: 200,
/// empty, no next link. It once wrapped to a negative offset, which SQLite reads as 0, and came
/// back with page 1's domains and a `next` link to a page number the server refuses.
#[tokio::test]
async fn a_page_whose_offset_passes_two_to_the_63_is_past_the_end() {
    let s = TestServer::start_with(|_| {}).await;
    let (_, key) = s.create_org("a");
    let batch: Vec<Value> = (0..5).map(|i| event(&format!("d{i}.example"))).collect();
    assert_eq!(
        s.post_json(&events_path(&key), &Value::Array(batch))
            .await
            .status,
        202
    );
    for (page, limit) in [
        ("46116860184273881", 200),
        ("9223372036854775807", 2),
        ("9223372036854775807", 1),
        ("4611686018427387905", 2),
    ] {
        let r = s
            .get(&format!("{}&page={page}&limit={limit}", domains_path(&key)))
            .await;
        assert_eq!(r.status, 200, "page {page}, limit {limit}");
        let b = r.json();
        assert_eq!(b["data"], json!([]), "page {page}, limit {limit}");
        assert_eq!(b["meta"]["next"], false, "page {page}, limit {limit}");
        assert_eq!(b["meta"]["page"].to_string(), page);
        assert_eq!(b["meta"]["limit"], limit);
    }
    // One past the largest page number is refused, as before.
    let r = s
        .get(&format!("{}&page=9223372036854775808", domains_path(&key)))
        .await;
    assert_enf_error(&r, 400, "BadRequestError");
}

/// decisions.md: without `--public-url`, links are built from the request's Host and the
/// listener's scheme; a Host that is not a plausible host[:port] is not echoed.
#[tokio::test]
async fn links_use_the_request_host_and_the_listener_scheme() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    for d in ["h1.example", "h2.example"] {
        s.post_json(&events_path(&key), &event(d)).await;
    }
    let path = format!("{}&limit=1", domains_path(&key));
    let with_host = |host: &'static str| {
        let (s, path) = (&s, path.clone());
        async move {
            let r = s.request("GET", &path, &[("host", host)], None).await;
            assert_eq!(r.status, 200, "{}", r.text());
            r.json()["meta"]["next"].clone()
        }
    };
    assert_eq!(
        with_host("parasol.lab:8443").await,
        format!("https://parasol.lab:8443/1.0/domains?customerKey={key}&page=2&limit=1")
    );
    // A Host that is not a host name is refused (decisions.md), never echoed into a link.
    let r = s
        .request("GET", &path, &[("host", "evil.example/x?y=")], None)
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["code"], "BadRequestError");
}

#[tokio::test]
async fn links_use_public_url_when_set() {
    let s =
        TestServer::start_with(|c| c.public_url = Some("https://parasol.lab.example:9443/".into()))
            .await;
    let (_, key) = s.create_org("a");
    let batch: Vec<Value> = (0..3).map(|i| event(&format!("p{i}.example"))).collect();
    s.post_json(&events_path(&key), &Value::Array(batch)).await;
    let b = s
        .get(&format!("{}&page=2&limit=1", domains_path(&key)))
        .await
        .json();
    assert_eq!(
        b["meta"]["next"],
        format!("https://parasol.lab.example:9443/1.0/domains?customerKey={key}&page=3&limit=1")
    );
    assert_eq!(
        b["meta"]["prev"],
        format!("https://parasol.lab.example:9443/1.0/domains?customerKey={key}&page=1&limit=1")
    );
}

/// Each entry of a page of the list as its name and one integer field.
fn names_with(r: &Resp, field: &str) -> Vec<(String, i64)> {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e[field].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The list as (name, id) pairs.
async fn entries(s: &TestServer, key: &str) -> Vec<(String, i64)> {
    names_with(
        &s.get(&format!("{}&limit=200", domains_path(key))).await,
        "id",
    )
}

/// The writer remembers keys, list positions and names between event writes: every change made
/// since, through the API or by another connection to the database (as the command line does),
/// shows in the next write.
#[tokio::test]
async fn event_writes_see_every_change_made_since_the_last_one() {
    let s = TestServer::start().await;
    let (org, key) = s.create_org("a");
    let post = |name: &'static str| {
        let path = events_path(&key);
        let s = &s;
        async move { s.post_json(&path, &event(name)).await.status }
    };
    assert_eq!(post("a.example").await, 202);
    assert_eq!(post("a.example").await, 202);
    let first = entries(&s, &key).await;
    assert_eq!(first.len(), 1);

    // Deleted through the API, then sent again: listed again, under a new id.
    let r = s
        .delete(&format!("/1.0/domains/a.example?customerKey={key}"))
        .await;
    assert_eq!(r.status, 204);
    assert_eq!(post("a.example").await, 202);
    let again = entries(&s, &key).await;
    assert_eq!(again.len(), 1, "{again:?}");
    assert!(again[0].1 > first[0].1);

    // Deleted by another process (a tool's store beside the server's): the same.
    let other_process = s.store();
    assert!(run(other_process.delete_domain_by_name(org, "a.example".into())).unwrap());
    assert_eq!(post("a.example").await, 202);
    let third = entries(&s, &key).await;
    assert_eq!(third.len(), 1, "{third:?}");
    assert!(third[0].1 > again[0].1);

    // Names added by another connection take list positions: the server's next new name takes
    // the one after them (a stale position would break the list's unique positions: a 5xx).
    let other = PreparedBatch::new(
        vec![PreparedEvent {
            domain: "other.example".into(),
            listed: true,
        }],
        "[{}]".into(),
    );
    let stored = run(other_process.ingest(Ingest {
        key: CustomerKey::parse(&key).unwrap(),
        batch_id: uuid::Uuid::new_v4(),
        now: 1,
        batch: other,
        new_domain_budget: None,
    }))
    .unwrap();
    assert_eq!(stored, Ingested::Stored { added: 1 });
    assert_eq!(post("b.example").await, 202);
    let names: Vec<String> = entries(&s, &key).await.into_iter().map(|e| e.0).collect();
    assert_eq!(names, ["a.example", "other.example", "b.example"]);

    // A key revoked by another connection stops working for events at once.
    assert!(run(other_process.revoke_customer_key(key.clone(), 1)).unwrap());
    assert_eq!(post("c.example").await, 403);
    assert_eq!(
        event_count(&s, org),
        6,
        "nothing stored after the revocation"
    );
}

#[tokio::test]
async fn deletes_by_id_by_path_name_and_by_where_name() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    let names = [
        "byid.example",
        "bypath.example",
        "www.bywhere.example",
        "encoded.example",
        "xn--bcher-kva.test",
    ];
    let batch: Vec<Value> = names.iter().map(|n| event(n)).collect();
    s.post_json(&events_path(&key), &Value::Array(batch)).await;
    let id = s.get(&domains_path(&key)).await.json()["data"][0]["id"]
        .as_i64()
        .unwrap();

    let r = s
        .delete(&format!("/1.0/domains/{id}?customerKey={key}"))
        .await;
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());
    let again = s
        .delete(&format!("/1.0/domains/{id}?customerKey={key}"))
        .await;
    assert_eq!(again.status, 404);
    assert_eq!(
        again.json(),
        json!({"code": "NotFoundError", "message": "Domain not in domain list", "statusCode": 404})
    );

    assert_eq!(
        s.delete(&format!("/1.0/domains/BYPATH.example?customerKey={key}"))
            .await
            .status,
        204
    );
    assert_eq!(
        s.delete(&format!(
            "/1.0/domains?customerKey={key}&where[name]=www.bywhere.example"
        ))
        .await
        .status,
        204
    );
    assert_eq!(
        s.delete(&format!(
            "/1.0/domains?customerKey={key}&where%5Bname%5D=encoded.example"
        ))
        .await
        .status,
        204
    );
    // A percent-encoded IDN is decoded, then normalised like dstDomain.
    assert_eq!(
        s.delete(&format!(
            "/1.0/domains?customerKey={key}&where%5Bname%5D=b%C3%BCcher.test"
        ))
        .await
        .status,
        204
    );
    assert!(listed(&s, &key).await.is_empty());

    let missing = s.delete(&format!("/1.0/domains?customerKey={key}")).await;
    assert_enf_error(&missing, 400, "BadRequestError");
    for p in [
        format!("/1.0/domains?customerKey={key}&where[name]=not%20a%20domain"),
        format!("/1.0/domains?customerKey={key}&where[name]=never.example"),
        format!("/1.0/domains/never.example?customerKey={key}"),
        format!("/1.0/domains/999999999999999999999?customerKey={key}"),
    ] {
        let r = s.delete(&p).await;
        assert_enf_error(&r, 404, "NotFoundError");
        assert_eq!(r.json()["message"], "Domain not in domain list");
    }
}

#[tokio::test]
async fn tenants_never_see_or_delete_each_others_entries() {
    let s = TestServer::start().await;
    let (_, a) = s.create_org("a");
    let (_, b) = s.create_org("b");
    s.post_json(&events_path(&a), &event("only-a.example"))
        .await;
    s.post_json(&events_path(&b), &event("only-b.example"))
        .await;
    let a_id = s.get(&domains_path(&a)).await.json()["data"][0]["id"]
        .as_i64()
        .unwrap();
    assert_eq!(listed(&s, &a).await, ["only-a.example"]);
    assert_eq!(listed(&s, &b).await, ["only-b.example"]);
    assert_eq!(
        s.delete(&format!("/1.0/domains/{a_id}?customerKey={b}"))
            .await
            .status,
        404
    );
    assert_eq!(
        s.delete(&format!("/1.0/domains/only-a.example?customerKey={b}"))
            .await
            .status,
        404
    );
    assert_eq!(
        s.delete(&format!(
            "/1.0/domains?customerKey={b}&where[name]=only-a.example"
        ))
        .await
        .status,
        404
    );
    assert_eq!(listed(&s, &a).await, ["only-a.example"], "still there");
    // The same name in both lists is two entries.
    s.post_json(&events_path(&b), &event("only-a.example"))
        .await;
    assert_eq!(
        s.delete(&format!("/1.0/domains/only-a.example?customerKey={b}"))
            .await
            .status,
        204
    );
    assert_eq!(listed(&s, &a).await, ["only-a.example"]);
}

/// Events of two tenants arriving at once are committed in shared groups by the one writer; each
/// list still gets exactly its own names, a name both send is an entry in each list, and every
/// event is stored for its own tenant.
#[tokio::test]
async fn concurrent_tenants_share_commits_but_never_entries() {
    let s = TestServer::start().await;
    let (org_a, a) = s.create_org("a");
    let (org_b, b) = s.create_org("b");
    const TASKS: usize = 16;
    const EACH: usize = 12;
    // Task `t` sends for tenant a when even, b when odd; every third of its events names a
    // domain that the other tenant's task `t ^ 1` sends too.
    fn name(t: usize, n: usize) -> String {
        if n.is_multiple_of(3) {
            format!("shared-{}-{n}.example", t / 2)
        } else {
            format!("own-{t}-{n}.example")
        }
    }
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let client = s.client.clone();
        let key = if t % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            for n in 0..EACH {
                let r = client
                    .post_json(&events_path(&key), &event(&name(t, n)))
                    .await;
                assert_eq!(r.status, 202, "{}", r.text());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for (t0, org, key) in [(0, org_a, &a), (1, org_b, &b)] {
        let mut want = std::collections::BTreeSet::new();
        for t in (t0..TASKS).step_by(2) {
            for n in 0..EACH {
                want.insert(name(t, n));
            }
        }
        let (mut names, mut ids) = (Vec::new(), std::collections::BTreeSet::new());
        for page in 1.. {
            let r = s
                .get(&format!("{}&limit=25&page={page}", domains_path(key)))
                .await;
            assert_eq!(r.status, 200, "{}", r.text());
            let b = r.json();
            for e in b["data"].as_array().unwrap() {
                names.push(e["name"].as_str().unwrap().to_string());
                assert!(ids.insert(e["id"].as_i64().unwrap()), "{e}");
            }
            if b["meta"]["next"] == false {
                break;
            }
        }
        let got: std::collections::BTreeSet<String> = names.iter().cloned().collect();
        assert_eq!(got.len(), names.len(), "each name once: {names:?}");
        assert_eq!(got, want);
        assert_eq!(event_count(&s, org), (TASKS / 2 * EACH) as i64);
    }
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    for p in [
        "/",
        "/1.0/nothing",
        "/2.0/events",
        "/favicon.ico",
        "/1.0/domains/1/x",
    ] {
        let r = s.get(p).await;
        assert_enf_error(&r, 404, "NotFoundError");
    }
    for (m, p, allow) in [
        ("GET", events_path(&key), "POST"),
        ("PUT", domains_path(&key), "GET, HEAD, DELETE"),
        ("POST", domains_path(&key), "GET, HEAD, DELETE"),
        ("GET", format!("/1.0/domains/1?customerKey={key}"), "DELETE"),
    ] {
        let r = s.request(m, &p, &[], None).await;
        assert_enf_error(&r, 405, "MethodNotAllowed");
        assert_eq!(r.header("allow"), Some(allow));
    }
    // Route and method come before credentials.
    assert_eq!(s.get("/1.0/events").await.status, 405);
    // The management prefix answers in its own shape.
    let r = s.get("/v1/nothing").await;
    assert_eq!(r.status, 404);
    assert!(r.json()["txId"].is_string());
}

#[tokio::test]
async fn cloud_limits_answer_429_with_retry_after() {
    let s = TestServer::start_with(|c| c.cloud_limits = true).await;
    // 5 requests per second per key.
    let (_, a) = s.create_org("a");
    for _ in 0..5 {
        assert_eq!(s.get(&domains_path(&a)).await.status, 200);
    }
    let r = s.get(&domains_path(&a)).await;
    assert_enf_error(&r, 429, "TooManyRequests");
    assert_eq!(r.header("retry-after"), Some("1"));
    // Another key has its own budget; a bad key is still 403, not 429.
    let (_, b) = s.create_org("b");
    assert_eq!(s.get(&domains_path(&b)).await.status, 200);
    assert_eq!(
        s.get("/1.0/domains?customerKey=2b3c8f2e-8c1d-4f7e-9a0b-1c2d3e4f5a6b")
            .await
            .status,
        403
    );

    // 200 new domains per minute: a request that would add more is refused whole.
    let (org_c, c) = s.create_org("c");
    let batch = |from: usize, n: usize| {
        Value::Array(
            (from..from + n)
                .map(|i| event(&format!("n{i}.example")))
                .collect(),
        )
    };
    assert_eq!(
        s.post_json(&events_path(&c), &batch(0, 150)).await.status,
        202
    );
    let r = s.post_json(&events_path(&c), &batch(150, 60)).await;
    assert_enf_error(&r, 429, "TooManyRequests");
    assert_eq!(
        r.json()["message"],
        "Too many new domains: at most 200 a minute for a customer key"
    );
    // Until the budget holds all 60: 10 more at 200 a minute.
    assert_eq!(r.header("retry-after"), Some("3"));
    assert_eq!(
        event_count(&s, org_c),
        150,
        "nothing of the refused request was stored"
    );
    // Names already listed are not new.
    assert_eq!(
        s.post_json(&events_path(&c), &batch(0, 150)).await.status,
        202
    );
    assert_eq!(
        s.post_json(&events_path(&c), &batch(150, 50)).await.status,
        202
    );
    // The refused request's names, undone with it, were really added by this one.
    let names = listed(&s, &c).await;
    assert_eq!(names.len(), 200);
    assert!((150..200).all(|i| names.contains(&format!("n{i}.example"))));

    // More new domains than the budget ever holds: a minute's wait, and the message says why.
    let (_, e) = s.create_org("e");
    let r = s.post_json(&events_path(&e), &batch(1_000, 201)).await;
    assert_enf_error(&r, 429, "TooManyRequests");
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(
        s.post_json(&events_path(&e), &batch(1_000, 200))
            .await
            .status,
        202
    );

    // 1 MB per minute.
    let (_, d) = s.create_org("d");
    let mut big = serde_json::to_vec(&json!([event("big.example")])).unwrap();
    big.extend(std::iter::repeat_n(b' ', 600_000));
    let ct = [("content-type", "application/json")];
    assert_eq!(
        s.request("POST", &events_path(&d), &ct, Some(big.clone()))
            .await
            .status,
        202
    );
    let r = s.request("POST", &events_path(&d), &ct, Some(big)).await;
    assert_enf_error(&r, 429, "TooManyRequests");
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() > 1);
}

#[tokio::test]
async fn without_cloud_limits_there_is_no_rate_limit() {
    let s = TestServer::start().await;
    let (_, a) = s.create_org("a");
    for _ in 0..20 {
        assert_eq!(s.get(&domains_path(&a)).await.status, 200);
    }
    let batch = Value::Array((0..500).map(|i| event(&format!("m{i}.example"))).collect());
    assert_eq!(s.post_json(&events_path(&a), &batch).await.status, 202);
}

/// Events are stored exactly as sent: spacing, key order and escapes of the body are kept (an
/// object alone is kept in brackets, an array as it came).
#[tokio::test]
async fn events_are_stored_as_sent() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let (org, key) = s.create_org("a");
    let mut e = event("raw.example");
    e["vendorNote"] = json!("caf\u{e9}");
    let pretty = serde_json::to_string_pretty(&e)
        .unwrap()
        .replace('\u{e9}', "\\u00e9");
    let one = format!("  {pretty}\n");
    let many = format!("[ {pretty} ,\n{pretty}]");
    let stored = || -> String {
        s.db()
            .query_row(
                "SELECT events FROM event_batches WHERE organization_id = ?1
                 ORDER BY id DESC LIMIT 1",
                [org],
                |r| r.get(0),
            )
            .unwrap()
    };
    for (body, expected) in [
        (one.clone(), format!("[{pretty}]")),
        (many.clone(), many.clone()),
    ] {
        let r = s
            .request(
                "POST",
                &events_path(&key),
                &[("content-type", "application/json")],
                Some(body.into_bytes()),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text());
        assert_eq!(stored(), expected);
    }
}
