#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The operators' list and delete commands, run as the real binary beside a running server: each
//! list prints what the management interface lists, each delete prints what it deleted, and a
//! missing object is worded the same way ("no site 5") by every command.

mod common;

use common::*;
use serde_json::{json, Value};

/// The demo world's credentials file.
fn demo(s: &TestServer) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(s.dir.path().join("demo-credentials.json")).unwrap(),
    )
    .unwrap()
}

fn org_cred(o: &Value) -> (i64, Cred) {
    (
        o["id"].as_i64().unwrap(),
        Cred {
            key: o["apiKey"].as_str().unwrap().into(),
            secret: o["apiSecret"].as_str().unwrap().into(),
        },
    )
}

/// Runs a command line (words split on spaces) against the server's data directory.
fn cli(s: &TestServer, line: &str) -> (bool, Value, String) {
    let args: Vec<&str> = line.split(' ').collect();
    parasol(s.dir.path(), &args)
}

fn ok(s: &TestServer, line: &str) -> Value {
    let (ok, v, err) = cli(s, line);
    assert!(ok, "{line}: {err}");
    v
}

/// The error a command line fails with.
fn refused(s: &TestServer, line: &str) -> String {
    let (ok, v, err) = cli(s, line);
    assert!(!ok, "{line} succeeded: {v}");
    let e: Value = serde_json::from_str(err.trim()).unwrap_or_else(|_| panic!("{line}: {err}"));
    e["error"].as_str().unwrap().to_string()
}

