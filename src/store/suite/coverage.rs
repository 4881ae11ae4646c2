//! The suite cannot fall behind the store: every operation declared in `managed.rs` (the
//! management operations) and in `mod.rs`'s `operations!` (the `Backend` trait) is called
//! somewhere in the suite's files, read from the source.

use std::path::Path;

/// The operations a macro invocation `name! { ... }` in `file` declares (`fn op(&self ...`).
fn declared(file: &Path, invocation: &str) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let start = text
        .find(&format!("\n{invocation}! {{"))
        .unwrap_or_else(|| panic!("{} has no {invocation}! block", file.display()));
    let block = &text[start..];
    let end = block.find("\n}\n").unwrap();
    block[..end]
        .split("fn ")
        .skip(1)
        .filter_map(|rest| rest.split_once("(&self"))
        .map(|(name, _)| name.trim().to_string())
        .collect()
}

#[test]
fn every_operation_of_the_store_is_called_somewhere_in_the_suite() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let managed = declared(&store.join("managed.rs"), "managed");
    let backend = declared(&store.join("mod.rs"), "operations");
    // The counts the store declares today: a block the reading above misses fails here.
    assert!(managed.len() >= 60, "{managed:?}");
    assert!(backend.len() >= 10, "{backend:?}");
    let mut suite = String::new();
    for entry in std::fs::read_dir(store.join("suite")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name() != Some("coverage.rs".as_ref()) {
            suite.push_str(&std::fs::read_to_string(path).unwrap());
        }
    }
    let missing: Vec<_> = managed
        .iter()
        .chain(&backend)
        .filter(|op| !suite.contains(&format!(".{op}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "not called in src/store/suite/: {missing:?}"
    );
}
