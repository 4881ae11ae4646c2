//! The reputation-file and known-good-file parsers (`reputation::parse_reputation`,
//! `parse_known_good`) on any text.
//!
//! Invariants: they never panic; a refusal names a line of the text (`line N: ...`, N at most
//! the number of lines); an accepted file's table holds exactly its names (normalised), each
//! with the value of its last line (the score, or 1 for a known-good name).
#![no_main]

use libfuzzer_sys::fuzz_target;
use parasol::enforcement::domain::normalize;
use parasol::reputation::{parse_known_good, parse_reputation};

/// The lines' contents as the parsers read them: `#` comments and surrounding space removed,
/// blank lines skipped.
fn contents(text: &str) -> impl Iterator<Item = &str> {
    text.split('\n')
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
}

/// The names and values an accepted file must hold, last line winning.
fn expected(text: &str, known_good: bool) -> Vec<(String, i8)> {
    let mut out: Vec<(String, i8)> = Vec::new();
    for line in contents(text) {
        let (name, value) = if known_good {
            (line.split_once(',').map_or(line, |(_, n)| n), 1)
        } else {
            let (n, s) = line.split_once(',').expect("an accepted line has a comma");
            let v = match s.trim() {
                "-1" => -1,
                "0" => 0,
                _ => 1,
            };
            (n, v)
        };
        let name = normalize(name.trim()).expect("an accepted line's name normalises");
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some(e) => e.1 = value,
            None => out.push((name, value)),
        }
    }
    out
}

fn check_refusal(e: &str, text: &str) {
    let lines = text.split('\n').count();
    let n: usize = e
        .strip_prefix("line ")
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a refusal that names no line: {e:?}"));
    assert!(n >= 1 && n <= lines, "{e:?} for {lines} lines");
}

fuzz_target!(|text: &str| {
    for known_good in [false, true] {
        let parsed = if known_good {
            parse_known_good(text)
        } else {
            parse_reputation(text)
        };
        match parsed {
            Ok(table) => {
                let want = expected(text, known_good);
                assert_eq!(table.len(), want.len());
                for (name, value) in want {
                    assert_eq!(table.get(&name), Some(value), "{name}");
                }
            }
            Err(e) => check_refusal(&e, text),
        }
    }
});