const RESOURCES: [(&str, &str); 6] = [
    ("site", "sites"),
    ("user", "users"),
    ("internal-network", "internalnetworks"),
    ("network", "networks"),
    ("roaming", "roamingcomputers"),
    ("va", "virtualappliances"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_list_command_prints_what_the_management_interface_lists() {
    let s = TestServer::start_with(|c| c.demo = true).await;
    let d = demo(&s);
    for o in d["organizations"].as_array().unwrap() {
        let (org, cred) = org_cred(o);
        for (command, path) in RESOURCES {
            let listed = ok(&s, &format!("{command} list --org {org}"));
            let r = s
                .mgmt(
                    "GET",
                    &format!("/v1/organizations/{org}/{path}?limit=200"),
                    &cred,
                    None,
                )
                .await;
            assert_eq!(r.status, 200);
            assert!(!listed.as_array().unwrap().is_empty(), "{command}");
            assert_eq!(listed, r.json(), "{command} list");
        }
    }
    let orgs = ok(&s, "org list");
    let ids: Vec<i64> = orgs
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_i64().unwrap())
        .collect();
    let demo_ids: Vec<i64> = d["organizations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, demo_ids);
    assert_eq!(orgs[0]["serviceProviderId"], d["serviceProvider"]["id"]);
    assert_eq!(orgs[1]["mspId"], d["msp"]["id"]);
    let providers = ok(&s, "provider list");
    assert_eq!(providers[0]["id"], d["serviceProvider"]["id"]);
    assert_eq!(providers[0]["customerCount"], 1);
    let msps = ok(&s, "msp list");
    assert_eq!(msps[0]["id"], d["msp"]["id"]);
    assert_eq!(msps[0]["customerCount"], 1);
}

/// Each delete prints the record as the management interface showed it, and it is gone; the
/// store's conflicts (the default site, a provider or MSP that still has customers) are refused
/// in their own words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_commands_delete_and_print_what_they_deleted() {
    let s = TestServer::start_with(|c| c.demo = true).await;
    let d = demo(&s);
    let (org, cred) = org_cred(&d["organizations"][0]);
    let get = async |path: &str| {
        s.mgmt(
            "GET",
            &format!("/v1/organizations/{org}/{path}"),
            &cred,
            None,
        )
        .await
    };

    // Devices and users: the first of each list.
    for (command, path, id_field) in [
        ("va", "virtualappliances", "originId"),
        ("network", "networks", "originId"),
        ("user", "users", "id"),
    ] {
        let first = get(path).await.json()[0].clone();
        let id = &first[id_field];
        let before = get(&format!("{path}/{id}")).await.json();
        let deleted = ok(&s, &format!("{command} delete --org {org} --id {id}"));
        assert_eq!(deleted, before, "{command}");
        assert_eq!(get(&format!("{path}/{id}")).await.status, 404, "{command}");
        assert!(refused(&s, &format!("{command} delete --org {org} --id {id}")).starts_with("no "));
    }
    let computer = get("roamingcomputers").await.json()[0].clone();
    let device = computer["deviceId"].as_str().unwrap();
    let deleted = ok(
        &s,
        &format!("roaming delete --org {org} --device-id {device}"),
    );
    assert_eq!(deleted, computer);
    assert_eq!(get(&format!("roamingcomputers/{device}")).await.status, 404);

    // Internal networks, then the site they were in.
    let nets = get("internalnetworks").await.json();
    for n in nets.as_array().unwrap() {
        let id = &n["originId"];
        let deleted = ok(
            &s,
            &format!("internal-network delete --org {org} --id {id}"),
        );
        assert_eq!(&deleted, n);
    }
    assert_eq!(get("internalnetworks").await.json(), json!([]));
    let sites = get("sites").await.json();
    let default = sites
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["isDefault"] == true)
        .unwrap();
    let err = refused(
        &s,
        &format!("site delete --org {org} --id {}", default["siteId"]),
    );
    assert!(err.contains("default site"), "{err}");
    let site = ok(&s, &format!("site create --org {org} --name Spare"));
    let deleted = ok(
        &s,
        &format!("site delete --org {org} --id {}", site["siteId"]),
    );
    assert_eq!(deleted, site);

    // A provider or an MSP goes only once its customers have.
    let sp = &d["serviceProvider"]["id"];
    let err = refused(&s, &format!("provider delete --id {sp}"));
    assert!(err.contains("still has 1 customer"), "{err}");
    ok(&s, &format!("org delete --id {org}"));
    assert_eq!(
        ok(&s, &format!("provider delete --id {sp}")),
        json!({"id": sp, "deleted": true})
    );
    assert_eq!(ok(&s, "provider list"), json!([]));
    let msp = &d["msp"]["id"];
    let msp_org = &d["organizations"][1]["id"];
    assert!(refused(&s, &format!("msp delete --id {msp}")).contains("still has"));
    ok(&s, &format!("org delete --id {msp_org}"));
    assert_eq!(
        ok(&s, &format!("msp delete --id {msp}")),
        json!({"id": msp, "deleted": true})
    );
    assert_eq!(ok(&s, "msp list"), json!([]));
    assert_eq!(ok(&s, "org list"), json!([]));
    // The deleted provider's credential is gone with it.
    let r = s
        .mgmt(
            "GET",
            &format!("/v1/serviceproviders/{sp}"),
            &Cred {
                key: d["serviceProvider"]["apiKey"].as_str().unwrap().into(),
                secret: d["serviceProvider"]["apiSecret"].as_str().unwrap().into(),
            },
            None,
        )
        .await;
    assert_eq!(r.status, 401);
}

