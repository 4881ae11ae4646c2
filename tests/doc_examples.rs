//! Every shell example in the README and in `docs/` runs as written, in order, on a fresh
//! `--demo` world.
//!
//! For each document, a fresh working directory gets a demo server started exactly as the README
//! says (`parasol serve --demo`: data in `./parasol-data`, listening on 127.0.0.1:8443), with the
//! `parasol` binary on `PATH`. Then the document's ```` ```sh ```` blocks run in order in one bash
//! shell (so a variable set in one block is there in the next), each under `set -e -o pipefail`:
//! a block whose command fails fails the test. A line `# => TEXT` in a block is output the
//! document shows: TEXT must appear in that block's standard output, in the order the lines
//! come (`...` inside TEXT stands for anything). Commands meant for an appliance's root shell
//! (`dpkg`, `systemctl`) are shown in ```` ```console ```` blocks instead, and are exercised by
//! the package tests.
//!
//! The README's first block holds the two commands of a fresh clone: `cargo run ... -- serve
//! --demo` (this test runs the same server from the binary cargo built) and `cargo test`
//! (which is running this test); the test checks that they are exactly those two.

// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The two commands of a fresh clone, as the README gives them.
const BOOTSTRAP: [&str; 2] = [
    "cargo run --locked --release -- serve --demo",
    "cargo test --locked",
];

/// A fenced ```sh block: its first line's number and its text.
struct Block {
    line: usize,
    text: String,
}

fn sh_blocks(doc: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut current: Option<Block> = None;
    for (i, line) in doc.lines().enumerate() {
        match &mut current {
            None if line.trim_end() == "```sh" => {
                current = Some(Block {
                    line: i + 2,
                    text: String::new(),
                })
            }
            Some(_) if line.trim_end() == "```" => out.extend(current.take()),
            Some(b) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
            None => {}
        }
    }
    assert!(current.is_none(), "an unclosed ```sh block");
    out
}

/// The documents, README first.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .collect()
        })
        .unwrap_or_default();
    docs.sort();
    docs.insert(0, Path::new(ROOT).join("README.md"));
    docs
}

/// Whether `text` holds `pattern`, where `...` in the pattern stands for anything.
fn shows(text: &str, pattern: &str) -> Option<usize> {
    let mut at = 0;
    let mut start = None;
    for (i, piece) in pattern.split("...").enumerate() {
        if piece.is_empty() {
            continue;
        }
        let found = text[at..].find(piece)?;
        if i == 0 || start.is_none() {
            start.get_or_insert(at + found);
        }
        at += found + piece.len();
    }
    Some(at)
}

/// A demo server started as the README says, in `dir`, stopped on drop.
struct Demo(std::process::Child);

impl Demo {
    fn start(dir: &Path) -> Demo {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
            .args(["serve", "--demo"])
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("ready: serving") {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = child.kill();
            panic!("the demo server did not start (is 127.0.0.1:8443 free?)");
        }
        Demo(child)
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        // SAFETY: kill with a valid signal on our own child's pid.
        unsafe {
            libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(40);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn every_shell_example_runs_as_written_on_a_fresh_demo_world() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_parasol"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for doc_path in documents() {
        let name = doc_path.strip_prefix(ROOT).unwrap().display().to_string();
        let doc = std::fs::read_to_string(&doc_path).unwrap();
        let mut blocks = sh_blocks(&doc);
        if name == "README.md" {
            // The two commands of a fresh clone come first; the server they start is the one
            // started below.
            assert!(!blocks.is_empty(), "README.md has no ```sh block");
            let first = blocks.remove(0);
            let commands: Vec<&str> = first
                .text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .collect();
            assert_eq!(commands, BOOTSTRAP, "README.md's first block");
        }
        if blocks.is_empty() {
            continue;
        }
        let work = tempdir(&name);
        let _demo = Demo::start(&work);
        // One shell for the whole document: each block's output goes to a file of its own.
        let mut driver = String::from("set -e -o pipefail\n");
        for (i, b) in blocks.iter().enumerate() {
            let script = work.join(format!(".block{i}.sh"));
            std::fs::write(&script, &b.text).unwrap();
            driver.push_str(&format!(
                "echo {i} > .current\nsource {} > .out{i} 2> .err{i}\n",
                script.display()
            ));
        }
        driver.push_str("echo done > .current\n");
        let status = std::process::Command::new("bash")
            .arg("-c")
            .arg(&driver)
            .current_dir(&work)
            .env("PATH", &path)
            .status()
            .unwrap();
        let current = std::fs::read_to_string(work.join(".current")).unwrap_or_default();
        let read = |f: String| std::fs::read_to_string(work.join(f)).unwrap_or_default();
        if !status.success() || current.trim() != "done" {
            let i: usize = current.trim().parse().unwrap_or(0);
            panic!(
                "{name}: the block at line {} failed ({status}).\n--- block\n{}--- stdout\n{}--- stderr\n{}",
                blocks[i].line,
                blocks[i].text,
                read(format!(".out{i}")),
                read(format!(".err{i}")),
            );
        }
        for (i, b) in blocks.iter().enumerate() {
            let out = read(format!(".out{i}"));
            let mut at = 0;
            for expected in b
                .text
                .lines()
                .filter_map(|l| l.trim_start().strip_prefix("# => "))
            {
                match shows(&out[at..], expected.trim()) {
                    Some(end) => at += end,
                    None => panic!(
                        "{name}: the block at line {} does not show {expected:?}.\n--- its output\n{out}",
                        b.line
                    ),
                }
            }
            ran += 1;
        }
        let _ = std::fs::remove_dir_all(&work);
    }
    assert!(ran > 0, "no shell example found");
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "parasol-doc-{}-{}",
        name.replace(['/', '.'], "-"),
        uuid::Uuid::new_v4()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_output_matcher_reads_ellipses_as_anything() {
    assert!(shows("202 {\"id\":\"6ece\"}", "{\"id\":\"...\"}").is_some());
    assert!(shows("a b c", "a...c").is_some());
    assert!(shows("a b c", "c...a").is_none());
    assert!(shows("abc", "abd").is_none());
}
