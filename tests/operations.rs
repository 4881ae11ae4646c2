#![allow(clippy::unwrap_used, clippy::expect_used)]
//! What operators and integrators reach for, against the real server: the health paths, the
//! OpenAPI document, `X-Request-Id` on every answer (equal to the management errors' `txId`),
//! the metrics (well-formed, and moving with traffic), `--metrics-listen`, and the access log
//! (one line per request, never a secret).

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

// ------------------------------------------------------------------ the exposition format

/// One sample of an exposition: its name, its labels (sorted) and its value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition.
struct Exposition {
    samples: Vec<Sample>,
}

impl Exposition {
    /// The value of the sample `name` whose labels include `labels`; `None` if there is none,
    /// panics if there are several.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        assert!(found.len() <= 1, "several samples match {name} {labels:?}");
        found.first().map(|s| s.value)
    }

    /// Like `get`, 0 when absent (a counter that has not moved yet).
    fn count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }
}

fn valid_name(s: &str, colon: bool) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || colon && c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || colon && c == ':')
}

/// Parses `{a="x",b="y"}` (after the metric name); returns the labels and the rest of the line.
fn parse_labels(line: &str) -> (BTreeMap<String, String>, &str) {
    let mut labels = BTreeMap::new();
    let Some(mut rest) = line.strip_prefix('{') else {
        return (labels, line);
    };
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return (labels, r);
        }
        let eq = rest
            .find('=')
            .unwrap_or_else(|| panic!("label without '=': {line}"));
        let name = &rest[..eq];
        assert!(valid_name(name, false), "label name {name:?} in {line}");
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .unwrap_or_else(|| panic!("label value not quoted: {line}"));
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => panic!("bad escape {other:?} in {line}"),
                },
                Some((i, '"')) => break i,
                Some((_, '\n')) => panic!("raw line feed in a label value: {line}"),
                Some((_, c)) => value.push(c),
                None => panic!("unterminated label value: {line}"),
            }
        };
        assert!(
            labels.insert(name.to_string(), value).is_none(),
            "label {name} twice: {line}"
        );
        rest = &rest[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// Parses an exposition in the Prometheus text format (0.0.4), checking it as `promtool check
/// metrics` would for what Parasol writes: `# HELP` and `# TYPE` once per family and before its
/// samples, each family's samples together, valid names and label syntax, numeric values, no
/// series twice, counters named `_total`, and histograms with buckets in order, cumulative,
/// ending at `+Inf` equal to `_count`, with a `_sum`.
fn parse_exposition(text: &str) -> Exposition {
    assert!(text.ends_with('\n'), "the exposition ends with a line feed");
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helps: HashSet<String> = HashSet::new();
    let mut done: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut series: HashSet<String> = HashSet::new();
    let mut samples = Vec::new();
    let family_of = |name: &str, types: &BTreeMap<String, String>| -> String {
        if types.contains_key(name) {
            return name.to_string();
        }
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix) {
                if types.get(base).map(String::as_str) == Some("histogram") {
                    return base.to_string();
                }
            }
        }
        panic!("sample {name} has no # TYPE before it");
    };
    for line in text.lines() {
        assert!(!line.is_empty(), "empty line in the exposition");
        if let Some(comment) = line.strip_prefix("# ") {
            let mut parts = comment.splitn(3, ' ');
            let (kind, name, rest) = (parts.next(), parts.next(), parts.next());
            let name = name
                .unwrap_or_else(|| panic!("bad comment {line}"))
                .to_string();
            assert!(valid_name(&name, true), "metric name {name:?}");
            if current.as_deref() != Some(name.as_str()) {
                if let Some(c) = current.take() {
                    done.insert(c);
                }
                assert!(!done.contains(&name), "family {name} split");
                current = Some(name.clone());
            }
            match kind {
                Some("HELP") => {
                    assert!(rest.is_some_and(|h| !h.is_empty()), "empty help: {line}");
                    assert!(helps.insert(name), "HELP twice: {line}");
                }
                Some("TYPE") => {
                    let t = rest.unwrap_or_default();
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                        "{line}"
                    );
                    if t == "counter" {
                        assert!(name.ends_with("_total"), "counter {name} without _total");
                    }
                    assert!(
                        types.insert(name, t.to_string()).is_none(),
                        "TYPE twice: {line}"
                    );
                }
                _ => panic!("unknown comment {line}"),
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("bad line {line}"));
        let name = &line[..name_end];
        assert!(valid_name(name, true), "metric name {name:?}");
        let family = family_of(name, &types);
        assert_eq!(
            current.as_deref(),
            Some(family.as_str()),
            "{line} outside its family"
        );
        assert!(helps.contains(&family), "no HELP for {family}");
        let (labels, rest) = parse_labels(&line[name_end..]);
        let value = rest
            .strip_prefix(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value {v:?}: {line}")),
        };
        assert!(
            series.insert(format!("{name}{labels:?}")),
            "series twice: {line}"
        );
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    for (name, t) in &types {
        if t != "histogram" {
            continue;
        }
        // Per label set (without `le`): buckets ascending and cumulative, ending at +Inf.
        let mut groups: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| s.name == format!("{name}_bucket"))
        {
            let mut rest = s.labels.clone();
            let le = rest
                .remove("le")
                .unwrap_or_else(|| panic!("{name} bucket without le"));
            let le: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            groups
                .entry(format!("{rest:?}"))
                .or_default()
                .push((le, s.value));
        }
        for (labels, buckets) in groups {
            assert!(
                buckets.windows(2).all(|w| w[0].0 < w[1].0),
                "{name}{labels}: le order"
            );
            assert!(
                buckets.windows(2).all(|w| w[0].1 <= w[1].1),
                "{name}{labels}: cumulative"
            );
            let (last_le, last) = *buckets.last().unwrap();
            assert!(last_le.is_infinite(), "{name}{labels}: no +Inf bucket");
            let with = |suffix: &str| {
                samples
                    .iter()
                    .find(|s| {
                        s.name == format!("{name}{suffix}") && format!("{:?}", s.labels) == labels
                    })
                    .map(|s| s.value)
            };
            assert_eq!(with("_count"), Some(last), "{name}{labels}: _count");
            assert!(with("_sum").is_some(), "{name}{labels}: _sum");
        }
    }
    Exposition { samples }
}

