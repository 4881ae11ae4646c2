//! The OpenAPI document and the router agree, both ways: every operation the document lists is
//! a route the server answers (with that method and template), and every route is in the
//! document.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

/// The (method, path template) of every operation in `openapi.yaml`: a path is a line of its
/// own two spaces in, under `paths:`; its operations are the method keys four spaces in below
/// it.
fn documented() -> BTreeSet<(String, String)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"))
        .expect("openapi.yaml");
    let mut out = BTreeSet::new();
    let mut in_paths = false;
    let mut path: Option<String> = None;
    for line in doc.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            in_paths = line.trim_end() == "paths:";
            path = None;
            continue;
        }
        if !in_paths {
            continue;
        }
        if let Some(p) = line.strip_prefix("  /") {
            path = Some(format!("/{}", p.trim_end().trim_end_matches(':')));
            continue;
        }
        if let (Some(p), Some(m)) = (&path, line.strip_prefix("    ")) {
            let key = m.trim_end().trim_end_matches(':');
            if ["get", "post", "put", "delete", "patch", "head", "options"].contains(&key) {
                out.insert((key.to_ascii_uppercase(), p.clone()));
            }
        }
    }
    out
}

#[test]
fn every_route_is_documented_and_every_documented_operation_is_a_route() {
    let documented = documented();
    assert!(!documented.is_empty(), "no operation found in openapi.yaml");
    let routes: BTreeSet<(String, String)> = parasol::router::routes()
        .into_iter()
        .map(|(m, t)| (m.to_string(), t.to_string()))
        .collect();
    let undocumented: Vec<_> = routes.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routes).collect();
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "routes missing from openapi.yaml: {undocumented:?}; operations the router lacks: {unrouted:?}"
    );
}
