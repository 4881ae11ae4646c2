//! The request's Host header over real sockets: a malformed one is a 400 in the interface's own
//! error shape, decided after the route (a 404 or 405 stays what it is) and before credentials;
//! a valid one makes well-formed `meta.next`/`meta.prev` links; a request without one (HTTP/1.0)
//! is served with links on the listener's address.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

/// Malformed Host values that a client library can send (visible ASCII).
const MALFORMED: &[&str] = &[
    "x:99999999999",
    "x:",
    "x:abc",
    "x:0",
    "x:65536",
    "[::1",
    "::1]",
    "[::1]x",
    "::1",
    "a b",
    "a_b.example",
    "a/b",
    "user@a.example",
    "a..b",
    "-a.example",
    "10.1.2",
    "",
];

fn assert_enf_bad_host(r: &Resp, host: &str) {
    assert_eq!(r.status, 400, "{host:?}: {}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let b = r.json();
    assert_fields(&b, &["code", "message", "statusCode"]);
    assert_eq!(b["code"], "BadRequestError", "{host:?}");
    assert_eq!(b["statusCode"], 400);
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid Host header"),
        "{b}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_host_is_a_400_on_both_interfaces() {
    let s = TestServer::start().await;
    let w = s.world();
    let (_, key) = s.create_org("hosts");
    let auth = w.lone_org_cred.auth();
    for host in MALFORMED {
        let h = [("host", *host)];
        // Enforcement: a read, a write with a body, and without any credentials.
        let r = s
            .request("GET", &format!("/1.0/domains?customerKey={key}"), &h, None)
            .await;
        assert_enf_bad_host(&r, host);
        let r = s
            .request(
                "POST",
                &format!("/1.0/events?customerKey={key}"),
                &[("host", host), ("content-type", "application/json")],
                Some(event("a.example").to_string().into_bytes()),
            )
            .await;
        assert_enf_bad_host(&r, host);
        assert_eq!(r.header("connection"), Some("close"));
        let r = s.request("GET", "/1.0/domains", &h, None).await;
        assert_enf_bad_host(&r, host);
        // Management: with good credentials, and with none.
        let path = format!("/v1/organizations/{}/sites", w.lone_org);
        let r = s
            .request(
                "GET",
                &path,
                &[("host", host), ("authorization", &auth)],
                None,
            )
            .await;
        assert_mgmt_error(&r, 400, "Invalid Host header");
        let r = s
            .request(
                "POST",
                &path,
                &[
                    ("host", host),
                    ("authorization", &auth),
                    ("content-type", "application/json"),
                ],
                Some(br#"{"name":"x"}"#.to_vec()),
            )
            .await;
        assert_mgmt_error(&r, 400, "Invalid Host header");
        let r = s.request("GET", &path, &h, None).await;
        assert_mgmt_error(&r, 400, "Invalid Host header");
        // The route is checked first.
        let r = s.request("GET", "/nowhere", &h, None).await;
        assert_eq!(r.status, 404, "{host:?}");
        let r = s.request("PATCH", "/1.0/events", &h, None).await;
        assert_eq!(r.status, 405, "{host:?}");
        let r = s.request("GET", "/v1/nowhere", &h, None).await;
        assert_eq!(r.status, 404, "{host:?}");
    }
    // Nothing was stored by the refused writes.
    let r = s.get(&format!("/1.0/domains?customerKey={key}")).await;
    assert_eq!(r.json()["data"], json!([]));
    let sites = s
        .mgmt(
            "GET",
            &format!("/v1/organizations/{}/sites", w.lone_org),
            &w.lone_org_cred,
            None,
        )
        .await;
    assert!(sites
        .json()
        .as_array()
        .unwrap()
        .iter()
        .all(|v| v["name"] != "x"));
}

/// Host values that no client library sends: raw bytes on the wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_malformed_hosts_are_refused_too() {
    use tokio::io::AsyncWriteExt;
    let s = TestServer::start().await;
    let (_, key) = s.create_org("raw");
    for host in [
        &b"b\xc3\xbccher.test"[..],
        b"a\xffb",
        b"[::1]:99999",
        b"[fe80::1%eth0]",
    ] {
        let mut raw = format!("GET /1.0/domains?customerKey={key} HTTP/1.1\r\nhost: ").into_bytes();
        raw.extend_from_slice(host);
        raw.extend_from_slice(b"\r\nconnection: close\r\n\r\n");
        let mut io = s.connect().await.unwrap();
        io.write_all(&raw).await.unwrap();
        let answer = read_response(&mut io).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{host:?}: {answer}");
        assert!(answer.contains("\"code\":\"BadRequestError\""), "{answer}");
        assert!(answer.contains("Invalid Host header"), "{answer}");
    }
    // Two Host headers.
    let mut io = s.connect().await.unwrap();
    io.write_all(
        format!(
            "GET /1.0/domains?customerKey={key} HTTP/1.1\r\nhost: a.example\r\nhost: b.example\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = read_response(&mut io).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("sent more than once"), "{answer}");
}

/// `meta.next`/`meta.prev` as a URL: scheme, authority and the rest.
fn link_parts(link: &serde_json::Value) -> (String, String, String, String) {
    let text = link
        .as_str()
        .unwrap_or_else(|| panic!("not a link: {link}"));
    let uri: hyper::Uri = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
    (
        uri.scheme_str().unwrap().to_string(),
        uri.authority().unwrap().as_str().to_string(),
        uri.path().to_string(),
        uri.query().unwrap_or("").to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_hosts_make_well_formed_links() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("links");
    let events = json!([event("a.example"), event("b.example"), event("c.example")]);
    let r = s
        .post_json(&format!("/1.0/events?customerKey={key}"), &events)
        .await;
    assert_eq!(r.status, 202, "{}", r.text());
    for host in [
        "parasol.lab",
        "parasol.lab:8443",
        "Parasol.LAB.",
        "192.0.2.1",
        "192.0.2.1:9",
        "[::1]",
        "[2001:db8::1]:65535",
        "xn--bcher-kva.test:1",
    ] {
        let r = s
            .request(
                "GET",
                &format!("/1.0/domains?customerKey={key}&page=2&limit=1"),
                &[("host", host)],
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{host}: {}", r.text());
        let meta = &r.json()["meta"];
        for (link, page) in [(&meta["next"], 3), (&meta["prev"], 1)] {
            let (scheme, authority, path, query) = link_parts(link);
            assert_eq!(scheme, "https");
            assert_eq!(authority, host);
            assert_eq!(path, "/1.0/domains");
            assert_eq!(
                query,
                format!("customerKey={key}&page={page}&limit=1"),
                "{host}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_host_links_to_the_listener() {
    use tokio::io::AsyncWriteExt;
    let s = TestServer::start().await;
    let (_, key) = s.create_org("http10");
    let events = json!([event("a.example"), event("b.example")]);
    let r = s
        .post_json(&format!("/1.0/events?customerKey={key}"), &events)
        .await;
    assert_eq!(r.status, 202);
    let mut io = s.connect().await.unwrap();
    io.write_all(format!("GET /1.0/domains?customerKey={key}&limit=1 HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let answer = read_response(&mut io).await;
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    let body: serde_json::Value =
        serde_json::from_str(&answer[answer.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    let (_, authority, path, _) = link_parts(&body["meta"]["next"]);
    assert_eq!(authority, s.client.addr.to_string());
    assert_eq!(path, "/1.0/domains");
}