#[test]
fn the_format_check_refuses_what_promtool_refuses() {
    let ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 2\n";
    parse_exposition(ok);
    for bad in [
        "a_total 1\n",
        "# HELP a A.\n# TYPE a counter\na 1\n",
        "# HELP a A.\n# TYPE a gauge\na{x=\"1} 1\n",
        "# HELP a A.\n# TYPE a gauge\na 1\na 2\n",
        "# HELP a A.\n# TYPE a gauge\na one\n",
        "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
        "# HELP a A.\n# TYPE a gauge\na 1\n# HELP b B.\n# TYPE b gauge\nb 1\na{x=\"2\"} 1\n",
    ] {
        let r = std::panic::catch_unwind(|| parse_exposition(bad));
        assert!(r.is_err(), "accepted: {bad}");
    }
}

// ------------------------------------------------------------------ helpers

async fn scrape(c: &Client) -> Exposition {
    let r = c.get("/metrics").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    parse_exposition(&r.text())
}

fn request_id(r: &Resp) -> String {
    let id = r
        .header("x-request-id")
        .unwrap_or_else(|| panic!("no X-Request-Id: {} {:?}", r.status, r.headers))
        .to_string();
    uuid::Uuid::parse_str(&id).unwrap_or_else(|_| panic!("{id} is not UUID-shaped"));
    id
}

/// Sends raw bytes on a new connection; returns the answer's head (lower-cased names) and body.
async fn raw(c: &Client, bytes: &[u8]) -> (String, Value) {
    use tokio::io::AsyncWriteExt;
    let mut io = c.connect().await.unwrap();
    io.write_all(bytes).await.unwrap();
    let answer = read_response(&mut io).await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (
        head.to_ascii_lowercase(),
        serde_json::from_str(body).unwrap(),
    )
}

fn header_in<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
}

// ------------------------------------------------------------------ health and the document

