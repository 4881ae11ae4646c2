//! The house's layers, read from the source: modules import downward only.
//!
//! A module depends on another when it names it in a `use crate::...`, `use super::...` or an
//! inline `crate::...` path, or declares it (`mod x;`); a child naming its own parent or an
//! ancestor is not counted (Rust's modules see their parents' items). Test code (`#[cfg(test)]`
//! modules) is left out. Two rules:
//! - nothing in `src/store/` depends on an interface module or on anything that depends on the
//!   store (the store sits below everything that uses it);
//! - no import circle runs through any module, the store's included (shared helpers live in leaf
//!   modules both sides import: `names.rs`, `histogram.rs`, `timefmt.rs`, `store/copied.rs`,
//!   ...).
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// The interface modules: the store must not import them.
const INTERFACES: [&str; 8] = [
    "enforcement",
    "management",
    "server",
    "router",
    "state",
    "error",
    "own",
    "cli",
];

/// Module path (`store::sqlite::writer`; the crate root is "") -> its source, test code cut off.
fn modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(Path::new(SRC), &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(SRC).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if matches!(
            parts.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            parts.pop();
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let text = match text.find("#[cfg(test)]\nmod tests {") {
            Some(i) => text[..i].to_string(),
            None => text,
        };
        out.insert(parts.join("::"), text);
    }
    // Modules declared under #[cfg(test)] are test code.
    let test_only: Vec<String> = out
        .iter()
        .flat_map(|(m, text)| {
            let lines: Vec<&str> = text.lines().collect();
            lines
                .windows(2)
                .filter(|w| w[0].trim() == "#[cfg(test)]")
                .filter_map(|w| mod_decl(w[1]))
                .map(|c| join(m, c))
                .collect::<Vec<_>>()
        })
        .collect();
    for t in test_only {
        out.remove(&t);
    }
    out
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}::{child}")
    }
}

/// `x` for a line `mod x;` or `pub mod x;` (any visibility).
fn mod_decl(line: &str) -> Option<&str> {
    let t = line.trim();
    let t = match t.strip_prefix("pub") {
        Some(r) => r.trim_start_matches(|c: char| c != ' ').trim_start(),
        None => t,
    };
    t.strip_prefix("mod ")?.strip_suffix(';')
}

/// The paths a module's code names: `use` trees flattened, `super::` resolved, inline `crate::`
/// paths, and its child modules.
fn named_paths(module: &str, text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| l.split(" // ").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    // `use` items, up to their semicolon.
    let mut rest = code.as_str();
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        rest = &rest[i + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = rest.find(';') else { break };
        let tree: String = rest[..end].split_whitespace().collect();
        flatten(&tree, &mut out);
    }
    // Inline `crate::a::b` paths.
    for (i, _) in code.match_indices("crate::") {
        let path: String = code[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        out.push(path.trim_end_matches(':').to_string());
    }
    let mut resolved: Vec<String> = out
        .into_iter()
        .filter_map(|p| {
            if let Some(r) = p.strip_prefix("crate::") {
                return Some(r.to_string());
            }
            let mut base: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
            let mut r = p.as_str();
            let mut climbed = false;
            while let Some(next) = r.strip_prefix("super::") {
                base.pop();
                r = next;
                climbed = true;
            }
            climbed.then(|| join(&base.join("::"), r))
        })
        .collect();
    for line in code.lines() {
        if let Some(c) = mod_decl(line) {
            resolved.push(join(module, c));
        }
    }
    resolved
}

/// Flattens a `use` tree (`crate::a::{b, c::{d, e}}`) into paths.
fn flatten(tree: &str, out: &mut Vec<String>) {
    let Some(open) = tree.find('{') else {
        out.push(tree.split(" as ").next().unwrap_or(tree).to_string());
        return;
    };
    let base = tree[..open].trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut depth, mut start) = (0, 0);
    let mut items = Vec::new();
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    for item in items.into_iter().filter(|i| !i.is_empty()) {
        if item == "self" {
            out.push(base.to_string());
        } else {
            flatten(&format!("{base}::{item}"), out);
        }
    }
}

/// Module -> the modules it depends on.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let resolve = |path: &str| -> Option<String> {
        let mut parts: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        while !parts.is_empty() {
            let m = parts.join("::");
            if mods.contains_key(&m) {
                return Some(m);
            }
            parts.pop();
        }
        None
    };
    mods.iter()
        .map(|(m, text)| {
            let deps = named_paths(m, text)
                .iter()
                .filter_map(|p| resolve(p))
                .filter(|d| d != m && !m.starts_with(&format!("{d}::")))
                .collect();
            (m.clone(), deps)
        })
        .collect()
}

fn reachable(g: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(m) = todo.pop() {
        for d in &g[&m] {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

fn in_store(m: &str) -> bool {
    m == "store" || m.starts_with("store::")
}

#[test]
fn the_store_imports_no_interface_and_nothing_above_it() {
    let g = graph();
    assert!(g.contains_key("store::sqlite") && g.contains_key("enforcement::handlers"));
    let mut climbs = Vec::new();
    for (m, deps) in g.iter().filter(|(m, _)| in_store(m)) {
        for d in deps.iter().filter(|d| !in_store(d)) {
            let top = d.split("::").next().unwrap();
            // A module outside the store that leads back into it is above it.
            let above = reachable(&g, d).iter().any(|r| in_store(r));
            if INTERFACES.contains(&top) || above {
                climbs.push(format!("{m} -> {d}"));
            }
        }
    }
    assert!(climbs.is_empty(), "the store climbs: {climbs:?}");
}

#[test]
fn no_import_circle_runs_through_any_module() {
    let g = graph();
    let circles: Vec<String> = g
        .keys()
        .filter(|m| reachable(&g, m).contains(*m))
        .cloned()
        .collect();
    assert!(
        circles.is_empty(),
        "modules on an import circle: {circles:?}"
    );
}

/// The reader itself: it sees `use` trees, `super::`, inline paths and `mod` lines, and the
/// circle that once ran error -> store -> store::metrics -> metrics -> error would be found.
#[test]
fn the_reader_sees_what_it_must() {
    let mut v = Vec::new();
    flatten("crate::a::{b,c::{d,e},self}", &mut v);
    assert_eq!(
        v,
        [
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c::e",
            "crate::a"
        ]
    );
    let paths = named_paths(
        "store::sqlite::x",
        "use super::y::Z;\nuse crate::m::{H, I};\n// crate::nope\nfn f() { crate::q::r(); }\nmod w;\n",
    );
    assert_eq!(
        paths,
        [
            "store::sqlite::y::Z",
            "m::H",
            "m::I",
            "m",
            "q::r",
            "store::sqlite::x::w"
        ]
    );
    let g = graph();
    assert!(g["error"].contains("store"), "{:?}", g["error"]);
    assert!(g["store"].contains("store::metrics"));
    assert!(g["metrics"].contains("error"));
    assert!(g["store::metrics"].contains("histogram"));
}
