#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The resolver exporter (`parasol serve --export-dir`) against the real server: the files follow
//! every kind of change, stale files go, serials keep increasing across restarts, rewrites are
//! coalesced, and the reload command runs after rewrites without ever blocking the server or
//! running twice at once. The resolvers themselves read these files in `.ci/resolvers-e2e`.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::*;
use parasol::export::formats::{render_to_string, rpz_serial, serial_after, Format};
use parasol::export::{ExportConfig, INTERVAL};
use serde_json::{json, Value};

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn exports_of(s: &TestServer) -> PathBuf {
    s.dir.path().join("exports")
}

async fn start(formats: &[Format]) -> TestServer {
    let formats = formats.to_vec();
    TestServer::start_with(move |c| {
        let mut e = ExportConfig::new(c.data_dir.join("exports"));
        e.formats = formats;
        c.export = Some(e);
    })
    .await
}

/// What the server should have written for the organization's lists, with the serial its RPZ
/// file carries now.
fn expected(
    format: Format,
    org: i64,
    blocked: &[&str],
    exceptions: &[&str],
    serial: u32,
) -> String {
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    render_to_string(format, org, &own(blocked), &own(exceptions), serial)
}

/// Waits until every resolver file of `org` holds exactly these lists.
async fn wait_for_lists(dir: &Path, org: i64, blocked: &[&str], exceptions: &[&str]) {
    for format in Format::RESOLVERS {
        let path = dir.join(format.file_name(org));
        wait_for(
            &format!("{} with {blocked:?} and {exceptions:?}", path.display()),
            || {
                let text = read(&path)?;
                let serial = rpz_serial(&text).unwrap_or(0);
                (text == expected(format, org, blocked, exceptions, serial)).then_some(())
            },
        )
        .await;
    }
}

async fn post(s: &TestServer, key: &str, names: &[&str]) {
    let events: Vec<Value> = names.iter().map(|n| event(n)).collect();
    let r = s
        .post_json(&format!("/1.0/events?customerKey={key}"), &json!(events))
        .await;
    assert_eq!(r.status, 202, "{}", r.text());
}

/// Every kind of change reaches every file: an organization created after the start gets its
/// (empty) files, then events that list names, an allow-list entry under a listed name (an
/// exception) and one that covers a listed name, a domain deleted through the enforcement
/// interface, and the organization's deletion, which removes its files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_follow_every_change_of_the_lists() {
    let s = start(&Format::RESOLVERS).await;
    let dir = exports_of(&s);
    let (org, key) = s.create_org("Exported");
    wait_for_lists(&dir, org, &[], &[]).await;

    post(
        &s,
        &key,
        &["bad.example", "evil.test", "www.unlisted.example"],
    )
    .await;
    wait_for_lists(
        &dir,
        org,
        &["bad.example", "evil.test", "www.unlisted.example"],
        &[],
    )
    .await;

    let store = s.store();
    let now = parasol::timefmt::now();
    assert!(run(store.allow_add(org, "good.bad.example".into(), now)).unwrap());
    assert!(run(store.allow_add(org, "unlisted.example".into(), now)).unwrap());
    wait_for_lists(
        &dir,
        org,
        &["bad.example", "evil.test"],
        &["good.bad.example"],
    )
    .await;

    let r = s
        .delete(&format!(
            "/1.0/domains?customerKey={key}&where%5Bname%5D=evil.test"
        ))
        .await;
    assert_eq!(r.status, 204);
    wait_for_lists(&dir, org, &["bad.example"], &["good.bad.example"]).await;

    assert!(run(store.allow_remove(org, "good.bad.example".into())).unwrap());
    wait_for_lists(&dir, org, &["bad.example"], &[]).await;

    // Another organization's files are its own.
    let (other, other_key) = s.create_org("Other");
    post(&s, &other_key, &["other.example"]).await;
    wait_for_lists(&dir, other, &["other.example"], &[]).await;

    assert!(run(store.delete_organization(org)).unwrap());
    for format in Format::RESOLVERS {
        let path = dir.join(format.file_name(org));
        wait_for(&format!("{} removed", path.display()), || {
            (!path.exists()).then_some(())
        })
        .await;
    }
    wait_for_lists(&dir, other, &["other.example"], &[]).await;
    store.close();
    s.stop().await;
}

