//! The operators' command line (JSON output) and the `--demo` world.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;
use serde_json::{json, Value};

#[test]
fn version_and_help() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("parasol {}", env!("CARGO_PKG_VERSION"))
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--data-dir",
        "--listen",
        "--tls-cert",
        "--tls-key",
        "--plain-http",
        "--public-url",
        "--reputation",
        "--known-good",
        "--cloud-limits",
        "--demo",
        "--log-level",
    ] {
        assert!(help.contains(flag), "serve --help lacks {flag}: {help}");
    }
}

#[tokio::test]
async fn provisioning_commands_print_json_and_keys_work() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let dir = TempDir::new();
    // The commands refuse a directory without a database (a mistyped --data-dir must not become
    // a fresh empty database); `parasol init` makes one.
    let (ok, _, err) = parasol(dir.path(), &["msp", "create", "--name", "Early"]);
    assert!(!ok);
    assert!(err.contains("holds no Parasol database"), "{err}");
    assert!(!dir.path().join("parasol.db").exists());
    let (ok, init, _) = parasol(dir.path(), &["init"]);
    assert!(ok);
    assert_eq!(init["created"], true);
    let (ok, again, _) = parasol(dir.path(), &["init"]);
    assert!(ok);
    assert_eq!(again["created"], false);
    let (ok, sp, _) = parasol(
        dir.path(),
        &["provider", "create", "--name", "Lab SP", "--seats", "50"],
    );
    assert!(ok);
    assert_eq!(sp["name"], "Lab SP");
    assert_eq!(sp["seatsTotal"], 50);
    let sp_id = sp["id"].as_i64().unwrap().to_string();
    let (ok, msp, _) = parasol(dir.path(), &["msp", "create", "--name", "Lab MSP"]);
    assert!(ok);
    let msp_id = msp["id"].as_i64().unwrap().to_string();
    // A provider's customer needs the fields the management interface requires, checked by the
    // same validation.
    let (ok, _, err) = parasol(
        dir.path(),
        &["org", "create", "--name", "Acme", "--provider", &sp_id],
    );
    assert!(!ok);
    assert!(err.contains("--street-address is required"), "{err}");
    let customer = |email: &str| {
        let args = "org create --name Acme --street-address Main --city Springfield --state IL";
        let mut args: Vec<&str> = args.split(' ').collect();
        args.extend(["--provider", &sp_id, "--admin-email", email]);
        parasol(dir.path(), &args)
    };
    let (ok, _, err) = customer("not-an-address");
    assert!(!ok);
    assert!(err.contains("--admin-email must be"), "{err}");
    let (ok, org, err) = customer("it@acme.example");
    assert!(ok, "{err}");
    let org_id = org["id"].as_i64().unwrap().to_string();
    let key1 = org["customerKey"].as_str().unwrap().to_string();
    assert_eq!(uuid::Uuid::parse_str(&key1).unwrap().get_version_num(), 4);
    let (ok, org2, _) = parasol(
        dir.path(),
        &["org", "create", "--name", "Globex", "--msp", &msp_id],
    );
    assert!(ok && org2["id"].as_i64().is_some());

    // Refusals are JSON on stderr with a non-zero status.
    let (ok, _, err) = parasol(
        dir.path(),
        &["org", "create", "--name", "X", "--provider", "999"],
    );
    assert!(!ok);
    assert!(
        serde_json::from_str::<Value>(err.trim()).unwrap()["error"].is_string(),
        "{err}"
    );

    let (ok, extra, _) = parasol(dir.path(), &["key", "create", "--org", &org_id]);
    assert!(ok);
    let key2 = extra["customerKey"].as_str().unwrap().to_string();
    let (_, listed, _) = parasol(dir.path(), &["key", "list", "--org", &org_id]);
    assert_eq!(listed.as_array().unwrap().len(), 2);

    let s = TestServer::start_in(dir, |_| {}).await;
    let post = |k: String| {
        let c = s.client.clone();
        async move {
            c.post_json(
                &format!("/1.0/events?customerKey={k}"),
                &event("cli.example"),
            )
            .await
            .status
        }
    };
    assert_eq!(post(key1.clone()).await, 202);
    assert_eq!(post(key2.clone()).await, 202);

    // Revoke one key while the server runs: 403 at once, the other still works.
    let (ok, _, _) = parasol(s.dir.path(), &["key", "revoke", "--key", &key2]);
    assert!(ok);
    assert_eq!(post(key2.clone()).await, 403);
    assert_eq!(post(key1.clone()).await, 202);
    // Rotate: every live key revoked, a new one issued.
    let (ok, rotated, _) = parasol(s.dir.path(), &["key", "rotate", "--org", &org_id]);
    assert!(ok);
    assert_eq!(rotated["revoked"], json!([key1.clone()]));
    let key3 = rotated["customerKey"].as_str().unwrap().to_string();
    assert_eq!(post(key1).await, 403);
    assert_eq!(post(key3.clone()).await, 202);

    // Management credentials: create, list (no secrets), revoke.
    let (ok, cred, _) = parasol(
        s.dir.path(),
        &["credential", "create", "--org", &org_id, "--label", "ci"],
    );
    assert!(ok);
    assert_eq!(
        cred["scope"],
        json!({"kind": "organization", "id": org_id.parse::<i64>().unwrap()})
    );
    let api_key = cred["apiKey"].as_str().unwrap().to_string();
    let (_, creds, _) = parasol(s.dir.path(), &["credential", "list"]);
    let text = creds.to_string();
    assert!(text.contains(&api_key) && !text.contains(cred["apiSecret"].as_str().unwrap()));
    let (ok, _, _) = parasol(s.dir.path(), &["credential", "revoke", "--key", &api_key]);
    assert!(ok);
    let (ok, _, _) = parasol(s.dir.path(), &["credential", "create", "--msp", "999"]);
    assert!(!ok, "a credential for a missing scope is refused");

    // Deleting the organization removes its data and its keys stop working.
    let (ok, _, _) = parasol(s.dir.path(), &["org", "delete", "--id", &org_id]);
    assert!(ok);
    assert_eq!(post(key3).await, 403);
    let left: i64 = s
        .db()
        .query_row("SELECT count(*) FROM domains", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn demo_world_and_credentials_file() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start_with(|c| c.demo = true).await;
    let path = s.dir.path().join("demo-credentials.json");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let keys: Vec<&String> = doc.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["baseUrl", "serviceProvider", "msp", "organizations"]);
    assert_eq!(doc["baseUrl"], format!("https://{}", s.addr));
    for who in ["serviceProvider", "msp"] {
        let o = doc[who].as_object().unwrap();
        assert_eq!(
            o.keys().collect::<Vec<_>>(),
            ["id", "apiKey", "apiSecret"],
            "{who}"
        );
    }
    let orgs = doc["organizations"].as_array().unwrap();
    assert_eq!(orgs.len(), 2);
    let db = s.db();
    for (i, o) in orgs.iter().enumerate() {
        assert_eq!(
            o.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["id", "name", "customerKey", "apiKey", "apiSecret"]
        );
        let key = o["customerKey"].as_str().unwrap();
        let r = s
            .post_json(
                &format!("/1.0/events?customerKey={key}"),
                &event("demo.example"),
            )
            .await;
        assert_eq!(r.status, 202);
        // The first organization is a customer of the service provider, the second of the MSP.
        let (sp, msp): (Option<i64>, Option<i64>) = db
            .query_row(
                "SELECT service_provider_id, msp_id FROM organizations WHERE id = ?1",
                [o["id"].as_i64().unwrap()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        if i == 0 {
            assert_eq!(sp, doc["serviceProvider"]["id"].as_i64());
            assert_eq!(msp, None);
        } else {
            assert_eq!(msp, doc["msp"]["id"].as_i64());
            assert_eq!(sp, None);
        }
        // Each organization has a default and a second site.
        let sites: i64 = db
            .query_row(
                "SELECT count(*) FROM sites WHERE organization_id = ?1",
                [o["id"].as_i64().unwrap()],
                |r| r.get(0),
            )
            .unwrap();
        assert!(sites >= 2);
    }
    // Secrets are stored only as argon2 hashes.
    let hashes: Vec<String> = db
        .prepare("SELECT secret_hash FROM api_credentials")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(hashes.len(), 4);
    assert!(hashes.iter().all(|h| h.starts_with("$argon2id$")));
    let secret = orgs[0]["apiSecret"].as_str().unwrap();
    assert!(!hashes.iter().any(|h| h.contains(secret)));

    // A restart with --demo keeps the world and prints the same credentials.
    let dir = s.stop().await;
    let s = TestServer::start_in(dir, |c| c.demo = true).await;
    let again: Value = serde_json::from_str(
        &std::fs::read_to_string(s.dir.path().join("demo-credentials.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(again["organizations"], doc["organizations"]);
    let count: i64 = s
        .db()
        .query_row("SELECT count(*) FROM organizations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 2);
}

#[tokio::test]
async fn allow_lists_block_list_export_and_check() {
    let dir = TempDir::new();
    cli_init(dir.path());
    let (ok, org, _) = parasol(dir.path(), &["org", "create", "--name", "Lab"]);
    assert!(ok);
    let org_id = org["id"].as_i64().unwrap().to_string();
    let key = org["customerKey"].as_str().unwrap().to_string();
    let (_, other, _) = parasol(dir.path(), &["org", "create", "--name", "Other"]);
    let other_id = other["id"].as_i64().unwrap().to_string();
    let org = org_id.as_str();

    // The allow list plays no part in adding to the domain list.
    let (ok, added, err) = parasol(
        dir.path(),
        &["allow", "add", "--org", org, "--name", "Good.Bad.Example."],
    );
    assert!(ok, "{err}");
    assert_eq!(
        added,
        json!({"org": org_id.parse::<i64>().unwrap(), "name": "good.bad.example", "added": true})
    );
    let s = TestServer::start_in(dir, |_| {}).await;
    let batch = json!([
        event("bad.example"),
        event("evil.test"),
        event("good.bad.example")
    ]);
    let r = s
        .post_json(&format!("/1.0/events?customerKey={key}"), &batch)
        .await;
    assert_eq!(r.status, 202, "{}", r.text());
    let dir = s.dir.path();

    let check = |name: &str| parasol(dir, &["blocklist", "check", "--org", org, "--name", name]).1;
    let v = check("www.bad.example");
    assert_eq!(v["blocked"], true, "{v}");
    assert_eq!(v["listedAs"], "bad.example");
    let v = check("x.good.bad.example");
    assert_eq!(v["blocked"], false, "{v}");
    assert_eq!(v["allowedBy"], "good.bad.example");
    assert_eq!(check("unlisted.example")["blocked"], false);
    let v = parasol(
        dir,
        &[
            "blocklist",
            "check",
            "--org",
            &other_id,
            "--name",
            "bad.example",
        ],
    )
    .1;
    assert_eq!(
        v["blocked"], false,
        "another organization's list plays no part: {v}"
    );

    // Export: in the JSON output, and to files in each format.
    let (ok, v, _) = parasol(dir, &["blocklist", "export", "--org", org]);
    assert!(ok);
    assert_eq!(v["names"], json!(["bad.example", "evil.test"]));
    assert_eq!(v["exceptions"], json!(["good.bad.example"]));
    for (format, needle, exception) in [
        ("plain", "bad.example\nevil.test\n", None),
        ("hosts", "0.0.0.0 bad.example\n0.0.0.0 evil.test\n", None),
        (
            "rpz",
            "*.evil.test CNAME .\n",
            Some("good.bad.example CNAME rpz-passthru.\n"),
        ),
    ] {
        let out = dir.join(format!("list.{format}"));
        let (ok, v, err) = parasol(
            dir,
            &[
                "blocklist",
                "export",
                "--org",
                org,
                "--format",
                format,
                "--output",
                out.to_str().unwrap(),
            ],
        );
        assert!(ok, "{err}");
        assert_eq!(v["entries"], 2);
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains(needle), "{format}: {text}");
        assert!(
            !text.contains("good.bad.example") || exception.is_some(),
            "{text}"
        );
        if let Some(e) = exception {
            assert!(text.contains(e), "{text}");
            assert!(text.contains("$TTL") && text.contains(" SOA "), "{text}");
        }
    }

    // Removing the exception blocks the name again; allow-listing a parent unblocks below it.
    let (ok, v, _) = parasol(
        dir,
        &[
            "allow",
            "remove",
            "--org",
            org,
            "--name",
            "good.bad.example",
        ],
    );
    assert!(ok && v["removed"] == true);
    assert_eq!(check("x.good.bad.example")["blocked"], true);
    parasol(
        dir,
        &["allow", "add", "--org", org, "--name", "bad.example"],
    );
    let (_, v, _) = parasol(dir, &["blocklist", "export", "--org", org]);
    assert_eq!(v["names"], json!(["evil.test"]));
    let (_, v, _) = parasol(dir, &["allow", "list", "--org", org]);
    assert_eq!(v["names"], json!(["bad.example"]));

    // Refusals name the problem.
    for (args, needle) in [
        (
            vec!["allow", "add", "--org", org, "--name", "http://x.example/"],
            "--name",
        ),
        (
            vec!["allow", "add", "--org", "999", "--name", "x.example"],
            "no organization 999",
        ),
        (
            vec!["blocklist", "check", "--org", org, "--name", "1.2.3.4"],
            "--name",
        ),
        (
            vec!["blocklist", "export", "--org", org, "--format", "bind"],
            "--format",
        ),
    ] {
        let (ok, _, err) = parasol(dir, &args);
        assert!(!ok, "{args:?}");
        let e: Value = serde_json::from_str(err.trim()).unwrap();
        assert!(e["error"].as_str().unwrap().contains(needle), "{err}");
    }
}

#[tokio::test]
async fn the_default_data_directory_is_parasol_data_in_the_working_directory() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    // decisions.md: --data-dir defaults to ./parasol-data, for the server and for the operators'
    // commands alike (the listen default, 127.0.0.1:8443, is checked by a unit test: a test
    // cannot count on that port being free).
    let cwd = TempDir::new();
    let init = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .arg("init")
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(init.status.success());
    let mut create = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"));
    create
        .args(["org", "create", "--name", "Default Dir"])
        .current_dir(cwd.path());
    let key = customer_key_from(create);
    let data = cwd.path().join("parasol-data");
    assert!(data.join("parasol.db").is_file());

    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"));
    serve
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(cwd.path());
    let server = ChildServer::spawn_command(serve, &data);
    // HTTPS by default, with the certificate made in the default directory (the client trusts
    // that one), and the key the command above created there works.
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let r = server
        .post_json(
            &format!("/1.0/events?customerKey={key}"),
            &json!([event("default-dir.example")]),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert!(server.stop().success());
}

/// The command line's small courtesies: `-V`; a reader that goes away ends a command quietly
/// with status 0 (as other Unix tools do) rather than a panic; an empty password on standard
/// input and a missing reputation file are refused naming what is wrong.
#[test]
fn version_closed_pipes_and_clear_refusals() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let bin = env!("CARGO_BIN_EXE_parasol");
    for flag in ["-V", "--version"] {
        let out = std::process::Command::new(bin).arg(flag).output().unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("parasol {}\n", env!("CARGO_PKG_VERSION"))
        );
    }

    let dir = TempDir::new();
    cli_init(dir.path());
    let (ok, org, _) = parasol(dir.path(), &["org", "create", "--name", "Pipe"]);
    assert!(ok);
    let org = org["id"].to_string();
    // A pipe whose reading end is closed before the command starts: its first write fails.
    let mut fds = [0; 2];
    // SAFETY: pipe fills the two descriptors, which are owned from here on.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just made by pipe and are not owned elsewhere.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    let out = std::process::Command::new(bin)
        .args(["key", "list", "--org", &org])
        .args(store_args(dir.path()))
        .stdout(std::process::Stdio::from(write))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut user = std::process::Command::new(bin);
    user.args([
        "user",
        "create",
        "--org",
        &org,
        "--firstname",
        "A",
        "--lastname",
        "B",
        "--email",
        "a@b.example",
        "--role-id",
        "1",
        "--timezone",
        "UTC",
        "--password-stdin",
        "--data-dir",
    ])
    .arg(dir.path())
    .stdin(std::process::Stdio::null());
    let out = user.output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--password-stdin") && err.contains("no password"),
        "{err}"
    );

    let out = std::process::Command::new(bin)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--reputation",
            "/nonexistent/rep.csv",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--reputation /nonexistent/rep.csv"), "{err}");
}
