//! Operators' online backup and restore with the real binary, and the data-directory lock: a
//! backup taken while the server writes restores into a fresh directory with the data it had;
//! restore and a second server refuse a directory a server holds; a damaged or foreign file is
//! refused and the current database stays as it was.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn parasol(args: &[&str], dir: &Path, file_flag: &str, file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .arg(file_flag)
        .arg(file)
        .output()
        .unwrap()
}

fn backup(dir: &Path, out: &Path) -> Output {
    parasol(&["backup"], dir, "--output", out)
}

fn restore(dir: &Path, input: &Path) -> Output {
    parasol(&["restore"], dir, "--input", input)
}

fn json_of(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn refused(o: &Output, needle: &str) {
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err: Value = serde_json::from_slice(&o.stderr).unwrap();
    let msg = err["error"].as_str().unwrap();
    assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
}

fn names(rt: &tokio::runtime::Runtime, c: &Client, key: &str) -> Vec<String> {
    let r = rt.block_on(c.get(&format!("/1.0/domains?customerKey={key}&limit=200")));
    assert_eq!(r.status, 200, "{}", r.text());
    let mut v: Vec<String> = r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn org_count(dir: &Path) -> i64 {
    open_db(&dir.join("parasol.db"))
        .query_row("SELECT count(*) FROM organizations", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn backup_while_serving_restores_into_a_fresh_directory() {
    let dir = TempDir::new();
    let server = ChildServer::spawn(dir.path(), &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let key = cli_create_org(dir.path(), "bk");
    let post = |d: &str| {
        let r = rt.block_on(server.post_json(&format!("/1.0/events?customerKey={key}"), &event(d)));
        assert_eq!(r.status, 202, "{}", r.text());
    };
    post("one.example");
    post("two.example");

    // Online: the server keeps running and keeps writing while the backup is taken.
    let out_dir = TempDir::new();
    let out = out_dir.path().join("parasol-backup.db");
    let b = json_of(&backup(dir.path(), &out));
    assert!(b["bytes"].as_u64().unwrap() > 0, "{b}");
    assert_eq!(b["schemaVersion"], parasol::store::SCHEMA_VERSION);
    post("after.example");

    // The server holds the directory: restore and a second server refuse it.
    refused(
        &restore(dir.path(), &out),
        "in use by a running parasol server",
    );
    let second = Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let second = wait_exit(second);
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("in use by a running parasol server")
            && err.contains(&server.child.id().to_string()),
        "{err}"
    );
    // ... and the first one is unharmed.
    assert_eq!(
        names(&rt, &server.client, &key),
        ["after.example", "one.example", "two.example"]
    );
    assert!(server.stop().success());

    let fresh = TempDir::new();
    let r = json_of(&restore(fresh.path(), &out));
    assert!(r["previous"].is_null(), "{r}");
    let again = ChildServer::spawn(fresh.path(), &[]);
    assert_eq!(
        names(&rt, &again.client, &key),
        ["one.example", "two.example"],
        "the backup is the database as it was when taken"
    );
    assert!(again.stop().success());

    // Restoring over an existing database keeps that one beside it.
    let r = json_of(&restore(dir.path(), &out));
    let previous = r["previous"].as_str().unwrap();
    assert!(previous.contains("parasol.db.pre-restore-"), "{r}");
    let kept = open_db(Path::new(previous));
    let n: i64 = kept
        .query_row("SELECT count(*) FROM domains", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 3, "the replaced database is kept whole");
}

/// Waits (bounded) for a child to exit and collects its output.
fn wait_exit(mut child: std::process::Child) -> Output {
    let deadline = Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the second server did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[tokio::test]
async fn a_second_server_in_process_is_refused_and_the_lock_goes_with_the_first() {
    let s = TestServer::start().await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = parasol::config::ServerConfig::new(s.dir.path());
    let err = parasol::server::run(config, listener, async {})
        .await
        .unwrap_err();
    assert!(err.contains("in use by a running parasol server"), "{err}");
    let dir = s.stop().await;
    // Stopped: the directory is free again.
    let s = TestServer::start_in(dir, |_| {}).await;
    s.stop().await;
}

#[test]
fn damaged_or_foreign_input_is_refused_and_the_database_stays() {
    let dir = TempDir::new();
    cli_create_org(dir.path(), "stays");
    let files = TempDir::new();

    let junk = files.path().join("junk.db");
    std::fs::write(&junk, vec![b'x'; 8192]).unwrap();
    refused(&restore(dir.path(), &junk), "not a Parasol database");

    let foreign = files.path().join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('hi');")
        .unwrap();
    refused(&restore(dir.path(), &foreign), "not a Parasol database");

    // A real backup, damaged: a page of the organizations' rows overwritten.
    let good = files.path().join("good.db");
    for i in 0..40 {
        cli_create_org(dir.path(), &format!("filler {i} {}", "x".repeat(200)));
    }
    json_of(&backup(dir.path(), &good));
    let (page, page_size): (i64, i64) = rusqlite::Connection::open(&good)
        .unwrap()
        .query_row(
            "SELECT pageno, pgsize FROM dbstat WHERE name = 'organizations' AND pagetype = 'leaf'
             ORDER BY pageno DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let mut bytes = std::fs::read(&good).unwrap();
    let start = ((page - 1) * page_size) as usize;
    bytes[start..start + page_size as usize].fill(0x5a);
    let bad = files.path().join("bad.db");
    std::fs::write(&bad, &bytes).unwrap();
    refused(&restore(dir.path(), &bad), "damaged");

    refused(
        &restore(dir.path(), &files.path().join("missing.db")),
        "no such file",
    );

    assert_eq!(
        org_count(dir.path()),
        41,
        "the current database is untouched"
    );
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("restore"))
        .collect();
    assert!(left.is_empty(), "nothing left behind: {left:?}");

    // The good backup restores.
    let r = json_of(&restore(dir.path(), &good));
    assert!(r["previous"].is_string(), "{r}");
    assert_eq!(org_count(dir.path()), 41);
}