/// A round follows a list by the names listed since the last one, and still sees what that does
/// not show: a name listed under an allow-listed one makes it an exception, and a name removed
/// while another is listed (in one round, as here most of the time) goes from the files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_follow_names_listed_and_removed_between_rounds() {
    let s = start(&Format::RESOLVERS).await;
    let dir = exports_of(&s);
    let (org, key) = s.create_org("Followed");
    post(&s, &key, &["a.example", "b.example"]).await;
    wait_for_lists(&dir, org, &["a.example", "b.example"], &[]).await;
    let rpz = dir.join(Format::Rpz.file_name(org));
    let serial = rpz_serial(&read(&rpz).unwrap()).unwrap();
    let store = s.store();
    let now = parasol::timefmt::now();
    // Under no listed name yet: no exception, but the files are rewritten (a new serial).
    assert!(run(store.allow_add(org, "good.bad.example".into(), now)).unwrap());
    wait_for("the files rewritten after the allow-list entry", || {
        serial_after(rpz_serial(&read(&rpz)?)?, serial).then_some(())
    })
    .await;
    post(&s, &key, &["bad.example"]).await;
    wait_for_lists(
        &dir,
        org,
        &["a.example", "b.example", "bad.example"],
        &["good.bad.example"],
    )
    .await;
    assert!(run(store.delete_domain_by_name(org, "a.example".into())).unwrap());
    post(&s, &key, &["c.example"]).await;
    wait_for_lists(
        &dir,
        org,
        &["b.example", "bad.example", "c.example"],
        &["good.bad.example"],
    )
    .await;
    // The last name removed and a new one listed in its place.
    assert!(run(store.delete_domain_by_name(org, "c.example".into())).unwrap());
    post(&s, &key, &["d.example"]).await;
    wait_for_lists(
        &dir,
        org,
        &["b.example", "bad.example", "d.example"],
        &["good.bad.example"],
    )
    .await;
    store.close();
    s.stop().await;
}

/// At its start the exporter writes every organization's files in the formats asked for and
/// removes what would not be written now: files of organizations that no longer exist, files of
/// formats no longer exported, and temporary files a process left behind. Anything else in the
/// directory is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_files_are_removed_at_start_and_others_left_alone() {
    let s = start(&[Format::Rpz, Format::Unbound]).await;
    let (org, key) = s.create_org("Kept");
    post(&s, &key, &["kept.example"]).await;
    let dir = exports_of(&s);
    wait_for("the first files", || {
        read(&dir.join(format!("org-{org}.rpz")))?
            .contains("kept.example")
            .then_some(())
    })
    .await;
    let data = s.stop().await;

    let stale = [
        "org-999.rpz".to_string(),
        "org-999.unbound.conf".into(),
        format!("org-{org}.hosts"),
        format!("org-{org}.dnsmasq.conf"),
        format!(".org-{org}.rpz.tmp-12345"),
    ];
    let left_alone = ["notes.txt", "org-999.txt", "org-x.rpz", "README"];
    for name in stale.iter().map(String::as_str).chain(left_alone) {
        std::fs::write(dir.join(name), "x\n").unwrap();
    }
    let s = TestServer::start_in(data, |c| {
        let mut e = ExportConfig::new(c.data_dir.join("exports"));
        e.formats = vec![Format::Rpz, Format::Unbound];
        c.export = Some(e);
    })
    .await;
    for name in &stale {
        let path = dir.join(name);
        wait_for(&format!("{name} removed"), || {
            (!path.exists()).then_some(())
        })
        .await;
    }
    for name in left_alone {
        assert_eq!(read(&dir.join(name)).as_deref(), Some("x\n"), "{name}");
    }
    for format in [Format::Rpz, Format::Unbound] {
        let text = read(&dir.join(format.file_name(org))).unwrap();
        assert!(text.contains("kept.example"), "{text}");
    }
    s.stop().await;
}

