//! The OpenAPI document and the router agree, both ways: every operation the document lists is
//! a route the server answers (with that method and template), and every route is in the
//! document. And the document reads the same to every YAML loader, and declares `null` where the
//! server takes it.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

/// The (method, path template) of every operation in `openapi.yaml`: a path is a line of its
/// own two spaces in, under `paths:`; its operations are the method keys four spaces in below
/// it.
fn document() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"))
        .expect("openapi.yaml")
}

fn documented() -> BTreeSet<(String, String)> {
    let doc = document();
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

/// Words that YAML 1.1 loaders (PyYAML, SnakeYAML, go-yaml v2) read as booleans and YAML 1.2
/// as strings (`true` and `false` are booleans to both).
const YAML11_BOOLEANS: [&str; 16] = [
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
    "OFF",
];

/// The plain (unquoted) scalars of a line: a mapping value, a block sequence item, or the items
/// of a flow sequence. Block text (descriptions) is skipped by the caller.
fn plain_scalars(line: &str) -> Vec<&str> {
    let t = line.trim_start();
    let value = match t.strip_prefix("- ") {
        Some(item) => item.split_once(": ").map_or(item, |(_, v)| v),
        None => match t.split_once(": ") {
            Some((_, v)) => v,
            None => return Vec::new(),
        },
    };
    let value = value.trim();
    match value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        Some(items) => items.split(',').map(str::trim).collect(),
        None => vec![value],
    }
}

/// The roaming computer's `status` enum held a plain `Off`, which YAML 1.1 loaders read as
/// `false`: a client generated from the document then had no "Off" status.
#[test]
fn no_plain_scalar_reads_as_a_boolean_to_yaml_1_1() {
    let doc = document();
    let mut block: Option<usize> = None;
    let mut found = Vec::new();
    for (n, line) in doc.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        // Inside a `|` or `>` block: its lines are indented deeper than its key.
        if let Some(key_indent) = block {
            if line.trim().is_empty() || indent > key_indent {
                continue;
            }
            block = None;
        }
        let t = line.trim_end();
        if t.ends_with(": |") || t.ends_with(": >") || t.ends_with("- |") {
            block = Some(indent);
            continue;
        }
        if t.trim_start().starts_with('#') {
            continue;
        }
        for v in plain_scalars(t) {
            if YAML11_BOOLEANS.contains(&v) {
                found.push(format!("line {}: {}", n + 1, t.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "plain scalars YAML 1.1 reads as booleans: {found:?}"
    );
    // The check sees the quoted value, and would see it plain.
    assert!(doc.contains("enum: ['Off', Open,"));
    assert_eq!(
        plain_scalars("          enum: [Off, Open]"),
        ["Off", "Open"]
    );
}

/// decisions.md: `null` for an optional field means absent, and so for one spelling of a field
/// that has two (`"deviceId": null` beside a `deviceID` string is accepted; tests/
/// enforcement_api.rs checks the server). The Event schema declared these as plain strings.
#[test]
fn the_event_schema_takes_null_under_either_spelling() {
    let doc = document();
    let event = doc
        .split_once("\n    Event:\n")
        .expect("the Event schema")
        .1
        .split("\n    EventBatchAccepted:")
        .next()
        .unwrap();
    let props = format!(
        "\n{}",
        event
            .split_once("\n      properties:\n")
            .expect("properties")
            .1
    );
    for field in ["deviceId", "deviceID", "dstUrl", "dstURL"] {
        let body = props
            .split_once(&format!("\n        {field}:\n"))
            .unwrap_or_else(|| panic!("{field} in Event"))
            .1;
        let ty = body
            .lines()
            .take_while(|l| l.starts_with("          "))
            .find_map(|l| l.trim().strip_prefix("type: "))
            .unwrap_or_else(|| panic!("{field} has no type"));
        assert_eq!(ty, "[string, 'null']", "{field}");
    }
}

/// The domain list links to the deletes of its first entry, and an accepted batch to the list,
/// so that a stateful run (Schemathesis' links) reaches the enforcement deletes with entries
/// that exist.
#[test]
fn the_domain_list_links_to_its_deletes() {
    let doc = document();
    let list = doc
        .split_once("operationId: listDomains")
        .expect("listDomains")
        .1
        .split("\n    delete:\n")
        .next()
        .unwrap();
    for (op, param) in [
        ("deleteDomain", "domainIdOrName: $response.body#/data/0/id"),
        (
            "deleteDomain",
            "domainIdOrName: $response.body#/data/0/name",
        ),
        (
            "deleteDomainByQuery",
            "query.where[name]: $response.body#/data/0/name",
        ),
    ] {
        let linked = list.split("operationId: ").skip(1).any(|l| {
            l.starts_with(&format!("{op}\n"))
                && l.contains(param)
                && l.contains("customerKey: $request.query.customerKey")
        });
        assert!(linked, "no link to {op} with {param}");
    }
    let post = doc
        .split_once("operationId: submitEvents")
        .unwrap()
        .1
        .split("\n  /")
        .next()
        .unwrap();
    assert!(post.contains("operationId: listDomains"));
}