/// One wording for a missing object, whatever the command: "no <kind> <id>", and for a flag that
/// names one, "<flag> <id>: no <kind> <id>".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_object_is_worded_the_same_in_every_command() {
    let s = TestServer::start_with(|c| c.demo = true).await;
    let d = demo(&s);
    let org = d["organizations"][0]["id"].as_i64().unwrap();
    let missing_org = [
        "site list --org 999",
        "site create --org 999 --name x",
        "site delete --org 999 --id 1",
        "user list --org 999",
        "user delete --org 999 --id 1",
        "internal-network list --org 999",
        "internal-network delete --org 999 --id 1",
        "internal-network create --org 999 --name n --ip-address 10.0.0.0 --prefix-length 8",
        "network list --org 999",
        "network delete --org 999 --id 1",
        "network register --org 999 --name n --ip-address 192.0.2.1",
        "roaming list --org 999",
        "roaming delete --org 999 --device-id 0a0b0c0d",
        "roaming register --org 999 --name n",
        "va list --org 999",
        "va delete --org 999 --id 1",
        "va register --org 999 --name n",
        "org delete --id 999",
        "key create --org 999",
        "key list --org 999",
        "key rotate --org 999",
        "credential create --org 999",
        "allow add --org 999 --name x.example",
        "allow remove --org 999 --name x.example",
        "allow list --org 999",
        "blocklist check --org 999 --name x.example",
        "blocklist export --org 999",
    ];
    for line in missing_org {
        assert_eq!(refused(&s, line), "no organization 999", "{line}");
    }
    for (line, want) in [
        (format!("site delete --org {org} --id 999"), "no site 999"),
        (format!("user delete --org {org} --id 999"), "no user 999"),
        (
            format!("internal-network delete --org {org} --id 999"),
            "no internal network 999",
        ),
        (
            format!("network delete --org {org} --id 999"),
            "no network 999",
        ),
        (
            format!("va delete --org {org} --id 999"),
            "no virtual appliance 999",
        ),
        (
            format!("roaming delete --org {org} --device-id 0a0b0c0d"),
            "no roaming computer 0a0b0c0d",
        ),
        ("provider delete --id 999".into(), "no service provider 999"),
        ("msp delete --id 999".into(), "no MSP 999"),
        (
            "org create --name x --provider 999".into(),
            "no service provider 999",
        ),
        ("org create --name x --msp 999".into(), "no MSP 999"),
        (
            "credential create --provider 999".into(),
            "no service provider 999",
        ),
        ("credential create --msp 999".into(), "no MSP 999"),
        (
            "provider create --name x --package-id 99".into(),
            "--package-id 99: no package 99",
        ),
        (
            format!(
                "internal-network create --org {org} --name n --ip-address 10.0.0.0 \
                 --prefix-length 8 --site-id 99999"
            ),
            "--site-id 99999: no site 99999 in organization",
        ),
        (
            format!("va register --org {org} --name n --site-id 99999"),
            "--site-id 99999: no site 99999 in organization",
        ),
        (
            format!(
                "user create --org {org} --firstname a --lastname b --email a@b.example \
                 --password p --role-id 9"
            ),
            "--role-id 9: no role 9",
        ),
        (
            "key revoke --key 6c5b7b1e-6a7d-4a3f-9d2e-1f0a9b8c7d6e".into(),
            "no live customer key 6c5b7b1e-6a7d-4a3f-9d2e-1f0a9b8c7d6e",
        ),
        (
            "credential revoke --key nosuchkey".into(),
            "no live credential nosuchkey",
        ),
    ] {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        let err = refused(&s, &line);
        assert!(err.starts_with(want), "{line}: {err}");
    }
}

/// `blocklist export` writes every resolver format the server's exporter writes, the same text,
/// and an RPZ file written over an older one continues its serial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocklist_export_writes_the_exporters_formats() {
    use parasol::export::formats::{render_to_string, rpz_serial, serial_after, Format};
    let s = TestServer::start().await;
    let (org, key) = s.create_org("Exported once");
    let r = s
        .post_json(
            &format!("/1.0/events?customerKey={key}"),
            &json!([event("bad.example"), event("evil.test")]),
        )
        .await;
    assert_eq!(r.status, 202);
    ok(
        &s,
        &format!("allow add --org {org} --name good.bad.example"),
    );
    let out = s.dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let names = |v: &[&str]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    for format in [
        Format::Unbound,
        Format::Dnsmasq,
        Format::Hosts,
        Format::Plain,
    ] {
        let path = out.join(format.file_name(org));
        let v = ok(
            &s,
            &format!(
                "blocklist export --org {org} --format {} --output {}",
                format.name(),
                path.display()
            ),
        );
        assert_eq!(v["entries"], 2);
        assert_eq!(v["exceptions"], 1);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            render_to_string(
                format,
                org,
                &names(&["bad.example", "evil.test"]),
                &names(&["good.bad.example"]),
                0
            ),
            "{format:?}"
        );
    }
    let rpz = out.join(Format::Rpz.file_name(org));
    let line = format!(
        "blocklist export --org {org} --format rpz --output {}",
        rpz.display()
    );
    ok(&s, &line);
    let first = rpz_serial(&std::fs::read_to_string(&rpz).unwrap()).unwrap();
    ok(&s, &line);
    let second = rpz_serial(&std::fs::read_to_string(&rpz).unwrap()).unwrap();
    assert!(serial_after(second, first), "{second} after {first}");
}