/// A round of many files (the first after a restart: every organization's) writes them all to
/// temporary files, syncs them together and renames them: every file ends up in place with its
/// list, stale temporary files go, and none of the round's own is left behind (nor swept away
/// before it is renamed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_many_files_puts_them_all_in_place() {
    let s = start(&Format::RESOLVERS).await;
    let mut orgs = Vec::new();
    // 4 files each, past the batch's few files synced one by one.
    for i in 0..6 {
        let (org, key) = s.create_org(&format!("Many {i}"));
        let name = format!("many{i}.example");
        post(&s, &key, &[name.as_str()]).await;
        orgs.push((org, name));
    }
    let dir = exports_of(&s);
    for (org, name) in &orgs {
        wait_for_lists(&dir, *org, &[name.as_str()], &[]).await;
    }
    let data = s.stop().await;
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let leftover = dir.join(format!(".org-{}.hosts.tmp-12345", orgs[0].0));
    std::fs::write(&leftover, "half\n").unwrap();
    let s = TestServer::start_in(data, |c| {
        c.export = Some(ExportConfig::new(c.data_dir.join("exports")))
    })
    .await;
    for (org, name) in &orgs {
        wait_for_lists(&dir, *org, &[name.as_str()], &[]).await;
    }
    wait_for("the leftover temporary file removed", || {
        (!leftover.exists()).then_some(())
    })
    .await;
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        orgs.len() * Format::RESOLVERS.len(),
        "{names:?}"
    );
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    s.stop().await;
}

fn serial_of(path: &Path) -> Option<u32> {
    rpz_serial(&read(path)?)
}

/// The RPZ serial increases with every rewrite, across a restart too (the new server continues
/// from the serial in the file, even when the clock says less).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpz_serials_increase_with_every_rewrite_and_across_restarts() {
    let s = start(&[Format::Rpz]).await;
    let (org, key) = s.create_org("Serials");
    let path = exports_of(&s).join(format!("org-{org}.rpz"));
    let first = wait_for("the first file", || serial_of(&path)).await;
    post(&s, &key, &["one.example"]).await;
    let second = wait_for("the rewrite", || {
        read(&path)?
            .contains("one.example")
            .then(|| serial_of(&path))?
    })
    .await;
    assert!(serial_after(second, first), "{second} after {first}");
    let data = s.stop().await;

    // A serial far ahead of the clock, as many rewrites in a short time leave it.
    let ahead = second + 100_000;
    let text = read(&path)
        .unwrap()
        .replace(&format!(" {second} 3600 "), &format!(" {ahead} 3600 "));
    std::fs::write(&path, text).unwrap();
    let s = TestServer::start_in(data, |c| {
        let mut e = ExportConfig::new(c.data_dir.join("exports"));
        e.formats = vec![Format::Rpz];
        c.export = Some(e);
    })
    .await;
    // The first round rewrites every file.
    let third = wait_for("the rewrite at start", || {
        serial_of(&path).filter(|s| *s != ahead)
    })
    .await;
    assert_eq!(third, ahead + 1);
    post(&s, &key, &["two.example"]).await;
    let fourth = wait_for("the rewrite after the restart", || {
        read(&path)?
            .contains("two.example")
            .then(|| serial_of(&path))?
    })
    .await;
    assert_eq!(fourth, ahead + 2);
    s.stop().await;
}

/// Changes are coalesced: however many arrive, the files are rewritten at most once per
/// `INTERVAL` (each rewrite raises the serial by one, or to the clock's seconds when those are
/// ahead, so the serial's rise bounds the rewrites from above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrites_are_coalesced() {
    let s = start(&[Format::Rpz]).await;
    let (org, key) = s.create_org("Busy");
    let path = exports_of(&s).join(format!("org-{org}.rpz"));
    let before = wait_for("the first file", || serial_of(&path)).await;
    let started = Instant::now();
    const CLIENTS: usize = 8;
    const EACH: usize = 50;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = s.client.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..EACH {
                let r = client
                    .post_json(
                        &format!("/1.0/events?customerKey={key}"),
                        &event(&format!("n{c}-{i}.coalesce.example")),
                    )
                    .await;
                assert_eq!(r.status, 202);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let last = format!("n{}-{}.coalesce.example", CLIENTS - 1, EACH - 1);
    let after = wait_for("every name in the file", || {
        let text = read(&path)?;
        (text.matches(".coalesce.example CNAME .\n").count() == 2 * CLIENTS * EACH
            && text.contains(&last))
        .then(|| rpz_serial(&text))?
    })
    .await;
    let elapsed = started.elapsed();
    let rewrites = after.wrapping_sub(before);
    let bound = elapsed.as_secs_f64() / INTERVAL.as_secs_f64() + elapsed.as_secs_f64() + 2.0;
    assert!(
        f64::from(rewrites) <= bound,
        "{rewrites} rewrites for {} changes in {elapsed:?}",
        CLIENTS * EACH
    );
    s.stop().await;
}

