//! Hostile and random input on the wire: every request gets an answer (a 4xx for what is wrong
//! with it, never a 5xx), no handler panics, the server keeps serving, and the database stays
//! whole. A panic hook counts panics anywhere in this test binary's process, the in-process
//! servers' tasks and threads included.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

/// xorshift64*: a fixed seed gives the same requests on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T: ?Sized>(&mut self, from: &[&'a T]) -> &'a T {
        from[self.below(from.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// Writes `raw` on a fresh connection and reads until the answer is complete, the server closes
/// the connection, or `WAIT` passes (a failure: the server must not leave a client hanging).
async fn raw_exchange(s: &TestServer, raw: &[u8]) -> String {
    raw_exchange_on(&mut s.connect().await.unwrap(), raw).await
}

/// `raw_exchange` on a connection of the caller's.
async fn raw_exchange_on(io: &mut Box<dyn Io>, raw: &[u8]) -> String {
    // A write may fail once the server has answered and closed: what it said is still read.
    let _ = io.write_all(raw).await;
    let _ = io.flush().await;
    read_response(io).await
}

/// Requests that are broken as HTTP, or as URLs, headers and bodies of this API.
fn malformed(key: &str, auth: &str) -> Vec<Vec<u8>> {
    let post = |target: &str, extra: &str, body: &[u8]| {
        let mut r = format!(
            "POST {target} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    };
    let events = format!("/1.0/events?customerKey={key}");
    vec![
        b"GARBAGE\r\n\r\n".to_vec(),
        b"\x16\x03\x01\x00\x05hello\r\n\r\n".to_vec(),
        b"GET /1.0/domains HTTP/9.9\r\nhost: x\r\n\r\n".to_vec(),
        b"GET /1.0/domains HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n".to_vec(),
        b"GET /1.0/domains HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab"
            .to_vec(),
        b"GET /1.0/domains HTTP/1.1\r\nhost: x\r\nbad header\r\n\r\n".to_vec(),
        b"GET /1.0/domains HTTP/1.1\r\nhost: x\r\nx-bin: \xff\xfe\x01\r\n\r\n".to_vec(),
        b"GET /1.0/domains?customerKey=%ff%fe%00 HTTP/1.1\r\nhost: x\r\n\r\n".to_vec(),
        format!("GET /1.0/domains?customerKey={key}&page=99999999999999999999999 HTTP/1.1\r\nhost: x\r\n\r\n").into_bytes(),
        [
            format!("GET /1.0/domains?customerKey={key}&limit=-1&page=0 HTTP/1.1\r\nhost: ").as_bytes(),
            b"\xff\r\n\r\n",
        ]
        .concat(),
        format!("DELETE /1.0/domains/%00%2f..%2f?customerKey={key} HTTP/1.1\r\nhost: x\r\n\r\n").into_bytes(),
        format!("DELETE /1.0/domains?customerKey={key}&where[name HTTP/1.1\r\nhost: x\r\n\r\n").into_bytes(),
        format!("DELETE /1.0/domains?customerKey={key}&where%5Bname%5D=%ff HTTP/1.1\r\nhost: x\r\n\r\n").into_bytes(),
        format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "a/".repeat(20_000)).into_bytes(),
        post(&events, "", b"\xff\xfe{}"),
        post(&events, "", &[b'['; 100_000]),
        post(&events, "", format!("[{}]", "{},".repeat(30_000) + "{}").as_bytes()),
        post(&events, "", br#"{"dstDomain": "a.example", "dstDomain": "b.example"}"#),
        post(&events, "", br#"{"eventTime": 1e400, "dstDomain": "\ud800.example"}"#),
        post(&events, "transfer-encoding: chunked\r\n", b"zz\r\n{}\r\n0\r\n\r\n"),
        post(
            "/v1/organizations/1/sites",
            &format!("authorization: {auth}\r\n"),
            b"{\"name\": \"\\u0000\"}",
        ),
        post(
            "/v1/organizations/1/users",
            &format!("authorization: {auth}\r\n"),
            br#"{"firstname": [], "lastname": {}, "email": 5, "password": null, "roleId": 1e30, "timezone": "../../etc/passwd"}"#,
        ),
        post(
            "/v1/organizations/99999999999999999999/sites",
            "authorization: Basic !!!!\r\n",
            b"{}",
        ),
        post(
            "/v1/organizations/1/sites",
            "authorization: Basic /w==\r\n",
            b"{}",
        ),
    ]
}

/// A random request: method, target, headers and body, built from the API's own vocabulary and
/// broken at random.
struct Random {
    method: &'static str,
    target: String,
    headers: Vec<(&'static str, String)>,
    body: Option<Vec<u8>>,
}

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 2 { 8 } else { 10 }) {
        0 => Value::Null,
        1 => json!(rng.chance(50)),
        2 => json!(rng.next() as i64),
        3 => json!(-1),
        4 => json!(1.5e300),
        5 => json!(rng.pick(&[
            "",
            " ",
            "a.example",
            "xn--bcher-kva.test",
            "bücher.test",
            "2026-11-22T10:00:00Z",
            "2026-13-45T99:99:99Z",
            "192.0.2.1",
            "::1",
            "\u{0}",
            "\u{202e}rtl",
            "UTC",
            "Europe/Berlin",
            "a@b.example",
            "1.0a",
            "Security Platform",
        ])),
        6 => json!("x".repeat(rng.below(2) * 70_000 + rng.below(300))),
        7 => json!(rng.below(10)),
        8 => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut m = serde_json::Map::new();
            for _ in 0..rng.below(4) {
                m.insert(rng.pick(FIELDS).to_string(), random_value(rng, depth + 1));
            }
            Value::Object(m)
        }
    }
}

const FIELDS: &[&str] = &[
    "deviceId",
    "deviceVersion",
    "eventTime",
    "alertTime",
    "dstDomain",
    "dstUrl",
    "dstIp",
    "protocolVersion",
    "providerName",
    "disableDstSafeguards",
    "eventType",
    "eventSeverity",
    "eventDescription",
    "fileName",
    "fileHash",
    "externalURL",
    "src",
    "name",
    "siteId",
    "ipAddress",
    "prefixLength",
    "firstname",
    "lastname",
    "email",
    "password",
    "roleId",
    "timezone",
    "customerName",
    "seats",
    "packageId",
    "adminEmails",
    "countryCode",
];

fn random_body(rng: &mut Rng) -> Vec<u8> {
    let mut base = event("random.example");
    match rng.below(6) {
        0 => (0..rng.below(300)).map(|_| rng.next() as u8).collect(),
        1 => serde_json::to_vec(&random_value(rng, 0)).unwrap(),
        _ => {
            // A valid event with a few fields removed, replaced or added.
            let obj = base.as_object_mut().unwrap();
            for _ in 0..rng.below(4) {
                let field = rng.pick(FIELDS).to_string();
                if rng.chance(30) {
                    obj.remove(&field);
                } else {
                    obj.insert(field, random_value(rng, 1));
                }
            }
            let body = if rng.chance(40) {
                json!((0..rng.below(5)).map(|_| base.clone()).collect::<Vec<_>>())
            } else {
                base
            };
            let mut bytes = serde_json::to_vec(&body).unwrap();
            if rng.chance(10) {
                let cut = rng.below(bytes.len() + 1);
                bytes.truncate(cut);
            }
            bytes
        }
    }
}

fn random_request(rng: &mut Rng, key: &str, other_key: &str, w: &World) -> Random {
    let ids = [
        w.sp.to_string(),
        w.msp.to_string(),
        w.sp_org.to_string(),
        w.sp_org.to_string(),
        w.lone_org.to_string(),
        "0".into(),
        "-1".into(),
        "1.5".into(),
        "99999999999999999999".into(),
        "abc".into(),
        "%2e%2e".into(),
        "%ff".into(),
        "10000001".into(),
    ];
    let id = |rng: &mut Rng| ids[rng.below(ids.len())].clone();
    let values = [
        "",
        "0",
        "1",
        "-1",
        "200",
        "201",
        "99999999999999999999",
        "1.5",
        "abc",
        "%ff",
        "%00",
        "%C3%BC",
        "a.example",
        "random.example",
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00+01:00",
        "+",
        "%2B",
    ];
    let mut query = Vec::new();
    let (method, path) = if rng.chance(55) {
        // The enforcement interface, mostly with a customer key of some kind.
        let (method, path) = match rng.below(20) {
            0..=9 => ("POST", rng.pick(&["/1.0/events", "/1.0/events/"])),
            10..=14 => ("GET", "/1.0/domains"),
            15..=18 => (
                "DELETE",
                rng.pick(&[
                    "/1.0/domains",
                    "/1.0/domains/1",
                    "/1.0/domains/random.example",
                    "/1.0/domains/%ff",
                    "/1.0/domains/a%2fb",
                ]),
            ),
            _ => (
                rng.pick(&["PUT", "PATCH", "GET"]),
                rng.pick(&["/1.0/events", "/1.0", "/", "/1.0/events/x", "/1.0/domains/"]),
            ),
        };
        if rng.chance(90) {
            let k = match rng.below(10) {
                0..=6 => key.to_string(),
                7 => other_key.to_string(),
                _ => values[rng.below(values.len())].to_string(),
            };
            query.push(format!("customerKey={k}"));
        }
        (method, path.to_string())
    } else {
        let method = rng.pick(&["GET", "POST", "PUT", "DELETE", "PATCH", "GET", "POST"]);
        let resource = rng.pick(&[
            "sites",
            "networks",
            "roamingcomputers",
            "internalnetworks",
            "virtualappliances",
            "users",
            "roles",
            "nothing",
        ]);
        let path = match rng.below(6) {
            0 | 1 => format!("/v1/organizations/{}/{resource}", id(rng)),
            2 | 3 => format!("/v1/organizations/{}/{resource}/{}", id(rng), id(rng)),
            4 => format!("/v1/serviceproviders/{}/customers/{}", id(rng), id(rng)),
            _ => format!("/v1/msps/{}/customers", id(rng)),
        };
        (method, path)
    };
    for _ in 0..rng.below(4) {
        let name = rng.pick(&[
            "customerKey",
            "page",
            "limit",
            "where[name]",
            "where%5Bname%5D",
            "name",
            "status",
            "lastSyncBefore",
            "lastSyncAfter",
            "%ff",
        ]);
        query.push(format!("{name}={}", values[rng.below(values.len())]));
    }
    let target = if query.is_empty() {
        path
    } else {
        format!("{path}?{}", query.join("&"))
    };
    let mut headers = Vec::new();
    let auth = match rng.below(10) {
        0..=2 => Some(w.sp_org_cred.auth()),
        3 => Some(w.sp_cred.auth()),
        4 => Some(w.msp_cred.auth()),
        5 => Some(
            rng.pick(&["Basic !!!", "Basic /w==", "Bearer x", "Basic"])
                .to_string(),
        ),
        _ => None,
    };
    if let Some(a) = auth {
        headers.push(("authorization", a));
    }
    let content_type = match rng.below(10) {
        0..=5 => Some("application/json"),
        6 => Some("application/json; charset=utf-8"),
        7 => Some("text/plain"),
        8 => Some("application/json; charset=latin1"),
        _ => None,
    };
    if let Some(ct) = content_type {
        headers.push(("content-type", ct.to_string()));
    }
    let body =
        (matches!(method, "POST" | "PUT" | "PATCH") || rng.chance(10)).then(|| random_body(rng));
    Random {
        method,
        target,
        headers,
        body,
    }
}

/// Panics anywhere in this process so far (a hook installed on first use). A failing test's own
/// assertion counts too, which only matters when something has failed already.
fn panics() -> usize {
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            default_hook(info);
        }));
    });
    PANICS.load(Ordering::SeqCst)
}