/// RFC 9110, section 9.1: HEAD is answered wherever GET is, with GET's status and headers and
/// no body, and `Allow` names it. Read from the socket, so that a body sent after the head
/// would show. Once answered 405 (`Allow: GET`) on every one of these paths.
#[tokio::test]
async fn head_is_answered_wherever_get_is_with_gets_status_and_headers_and_no_body() {
    use tokio::io::AsyncWriteExt;
    let s = TestServer::start().await;
    let (_, key) = s.create_org("a");
    assert_eq!(
        s.post_json(
            &format!("/1.0/events?customerKey={key}"),
            &json!([event("www.example.com")])
        )
        .await
        .status,
        202
    );
    let w = s.world();
    let auth = w.lone_org_cred.auth();
    let org = w.lone_org;
    let cases: Vec<(String, Option<&str>)> = vec![
        ("/healthz".into(), None),
        ("/readyz".into(), None),
        ("/openapi.yaml".into(), None),
        (format!("/1.0/domains?customerKey={key}"), None),
        // An error answered to GET is answered to HEAD alike.
        ("/1.0/domains?customerKey=nope".into(), None),
        (
            format!("/v1/organizations/{org}/sites"),
            Some(auth.as_str()),
        ),
        (format!("/v1/organizations/{org}/roles"), None),
        (
            format!("/parasol/v1/organizations/{org}/allowlist"),
            Some(auth.as_str()),
        ),
    ];
    // Headers that differ between any two answers.
    let varying = ["date", "x-request-id"];
    for (path, auth) in &cases {
        let extra: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
        let get = s.request("GET", path, &extra, None).await;
        let mut io = s.connect().await.unwrap();
        let auth_line = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        let req = format!(
            "HEAD {path} HTTP/1.1\r\nHost: {}\r\n{auth_line}Connection: close\r\n\r\n",
            s.addr
        );
        io.write_all(req.as_bytes()).await.unwrap();
        // Up to the server's close: everything it sent.
        let answer = read_response(&mut io).await;
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert_eq!(body, "", "HEAD {path} sent a body");
        let mut lines = head.lines();
        let status = lines.next().unwrap();
        assert!(
            status.starts_with(&format!("HTTP/1.1 {} ", get.status)),
            "HEAD {path}: {status}, GET: {}",
            get.status
        );
        let mut head_headers: Vec<(String, String)> = lines
            .map(|l| {
                let (k, v) = l.split_once(": ").unwrap();
                (k.to_ascii_lowercase(), v.to_string())
            })
            .filter(|(k, _)| !varying.contains(&k.as_str()) && k != "connection")
            .collect();
        head_headers.sort();
        let mut get_headers: Vec<(String, String)> = get
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
            .filter(|(k, _)| !varying.contains(&k.as_str()) && k != "connection")
            .collect();
        get_headers.sort();
        assert_eq!(head_headers, get_headers, "HEAD {path}");
        assert!(
            get_headers.contains(&("content-length".into(), get.body.len().to_string())),
            "GET {path}: {get_headers:?}"
        );
    }
    // /metrics too (its body changes with every request, its headers do not).
    let r = s.request("HEAD", "/metrics", &[], None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"");
    assert_eq!(
        r.header("content-type"),
        s.get("/metrics").await.header("content-type")
    );
    // Where GET is not allowed, neither is HEAD; every `Allow` with GET names HEAD.
    for (path, allow) in [
        (format!("/1.0/events?customerKey={key}"), "POST"),
        (format!("/1.0/domains/1?customerKey={key}"), "DELETE"),
    ] {
        let r = s.request("HEAD", &path, &[], None).await;
        assert_eq!((r.status, r.header("allow")), (405, Some(allow)), "{path}");
    }
    for (m, path, allow) in [
        ("POST", "/readyz".to_string(), "GET, HEAD"),
        (
            "PUT",
            format!("/1.0/domains?customerKey={key}"),
            "GET, HEAD, DELETE",
        ),
        (
            "PATCH",
            format!("/v1/organizations/{org}/sites/1"),
            "GET, HEAD, PUT, DELETE",
        ),
        (
            "PUT",
            format!("/parasol/v1/organizations/{org}/allowlist"),
            "GET, HEAD, POST",
        ),
    ] {
        let r = s.request(m, &path, &[], None).await;
        assert_eq!(
            (r.status, r.header("allow")),
            (405, Some(allow)),
            "{m} {path}"
        );
    }
}

#[tokio::test]
async fn own_paths_answer_without_credentials_and_errors_take_the_enforcement_shape() {
    let s = TestServer::start().await;
    let r = s.get("/healthz").await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let r = s.get("/readyz").await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "ready"})));
    let r = s.get("/openapi.yaml").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/yaml"));
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"));
    assert_eq!(
        r.text(),
        doc.unwrap(),
        "the repository's document, as it is"
    );
    let r = s.post_json("/healthz", &json!({})).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
    assert_eq!(
        r.json(),
        json!({"code": "MethodNotAllowed", "message": "Method not allowed", "statusCode": 405})
    );
    let r = s.get("/healthz/deeper").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["code"], "NotFoundError");
}

