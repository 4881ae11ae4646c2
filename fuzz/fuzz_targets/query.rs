//! The query-string reader (`http::Query`) on any query text, and on queries written from any
//! names and values. Input: the query text on the first line; then `name<TAB>value` lines.
//!
//! Invariants: it never panics; a query written with `http::query_encode` from the
//! `(name, value)` pairs reads back, for each name, the value of that name's first pair.
#![no_main]

use libfuzzer_sys::fuzz_target;
use parasol::http::{query_encode, Query};

fuzz_target!(|input: &str| {
    let mut lines = input.split('\n');
    let raw = lines.next().unwrap_or("");
    let pairs: Vec<(&str, &str)> = lines
        .map(|l| l.split_once('\t').unwrap_or((l, "")))
        .collect();
    if let Ok(uri) = format!("/1.0/domains?{raw}").parse::<hyper::Uri>() {
        let q = Query::new(uri);
        for name in ["customerKey", "page", "limit", "where[name]", ""] {
            let _ = q.get(name);
        }
        for (name, _) in &pairs {
            let _ = q.get(name);
        }
    }
    let text = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", query_encode(k), query_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let uri: hyper::Uri = format!("/1.0/domains?{text}")
        .parse()
        .unwrap_or_else(|e| panic!("an encoded query does not parse: {text:?}: {e}"));
    let q = Query::new(uri);
    for (name, _) in &pairs {
        let first = pairs.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
        assert_eq!(q.get(name).as_deref(), first, "{name:?} in {text:?}");
    }
});
