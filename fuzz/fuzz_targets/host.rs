//! The Host header rule (`host::parse`, `host::request_host`) and the link builder
//! (`host::base_url`) on any header value.
//!
//! Invariants: it never panics; a value is accepted exactly when `request_host` accepts it as
//! the only Host header; a link built on an accepted value is an absolute URL whose authority
//! is that value, unchanged, and whose path and query are the ones appended.
#![no_main]

use hyper::header::{HeaderValue, HOST};
use hyper::HeaderMap;
use libfuzzer_sys::fuzz_target;
use parasol::host::{base_url, parse, request_host};

fuzz_target!(|value: &[u8]| {
    let parsed = parse(value);
    let Ok(header) = HeaderValue::from_bytes(value) else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert(HOST, header);
    assert_eq!(
        request_host(&headers).map(|h| h.map(str::to_string)),
        parsed.map(|h| Some(h.to_string()))
    );
    let Ok(host) = parsed else {
        return;
    };
    let fallback = "127.0.0.1:8443".parse().unwrap();
    let url = format!(
        "{}/1.0/domains?customerKey=k&page=2&limit=200",
        base_url("https", &headers, fallback)
    );
    let uri: hyper::Uri = url
        .parse()
        .unwrap_or_else(|e| panic!("a link on {host:?} does not parse: {url:?}: {e}"));
    assert_eq!(uri.scheme_str(), Some("https"));
    assert_eq!(uri.authority().map(|a| a.as_str()), Some(host), "{url}");
    assert_eq!(uri.path(), "/1.0/domains");
    assert_eq!(uri.query(), Some("customerKey=k&page=2&limit=200"));
});