// ------------------------------------------------------------------ request ids

/// Every answer has an `X-Request-Id`: both interfaces, successes and errors, Parasol's own
/// paths, refusals before the body is read, and the 400s the transport writes itself for
/// requests hyper cannot parse. A management error's `txId` is the same id. No two are alike.
#[tokio::test]
async fn every_answer_carries_a_request_id_and_management_errors_repeat_it_as_tx_id() {
    let s = TestServer::start().await;
    let w = s.world();
    let (_, key) = s.create_org("ids");
    let mut ids = HashSet::new();
    let mut seen = |id: String| assert!(ids.insert(id.clone()), "{id} twice");

    let events = format!("/1.0/events?customerKey={key}");
    for r in [
        s.post_json(&events, &event("ids.example")).await,
        s.post_json(&events, &json!([])).await,
        s.get("/1.0/domains?customerKey=00000000-0000-4000-8000-000000000000")
            .await,
        s.get(&format!("/1.0/domains?customerKey={key}")).await,
        s.delete(&format!("/1.0/domains/nothing.example?customerKey={key}"))
            .await,
        s.get("/1.0/events").await,
        s.get("/nowhere").await,
        s.get("/healthz").await,
        s.get("/metrics").await,
        s.request("GET", "/healthz", &[("host", "bad host")], None)
            .await,
    ] {
        assert!(r.status < 500, "{}", r.text());
        seen(request_id(&r));
    }
    let sites = format!("/v1/organizations/{}/sites", w.lone_org);
    let ok = s.mgmt("GET", &sites, &w.lone_org_cred, None).await;
    assert_eq!(ok.status, 200);
    seen(request_id(&ok));
    let unauthorized = s.get(&sites).await;
    assert_eq!(unauthorized.status, 401);
    seen(request_id(&unauthorized));
    for r in [
        s.mgmt("GET", &format!("{sites}/999999"), &w.lone_org_cred, None)
            .await,
        s.mgmt("PUT", &sites, &w.lone_org_cred, Some(&json!({})))
            .await,
        s.mgmt("POST", &sites, &w.lone_org_cred, Some(&json!({"name": 5})))
            .await,
        s.get("/v1/nothing").await,
    ] {
        assert!((400..500).contains(&r.status), "{}", r.text());
        let id = request_id(&r);
        assert_eq!(r.json()["txId"], id.as_str(), "{}", r.text());
        seen(id);
    }
    // Answers the transport writes itself.
    let (head, body) = raw(&s, b"GARBAGE\r\n\r\n").await;
    assert!(head.starts_with("http/1.1 400"), "{head}");
    assert_eq!(body["code"], "BadRequestError");
    seen(header_in(&head, "x-request-id").expect("an id").to_string());
    let (head, body) = raw(&s, b"GET /v1/x HTTP/1.1\r\nbad header\r\n\r\n").await;
    assert!(head.starts_with("http/1.1 400"), "{head}");
    let id = header_in(&head, "x-request-id").expect("an id");
    assert_eq!(body["txId"], id, "{head}");
    seen(id.to_string());
}

/// Ids are a per-process prefix and a counter: another run of the server has another prefix.
#[test]
fn request_ids_differ_across_restarts() {
    let dir = TempDir::new();
    let prefix = || {
        let server = ChildServer::spawn(dir.path(), &["--plain-http"]);
        let ids: Vec<String> = (0..2)
            .map(|_| request_id(&run(server.get("/healthz"))))
            .collect();
        assert_eq!(ids[0][..18], ids[1][..18], "one prefix per process");
        assert_ne!(ids[0], ids[1]);
        assert!(server.stop().success());
        ids[0][..18].to_string()
    };
    assert_ne!(prefix(), prefix());
}

// ------------------------------------------------------------------ metrics

