//! Networks, roaming computers and virtual appliances of the management interface, their
//! registration on the command line and in the demo world, over HTTPS against the real server.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use parasol::store::{
    ApplianceSettings, ApplianceState, NewAppliance, NewNetwork, NewRoamingComputer,
};
use parasol::timefmt::{now, rfc3339};
use serde_json::{json, Value};

const NETWORK_FIELDS: &[&str] = &[
    "originId",
    "name",
    "ipAddress",
    "prefixLength",
    "isDynamic",
    "isVerified",
    "status",
    "createdAt",
];
const ROAMING_FIELDS: &[&str] = &[
    "originId",
    "name",
    "deviceId",
    "type",
    "status",
    "lastSyncStatus",
    "lastSync",
    "appliedBundle",
    "hasIpBlocking",
    "version",
    "osVersion",
    "osVersionName",
];
const APPLIANCE_FIELDS: &[&str] = &[
    "originId",
    "name",
    "siteId",
    "isUpgradable",
    "state",
    "health",
    "type",
    "settings",
    "createdAt",
    "modifiedAt",
    "stateUpdatedAt",
];
const STATE_FIELDS: &[&str] = &[
    "connectedToConnector",
    "hasLocalDomainConfigured",
    "queryFailureRateAcceptable",
    "receivedInternalDNSQueries",
    "redundantWithinSite",
    "syncing",
];
const SETTINGS_FIELDS: &[&str] = &[
    "internalIPs",
    "externalIP",
    "hostType",
    "uptime",
    "isDnscryptEnabled",
    "version",
    "upgradeError",
    "domains",
    "lastSyncTime",
];

fn assert_appliance_fields(v: &Value) {
    assert_fields(v, APPLIANCE_FIELDS);
    assert_fields(&v["state"], STATE_FIELDS);
    assert_fields(&v["settings"], SETTINGS_FIELDS);
}

fn org_path(org: i64, rest: &str) -> String {
    format!("/v1/organizations/{org}/{rest}")
}

fn network(name: &str, ip: &str, prefix: i64, status: &str) -> NewNetwork {
    NewNetwork {
        name: name.into(),
        ip_address: ip.into(),
        prefix_length: prefix,
        is_dynamic: false,
        is_verified: true,
        status: status.into(),
    }
}

fn add_network(s: &TestServer, org: i64, name: &str) -> i64 {
    run(s
        .store()
        .register_network(org, network(name, "203.0.113.8", 29, "OPEN"), now()))
    .unwrap()
    .origin_id
}

fn computer(device: &str, name: &str, status: &str, last_sync: Option<i64>) -> NewRoamingComputer {
    NewRoamingComputer {
        device_id: device.into(),
        name: name.into(),
        kind: "roaming".into(),
        status: status.into(),
        last_sync,
        ..Default::default()
    }
}

fn add_computer(s: &TestServer, org: i64, c: &NewRoamingComputer) {
    run(s.store().register_roaming_computer(org, c.clone())).unwrap();
}

fn appliance(name: &str, site: i64) -> NewAppliance {
    NewAppliance {
        name: name.into(),
        site_id: site,
        is_upgradable: true,
        state: ApplianceState {
            connected_to_connector: Some("yes".into()),
            syncing: Some("never".into()),
            ..Default::default()
        },
        health: "okay".into(),
        kind: "virtual_appliance".into(),
        settings: ApplianceSettings {
            internal_ips: vec!["10.0.0.10".into()],
            external_ip: Some("203.0.113.9".into()),
            uptime: Some(3600),
            domains: vec!["corp.local".into()],
            ..Default::default()
        },
    }
}

fn default_site(s: &TestServer, org: i64) -> i64 {
    run(s.store().default_site(org)).unwrap().unwrap()
}

/// Adds a virtual appliance registered an hour ago on the organization's default site.
fn add_appliance(s: &TestServer, org: i64, name: &str) -> i64 {
    let site = default_site(s, org);
    run(s
        .store()
        .register_appliance(org, appliance(name, site), now() - 3600))
    .unwrap()
    .origin_id
}

fn ids(v: &Value, member: &str) -> Vec<Value> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x[member].clone())
        .collect()
}

/// GET of an organization's resource path.
async fn get(s: &TestServer, cred: &Cred, org: i64, rest: &str) -> Resp {
    s.mgmt("GET", &org_path(org, rest), cred, None).await
}