/// The JSON body of a raw answer.
fn json_body(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_the_http_layer_cannot_parse_get_the_interfaces_json_error() {
    panics();
    let s = TestServer::start().await;
    let w = s.world();
    let (_, key) = s.create_org("target");

    for raw in malformed(&key, &w.sp_org_cred.auth()) {
        let answer = raw_exchange(&s, &raw).await;
        // A 4xx with the JSON error of an interface, never a bare answer or a 5xx.
        let what = || String::from_utf8_lossy(&raw[..raw.len().min(200)]).into_owned();
        assert!(answer.starts_with("HTTP/1.1 4"), "{} -> {answer:?}", what());
        let head = answer.split_once("\r\n\r\n").unwrap().0;
        assert!(
            head.contains("\r\ncontent-type: application/json\r\n"),
            "{} -> {answer:?}",
            what()
        );
        let body = json_body(&answer);
        // (The management 401 has a body of its own, without statusCode.)
        if !answer.starts_with("HTTP/1.1 401") {
            assert_eq!(body["statusCode"], answer[9..12].parse::<u16>().unwrap());
        }
    }

    // What hyper cannot parse gets the JSON error of the interface the request line names, and
    // a head beyond what the server reads is the 1 MiB rule's 400.
    let huge = "b".repeat(2 << 20);
    let answer = raw_exchange(
        &s,
        format!("GET /1.0/domains?customerKey={key} HTTP/1.1\r\nhost: x\r\nx-big: {huge}\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(
        answer.ends_with(
            r#"{"code":"BadRequestError","message":"Request too large","statusCode":400}"#
        ),
        "{answer}"
    );
    let answer = raw_exchange(
        &s,
        format!("GET /v1/organizations/1/sites HTTP/1.1\r\nhost: x\r\nx-big: {huge}\r\n\r\n")
            .as_bytes(),
    )
    .await;
    let body = json_body(&answer);
    assert_eq!(body["message"], "Request too large", "{answer}");
    assert_eq!(body["error"], "Bad Request");
    assert!(body["txId"].is_string(), "{answer}");
    let long = format!(
        "GET /1.0/domains/{} HTTP/1.1\r\nhost: x\r\n\r\n",
        "a".repeat(70_000)
    );
    let answer = raw_exchange(&s, long.as_bytes()).await;
    assert!(
        answer.ends_with(
            r#"{"code":"BadRequestError","message":"Request URI too long","statusCode":400}"#
        ),
        "{answer}"
    );
    // The interface of the request that failed, not of the one before it on the connection.
    let good_enf = format!("GET /1.0/domains?customerKey={key} HTTP/1.1\r\nhost: x\r\n\r\n");
    let good_mgmt = format!(
        "GET /v1/organizations/{}/roles HTTP/1.1\r\nhost: x\r\nauthorization: {}\r\n\r\n",
        w.sp_org,
        w.sp_org_cred.auth()
    );
    for (first, broken, management) in [
        (
            &good_enf,
            "GET /v1/roles HTTP/1.1\r\nbad header\r\n\r\n",
            true,
        ),
        (
            &good_mgmt,
            "GET /1.0/domains HTTP/1.1\r\nbad header\r\n\r\n",
            false,
        ),
    ] {
        let mut io = s.connect().await.unwrap();
        let answer = raw_exchange_on(&mut io, first.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let answer = raw_exchange_on(&mut io, broken.as_bytes()).await;
        let body = json_body(&answer);
        assert_eq!(body["message"], "Malformed HTTP request", "{answer}");
        assert_eq!(body["txId"].is_string(), management, "{answer}");
    }
    let answer = raw_exchange(&s, b"GARBAGE\r\n\r\n").await;
    assert!(
        answer.ends_with(
            r#"{"code":"BadRequestError","message":"Malformed HTTP request","statusCode":400}"#
        ),
        "{answer}"
    );
    s.stop().await;
    assert_eq!(panics(), 0, "a panic was caught");
}

/// hyper parses at most 100 header fields and answers more with the same bare 431 as a head
/// beyond its buffer: a small request with too many fields is told so, a head past the 1 MiB rule
/// (however many fields it has) is `Request too large`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_header_fields_are_told_apart_from_a_request_too_large() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("target");
    let fields = |n: usize, len: usize| -> String {
        (0..n)
            .map(|i| format!("x-f{i}: {}\r\n", "v".repeat(len)))
            .collect()
    };
    let get =
        |target: &str, extra: &str| format!("GET {target} HTTP/1.1\r\nhost: x\r\n{extra}\r\n");
    let domains = format!("/1.0/domains?customerKey={key}&limit=1");
    // 98 fields besides host: within hyper's 100.
    let answer = raw_exchange(&s, get(&domains, &fields(98, 1)).as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    for (target, management) in [
        (domains.as_str(), false),
        ("/v1/organizations/1/sites", true),
    ] {
        let mut io = s.connect().await.unwrap();
        let answer = raw_exchange_on(&mut io, get(target, &fields(120, 1)).as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
        assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
        let body = json_body(&answer);
        assert_eq!(
            body["message"], "Too many header fields (at most 100)",
            "{answer}"
        );
        assert_eq!(body["txId"].is_string(), management, "{answer}");
        assert!(closed_within(&mut io, WAIT).await);
    }
    // With a body after the head.
    let post = format!(
        "POST /1.0/events?customerKey={key} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n{}\r\n{{}}",
        fields(200, 10)
    );
    let answer = raw_exchange(&s, post.as_bytes()).await;
    assert_eq!(
        json_body(&answer)["message"],
        "Too many header fields (at most 100)",
        "{answer}"
    );
    // 1,100 fields of 1,000 bytes: past the 1 MiB rule, though hyper stops at the 101st field.
    let answer = raw_exchange(&s, get(&domains, &fields(1_100, 1_000)).as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert_eq!(
        json_body(&answer)["message"],
        "Request too large",
        "{answer}"
    );
    // The server still serves.
    let answer = raw_exchange(&s, get(&domains, "").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    s.stop().await;
}

/// Requests refused by their route before their body is read (404, 405), sent whole before the
/// answer is read, as simple clients do: the answer must arrive intact, not as a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_route_reaches_a_client_that_sends_its_whole_body_first() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("target");
    let body = " ".repeat(1_000_000);
    for (method, target, status, management) in [
        ("PUT", format!("/1.0/events?customerKey={key}"), 405, false),
        ("POST", "/1.0/nowhere".to_string(), 404, false),
        ("POST", "/v1/nowhere".to_string(), 404, true),
        ("PATCH", "/v1/organizations/1/sites".to_string(), 405, true),
    ] {
        let raw = format!(
            "{method} {target} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut io = s.connect().await.unwrap();
        let answer = raw_exchange_on(&mut io, raw.as_bytes()).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{method} {target}: {:?}",
            &answer[..answer.len().min(300)]
        );
        assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
        let json = json_body(&answer);
        assert_eq!(json["statusCode"], status, "{answer}");
        assert_eq!(json["txId"].is_string(), management, "{answer}");
        assert!(closed_within(&mut io, WAIT).await, "{method} {target}");
    }
    // Without a body the connection stays open for the next request.
    let mut io = s.connect().await.unwrap();
    let answer = raw_exchange_on(&mut io, b"GET /1.0/nowhere HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
    assert!(!answer.contains("connection: close"), "{answer}");
    let answer = raw_exchange_on(
        &mut io,
        format!("GET /1.0/domains?customerKey={key} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_requests_get_answers_and_never_a_panic() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    panics();
    let s = TestServer::start().await;
    let w = s.world();
    let (org, key) = s.create_org("target");
    let (_, other_key) = s.create_org("other");
    let listed = |name: &str| {
        s.db()
            .query_row(
                "SELECT count(*) FROM domains WHERE organization_id = ?1 AND name = ?2",
                rusqlite::params![org, name],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
    };

    let mut rng = Rng(0x5eed_0f9a_7a50_1234);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..3000 {
        let r = random_request(&mut rng, &key, &other_key, &w);
        let headers: Vec<(&str, &str)> = r.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let resp = s
            .request(r.method, &r.target, &headers, r.body.clone())
            .await;
        *statuses.entry(resp.status).or_default() += 1;
        let what = || {
            format!(
                "request {i}: {} {} {:?} {:?} -> {} {}",
                r.method,
                r.target,
                r.headers,
                r.body
                    .as_ref()
                    .map(|b| String::from_utf8_lossy(&b[..b.len().min(300)])),
                resp.status,
                resp.text()
            )
        };
        assert!(resp.status < 500, "{}", what());
        if resp.status != 204 {
            assert_eq!(
                resp.header("content-type"),
                Some("application/json"),
                "{}",
                what()
            );
            let _: Value =
                serde_json::from_slice(&resp.body).unwrap_or_else(|_| panic!("{}", what()));
        }
    }
    eprintln!("statuses: {statuses:?}");
    // The mix reached the handlers, not just the front door.
    assert!(
        statuses.get(&202).copied().unwrap_or(0) > 10,
        "{statuses:?}"
    );
    assert!(
        statuses.get(&200).copied().unwrap_or(0) > 10,
        "{statuses:?}"
    );
    assert!(
        statuses.get(&400).copied().unwrap_or(0) > 100,
        "{statuses:?}"
    );

    // Still serving, and what it accepted is there.
    let r = s
        .post_json(
            &format!("/1.0/events?customerKey={key}"),
            &event("after-the-storm.example"),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(listed("after-the-storm.example"), 1);
    let db = s.db();
    let check: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let dangling: i64 = db
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(dangling, 0);
    drop(db);
    s.stop().await;
    assert_eq!(panics(), 0, "a panic was caught");
}

/// A request with both `Content-Length` and `Transfer-Encoding: chunked` (a request-smuggling
/// shape): the body is read as chunked, and the connection is closed after the answer, as RFC
/// 9112 section 6.1 requires, so that no bytes the two framings disagree on are read as a request.
#[tokio::test]
async fn content_length_with_chunked_is_read_as_chunked_and_the_connection_closed() {
    let s = TestServer::start().await;
    let (_, key) = s.create_org("framing");
    let body = serde_json::to_string(&event("framing.example")).unwrap();
    let raw = format!(
        "POST /1.0/events?customerKey={key} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: 4\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    let mut io = s.connect().await.unwrap();
    let answer = raw_exchange_on(&mut io, raw.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 202 "), "{answer}");
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(closed_within(&mut io, WAIT).await);
    let list = s.get(&format!("/1.0/domains?customerKey={key}")).await;
    assert_eq!(
        list.json()["data"][0]["name"],
        "framing.example",
        "{}",
        list.text()
    );
    // Chunked alone keeps the connection open.
    let raw = raw.replace("content-length: 4\r\n", "");
    let mut io = s.connect().await.unwrap();
    let answer = raw_exchange_on(&mut io, raw.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 202 "), "{answer}");
    assert!(!answer.contains("connection: close"), "{answer}");
    s.stop().await;
}