/// A rewrite waits while the server is busy taking writes, but not for ever: while a large
/// upload of events stays in flight (a client that sent the head and the start of a batch, and
/// then nothing), names listed meanwhile still reach the files, one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stays_busy_does_not_hold_back_the_files() {
    use tokio::io::AsyncWriteExt;
    let s = TestServer::start_with(|c| {
        let mut e = ExportConfig::new(c.data_dir.join("exports"));
        e.formats = vec![Format::Hosts];
        c.export = Some(e);
        // The upload below stays in flight for the whole test.
        c.limits.body_timeout = std::time::Duration::from_secs(3600);
    })
    .await;
    let (org, key) = s.create_org("Never idle");
    let path = exports_of(&s).join(format!("org-{org}.hosts"));
    wait_for("the first file", || read(&path)).await;
    let mut upload = s.client.connect().await.unwrap();
    let head = format!(
        "POST /1.0/events?customerKey={key} HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: application/json\r\nContent-Length: 500000\r\n\r\n[{},",
        event("upload.never-idle.example")
    );
    upload.write_all(head.as_bytes()).await.unwrap();
    upload.flush().await.unwrap();
    for i in 0..3 {
        let name = format!("new{i}.never-idle.example");
        post(&s, &key, &[&name]).await;
        wait_for(
            &format!("{name} in the file with an upload in flight"),
            || read(&path)?.contains(&format!(" {name}\n")).then_some(()),
        )
        .await;
    }
    drop(upload);
    s.stop().await;
}

/// A file is never seen half-written: a reader that opens it over and over while large lists are
/// rewritten finds, every time, one whole version (the header, then two complete triggers per
/// name, the last line ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_see_a_half_written_file() {
    let s = start(&[Format::Rpz]).await;
    let (org, key) = s.create_org("Large");
    let path = exports_of(&s).join(format!("org-{org}.rpz"));
    wait_for("the first file", || read(&path)).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let text = std::fs::read_to_string(&path).unwrap();
                let rules: Vec<&str> = text.lines().skip(5).collect();
                assert!(
                    text.ends_with('\n'),
                    "a read ended mid-line: {} bytes",
                    text.len()
                );
                assert!(rpz_serial(&text).is_some(), "no SOA in a read");
                assert!(
                    rules.len().is_multiple_of(2),
                    "a read ended between a name's triggers"
                );
                for pair in rules.chunks(2) {
                    let name = pair[0].strip_suffix(" CNAME .").unwrap();
                    assert_eq!(pair[1], format!("*.{name} CNAME ."));
                }
                reads += 1;
            }
            reads
        })
    };
    // Batches of 2,000 new names each: every rewrite is some hundreds of kilobytes.
    for b in 0..10 {
        let names: Vec<String> = (0..2000)
            .map(|i| format!("n{i}.batch{b}.half-written.example"))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        post(&s, &key, &names).await;
    }
    wait_for("the last batch in the file", || {
        read(&path)?
            .contains("\n*.n1999.batch9.half-written.example CNAME .\n")
            .then_some(())
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().expect("every read was one whole file");
    assert!(reads > 0);
    s.stop().await;
}

/// A shell snippet for `--export-reload-cmd` that records each run in `log` (and "overlap" when
/// it finds another run still going), copies the exported hosts files to `seen` (logging the run
/// first, so that whoever finds a copy in `seen` finds its run in `log`), and takes a while, so
/// that rewrites happen while it runs.
fn recording_reload(work: &Path) -> String {
    let w = work.display();
    format!(
        "if mkdir '{w}/busy' 2>/dev/null; then :; else echo overlap >> '{w}/log'; fi; \
         cat '{w}'/exports/org-*.hosts > '{w}/seen.tmp'; echo run >> '{w}/log'; \
         mv '{w}/seen.tmp' '{w}/seen'; sleep 0.3; rmdir '{w}/busy'"
    )
}

/// The reload command runs after rewrites, never twice at once, and a rewrite made while it runs
/// is followed by another run (the last run sees the last list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reload_command_follows_rewrites_one_run_at_a_time() {
    let work = TempDir::new();
    let data = work.path().join("data");
    let key = cli_create_org(&data, "Reloaded");
    let exports = work.path().join("exports");
    let cmd = recording_reload(work.path());
    let server = ChildServer::spawn(
        &data,
        &[
            "--plain-http",
            "--export-dir",
            exports.to_str().unwrap(),
            "--export-formats",
            "hosts",
            "--export-reload-cmd",
            &cmd,
        ],
    );
    // The first run follows the first round.
    wait_for("a first reload", || read(&work.path().join("log"))).await;
    for i in 0..12 {
        let r = server
            .post_json(
                &format!("/1.0/events?customerKey={key}"),
                &event(&format!("r{i}.reload.example")),
            )
            .await;
        assert_eq!(r.status, 202);
    }
    wait_for("a reload that saw the last name", || {
        read(&work.path().join("seen"))?
            .contains("0.0.0.0 r11.reload.example\n")
            .then_some(())
    })
    .await;
    let log = read(&work.path().join("log")).unwrap();
    assert!(!log.contains("overlap"), "{log}");
    assert!(log.lines().count() >= 2, "{log}");
    assert!(server.stop().success());
}