/// DELETE answers 200 with the record's fields; afterwards GET and DELETE answer 404.
async fn assert_deleted(s: &TestServer, path: &str, cred: &Cred, record: &Value) {
    let r = s.mgmt("DELETE", path, cred, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(&r.json(), record);
    for method in ["GET", "DELETE"] {
        assert_mgmt_error(&s.mgmt(method, path, cred, None).await, 404, "");
    }
}

#[tokio::test]
async fn networks_list_read_delete_with_exact_fields() {
    let s = TestServer::start().await;
    let w = s.world();
    let t = now();
    let store = s.store();
    let a =
        run(store.register_network(w.sp_org, network("HQ", "203.0.113.8", 29, "OPEN"), t)).unwrap();
    let mut closed = network("Old line", "198.51.100.7", 32, "CLOSED");
    closed.is_dynamic = true;
    closed.is_verified = false;
    let b = run(store.register_network(w.sp_org, closed, t)).unwrap();
    add_network(&s, w.msp_org, "other org");

    let r = get(&s, &w.sp_org_cred, w.sp_org, "networks").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let list = r.json();
    assert_eq!(
        ids(&list, "originId"),
        [json!(a.origin_id), json!(b.origin_id)]
    );
    for n in list.as_array().unwrap() {
        assert_fields(n, NETWORK_FIELDS);
    }
    assert_eq!(
        list[1],
        json!({
            "originId": b.origin_id,
            "name": "Old line",
            "ipAddress": "198.51.100.7",
            "prefixLength": 32,
            "isDynamic": true,
            "isVerified": false,
            "status": "CLOSED",
            "createdAt": rfc3339(t),
        })
    );

    // The service provider's credential reads its customer's networks too.
    let item = org_path(w.sp_org, &format!("networks/{}", a.origin_id));
    let r = s.mgmt("GET", &item, &w.sp_cred, None).await;
    assert_eq!(r.status, 200);
    assert_fields(&r.json(), NETWORK_FIELDS);
    assert_eq!(r.json(), list[0]);

    // DELETE answers 200 with the deleted fields; afterwards the network is gone.
    assert_deleted(&s, &item, &w.sp_org_cred, &list[0]).await;
    let r = get(&s, &w.sp_org_cred, w.sp_org, "networks").await;
    assert_eq!(ids(&r.json(), "originId"), [json!(b.origin_id)]);
    // Unknown ids, and another organization's network under this organization's path.
    let other = add_network(&s, w.msp_org, "not yours");
    for id in [999_999, other] {
        let p = org_path(w.sp_org, &format!("networks/{id}"));
        assert_mgmt_error(&s.mgmt("GET", &p, &w.sp_org_cred, None).await, 404, "");
        assert_mgmt_error(&s.mgmt("DELETE", &p, &w.sp_org_cred, None).await, 404, "");
    }
    // No create or update of networks.
    let r = s
        .mgmt(
            "PUT",
            &org_path(w.sp_org, "networks/1"),
            &w.sp_org_cred,
            Some(&json!({})),
        )
        .await;
    assert_mgmt_error(&r, 405, "");
}

#[tokio::test]
async fn roaming_computers_read_rename_delete() {
    let s = TestServer::start().await;
    let w = s.world();
    let t = now() - 120;
    let full = NewRoamingComputer {
        device_id: "0a1b2c3d4e5f6071".into(),
        name: "alice-macbook".into(),
        kind: "anyconnect".into(),
        status: "Encrypted".into(),
        last_sync_status: Some("success".into()),
        last_sync: Some(t),
        applied_bundle: Some(1234),
        has_ip_blocking: true,
        version: Some("5.1.2.42".into()),
        os_version: Some("14.4.1".into()),
        os_version_name: Some("macOS Sonoma".into()),
    };
    add_computer(&s, w.sp_org, &full);
    add_computer(
        &s,
        w.sp_org,
        &computer("ffff0000", "never-synced", "Off", None),
    );
    add_computer(
        &s,
        w.msp_org,
        &computer("0a1b2c3d4e5f6071", "same id elsewhere", "Off", None),
    );

    let item = org_path(w.sp_org, "roamingcomputers/0a1b2c3d4e5f6071");
    let r = s.mgmt("GET", &item, &w.sp_org_cred, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let rec = r.json();
    assert_fields(&rec, ROAMING_FIELDS);
    let origin = rec["originId"].as_i64().unwrap();
    assert_eq!(
        rec,
        json!({
            "originId": origin,
            "name": "alice-macbook",
            "deviceId": "0a1b2c3d4e5f6071",
            "type": "anyconnect",
            "status": "Encrypted",
            "lastSyncStatus": "success",
            "lastSync": rfc3339(t),
            "appliedBundle": 1234,
            "hasIpBlocking": true,
            "version": "5.1.2.42",
            "osVersion": "14.4.1",
            "osVersionName": "macOS Sonoma",
        })
    );
    // Hex ids are matched whatever their case.
    let upper = org_path(w.sp_org, "roamingcomputers/0A1B2C3D4E5F6071");
    assert_eq!(
        s.mgmt("GET", &upper, &w.sp_org_cred, None).await.json(),
        rec
    );
    // Optional members never set come back as null.
    let r = get(&s, &w.msp_cred, w.sp_org, "roamingcomputers/ffff0000").await;
    assert_eq!(
        r.status, 404,
        "the MSP does not reach a provider's customer"
    );
    let r = get(&s, &w.sp_cred, w.sp_org, "roamingcomputers/ffff0000").await;
    assert_fields(&r.json(), ROAMING_FIELDS);
    for m in [
        "lastSync",
        "lastSyncStatus",
        "appliedBundle",
        "version",
        "osVersion",
    ] {
        assert_eq!(r.json()[m], Value::Null, "{m}");
    }

    // PUT renames; output-only members sent along are ignored.
    let r = s
        .mgmt(
            "PUT",
            &item,
            &w.sp_org_cred,
            Some(&json!({"name": "  alice-mbp  ", "status": "Off", "deviceId": "00"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut renamed = rec.clone();
    renamed["name"] = json!("alice-mbp");
    assert_eq!(r.json(), renamed);
    assert_eq!(
        s.mgmt("GET", &item, &w.sp_org_cred, None).await.json(),
        renamed
    );
    // The other organization's computer with the same id is untouched.
    let r = get(
        &s,
        &w.msp_cred,
        w.msp_org,
        "roamingcomputers/0a1b2c3d4e5f6071",
    )
    .await;
    assert_eq!(r.json()["name"], "same id elsewhere");

    // Validation names the field; it comes before the computer's existence.
    let missing = org_path(w.sp_org, "roamingcomputers/deadbeef");
    for body in [
        json!({}),
        json!({"name": null}),
        json!({"name": ""}),
        json!({"name": 7}),
        json!({"name": ["x"]}),
        json!({"name": "x".repeat(256)}),
    ] {
        for path in [&item, &missing] {
            let r = s.mgmt("PUT", path, &w.sp_org_cred, Some(&body)).await;
            assert_mgmt_error(&r, 400, "name");
        }
    }
    let r = s
        .request(
            "PUT",
            &item,
            &[
                ("authorization", &w.sp_org_cred.auth()),
                ("content-type", "application/json"),
            ],
            Some(b"[1]".to_vec()),
        )
        .await;
    assert_mgmt_error(&r, 400, "object");
    let r = s
        .request(
            "PUT",
            &item,
            &[
                ("authorization", &w.sp_org_cred.auth()),
                ("content-type", "text/plain"),
            ],
            Some(br#"{"name":"x"}"#.to_vec()),
        )
        .await;
    assert_mgmt_error(&r, 415, "");
    let r = s
        .mgmt("PUT", &missing, &w.sp_org_cred, Some(&json!({"name": "x"})))
        .await;
    assert_mgmt_error(&r, 404, "");

    // DELETE answers with the fields, then the computer is gone.
    assert_deleted(&s, &item, &w.sp_org_cred, &renamed).await;
    let r = get(
        &s,
        &w.msp_cred,
        w.msp_org,
        "roamingcomputers/0a1b2c3d4e5f6071",
    )
    .await;
    assert_eq!(
        r.status, 200,
        "deleting one organization's computer leaves the other's"
    );
}

#[tokio::test]
async fn roaming_computer_filters() {
    let s = TestServer::start().await;
    let w = s.world();
    let t0 = 1_795_341_600; // 2026-11-22T10:00:00Z
    for c in [
        computer("00000001", "Alice-MacBook", "Encrypted", Some(t0 - 100)),
        computer("00000002", "bob-pc", "Open", Some(t0)),
        computer("00000003", "ALICE-ipad", "Open", Some(t0 + 100)),
        computer("00000004", "kiosk", "Off", None),
        computer("00000005", "Zoë's Äpfel", "Off", Some(t0 + 200)),
    ] {
        add_computer(&s, w.sp_org, &c);
    }
    let list = |q: &str| {
        let path = format!("{}?{q}", org_path(w.sp_org, "roamingcomputers"));
        let cred = w.sp_org_cred.clone();
        let s = &s;
        async move {
            let r = s.mgmt("GET", &path, &cred, None).await;
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            let v = r.json();
            for c in v.as_array().unwrap() {
                assert_fields(c, ROAMING_FIELDS);
            }
            ids(&v, "name")
                .into_iter()
                .map(|n| n.as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    let all = [
        "Alice-MacBook",
        "bob-pc",
        "ALICE-ipad",
        "kiosk",
        "Zoë's Äpfel",
    ];
    assert_eq!(list("").await, all);
    // name: case-insensitive substring (beyond ASCII too).
    assert_eq!(list("name=alice").await, ["Alice-MacBook", "ALICE-ipad"]);
    assert_eq!(list("name=MACBOOK").await, ["Alice-MacBook"]);
    assert_eq!(list("name=%C3%A4PFEL").await, ["Zoë's Äpfel"]);
    assert_eq!(list("name=").await, all);
    assert!(list("name=nobody").await.is_empty());
    // status: exact.
    assert_eq!(list("status=Open").await, ["bob-pc", "ALICE-ipad"]);
    assert!(list("status=open").await.is_empty());
    assert!(list("status=Ope").await.is_empty());
    // Times compare strictly; a computer that never synced matches neither.
    assert_eq!(
        list("lastSyncBefore=2026-11-22T10:00:00Z").await,
        ["Alice-MacBook"]
    );
    assert_eq!(
        list("lastSyncAfter=2026-11-22T10:00:00Z").await,
        ["ALICE-ipad", "Zoë's Äpfel"]
    );
    assert_eq!(
        list("lastSyncAfter=2026-11-22T09:58:20Z&lastSyncBefore=2026-11-22T10:01:40Z").await,
        ["bob-pc"]
    );
    assert_eq!(
        list("lastSyncBefore=2999-01-01T00:00:00Z").await,
        ["Alice-MacBook", "bob-pc", "ALICE-ipad", "Zoë's Äpfel"]
    );
    assert_eq!(
        list("lastSyncAfter=1970-01-01T00:00:00Z").await,
        ["Alice-MacBook", "bob-pc", "ALICE-ipad", "Zoë's Äpfel"]
    );
    // Fractions and offsets: 10:00:00 is before 10:00:00.5 and after 09:59:59.5.
    assert_eq!(
        list("lastSyncBefore=2026-11-22T10:00:00.5Z").await,
        ["Alice-MacBook", "bob-pc"]
    );
    assert_eq!(
        list("lastSyncAfter=2026-11-22T09:59:59.5Z&lastSyncBefore=2026-11-22T10:00:01Z").await,
        ["bob-pc"]
    );
    assert_eq!(
        list("lastSyncBefore=2026-11-22T12:00:00%2B02:00").await,
        ["Alice-MacBook"]
    );
    // RFC 3339 allows the separator and the zone letter in lower case.
    assert_eq!(
        list("lastSyncBefore=2026-11-22t10:00:00.5z").await,
        ["Alice-MacBook", "bob-pc"]
    );
    // An unencoded `+` arrives as a space and is still understood.
    assert_eq!(
        list("lastSyncBefore=2026-11-22T12:00:00+02:00").await,
        ["Alice-MacBook"]
    );
    // Filters combine, and paging applies to the filtered list.
    assert_eq!(list("name=alice&status=Open").await, ["ALICE-ipad"]);
    assert_eq!(list("name=alice&limit=1").await, ["Alice-MacBook"]);
    assert_eq!(list("name=alice&limit=1&page=2").await, ["ALICE-ipad"]);
    assert!(list("name=alice&limit=1&page=3").await.is_empty());
    assert_eq!(list("status=Off&limit=1&page=2").await, ["Zoë's Äpfel"]);

    // A bad time is a 400 naming the parameter.
    for (param, value) in [
        ("lastSyncBefore", "yesterday"),
        ("lastSyncBefore", ""),
        ("lastSyncAfter", "2026-11-22"),
        ("lastSyncAfter", "2026-11-22T10:00:00"),
        ("lastSyncAfter", "2026-02-30T10:00:00Z"),
        ("lastSyncBefore", "1795341600"),
        ("lastSyncBefore", "2026-11-22x10:00:00Z"),
        ("lastSyncAfter", "2026-11-22%2010:00:00Z"),
    ] {
        let path = format!("{}?{param}={value}", org_path(w.sp_org, "roamingcomputers"));
        let r = s.mgmt("GET", &path, &w.sp_org_cred, None).await;
        assert_mgmt_error(&r, 400, param);
    }
}

#[tokio::test]
async fn virtual_appliances_read_move_delete() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    let home = default_site(&s, w.sp_org);
    let branch = run(s.store().create_site(w.sp_org, "Branch".into(), now()))
        .unwrap()
        .site_id;
    let foreign_site = default_site(&s, w.msp_org);
    let id = add_appliance(&s, w.sp_org, "VA-01");
    let elsewhere = add_appliance(&s, w.msp_org, "VA-other");

    let item = org_path(w.sp_org, &format!("virtualappliances/{id}"));
    let r = s.mgmt("GET", &item, &w.sp_org_cred, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let rec = r.json();
    assert_appliance_fields(&rec);
    let an_hour_ago = rec["createdAt"].clone();
    assert_eq!(
        rec,
        json!({
            "originId": id,
            "name": "VA-01",
            "siteId": home,
            "isUpgradable": true,
            "state": {
                "connectedToConnector": "yes",
                "hasLocalDomainConfigured": null,
                "queryFailureRateAcceptable": null,
                "receivedInternalDNSQueries": null,
                "redundantWithinSite": null,
                "syncing": "never",
            },
            "health": "okay",
            "type": "virtual_appliance",
            "settings": {
                "internalIPs": ["10.0.0.10"],
                "externalIP": "203.0.113.9",
                "hostType": null,
                "uptime": 3600,
                "isDnscryptEnabled": null,
                "version": null,
                "upgradeError": null,
                "domains": ["corp.local"],
                "lastSyncTime": null,
            },
            "createdAt": an_hour_ago,
            "modifiedAt": an_hour_ago,
            "stateUpdatedAt": an_hour_ago,
        })
    );
    let r = get(&s, &w.sp_cred, w.sp_org, "virtualappliances").await;
    assert_eq!(r.json(), json!([rec]));

    // Validation: siteId required, an integer, a site of this organization. It comes before the
    // appliance's existence.
    let missing = org_path(w.sp_org, "virtualappliances/999999");
    for (body, needle) in [
        (json!({}), "siteId"),
        (json!({"siteId": null}), "siteId"),
        (json!({"siteId": "2"}), "siteId"),
        (json!({"siteId": 1.5}), "siteId"),
        (json!({"siteId": 999_999}), "siteId"),
        (json!({"siteId": foreign_site}), "siteId"),
        (json!({"name": "x"}), "siteId"),
    ] {
        for path in [&item, &missing] {
            let r = s.mgmt("PUT", path, &w.sp_org_cred, Some(&body)).await;
            assert_mgmt_error(&r, 400, needle);
        }
    }
    assert_eq!(s.mgmt("GET", &item, &w.sp_org_cred, None).await.json(), rec);
    let r = s
        .mgmt(
            "PUT",
            &missing,
            &w.sp_org_cred,
            Some(&json!({"siteId": branch})),
        )
        .await;
    assert_mgmt_error(&r, 404, "");
    // Another organization's appliance cannot be moved through this organization's path.
    let r = s
        .mgmt(
            "PUT",
            &org_path(w.sp_org, &format!("virtualappliances/{elsewhere}")),
            &w.sp_org_cred,
            Some(&json!({"siteId": branch})),
        )
        .await;
    assert_mgmt_error(&r, 404, "");

    // A move changes siteId and modifiedAt only (other members sent along are ignored).
    let before = now();
    let r = s
        .mgmt(
            "PUT",
            &item,
            &w.sp_org_cred,
            Some(&json!({"siteId": branch, "name": "renamed?", "health": "bad"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let moved = r.json();
    assert_appliance_fields(&moved);
    assert_eq!(moved["siteId"], branch);
    let modified = parasol::timefmt::parse_rfc3339(moved["modifiedAt"].as_str().unwrap()).unwrap();
    assert!(modified >= before && modified <= now(), "{moved}");
    let mut expected = rec.clone();
    expected["siteId"] = json!(branch);
    expected["modifiedAt"] = moved["modifiedAt"].clone();
    assert_eq!(moved, expected);
    assert_eq!(
        s.mgmt("GET", &item, &w.sp_org_cred, None).await.json(),
        moved
    );
    let on_branch: i64 = s
        .db()
        .query_row(
            "SELECT count(*) FROM virtual_appliances WHERE site_id = ?1",
            [branch],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(on_branch, 1);

    // DELETE answers with the fields, then the appliance is gone.
    assert_deleted(&s, &item, &w.sp_org_cred, &moved).await;
    let r = get(&s, &w.sp_org_cred, w.sp_org, "virtualappliances").await;
    assert_eq!(r.json(), json!([]));
}

/// All three lists page by id: `page` from 1 (0 taken as 1), `limit` 1..200.
#[tokio::test]
async fn device_lists_page_by_id() {
    let s = TestServer::start().await;
    let w = s.world();
    let mut want: Vec<(&str, &str, Vec<Value>)> = Vec::new();
    let networks: Vec<Value> = (0..5)
        .map(|i| json!(add_network(&s, w.msp_org, &format!("n{i}"))))
        .collect();
    want.push(("networks", "originId", networks));
    // Registered in an order that is not the device ids' order: the list follows originId.
    let devices: Vec<Value> = ["ff000000", "00000000", "aa000000", "11000000", "cc000000"]
        .iter()
        .map(|d| {
            add_computer(&s, w.msp_org, &computer(d, d, "Off", None));
            json!(d)
        })
        .collect();
    want.push(("roamingcomputers", "deviceId", devices));
    let vas: Vec<Value> = (0..5)
        .map(|i| json!(add_appliance(&s, w.msp_org, &format!("va{i}"))))
        .collect();
    want.push(("virtualappliances", "originId", vas));
    for (kind, member, all) in &want {
        let page = |q: &str| {
            let path = format!("{}?{q}", org_path(w.msp_org, kind));
            let cred = w.msp_cred.clone();
            let s = &s;
            async move {
                let r = s.mgmt("GET", &path, &cred, None).await;
                assert_eq!(r.status, 200, "{path}: {}", r.text());
                ids(&r.json(), member)
            }
        };
        assert_eq!(&page("").await, all, "{kind}");
        assert_eq!(page("limit=2").await, all[0..2], "{kind}");
        assert_eq!(page("limit=2&page=0").await, all[0..2], "{kind}");
        assert_eq!(page("limit=2&page=1").await, all[0..2], "{kind}");
        assert_eq!(page("limit=2&page=2").await, all[2..4], "{kind}");
        assert_eq!(page("limit=2&page=3").await, all[4..5], "{kind}");
        assert!(page("limit=2&page=4").await.is_empty(), "{kind}");
        assert_eq!(&page("limit=200").await, all, "{kind}");
        assert!(page("page=9223372036854775807").await.is_empty(), "{kind}");
        for (q, needle) in [
            ("limit=0", "limit"),
            ("limit=201", "limit"),
            ("limit=-1", "limit"),
            ("limit=x", "limit"),
            ("page=-1", "page"),
            ("page=1.5", "page"),
        ] {
            let path = format!("{}?{q}", org_path(w.msp_org, kind));
            let r = s.mgmt("GET", &path, &w.msp_cred, None).await;
            assert_mgmt_error(&r, 400, needle);
        }
    }
}

/// Method, path and body of one request.
type Request = (&'static str, String, Option<Value>);

/// Every credential kind gets 404 for devices of organizations outside its scope, on every
/// endpoint, before any look at the body; inside the scope the same requests work.
#[tokio::test]
async fn device_scopes_answer_404_outside_their_reach() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    let other = s.world();
    let mut paths: Vec<(i64, Vec<Request>)> = Vec::new();
    for org in [w.sp_org, w.msp_org, w.lone_org, other.sp_org] {
        let net = add_network(&s, org, "n");
        add_computer(&s, org, &computer("abcdef01", "c", "Off", None));
        let va = add_appliance(&s, org, "va");
        let site = default_site(&s, org);
        paths.push((
            org,
            vec![
                ("GET", org_path(org, "networks"), None),
                ("GET", org_path(org, &format!("networks/{net}")), None),
                ("GET", org_path(org, "roamingcomputers"), None),
                ("GET", org_path(org, "roamingcomputers/abcdef01"), None),
                (
                    "PUT",
                    org_path(org, "roamingcomputers/abcdef01"),
                    Some(json!({"name": "renamed"})),
                ),
                ("GET", org_path(org, "virtualappliances"), None),
                (
                    "GET",
                    org_path(org, &format!("virtualappliances/{va}")),
                    None,
                ),
                (
                    "PUT",
                    org_path(org, &format!("virtualappliances/{va}")),
                    Some(json!({"siteId": site})),
                ),
                // Invalid bodies too: scope is checked before validation.
                (
                    "PUT",
                    org_path(org, &format!("virtualappliances/{va}")),
                    Some(json!({})),
                ),
                ("DELETE", org_path(org, "roamingcomputers/abcdef01"), None),
                ("DELETE", org_path(org, &format!("networks/{net}")), None),
                (
                    "DELETE",
                    org_path(org, &format!("virtualappliances/{va}")),
                    None,
                ),
            ],
        ));
    }
    let reach: Vec<(&Cred, Vec<i64>)> = vec![
        (&w.sp_cred, vec![w.sp_org]),
        (&w.msp_cred, vec![w.msp_org]),
        (&w.sp_org_cred, vec![w.sp_org]),
        (&w.msp_org_cred, vec![w.msp_org]),
        (&w.lone_org_cred, vec![w.lone_org]),
    ];
    // Outside the reach first (so that the deletes inside it come last).
    for (cred, inside) in &reach {
        for (org, requests) in &paths {
            if inside.contains(org) {
                continue;
            }
            for (method, path, body) in requests {
                let r = s.mgmt(method, path, cred, body.as_ref()).await;
                assert_mgmt_error(&r, 404, "");
            }
        }
    }
    // Nothing was changed by those requests.
    let db = s.db();
    for (table, n) in [
        ("networks", 4),
        ("roaming_computers", 4),
        ("virtual_appliances", 4),
    ] {
        let count: i64 = db
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(count, n, "{table}");
    }
    let name: String = db
        .query_row(
            "SELECT name FROM roaming_computers WHERE organization_id = ?1",
            [w.sp_org],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(name, "c");
    // Without credentials: 401.
    let r = s.get(&org_path(w.sp_org, "networks")).await;
    assert_eq!(r.status, 401);
    // Inside the reach everything works, through each organization's own credential.
    for (cred, org) in [
        (&w.sp_org_cred, w.sp_org),
        (&w.msp_cred, w.msp_org),
        (&w.lone_org_cred, w.lone_org),
    ] {
        let (_, requests) = paths.iter().find(|(o, _)| *o == org).unwrap();
        for (method, path, body) in requests {
            let r = s.mgmt(method, path, cred, body.as_ref()).await;
            let want = if body == &Some(json!({})) { 400 } else { 200 };
            assert_eq!(r.status, want, "{method} {path}: {}", r.text());
        }
    }
}

#[tokio::test]
async fn deleting_a_customer_removes_its_devices() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    for org in [w.sp_org, w.msp_org] {
        add_network(&s, org, "n");
        add_computer(&s, org, &computer("abcdef01", "c", "Open", Some(now())));
        add_appliance(&s, org, "va");
    }
    let r = s
        .mgmt(
            "DELETE",
            &format!("/v1/serviceproviders/{}/customers/{}", w.sp, w.sp_org),
            &w.sp_cred,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let db = s.db();
    for table in ["networks", "roaming_computers", "virtual_appliances"] {
        let count = |org: i64| -> i64 {
            db.query_row(
                &format!("SELECT count(*) FROM {table} WHERE organization_id = ?1"),
                [org],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(count(w.sp_org), 0, "{table}");
        assert_eq!(count(w.msp_org), 1, "{table} of another organization");
    }
    let r = get(&s, &w.sp_cred, w.sp_org, "networks").await;
    assert_mgmt_error(&r, 404, "");
}

/// Runs the binary with the words of `line` (split at white space).
fn cli(dir: &std::path::Path, line: &str) -> (bool, Value, String) {
    parasol(dir, &line.split_whitespace().collect::<Vec<_>>())
}

/// Each register command prints the record the interface then serves, and refuses bad input
/// naming the flag.
#[tokio::test]
async fn register_commands_print_records_the_interface_serves() {
    let dir = TempDir::new();
    let d = dir.path();
    cli_init(d);
    let (ok, org, err) = parasol(d, &["org", "create", "--name", "Lab"]);
    assert!(ok, "{err}");
    let org_id = org["id"].as_i64().unwrap();
    let o = org_id.to_string();
    let (ok, other, _) = parasol(d, &["org", "create", "--name", "Other"]);
    assert!(ok);
    let other_site = other["defaultSiteId"].as_i64().unwrap().to_string();

    let (ok, net, err) = cli(
        d,
        &format!(
            "network register --org {o} --name HQ --ip-address 203.0.113.8 --prefix-length 29 \
             --status CLOSED --dynamic"
        ),
    );
    assert!(ok, "{err}");
    assert_fields(&net, NETWORK_FIELDS);
    assert_eq!(
        (
            &net["prefixLength"],
            &net["status"],
            &net["isDynamic"],
            &net["isVerified"]
        ),
        (&json!(29), &json!("CLOSED"), &json!(true), &json!(false))
    );
    let (ok, rc, err) = cli(
        d,
        &format!(
            "roaming register --org {o} --name carol-surface --device-id 00AB12CD34EF5678 \
             --type anyconnect --status VA --last-sync 2026-11-22T11:00:00+01:00 \
             --last-sync-status success --applied-bundle 42 --ip-blocking --version 5.1.2.42 \
             --os-version 10.0.22631 --os-version-name Windows"
        ),
    );
    assert!(ok, "{err}");
    assert_fields(&rc, ROAMING_FIELDS);
    assert_eq!(rc["deviceId"], "00ab12cd34ef5678");
    assert_eq!(rc["lastSync"], "2026-11-22T10:00:00Z");
    assert_eq!(rc["type"], "anyconnect");
    assert_eq!(rc["hasIpBlocking"], true);
    // Without a device id one is made up: 16 hex digits.
    let (ok, rc2, err) = parasol(d, &["roaming", "register", "--org", &o, "--name", "x"]);
    assert!(ok, "{err}");
    let dev = rc2["deviceId"].as_str().unwrap();
    assert!(
        dev.len() == 16 && dev.bytes().all(|b| b.is_ascii_hexdigit()),
        "{dev}"
    );
    assert_eq!(
        (&rc2["status"], &rc2["type"]),
        (&json!("Off"), &json!("roaming"))
    );
    assert_eq!(rc2["lastSync"], Value::Null);
    let (ok, va, err) = cli(
        d,
        &format!(
            "va register --org {o} --name VA-1 --internal-ip 10.1.0.10 --internal-ip 10.1.0.11 \
             --external-ip 203.0.113.9 --host-type VMware --uptime 86400 --dnscrypt \
             --version 3.4.6 --domain lab.local --state redundantWithinSite=never --upgradable \
             --last-sync-time 2026-11-22T10:00:00Z"
        ),
    );
    assert!(ok, "{err}");
    assert_appliance_fields(&va);
    assert_eq!(va["siteId"], org["defaultSiteId"]);
    assert_eq!(va["state"]["redundantWithinSite"], "never");
    assert_eq!(va["state"]["syncing"], "yes");
    assert_eq!(
        va["settings"]["internalIPs"],
        json!(["10.1.0.10", "10.1.0.11"])
    );
    assert_eq!(va["settings"]["lastSyncTime"], "2026-11-22T10:00:00Z");
    assert_eq!(va["settings"]["isDnscryptEnabled"], true);
    assert_eq!(va["settings"]["upgradeError"], Value::Null);

    // Refusals name the flag. Each command line gets `--org` (this organization unless it
    // names one) and `--name x`.
    let other_site = format!("--site-id {other_site}");
    for (args, needle) in [
        (
            "network register --ip-address 1.2.3 --prefix-length 32",
            "--ip-address",
        ),
        (
            "network register --ip-address 1.2.3.4 --prefix-length 28",
            "--prefix-length",
        ),
        (
            "network register --ip-address 1.2.3.4 --status open",
            "--status",
        ),
        (
            "network register --ip-address 1.2.3.4 --org 999",
            "no organization",
        ),
        ("roaming register --device-id xyz", "--device-id"),
        (
            "roaming register --device-id 00ab12cd34ef5678",
            "already has",
        ),
        ("roaming register --type laptop", "--type"),
        ("roaming register --status On", "--status"),
        ("roaming register --last-sync today", "--last-sync"),
        ("roaming register --applied-bundle -1", "--applied-bundle"),
        ("va register OTHER_SITE", "--site-id"),
        // An unknown site is named before bad fields after siteId in the spec's table.
        ("va register OTHER_SITE --internal-ip 10.0.0", "--site-id"),
        ("va register OTHER_SITE --external-ip nope", "--site-id"),
        ("va register --internal-ip 10.0.0", "--internal-ip"),
        ("va register --external-ip nope", "--external-ip"),
        ("va register --state bogus=yes", "--state bogus"),
        ("va register --state syncing", "--state"),
        ("va register --uptime -5", "--uptime"),
        ("va register --last-sync-time now", "--last-sync-time"),
        ("va register --org 999", "no organization"),
    ] {
        let mut line = args.replace("OTHER_SITE", &other_site);
        if !line.contains("--org") {
            line += &format!(" --org {o}");
        }
        let (ok, out, err) = cli(d, &format!("{line} --name x"));
        assert!(!ok, "{args} succeeded: {out}");
        let e: Value = serde_json::from_str(err.trim()).unwrap_or_else(|_| panic!("{err}"));
        assert!(
            e["error"].as_str().unwrap().contains(needle),
            "{args}: {err}"
        );
    }
    let (ok, _, err) = parasol(
        d,
        &[
            "network",
            "register",
            "--org",
            &o,
            "--name",
            " ",
            "--ip-address",
            "1.2.3.4",
        ],
    );
    assert!(!ok && err.contains("--name"), "{err}");

    // The server serves exactly what the commands printed.
    let (ok, cred, err) = parasol(d, &["credential", "create", "--org", &o]);
    assert!(ok, "{err}");
    let cred = Cred {
        key: cred["apiKey"].as_str().unwrap().into(),
        secret: cred["apiSecret"].as_str().unwrap().into(),
    };
    let s = TestServer::start_in(TempDir(d.to_path_buf()), |_| {}).await;
    let get = |rest: String| {
        let (s, cred) = (&s, cred.clone());
        async move {
            let r = get(s, &cred, org_id, &rest).await;
            assert_eq!(r.status, 200, "{rest}: {}", r.text());
            r.json()
        }
    };
    assert_eq!(get("networks".into()).await, json!([net]));
    assert_eq!(get("roamingcomputers".into()).await, json!([rc, rc2]));
    assert_eq!(get(format!("roamingcomputers/{dev}")).await, rc2);
    assert_eq!(get("virtualappliances".into()).await, json!([va]));
    // The server owns the directory now; TempDir(d) in it removes it when the server drops.
    std::mem::forget(dir);
}

/// `--demo` gives each organization realistic devices: networks with prefixes above 28 in both
/// statuses, synced roaming computers of varied status and type, appliances on its sites.
#[tokio::test]
async fn demo_world_has_devices() {
    let s = TestServer::start_with(|c| c.demo = true).await;
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(s.dir.path().join("demo-credentials.json")).unwrap(),
    )
    .unwrap();
    let orgs = doc["organizations"].as_array().unwrap();
    assert_eq!(orgs.len(), 2);
    for o in orgs {
        let org = o["id"].as_i64().unwrap();
        let cred = Cred {
            key: o["apiKey"].as_str().unwrap().into(),
            secret: o["apiSecret"].as_str().unwrap().into(),
        };
        let get = |rest: &str| {
            let (s, cred, path) = (&s, cred.clone(), org_path(org, rest));
            async move {
                let r = s.mgmt("GET", &path, &cred, None).await;
                assert_eq!(r.status, 200, "{path}: {}", r.text());
                r.json().as_array().unwrap().clone()
            }
        };
        let networks = get("networks").await;
        assert!(networks.len() >= 3, "{networks:?}");
        for n in &networks {
            assert_fields(n, NETWORK_FIELDS);
            assert!(n["prefixLength"].as_i64().unwrap() > 28, "{n}");
        }
        for status in ["OPEN", "CLOSED"] {
            assert!(networks.iter().any(|n| n["status"] == status), "{status}");
        }
        let computers = get("roamingcomputers").await;
        let synced: Vec<&Value> = computers
            .iter()
            .filter(|c| !c["lastSync"].is_null())
            .collect();
        assert!(synced.len() >= 3, "{computers:?}");
        let mut statuses: Vec<&str> = synced
            .iter()
            .map(|c| c["status"].as_str().unwrap())
            .collect();
        statuses.sort_unstable();
        statuses.dedup();
        assert!(statuses.len() >= 2, "{statuses:?}");
        assert!(computers.iter().any(|c| c["type"] == "anyconnect"));
        assert!(computers.iter().any(|c| c["type"] == "roaming"));
        for c in &computers {
            assert_fields(c, ROAMING_FIELDS);
        }
        let vas = get("virtualappliances").await;
        assert!(vas.len() >= 2, "{vas:?}");
        let store = s.store();
        let mut sites = Vec::new();
        for va in &vas {
            assert_appliance_fields(va);
            assert_eq!(
                (&va["type"], &va["health"]),
                (&json!("virtual_appliance"), &json!("okay"))
            );
            for m in STATE_FIELDS {
                assert!(va["state"][m].is_string(), "{m}: {va}");
            }
            for m in SETTINGS_FIELDS.iter().filter(|m| **m != "upgradeError") {
                assert!(!va["settings"][m].is_null(), "{m}: {va}");
            }
            let site = va["siteId"].as_i64().unwrap();
            assert!(run(store.get_site(org, site)).unwrap().is_some());
            sites.push(site);
        }
        sites.sort_unstable();
        sites.dedup();
        assert!(sites.len() >= 2, "appliances on both sites");
    }
}