/// The counters move with traffic: requests by route template and status, events accepted,
/// kept off the list and refused, connections, the store's commits and group sizes, each
/// organization's domain list; and the exposition stays well-formed.
#[tokio::test]
async fn metrics_move_with_traffic() {
    let dir = TempDir::new();
    let good = dir.path().join("known-good.txt");
    std::fs::write(&good, "1,good.example\n").unwrap();
    let s = TestServer::start_with(|c| c.known_good = Some(good.clone())).await;
    let w = s.world();
    let (org, key) = s.create_org("metrics");
    let (other, _) = s.create_org("empty");
    let before = scrape(&s).await;
    let events = format!("/1.0/events?customerKey={key}");
    let ev = ("route", "/1.0/events");
    let st = |c: &'static str| ("status", c);

    for n in 0..3 {
        let r = s.post_json(&events, &event(&format!("m{n}.example"))).await;
        assert_eq!(r.status, 202);
    }
    let batch = json!([event("a.good.example"), event("m9.example")]);
    assert_eq!(s.post_json(&events, &batch).await.status, 202);
    assert_eq!(
        s.post_json(&events, &json!([event("bad..name")]))
            .await
            .status,
        400
    );
    let wrong = "/1.0/events?customerKey=00000000-0000-4000-8000-000000000000";
    assert_eq!(s.post_json(wrong, &event("x.example")).await.status, 403);
    let r = s
        .request(
            "POST",
            &events,
            &[("content-type", "text/plain")],
            Some(b"{}".to_vec()),
        )
        .await;
    assert_eq!(r.status, 415);
    assert_eq!(
        s.get(&format!("/1.0/domains?customerKey={key}"))
            .await
            .status,
        200
    );
    assert_eq!(s.get("/nowhere").await.status, 404);
    let sites = format!("/v1/organizations/{}/sites", w.lone_org);
    assert_eq!(
        s.mgmt("GET", &sites, &w.lone_org_cred, None).await.status,
        200
    );
    assert_eq!(s.get(&sites).await.status, 401);

    let after = scrape(&s).await;
    let delta = |name: &str, labels: &[(&str, &str)]| {
        after.count(name, labels) - before.count(name, labels)
    };
    let requests = "parasol_http_requests_total";
    let enf = ("interface", "enforcement");
    assert_eq!(
        delta(requests, &[enf, ev, ("method", "POST"), st("202")]),
        4.0
    );
    assert_eq!(delta(requests, &[ev, st("400")]), 1.0);
    assert_eq!(delta(requests, &[ev, st("403")]), 1.0);
    assert_eq!(delta(requests, &[ev, st("415")]), 1.0);
    assert_eq!(
        delta(
            requests,
            &[("route", "/1.0/domains"), ("method", "GET"), st("200")]
        ),
        1.0
    );
    assert_eq!(
        delta(
            requests,
            &[enf, ("route", "unmatched"), ("method", "*"), st("404")]
        ),
        1.0
    );
    let site_route = ("route", "/v1/organizations/{organizationId}/sites");
    assert_eq!(
        delta(
            requests,
            &[("interface", "management"), site_route, st("200")]
        ),
        1.0
    );
    assert_eq!(delta(requests, &[site_route, st("401")]), 1.0);
    // The first scrape is counted by the second.
    assert_eq!(
        after.count(
            requests,
            &[("interface", "parasol"), ("route", "/metrics"), st("200")]
        ),
        1.0
    );
    let latency = "parasol_http_request_duration_seconds_count";
    assert_eq!(delta(latency, &[ev, ("method", "POST")]), 7.0);

    assert_eq!(delta("parasol_events_accepted_total", &[]), 5.0);
    assert_eq!(
        delta("parasol_events_not_listed_total", &[]),
        1.0,
        "a.good.example"
    );
    let refused = "parasol_event_requests_refused_total";
    assert_eq!(delta(refused, &[("reason", "validation")]), 1.0);
    assert_eq!(delta(refused, &[("reason", "credentials")]), 1.0);
    assert_eq!(delta(refused, &[("reason", "media_type")]), 1.0);
    assert_eq!(delta(refused, &[("reason", "rate_limit")]), 0.0);

    // Eleven requests and the second scrape, each on a connection of its own.
    assert_eq!(delta("parasol_connections_accepted_total", &[]), 12.0);
    assert!(
        after.count("parasol_connections_open", &[]) >= 1.0,
        "the scrape's own"
    );
    assert!(delta("parasol_store_commits_total", &[]) >= 4.0);
    assert!(delta("parasol_store_commit_group_size_count", &[]) >= 4.0);
    assert!(delta("parasol_store_commit_duration_seconds_count", &[]) >= 4.0);
    assert!(delta("parasol_store_writes_total", &[]) >= 4.0);
    assert_eq!(after.get("parasol_store_writable", &[]), Some(1.0));
    assert_eq!(after.get("parasol_store_faults_total", &[]), Some(0.0));
    assert!(after.get("parasol_store_database_bytes", &[]).unwrap() > 0.0);
    // The WAL file and the file system's room are the embedded database's; PostgreSQL's are the
    // database server's, which a node does not see.
    if !common::on_postgres() {
        assert!(after.get("parasol_store_wal_bytes", &[]).is_some());
        assert!(
            after
                .get("parasol_store_filesystem_free_bytes", &[])
                .unwrap()
                > 0.0
        );
    }
    assert_eq!(
        after.get("parasol_reputation_entries", &[("list", "known_good")]),
        Some(1.0)
    );
    assert!(
        after
            .get("parasol_reputation_loaded_timestamp_seconds", &[])
            .unwrap()
            > 1.7e9
    );
    let (org, other) = (org.to_string(), other.to_string());
    assert_eq!(
        after.get("parasol_domains", &[("organization", &org)]),
        Some(4.0),
        "m0, m1, m2, m9"
    );
    assert_eq!(
        after.get("parasol_domains", &[("organization", &other)]),
        Some(0.0)
    );
    assert_eq!(after.get("parasol_organizations", &[]), Some(5.0));
    assert!(after.get("process_resident_memory_bytes", &[]).unwrap() > 0.0);
}