/// A reload command that fails is logged with its status and what it said; one that hangs blocks
/// nothing: the files keep following the lists, and the server stops at once, killing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_or_hanging_reload_command_blocks_nothing() {
    let work = TempDir::new();
    let data = work.path().join("data");
    let key = cli_create_org(&data, "Failing");
    let exports = work.path().join("exports");
    let server = ChildServer::spawn(
        &data,
        &[
            "--plain-http",
            "--export-dir",
            exports.to_str().unwrap(),
            "--export-reload-cmd",
            "echo cannot reach the resolver >&2; exit 3",
        ],
    );
    server.wait_for_log("failed (exit status 3): cannot reach the resolver");
    assert!(server.stop().success());

    let marker = work.path().join("hanging");
    let cmd = format!("touch '{}'; sleep 600", marker.display());
    let server = ChildServer::spawn(
        &data,
        &[
            "--plain-http",
            "--export-dir",
            exports.to_str().unwrap(),
            "--export-reload-cmd",
            &cmd,
        ],
    );
    wait_for("the hanging command", || marker.exists().then_some(())).await;
    let r = server
        .post_json(
            &format!("/1.0/events?customerKey={key}"),
            &json!([event("while.hanging.example")]),
        )
        .await;
    assert_eq!(r.status, 202);
    let hosts = std::fs::read_dir(&exports)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".hosts"))
        .unwrap();
    wait_for("the rewrite while the command hangs", || {
        read(&hosts)?
            .contains("while.hanging.example")
            .then_some(())
    })
    .await;
    // `stop` fails unless the server exits within `WAIT`: the command's 600 s do not hold it.
    assert!(server.stop().success());
}

/// A directory the exporter cannot write stops the server at start, naming it.
#[tokio::test]
async fn an_unwritable_export_directory_is_refused_at_start() {
    let work = TempDir::new();
    let file = work.path().join("not-a-directory");
    std::fs::write(&file, "x").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--plain-http",
            "--data-dir",
        ])
        .arg(work.path().join("data"))
        .arg("--export-dir")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--export-dir"), "{err}");
}

/// The niceness of each of this process's threads whose name starts with `prefix` (Linux: the
/// 19th field of `/proc/self/task/<tid>/stat`, counted after the command's parentheses).
fn niceness_of_threads(prefix: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let task = task.unwrap().path();
        let (Some(comm), Some(stat)) = (read(&task.join("comm")), read(&task.join("stat"))) else {
            continue;
        };
        if !comm.starts_with(prefix) {
            continue;
        }
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
            .split_ascii_whitespace()
            .collect();
        out.push(fields[16].parse().unwrap());
    }
    out
}

/// The exporter's work has a deadline, so it does not run at the lowest priority (nice +19),
/// which other processes keeping every core busy starve for tens of seconds: the thread that
/// writes the files and the one that reads the lists (SQLite) run at the bulk threads' +5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exporter_does_not_run_at_the_lowest_priority() {
    let s = start(&[Format::Hosts]).await;
    let (org, key) = s.create_org("Priority");
    post(&s, &key, &["priority.example"]).await;
    let path = exports_of(&s).join(format!("org-{org}.hosts"));
    wait_for("the name in the file", || {
        read(&path)?.contains(" priority.example\n").then_some(())
    })
    .await;
    // SAFETY: getpriority on the calling thread.
    let ours = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let writers = niceness_of_threads("parasol-export");
    assert!(!writers.is_empty(), "no exporter thread found");
    let readers = niceness_of_threads("parasol-store-b");
    if !on_postgres() {
        assert!(!readers.is_empty(), "no store background thread found");
    }
    for nice in writers.into_iter().chain(readers) {
        assert!(
            nice < 19 && nice <= ours + 5,
            "an exporter thread at nice {nice}"
        );
    }
    s.stop().await;
}
