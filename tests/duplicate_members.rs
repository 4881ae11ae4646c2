//! A JSON object holding the same member twice, over real sockets: a 400 naming the member on
//! both interfaces (enforcement: the validation shape, keyed like the other field errors;
//! management: `<member> is duplicated`), wherever the object sits, and nothing is stored.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

/// A good event's text with `extra` members put first.
fn event_with(extra: &str, domain: &str) -> String {
    let text = event(domain).to_string();
    format!("{{{extra},{}", &text[1..])
}

async fn post_raw(s: &TestServer, key: &str, body: String) -> Resp {
    s.request(
        "POST",
        &format!("/1.0/events?customerKey={key}"),
        &[("content-type", "application/json")],
        Some(body.into_bytes()),
    )
    .await
}

fn errors(r: &Resp) -> serde_json::Value {
    assert_eq!(r.status, 400, "{}", r.text());
    let b = r.json();
    assert_fields(&b, &["code", "message", "errors", "statusCode"]);
    assert_eq!(b["code"], "BadRequestError");
    assert_eq!(
        b["message"],
        "There were one or more missing or required fields"
    );
    assert_eq!(b["statusCode"], 400);
    b["errors"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforcement_names_each_repeated_member() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("dups");
    let cases = [
        (
            event_with(r#""dstDomain":"evil.example""#, "good.example"),
            json!({"dstDomain": "is duplicated"}),
        ),
        (
            event_with(r#""vendorExtra":1,"vendorExtra":2"#, "good.example"),
            json!({"vendorExtra": "is duplicated"}),
        ),
        (
            event_with(
                r#""vendorExtra":{"hits":[{"n":1,"n":2}],"k":0,"k":0}"#,
                "good.example",
            ),
            json!({"vendorExtra.hits[0].n": "is duplicated", "vendorExtra.k": "is duplicated"}),
        ),
        (
            format!(
                "[{},{},{},{}]",
                event("a.example"),
                event("b.example"),
                event("c.example"),
                event_with(r#""dstDomain":"d.example""#, "e.example")
            ),
            json!({"[3].dstDomain": "is duplicated"}),
        ),
        (
            format!(
                "[{},{},{}]",
                event_with(r#""src":"h","src":"h""#, "a.example"),
                json!({"dstDomain": "b.example"}),
                event("c.example")
            ),
            json!({
                "[0].src": "is duplicated",
                "[1].deviceId": "is required",
                "[1].deviceVersion": "is required",
                "[1].eventTime": "is required",
                "[1].alertTime": "is required",
                "[1].dstUrl": "is required",
                "[1].protocolVersion": "is required",
                "[1].providerName": "is required",
            }),
        ),
    ];
    for (body, want) in cases {
        let r = post_raw(&s, &key, body.clone()).await;
        assert_eq!(errors(&r), want, "{body}");
    }
    // Nothing of any refused body was stored.
    let r = s.get(&format!("/1.0/domains?customerKey={key}")).await;
    assert_eq!(r.json()["data"], json!([]));
    // The same events without the repeat are taken.
    let r = post_raw(
        &s,
        &key,
        event_with(r#""vendorExtra":{"k":0}"#, "good.example"),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_names_the_repeated_member() {
    let s = TestServer::start().await;
    let w = s.world();
    let sites = format!("/v1/organizations/{}/sites", w.lone_org);
    let post = |path: String, body: &'static str| {
        let s = &s;
        let auth = w.lone_org_cred.auth();
        async move {
            s.request(
                "POST",
                &path,
                &[
                    ("authorization", &auth),
                    ("content-type", "application/json"),
                ],
                Some(body.as_bytes().to_vec()),
            )
            .await
        }
    };
    let r = post(sites.clone(), r#"{"name":"a","name":"b"}"#).await;
    assert_mgmt_error(&r, 400, "name is duplicated");
    let r = post(sites.clone(), r#"{"name":"a","extra":{"x":1,"x":1}}"#).await;
    assert_mgmt_error(&r, 400, "extra.x is duplicated");
    let r = post(sites.clone(), r#"{"name":"a","\u006eame":"a"}"#).await;
    assert_mgmt_error(&r, 400, "name is duplicated");
    // A customer's PUT, by the service provider.
    let path = format!("/v1/serviceproviders/{}/customers/{}", w.sp, w.sp_org);
    let r = s
        .request(
            "PUT",
            &path,
            &[
                ("authorization", &w.sp_cred.auth()),
                ("content-type", "application/json"),
            ],
            Some(br#"{"customerName":"A","seats":1,"seats":2}"#.to_vec()),
        )
        .await;
    assert_mgmt_error(&r, 400, "seats is duplicated");
    // Nothing was created; the same body without the repeat is.
    let list = s.mgmt("GET", &sites, &w.lone_org_cred, None).await;
    assert!(list
        .json()
        .as_array()
        .unwrap()
        .iter()
        .all(|v| v["name"] != "a"));
    let r = post(sites.clone(), r#"{"name":"a","extra":{"x":1}}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
}