/// Domain list lengths come from the paging counts, right past many closed blocks of 1024 and
/// after deletes.
#[tokio::test]
async fn domains_per_organization_are_counted_for_long_lists() {
    let s = TestServer::start().await;
    let (org, key) = s.create_org("long");
    let events = format!("/1.0/events?customerKey={key}");
    for chunk in 0..3 {
        let batch: Vec<Value> = (0..1000)
            .map(|n| event(&format!("n{chunk}-{n}.long.example")))
            .collect();
        assert_eq!(s.post_json(&events, &Value::Array(batch)).await.status, 202);
    }
    for n in 0..10 {
        let r = s
            .delete(&format!(
                "/1.0/domains/n1-{n}.long.example?customerKey={key}"
            ))
            .await;
        assert_eq!(r.status, 204);
    }
    let m = scrape(&s).await;
    assert_eq!(
        m.get("parasol_domains", &[("organization", &org.to_string())]),
        Some(2990.0)
    );
}

// ------------------------------------------------------------------ readiness under a fault

/// `/readyz` answers 503 with the reason while the storage refuses writes (here: no space left
/// for a stretch of the WAL's writes, injected), the metrics say so too, and both come back by
/// themselves once the storage takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_with_the_reason_while_the_disk_is_full() {
    if skip_on_postgres("injects faults under the SQLite file") {
        return;
    }
    let dir = TempDir::new();
    let key = cli_create_org(dir.path(), "full");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"));
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--plain-http",
            "--data-dir",
        ])
        .arg(dir.path())
        .env("PARASOL_FAULT_INJECTION", "wal-write:enospc@4-40");
    let server = ChildServer::spawn_command(command, dir.path());
    assert_eq!(server.get("/readyz").await.status, 200);
    let events = format!("/1.0/events?customerKey={key}");
    let deadline = Instant::now() + WAIT;
    let mut n = 0;
    let mut post = async || {
        n += 1;
        server
            .post_json(&events, &event(&format!("f{n}.full.example")))
            .await
            .status
    };
    loop {
        let status = post().await;
        if status == 503 {
            break;
        }
        assert_eq!(status, 202);
        assert!(Instant::now() < deadline, "no write was refused");
    }
    let r = server.get("/readyz").await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    request_id(&r);
    let body = r.json();
    assert_eq!(body["status"], "unavailable");
    assert_eq!(body["reason"], "disk_full", "{body}");
    assert_eq!(
        server.get("/healthz").await.status,
        200,
        "the process still answers"
    );
    let m = scrape(&server).await;
    assert_eq!(m.get("parasol_store_writable", &[]), Some(0.0));
    assert!(m.get("parasol_store_faults_total", &[]).unwrap() >= 1.0);
    assert_eq!(
        m.get("parasol_store_last_fault_info", &[("kind", "disk_full")]),
        Some(1.0)
    );
    assert!(
        m.count(
            "parasol_event_requests_refused_total",
            &[("reason", "unavailable")]
        ) >= 1.0
    );

    // Writes (refused while the stretch lasts) and the store's own probes use it up.
    let deadline = Instant::now() + WAIT;
    while post().await != 202 {
        assert!(Instant::now() < deadline, "writes never accepted again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = server.get("/readyz").await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "ready"})));
    assert!(server.stop().success());
}

// ------------------------------------------------------------------ --metrics-listen

/// With `--metrics-listen`, `/metrics` (and the health paths) are served on that plain-HTTP
/// listener, nothing else is, and the main listener's `/metrics` is a 404.
#[test]
fn metrics_listen_moves_metrics_to_a_listener_of_their_own() {
    let dir = TempDir::new();
    let server = ChildServer::spawn(dir.path(), &["--metrics-listen", "127.0.0.1:0"]);
    server.wait_for_log("metrics: serving http://");
    let line = server
        .stderr_lines
        .lock()
        .unwrap()
        .iter()
        .find_map(|l| {
            l.split("metrics: serving http://")
                .nth(1)
                .map(str::to_string)
        })
        .unwrap();
    let addr = line.trim().trim_end_matches("/metrics").parse().unwrap();
    let ops = Client::new(addr, None);
    run(async {
        let r = ops.get("/metrics").await;
        assert_eq!(r.status, 200);
        request_id(&r);
        parse_exposition(&r.text());
        assert_eq!(ops.get("/healthz").await.status, 200);
        assert_eq!(ops.get("/readyz").await.status, 200);
        for p in [
            "/openapi.yaml",
            "/1.0/domains",
            "/v1/organizations/1/sites",
            "/x",
        ] {
            let r = ops.get(p).await;
            assert_eq!(r.status, 404, "{p}");
            assert_eq!(r.json()["code"], "NotFoundError");
        }
        let r = server.get("/metrics").await;
        assert_eq!(r.status, 404, "the main listener's /metrics");
        request_id(&r);
        assert_eq!(server.get("/healthz").await.status, 200);
        assert_eq!(server.get("/openapi.yaml").await.status, 200);
    });
    assert!(server.stop().success());
}

// ------------------------------------------------------------------ the access log

/// The access lines of a log: request id -> the line.
fn access_lines(lines: &[String]) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter(|l| l.contains(" access method="))
        .map(|l| {
            let id = l.split("request_id=").nth(1).unwrap().trim().to_string();
            (id, l.clone())
        })
        .collect()
}

/// Stops the server and returns its whole log, to its last line ("stopped").
fn stop_and_read_log(server: ChildServer) -> Vec<String> {
    let lines = server.stderr_lines.clone();
    assert!(server.stop().success());
    wait_for_blocking("the last line, \"stopped\"", || {
        let got = lines.lock().unwrap().clone();
        got.last()
            .is_some_and(|l| l.ends_with("stopped"))
            .then_some(got)
    })
}

/// Waits (bounded) until the server has logged the access line of request `id`.
fn wait_for_access(server: &ChildServer, id: &str) -> String {
    server.wait_for_log(&format!("request_id={id}"));
    access_lines(&server.stderr_lines.lock().unwrap())
        .remove(id)
        .unwrap()
}

/// One line per request at info with method, route template, status, bytes, duration, client
/// and request id; and in the server's whole log, from start to stop, not one customer key, API
/// secret, password or Basic credential, however the requests carried them (query, path, header,
/// body, even a request hyper cannot parse).
#[test]
fn the_access_log_has_a_line_per_request_and_the_log_never_a_secret() {
    let dir = TempDir::new();
    let server = ChildServer::spawn(dir.path(), &["--demo", "--log-level", "info"]);
    let creds: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("demo-credentials.json")).unwrap())
            .unwrap();
    let org = &creds["organizations"][0];
    let customer_key = org["customerKey"].as_str().unwrap().to_string();
    let other_key = creds["organizations"][1]["customerKey"].as_str().unwrap();
    let sp = Cred {
        key: creds["serviceProvider"]["apiKey"].as_str().unwrap().into(),
        secret: creds["serviceProvider"]["apiSecret"]
            .as_str()
            .unwrap()
            .into(),
    };
    let org_cred = Cred {
        key: org["apiKey"].as_str().unwrap().into(),
        secret: org["apiSecret"].as_str().unwrap().into(),
    };
    let org_id = org["id"].as_i64().unwrap();
    let password = "Correct-Horse-Battery-Staple-42";
    let wrong_secret = "not-the-secret-7f9a1c";
    let mut secrets = vec![
        customer_key.clone(),
        other_key.to_string(),
        sp.secret.clone(),
        org_cred.secret.clone(),
        creds["msp"]["apiSecret"].as_str().unwrap().to_string(),
        password.to_string(),
        wrong_secret.to_string(),
    ];
    for c in [&sp, &org_cred] {
        secrets.push(c.auth().trim_start_matches("Basic ").to_string());
    }

    let enf = |path: &str| format!("{path}?customerKey={customer_key}");
    let sp_path = format!("/v1/serviceproviders/{}", creds["serviceProvider"]["id"]);
    let users = format!("/v1/organizations/{org_id}/users");
    let user = json!({"firstname": "Ada", "lastname": "L", "email": "ada@example.com",
        "password": password, "roleId": 1, "timezone": "UTC"});
    let wrong = Cred {
        key: sp.key.clone(),
        secret: wrong_secret.into(),
    };
    let expected: Vec<(Resp, &str, &str)> = run(async {
        vec![
            (
                server
                    .post_json(&enf("/1.0/events"), &event("logged.example"))
                    .await,
                "POST",
                "/1.0/events",
            ),
            (
                server.get(&enf("/1.0/domains")).await,
                "GET",
                "/1.0/domains",
            ),
            (
                server.delete(&enf("/1.0/domains/logged.example")).await,
                "DELETE",
                "/1.0/domains/{domainIdOrName}",
            ),
            (
                server.get(&format!("/1.0/domains/{customer_key}")).await,
                "GET",
                "unmatched",
            ),
            (
                server.get(&format!("/{customer_key}")).await,
                "GET",
                "unmatched",
            ),
            (
                server.mgmt("GET", &sp_path, &sp, None).await,
                "GET",
                "/v1/serviceproviders/{serviceProviderId}",
            ),
            (
                server.mgmt("GET", &sp_path, &wrong, None).await,
                "GET",
                "/v1/serviceproviders/{serviceProviderId}",
            ),
            (
                server.mgmt("POST", &users, &org_cred, Some(&user)).await,
                "POST",
                "/v1/organizations/{organizationId}/users",
            ),
            (server.get("/readyz").await, "GET", "/readyz"),
        ]
    });
    for (r, method, route) in &expected {
        let id = request_id(r);
        let line = wait_for_access(&server, &id);
        let status = r.status.to_string();
        for part in [
            format!(" access method={method} route={route} status={status} "),
            format!(" bytes={} duration_ms=", r.body.len()),
            " client=127.0.0.1:".to_string(),
        ] {
            assert!(line.contains(&part), "{line} lacks {part:?}");
        }
        assert!(line.contains("[INFO] access "), "{line}");
    }
    assert_eq!(expected[7].0.status, 200, "{}", expected[7].0.text());
    assert_eq!(expected[6].0.status, 401);
    // A request hyper cannot parse, with the key in it.
    let (head, _) = run(raw(
        &server,
        format!("GET /1.0/domains?customerKey={customer_key} HTTP/1.1\r\nbad header\r\n\r\n")
            .as_bytes(),
    ));
    let id = header_in(&head, "x-request-id").unwrap().to_string();
    let line = wait_for_access(&server, &id);
    assert!(
        line.contains(" access method=- route=unmatched status=400 ")
            && line.contains("duration_ms=-"),
        "{line}"
    );

    let log = stop_and_read_log(server).join("\n");
    for secret in &secrets {
        assert!(
            !log.contains(secret.as_str()),
            "the log holds a secret: {secret}"
        );
    }
}

/// `--access-log errors` writes only answers of 400 and above; `off` none.
#[test]
fn the_access_log_can_be_limited_to_errors_or_turned_off() {
    for (mode, want_ok) in [("errors", false), ("off", false), ("all", true)] {
        let dir = TempDir::new();
        let server = ChildServer::spawn(dir.path(), &["--plain-http", "--access-log", mode]);
        let (ok, missing) = run(async { (server.get("/healthz").await, server.get("/x").await) });
        let got = access_lines(&stop_and_read_log(server));
        assert_eq!(got.contains_key(&request_id(&ok)), want_ok, "{mode}");
        assert_eq!(
            got.contains_key(&request_id(&missing)),
            mode != "off",
            "{mode}"
        );
    }
    let dir = TempDir::new();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"));
    command
        .args(["serve", "--access-log", "sometimes", "--data-dir"])
        .arg(dir.path());
    let out = command.output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--access-log"));
}
