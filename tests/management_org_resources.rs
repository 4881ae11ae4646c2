//! Sites, internal networks and users of an organization (`/v1/organizations/{id}/...`), over
//! HTTPS against the real server, and their command line and demo data.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

const SITE: &[&str] = &[
    "originId",
    "name",
    "siteId",
    "isDefault",
    "type",
    "internalNetworkCount",
    "vaCount",
    "modifiedAt",
    "createdAt",
];
const INTERNAL_NETWORK: &[&str] = &[
    "originId",
    "name",
    "ipAddress",
    "prefixLength",
    "siteName",
    "siteId",
    "createdAt",
    "modifiedAt",
];
const USER: &[&str] = &[
    "id",
    "firstname",
    "lastname",
    "email",
    "roleId",
    "role",
    "timezone",
    "status",
    "lastLoginTime",
    "twoFactorEnable",
];

/// Exactly the spec's members, in the spec's order.
fn assert_exact(v: &Value, fields: &[&str]) {
    let keys: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, fields, "{v}");
}

fn path(org: i64, what: &str) -> String {
    format!("/v1/organizations/{org}/{what}")
}

/// A successful management call's JSON body.
async fn call(s: &TestServer, method: &str, p: &str, cred: &Cred, body: Option<&Value>) -> Value {
    let r = s.mgmt(method, p, cred, body).await;
    assert_eq!(r.status, 200, "{method} {p}: {}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    r.json()
}

fn user(email: &str) -> Value {
    json!({
        "firstname": "Ada",
        "lastname": "Lovelace",
        "email": email,
        "password": "correct horse battery staple",
        "roleId": 2,
        "timezone": "Europe/Berlin",
    })
}

fn network(name: &str, site: i64) -> Value {
    json!({"name": name, "ipAddress": "10.1.2.0", "prefixLength": 24, "siteId": site})
}

/// Sets a site's or internal network's timestamps back to 1970 so that an update shows.
fn backdate(s: &TestServer, table: &str, key: &str, id: i64) {
    s.execute(&format!(
        "UPDATE {table} SET created_at = 1000, modified_at = 1000 WHERE {key} = {id}"
    ));
}

const OLD: &str = "1970-01-01T00:16:40Z";

/// Inserts a virtual appliance on `site` directly (appliances have no create endpoint).
fn insert_va(s: &TestServer, org: i64, site: i64) -> i64 {
    let va = parasol::store::NewAppliance {
        name: "va1".into(),
        site_id: site,
        is_upgradable: false,
        state: Default::default(),
        health: "okay".into(),
        kind: "virtual_appliance".into(),
        settings: Default::default(),
    };
    run(s.store().register_appliance(org, va, 0))
        .unwrap()
        .origin_id
}

/// Creates a site, an internal network on it and a user; returns their ids.
async fn seed(s: &TestServer, org: i64, cred: &Cred) -> (i64, i64, i64) {
    let id = |v: Value, key: &str| v[key].as_i64().unwrap();
    let site = call(
        s,
        "POST",
        &path(org, "sites"),
        cred,
        Some(&json!({"name": "s"})),
    )
    .await;
    let site = id(site, "siteId");
    let net = network("n", site);
    let net = call(s, "POST", &path(org, "internalnetworks"), cred, Some(&net)).await;
    let usr = user("u@example.com");
    let usr = call(s, "POST", &path(org, "users"), cred, Some(&usr)).await;
    (site, id(net, "originId"), id(usr, "id"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sites_create_read_update_delete_with_exact_fields() {
    let s = TestServer::start().await;
    let w = s.world();
    let sites = path(w.sp_org, "sites");
    // The organization came with its default site.
    let list = call(&s, "GET", &sites, &w.sp_org_cred, None).await;
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_exact(&list[0], SITE);
    assert_eq!(list[0]["isDefault"], true);
    assert_eq!(list[0]["type"], "site");

    // Output-only fields on input are ignored.
    let body = json!({"name": " Branch ", "siteId": 999, "isDefault": true, "vaCount": 5});
    let site = call(&s, "POST", &sites, &w.sp_cred, Some(&body)).await;
    assert_exact(&site, SITE);
    let id = site["siteId"].as_i64().unwrap();
    assert_ne!(id, 999);
    assert_ne!(site["originId"], site["siteId"]);
    assert_eq!(site["name"], "Branch");
    assert_eq!(site["isDefault"], false);
    assert_eq!(site["type"], "site");
    assert_eq!(
        (
            site["internalNetworkCount"].as_i64(),
            site["vaCount"].as_i64()
        ),
        (Some(0), Some(0))
    );
    assert_eq!(site["createdAt"], site["modifiedAt"]);
    assert!(parasol::timefmt::parse_rfc3339(site["createdAt"].as_str().unwrap()).is_some());

    let one = format!("{sites}/{id}");
    assert_eq!(call(&s, "GET", &one, &w.sp_org_cred, None).await, site);

    backdate(&s, "sites", "id", id);
    let renamed = call(
        &s,
        "PUT",
        &one,
        &w.sp_org_cred,
        Some(&json!({"name": "HQ"})),
    )
    .await;
    assert_exact(&renamed, SITE);
    assert_eq!(renamed["name"], "HQ");
    assert_eq!(renamed["createdAt"], OLD);
    assert_ne!(renamed["modifiedAt"], OLD, "modifiedAt follows the update");
    assert_eq!(renamed["originId"], site["originId"]);

    let deleted = call(&s, "DELETE", &one, &w.sp_org_cred, None).await;
    assert_eq!(
        deleted,
        call_get_404(&s, &one, &w.sp_org_cred, renamed).await
    );
    let list = call(&s, "GET", &sites, &w.sp_org_cred, None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
}

/// Asserts that `p` is gone (404) and hands back `rec` for comparison with the DELETE answer.
async fn call_get_404(s: &TestServer, p: &str, cred: &Cred, rec: Value) -> Value {
    assert_mgmt_error(&s.mgmt("GET", p, cred, None).await, 404, "");
    rec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_networks_follow_their_sites_through_create_move_rename_and_delete() {
    let s = TestServer::start().await;
    let w = s.world();
    let org = w.msp_org;
    let cred = &w.msp_cred;
    let sites = path(org, "sites");
    let nets = path(org, "internalnetworks");
    let default = call(&s, "GET", &sites, cred, None).await[0].clone();
    let a = default["siteId"].as_i64().unwrap();
    let b_site = call(&s, "POST", &sites, cred, Some(&json!({"name": "Lab"}))).await;
    let b = b_site["siteId"].as_i64().unwrap();
    let count = |site: Value| site["internalNetworkCount"].as_i64().unwrap();

    let mut body = network("Office LAN", a);
    body["originId"] = json!(5);
    body["siteName"] = json!("ignored");
    let net = call(&s, "POST", &nets, &w.msp_org_cred, Some(&body)).await;
    assert_exact(&net, INTERNAL_NETWORK);
    assert_eq!(net["name"], "Office LAN");
    assert_eq!(net["ipAddress"], "10.1.2.0");
    assert_eq!(net["prefixLength"], 24);
    assert_eq!(net["siteId"], a);
    assert_eq!(net["siteName"], "Default Site");
    assert_eq!(net["createdAt"], net["modifiedAt"]);
    let id = net["originId"].as_i64().unwrap();
    assert_ne!(id, 5);
    // originIds come from the one identity sequence the sites draw from too.
    assert!(id > b_site["originId"].as_i64().unwrap());
    let one = format!("{nets}/{id}");
    assert_eq!(call(&s, "GET", &one, cred, None).await, net);
    let list = call(&s, "GET", &nets, cred, None).await;
    assert_eq!(list, json!([net.clone()]));
    assert_eq!(
        count(call(&s, "GET", &format!("{sites}/{a}"), cred, None).await),
        1
    );

    // The site's name is read through the site.
    call(
        &s,
        "PUT",
        &format!("{sites}/{a}"),
        cred,
        Some(&json!({"name": "Main"})),
    )
    .await;
    assert_eq!(call(&s, "GET", &one, cred, None).await["siteName"], "Main");

    // PUT is a full replacement; a new siteId moves the network.
    backdate(&s, "internal_networks", "origin_id", id);
    let moved =
        json!({"name": "Lab LAN", "ipAddress": "192.168.7.1", "prefixLength": 8, "siteId": b});
    let net2 = call(&s, "PUT", &one, cred, Some(&moved)).await;
    assert_exact(&net2, INTERNAL_NETWORK);
    assert_eq!(
        (
            &net2["name"],
            &net2["ipAddress"],
            &net2["prefixLength"],
            &net2["siteId"],
            &net2["siteName"]
        ),
        (
            &json!("Lab LAN"),
            &json!("192.168.7.1"),
            &json!(8),
            &json!(b),
            &json!("Lab")
        )
    );
    assert_eq!(net2["originId"], id);
    assert_eq!(net2["createdAt"], OLD);
    assert_ne!(net2["modifiedAt"], OLD);
    assert_eq!(
        count(call(&s, "GET", &format!("{sites}/{a}"), cred, None).await),
        0
    );
    assert_eq!(
        count(call(&s, "GET", &format!("{sites}/{b}"), cred, None).await),
        1
    );

    let gone = call(&s, "DELETE", &one, cred, None).await;
    assert_eq!(gone, net2);
    assert_mgmt_error(&s.mgmt("GET", &one, cred, None).await, 404, "");
    assert_mgmt_error(&s.mgmt("DELETE", &one, cred, None).await, 404, "");
    assert_eq!(
        count(call(&s, "GET", &format!("{sites}/{b}"), cred, None).await),
        0
    );
    assert_eq!(call(&s, "GET", &nets, cred, None).await, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sites_in_use_and_the_default_site_cannot_be_deleted() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    let (org, cred) = (w.lone_org, &w.lone_org_cred);
    let sites = path(org, "sites");
    let default = call(&s, "GET", &sites, cred, None).await[0]["siteId"]
        .as_i64()
        .unwrap();
    let r = s
        .mgmt("DELETE", &format!("{sites}/{default}"), cred, None)
        .await;
    assert_mgmt_error(&r, 409, "default site");

    let site = call(&s, "POST", &sites, cred, Some(&json!({"name": "Edge"}))).await;
    let id = site["siteId"].as_i64().unwrap();
    let one = format!("{sites}/{id}");
    // With an internal network on it.
    let net = call(
        &s,
        "POST",
        &path(org, "internalnetworks"),
        cred,
        Some(&network("n", id)),
    )
    .await;
    assert_mgmt_error(
        &s.mgmt("DELETE", &one, cred, None).await,
        409,
        "internal network",
    );
    let net_path = format!("{}/{}", path(org, "internalnetworks"), net["originId"]);
    call(&s, "DELETE", &net_path, cred, None).await;

    // With a virtual appliance on it.
    insert_va(&s, org, id);
    let with_va = call(&s, "GET", &one, cred, None).await;
    assert_eq!(with_va["vaCount"], 1);
    assert_eq!(with_va["internalNetworkCount"], 0);
    assert_mgmt_error(
        &s.mgmt("DELETE", &one, cred, None).await,
        409,
        "virtual appliance",
    );
    s.db()
        .execute("DELETE FROM virtual_appliances WHERE site_id = ?1", [id])
        .unwrap();
    assert_eq!(call(&s, "GET", &one, cred, None).await["vaCount"], 0);
    let gone = call(&s, "DELETE", &one, cred, None).await;
    assert_exact(&gone, SITE);
    assert_mgmt_error(&s.mgmt("DELETE", &one, cred, None).await, 404, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_create_list_get_delete_and_the_password_stays_a_hash() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    let users = path(w.sp_org, "users");
    let mut body = user("Ada@Example.com");
    body["id"] = json!(77);
    body["status"] = json!("Disabled");
    body["twoFactorEnable"] = json!(true);
    let r = s.mgmt("POST", &users, &w.sp_cred, Some(&body)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.text().contains("correct horse"), "{}", r.text());
    let u = r.json();
    assert_exact(&u, USER);
    assert_eq!(
        u,
        json!({
            "id": u["id"], "firstname": "Ada", "lastname": "Lovelace", "email": "Ada@Example.com",
            "roleId": 2, "role": "Read Only", "timezone": "Europe/Berlin", "status": "Active",
            "lastLoginTime": null, "twoFactorEnable": false
        })
    );
    let id = u["id"].as_i64().unwrap();
    assert_ne!(id, 77);
    // A backward-compatible zone name is an IANA name too.
    let mut second = user("grace@example.com");
    second["timezone"] = json!("US/Eastern");
    second["roleId"] = json!(6);
    let u2 = call(&s, "POST", &users, &w.sp_org_cred, Some(&second)).await;
    assert_eq!(u2["role"], "Security Administrator");

    let hash: String = s
        .db()
        .query_row("SELECT password_hash FROM users WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    assert!(parasol::secrets::verify(
        "correct horse battery staple",
        &hash
    ));
    assert!(!hash.contains("correct horse"));

    let one = format!("{users}/{id}");
    for p in [&one, &users] {
        let r = s.mgmt("GET", p, &w.sp_org_cred, None).await;
        assert_eq!(r.status, 200);
        assert!(!r.text().contains("password") && !r.text().contains("argon2"));
    }
    assert_eq!(call(&s, "GET", &one, &w.sp_org_cred, None).await, u);
    assert_eq!(
        call(&s, "GET", &users, &w.sp_org_cred, None).await,
        json!([u.clone(), u2])
    );
    assert_eq!(call(&s, "DELETE", &one, &w.sp_org_cred, None).await, u);
    assert_mgmt_error(&s.mgmt("GET", &one, &w.sp_org_cred, None).await, 404, "");
    assert_mgmt_error(&s.mgmt("DELETE", &one, &w.sp_org_cred, None).await, 404, "");
    assert_eq!(
        call(&s, "GET", &users, &w.sp_org_cred, None)
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_emails_are_unique_per_organization_ignoring_case() {
    let s = TestServer::start().await;
    let w = s.world();
    let users = path(w.sp_org, "users");
    call(
        &s,
        "POST",
        &users,
        &w.sp_org_cred,
        Some(&user("ada@example.com")),
    )
    .await;
    for dup in ["ada@example.com", "ADA@Example.COM", " Ada@example.com "] {
        let r = s
            .mgmt("POST", &users, &w.sp_org_cred, Some(&user(dup)))
            .await;
        assert_mgmt_error(&r, 409, "email");
    }
    // Another organization may hold the same address.
    call(
        &s,
        "POST",
        &path(w.msp_org, "users"),
        &w.msp_org_cred,
        Some(&user("ada@example.com")),
    )
    .await;
    // A deleted user's address is free again.
    let list = call(&s, "GET", &users, &w.sp_org_cred, None).await;
    let one = format!("{users}/{}", list[0]["id"]);
    call(&s, "DELETE", &one, &w.sp_org_cred, None).await;
    call(
        &s,
        "POST",
        &users,
        &w.sp_org_cred,
        Some(&user("ADA@example.com")),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_names_the_field() {
    let s = TestServer::start().await;
    let w = s.world();
    let (org, cred) = (w.sp_org, &w.sp_org_cred);
    let site = call(&s, "GET", &path(org, "sites"), cred, None).await[0]["siteId"]
        .as_i64()
        .unwrap();
    let other_site = call(&s, "GET", &path(w.msp_org, "sites"), &w.msp_cred, None).await[0]
        ["siteId"]
        .as_i64()
        .unwrap();
    let net = call(
        &s,
        "POST",
        &path(org, "internalnetworks"),
        cred,
        Some(&network("n", site)),
    )
    .await;
    let net_one = format!("{}/{}", path(org, "internalnetworks"), net["originId"]);
    let site_one = format!("{}/{site}", path(org, "sites"));

    let with = |base: Value, field: &str, v: Value| {
        let mut b = base;
        if v == json!("<absent>") {
            b.as_object_mut().unwrap().remove(field);
        } else {
            b[field] = v;
        }
        b
    };
    let n = network("n", site);
    let u = user("x@example.com");
    let mut cases: Vec<(&str, String, Value, &str)> = Vec::new();
    for (method, p) in [("POST", path(org, "sites")), ("PUT", site_one.clone())] {
        for v in [
            json!("<absent>"),
            json!(null),
            json!(""),
            json!("   "),
            json!(5),
            json!(["x"]),
        ] {
            cases.push((
                method,
                p.clone(),
                with(json!({"name": "x"}), "name", v),
                "name",
            ));
        }
        cases.push((method, p.clone(), json!({"name": "x".repeat(256)}), "name"));
    }
    for (method, p) in [
        ("POST", path(org, "internalnetworks")),
        ("PUT", net_one.clone()),
    ] {
        let mut add = |field: &'static str, v: Value| {
            cases.push((method, p.clone(), with(n.clone(), field, v), field))
        };
        add("name", json!("<absent>"));
        add("name", json!(1));
        add("ipAddress", json!("<absent>"));
        add("ipAddress", json!(167772160));
        add("ipAddress", json!("10.0.0"));
        add("ipAddress", json!("10.0.0.256"));
        add("ipAddress", json!("::1"));
        add("ipAddress", json!("10.0.0.0/24"));
        add("prefixLength", json!("<absent>"));
        add("prefixLength", json!("24"));
        add("prefixLength", json!(24.5));
        add("prefixLength", json!(7));
        add("prefixLength", json!(33));
        add("siteId", json!("<absent>"));
        add("siteId", json!("1"));
        add("siteId", json!(987654));
        add("siteId", json!(other_site));
    }
    let mut add = |field: &'static str, v: Value| {
        cases.push(("POST", path(org, "users"), with(u.clone(), field, v), field))
    };
    for f in [
        "firstname",
        "lastname",
        "email",
        "password",
        "roleId",
        "timezone",
    ] {
        add(f, json!("<absent>"));
        add(f, json!(null));
    }
    add("firstname", json!(1));
    add("lastname", json!(false));
    add("email", json!(["a@b.c"]));
    add("email", json!("not-an-address"));
    add("email", json!("a@b"));
    add("password", json!(""));
    add("password", json!(12345678));
    add("roleId", json!("1"));
    add("roleId", json!(0));
    add("roleId", json!(7));
    add("timezone", json!(0));
    add("timezone", json!("Mars/Olympus_Mons"));
    add("timezone", json!("europe/berlin"));
    add("timezone", json!("+02:00"));
    // An unknown roleId (an existence check) is named before a bad field after it in the spec's
    // table.
    for timezone in [json!("Nope"), json!(null), json!(5)] {
        let mut b = json!({"firstname": "a", "lastname": "b", "email": "ord@x.example",
            "password": "p", "roleId": 99});
        b["timezone"] = timezone;
        cases.push(("POST", path(org, "users"), b, "roleId"));
    }
    for (method, p, body, field) in cases {
        let r = s.mgmt(method, &p, cred, Some(&body)).await;
        assert_eq!(r.status, 400, "{method} {p} {body}: {}", r.text());
        assert_mgmt_error(&r, 400, field);
    }
    // Nothing was created or changed by the refused requests.
    assert_eq!(
        call(&s, "GET", &path(org, "users"), cred, None).await,
        json!([])
    );
    assert_eq!(call(&s, "GET", &net_one, cred, None).await, net);
    assert_eq!(
        call(&s, "GET", &path(org, "sites"), cred, None)
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Bodies that are not JSON objects, and bodies without the JSON content type.
    for p in [
        path(org, "sites"),
        path(org, "internalnetworks"),
        path(org, "users"),
    ] {
        for raw in ["[]", "\"x\"", "{", ""] {
            let r = s
                .request(
                    "POST",
                    &p,
                    &[
                        ("authorization", &cred.auth()),
                        ("content-type", "application/json"),
                    ],
                    Some(raw.as_bytes().to_vec()),
                )
                .await;
            assert_mgmt_error(&r, 400, "body");
        }
        let r = s
            .request(
                "POST",
                &p,
                &[
                    ("authorization", &cred.auth()),
                    ("content-type", "text/plain"),
                ],
                Some(b"{}".to_vec()),
            )
            .await;
        assert_mgmt_error(&r, 415, "Content-Type");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_ids_and_organizations_out_of_scope_are_404() {
    let s = TestServer::start().await;
    let w = s.world();
    // One site, internal network and user in the service provider's customer.
    let org = w.sp_org;
    let (site, net, usr) = seed(&s, org, &w.sp_cred).await;
    let endpoints = |o: i64| -> Vec<(&'static str, String, Option<Value>)> {
        vec![
            ("GET", path(o, "sites"), None),
            ("POST", path(o, "sites"), Some(json!({"name": "x"}))),
            ("GET", format!("{}/{site}", path(o, "sites")), None),
            (
                "PUT",
                format!("{}/{site}", path(o, "sites")),
                Some(json!({"name": "x"})),
            ),
            ("DELETE", format!("{}/{site}", path(o, "sites")), None),
            ("GET", path(o, "internalnetworks"), None),
            (
                "POST",
                path(o, "internalnetworks"),
                Some(network("x", site)),
            ),
            (
                "GET",
                format!("{}/{net}", path(o, "internalnetworks")),
                None,
            ),
            (
                "PUT",
                format!("{}/{net}", path(o, "internalnetworks")),
                Some(network("x", site)),
            ),
            (
                "DELETE",
                format!("{}/{net}", path(o, "internalnetworks")),
                None,
            ),
            ("GET", path(o, "users"), None),
            ("POST", path(o, "users"), Some(user("v@example.com"))),
            ("GET", format!("{}/{usr}", path(o, "users")), None),
            ("DELETE", format!("{}/{usr}", path(o, "users")), None),
        ]
    };
    // Credentials that do not reach the organization: as if it did not exist.
    for cred in [&w.msp_cred, &w.msp_org_cred, &w.lone_org_cred] {
        for (method, p, body) in endpoints(org) {
            let r = s.mgmt(method, &p, cred, body.as_ref()).await;
            assert_mgmt_error(&r, 404, "");
        }
    }
    for (method, p, body) in endpoints(987_654) {
        assert_mgmt_error(
            &s.mgmt(method, &p, &w.sp_cred, body.as_ref()).await,
            404,
            "",
        );
    }
    // The items of one organization addressed under another the credential reaches: 404 (the
    // MSP's own customer has none of these ids). A moving PUT names one of its own sites: a
    // foreign siteId would be a validation error (400), which is checked before existence.
    let msp_site = call(&s, "GET", &path(w.msp_org, "sites"), &w.msp_cred, None).await[0]["siteId"]
        .as_i64()
        .unwrap();
    for (method, p, mut body) in endpoints(w.msp_org) {
        if !p.ends_with("sites") && !p.ends_with("internalnetworks") && !p.ends_with("users") {
            if let Some(b) = body.as_mut().filter(|b| b.get("siteId").is_some()) {
                b["siteId"] = json!(msp_site);
            }
            let r = s.mgmt(method, &p, &w.msp_cred, body.as_ref()).await;
            assert_mgmt_error(&r, 404, "");
        }
    }
    // Unknown ids in the right organization.
    for (method, what) in [("GET", "sites"), ("PUT", "sites"), ("DELETE", "sites")] {
        let body = (method == "PUT").then(|| json!({"name": "x"}));
        let p = format!("{}/987654", path(org, what));
        assert_mgmt_error(
            &s.mgmt(method, &p, &w.sp_cred, body.as_ref()).await,
            404,
            "",
        );
    }
    for method in ["GET", "PUT", "DELETE"] {
        let body = (method == "PUT").then(|| network("x", site));
        let p = format!("{}/987654", path(org, "internalnetworks"));
        assert_mgmt_error(
            &s.mgmt(method, &p, &w.sp_cred, body.as_ref()).await,
            404,
            "",
        );
    }
    for method in ["GET", "DELETE"] {
        let p = format!("{}/987654", path(org, "users"));
        assert_mgmt_error(&s.mgmt(method, &p, &w.sp_cred, None).await, 404, "");
    }
    // Everything is still there, untouched, for the credentials that reach it.
    for cred in [&w.sp_cred, &w.sp_org_cred] {
        let sites = call(&s, "GET", &path(org, "sites"), cred, None).await;
        assert_eq!(sites.as_array().unwrap().len(), 2);
        assert_eq!(sites[1]["name"], "s");
        assert_eq!(sites[1]["internalNetworkCount"], 1);
        call(
            &s,
            "GET",
            &format!("{}/{net}", path(org, "internalnetworks")),
            cred,
            None,
        )
        .await;
        call(
            &s,
            "GET",
            &format!("{}/{usr}", path(org, "users")),
            cred,
            None,
        )
        .await;
    }
    assert_eq!(
        call(&s, "GET", &path(w.msp_org, "users"), &w.msp_cred, None).await,
        json!([])
    );
}

/// Two organizations' writes arriving at once: each list holds exactly its own records, ids are
/// never shared, and a site's derived internal network count counts every network put on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_of_two_organizations_stay_apart() {
    let s = TestServer::start().await;
    let w = s.world();
    const TASKS: usize = 8;
    let orgs = [
        (w.sp_org, w.sp_org_cred.clone()),
        (w.msp_org, w.msp_org_cred.clone()),
    ];
    let mut defaults = Vec::new();
    for (org, cred) in &orgs {
        let sites = call(&s, "GET", &path(*org, "sites"), cred, None).await;
        defaults.push(sites[0]["siteId"].as_i64().unwrap());
    }
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        for ((org, cred), default) in orgs.iter().zip(&defaults) {
            let (client, org, cred, default) = (s.client.clone(), *org, cred.clone(), *default);
            tasks.push(tokio::spawn(async move {
                for i in 0..3 {
                    let site = json!({"name": format!("site {org}-{t}-{i}")});
                    let r = client
                        .mgmt("POST", &path(org, "sites"), &cred, Some(&site))
                        .await;
                    assert_eq!(r.status, 200, "{}", r.text());
                }
                let net = network(&format!("net {org}-{t}"), default);
                let r = client
                    .mgmt("POST", &path(org, "internalnetworks"), &cred, Some(&net))
                    .await;
                assert_eq!(r.status, 200, "{}", r.text());
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut site_ids = std::collections::BTreeSet::new();
    let mut origin_ids = std::collections::BTreeSet::new();
    for ((org, cred), default) in orgs.iter().zip(&defaults) {
        let sites = call(
            &s,
            "GET",
            &format!("{}?limit=200", path(*org, "sites")),
            cred,
            None,
        )
        .await;
        let sites = sites.as_array().unwrap();
        let mut names: Vec<String> = Vec::new();
        for site in sites {
            assert!(site_ids.insert(site["siteId"].as_i64().unwrap()), "{site}");
            assert!(
                origin_ids.insert(site["originId"].as_i64().unwrap()),
                "{site}"
            );
            if site["siteId"] == *default {
                assert_eq!(site["internalNetworkCount"], TASKS, "{site}");
            } else {
                names.push(site["name"].as_str().unwrap().to_string());
            }
        }
        names.sort();
        let mut want: Vec<String> = (0..TASKS)
            .flat_map(|t| (0..3).map(move |i| format!("site {org}-{t}-{i}")))
            .collect();
        want.sort();
        assert_eq!(names, want);
        let nets = call(&s, "GET", &path(*org, "internalnetworks"), cred, None).await;
        let nets = nets.as_array().unwrap();
        assert_eq!(nets.len(), TASKS);
        for net in nets {
            assert_eq!(net["siteId"], *default, "{net}");
            assert!(net["name"]
                .as_str()
                .unwrap()
                .starts_with(&format!("net {org}-")));
            assert!(
                origin_ids.insert(net["originId"].as_i64().unwrap()),
                "{net}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_by_id() {
    let s = TestServer::start().await;
    let w = s.world();
    let (org, cred) = (w.lone_org, &w.lone_org_cred);
    let default = call(&s, "GET", &path(org, "sites"), cred, None).await[0]["siteId"]
        .as_i64()
        .unwrap();
    for i in 0..4 {
        call(
            &s,
            "POST",
            &path(org, "sites"),
            cred,
            Some(&json!({"name": format!("s{i}")})),
        )
        .await;
        call(
            &s,
            "POST",
            &path(org, "internalnetworks"),
            cred,
            Some(&network(&format!("n{i}"), default)),
        )
        .await;
        call(
            &s,
            "POST",
            &path(org, "users"),
            cred,
            Some(&user(&format!("u{i}@example.com"))),
        )
        .await;
    }
    for (what, key, total) in [
        ("sites", "siteId", 5),
        ("internalnetworks", "originId", 4),
        ("users", "id", 4),
    ] {
        let ids = |v: Value| -> Vec<i64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x[key].as_i64().unwrap())
                .collect()
        };
        let all = ids(call(&s, "GET", &path(org, what), cred, None).await);
        assert_eq!(all.len(), total, "{what}");
        assert!(
            all.windows(2).all(|p| p[0] < p[1]),
            "{what} ordered by id: {all:?}"
        );
        for (q, want) in [
            ("?limit=2", all[..2].to_vec()),
            ("?limit=2&page=0", all[..2].to_vec()),
            ("?limit=2&page=2", all[2..4].to_vec()),
            ("?limit=3&page=2", all[3..].to_vec()),
            ("?page=3&limit=200", vec![]),
        ] {
            let got = ids(call(&s, "GET", &format!("{}{q}", path(org, what)), cred, None).await);
            assert_eq!(got, want, "{what}{q}");
        }
        for q in ["?limit=0", "?limit=201", "?page=-1", "?limit=two"] {
            let r = s
                .mgmt("GET", &format!("{}{q}", path(org, what)), cred, None)
                .await;
            assert_mgmt_error(&r, 400, if q.contains("page") { "page" } else { "limit" });
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_organization_removes_its_sites_users_and_internal_networks() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    let org = w.sp_org;
    let (site, _, _) = seed(&s, org, &w.sp_cred).await;
    insert_va(&s, org, site);
    // The MSP's customer keeps its own.
    call(
        &s,
        "POST",
        &path(w.msp_org, "users"),
        &w.msp_cred,
        Some(&user("u@example.com")),
    )
    .await;
    let customer = format!("/v1/serviceproviders/{}/customers/{org}", w.sp);
    call(&s, "DELETE", &customer, &w.sp_cred, None).await;
    let db = s.db();
    for table in ["sites", "internal_networks", "users", "virtual_appliances"] {
        let n: i64 = db
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE organization_id = ?1"),
                [org],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 0, "{table}");
    }
    assert_mgmt_error(
        &s.mgmt("GET", &path(org, "sites"), &w.sp_cred, None).await,
        404,
        "",
    );
    assert_eq!(
        call(&s, "GET", &path(w.msp_org, "users"), &w.msp_cred, None)
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// Writes racing the deletion of their organization: each is done before the deletion (200) or
/// refused as if the organization had never existed (404); never a 5xx, nothing left behind.
/// (Deterministically, with the deletion between scope check and write: the unit test
/// `management::tests::writes_to_an_organization_deleted_after_the_scope_check_are_404`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_the_deletion_of_their_organization_are_200_or_404() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    use parasol::store::{OrgFields, Parent};
    let s = TestServer::start().await;
    let w = s.world();
    let cred = &w.sp_cred;
    let fields = OrgFields {
        name: "Doomed".into(),
        seats: 1,
        ..Default::default()
    };
    let mut orgs = Vec::new();
    for i in 0..10 {
        let o =
            run(s
                .store()
                .create_organization(Parent::ServiceProvider(w.sp), fields.clone(), 0))
            .unwrap();
        let (org, site) = (o.id, o.default_site_id);
        orgs.push(org);
        let customer = format!("/v1/serviceproviders/{}/customers/{org}", w.sp);
        let (users, sites, networks) = (
            path(org, "users"),
            path(org, "sites"),
            path(org, "internalnetworks"),
        );
        let rename = path(org, &format!("sites/{site}"));
        let (u, n, named) = (
            user(&format!("race{i}@example.com")),
            network("n", site),
            json!({"name": "s"}),
        );
        let (a, b, c, d, e, deleted) = tokio::join!(
            s.mgmt("POST", &users, cred, Some(&u)),
            s.mgmt("POST", &sites, cred, Some(&named)),
            s.mgmt("POST", &networks, cred, Some(&n)),
            s.mgmt("PUT", &rename, cred, Some(&named)),
            s.mgmt("POST", &sites, cred, Some(&named)),
            s.mgmt("DELETE", &customer, cred, None),
        );
        assert_eq!(deleted.status, 200, "{}", deleted.text());
        for r in [a, b, c, d, e] {
            assert!(matches!(r.status, 200 | 404), "{}", r.text());
        }
    }
    let db = s.db();
    for table in ["sites", "internal_networks", "users"] {
        let sql = format!(
            "SELECT count(*) FROM {table} WHERE organization_id IN ({})",
            orgs.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        let n: i64 = db.query_row(&sql, [], |r| r.get(0)).unwrap();
        assert_eq!(n, 0, "{table}");
    }
}

fn parasol(dir: &Path, args: &[&str], stdin: Option<&str>) -> (bool, Value, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"))
        .args(args)
        .args(common::store_args(dir))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line_creates_what_the_api_shows_with_the_same_validation() {
    if skip_on_postgres("checks what is stored by reading the SQLite file") {
        return;
    }
    let s = TestServer::start().await;
    let w = s.world();
    let dir = s.dir.path();
    let org = w.lone_org.to_string();
    let cred = &w.lone_org_cred;

    let (ok, packages, _) = parasol(dir, &["package", "list"], None);
    assert!(ok);
    assert_eq!(
        packages[1],
        json!({"id": 2, "name": "DNS Security Advantage"})
    );
    assert_eq!(packages.as_array().unwrap().len(), 4);

    let (ok, site, err) = parasol(
        dir,
        &["site", "create", "--org", &org, "--name", "Depot"],
        None,
    );
    assert!(ok, "{err}");
    assert_exact(&site, SITE);
    let site_id = site["siteId"].as_i64().unwrap();
    assert_eq!(
        call(
            &s,
            "GET",
            &format!("{}/{site_id}", path(w.lone_org, "sites")),
            cred,
            None
        )
        .await,
        site
    );

    let net_args = |extra: &[&'static str]| {
        let mut a = vec![
            "internal-network",
            "create",
            "--org",
            &org,
            "--name",
            "Depot LAN",
        ];
        a.extend_from_slice(extra);
        a.iter().map(|x| x.to_string()).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        parasol(dir, &refs, None)
    };
    // Without --site-id the network goes to the default site.
    let (ok, net, err) = run(net_args(&[
        "--ip-address",
        "172.16.0.0",
        "--prefix-length",
        "12",
    ]));
    assert!(ok, "{err}");
    assert_exact(&net, INTERNAL_NETWORK);
    assert_eq!(net["siteName"], "Default Site");
    let sid = site_id.to_string();
    let mut args = net_args(&[
        "--ip-address",
        "172.16.0.0",
        "--prefix-length",
        "16",
        "--site-id",
    ]);
    args.push(sid);
    let (ok, net2, err) = run(args);
    assert!(ok, "{err}");
    assert_eq!(net2["siteName"], "Depot");
    let listed = call(&s, "GET", &path(w.lone_org, "internalnetworks"), cred, None).await;
    assert_eq!(listed, json!([net, net2]));
    for (extra, msg) in [
        (
            vec!["--ip-address", "172.16.0", "--prefix-length", "16"],
            "--ip-address must be an IPv4",
        ),
        (
            vec!["--ip-address", "172.16.0.0", "--prefix-length", "33"],
            "--prefix-length must be between 8 and 32",
        ),
        (
            vec![
                "--ip-address",
                "172.16.0.0",
                "--prefix-length",
                "16",
                "--site-id",
                "987654",
            ],
            "--site-id 987654: no site 987654",
        ),
    ] {
        let (ok, _, err) = run(net_args(&extra));
        assert!(!ok);
        assert!(err.contains(msg), "{err} should mention {msg}");
    }

    let user_args = |email: &'static str, extra: &[&'static str]| {
        let mut a = vec![
            "user",
            "create",
            "--org",
            &org,
            "--firstname",
            "Op",
            "--lastname",
            "Erator",
            "--email",
            email,
        ];
        a.extend_from_slice(extra);
        a.iter().map(|x| x.to_string()).collect::<Vec<_>>()
    };
    let (ok, u, err) = run(user_args(
        "op@example.com",
        &["--password", "pw1", "--role-id", "4"],
    ));
    assert!(ok, "{err}");
    assert_exact(&u, USER);
    assert_eq!(
        (&u["role"], &u["timezone"], &u["status"]),
        (&json!("Reporting Only"), &json!("UTC"), &json!("Active"))
    );
    let args = user_args(
        "op2@example.com",
        &["--password-stdin", "--timezone", "Asia/Tokyo"],
    );
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, u2, err) = parasol(dir, &refs, Some("from stdin\n"));
    assert!(ok, "{err}");
    let hash: String = s
        .db()
        .query_row(
            "SELECT password_hash FROM users WHERE id = ?1",
            [u2["id"].as_i64().unwrap()],
            |r| r.get(0),
        )
        .unwrap();
    assert!(parasol::secrets::verify("from stdin", &hash));
    let listed = call(&s, "GET", &path(w.lone_org, "users"), cred, None).await;
    assert_eq!(listed, json!([u, u2]));
    for (email, extra, msg) in [
        ("OP@example.com", vec!["--password", "x"], "already exists"),
        ("bad", vec!["--password", "x"], "--email must be"),
        (
            "z@example.com",
            vec!["--password", "x", "--timezone", "Nowhere"],
            "--timezone must be",
        ),
        (
            "z@example.com",
            vec!["--password", "x", "--role-id", "9"],
            "--role-id 9: no role 9",
        ),
        ("z@example.com", vec![], "--password"),
    ] {
        let (ok, _, err) = run(user_args(email, &extra));
        assert!(!ok, "{email} {extra:?}");
        assert!(err.contains(msg), "{err} should mention {msg}");
    }
    let (ok, _, err) = parasol(
        dir,
        &["site", "create", "--org", "987654", "--name", "x"],
        None,
    );
    assert!(!ok);
    assert!(err.contains("no organization 987654"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_organizations_have_sites_internal_networks_and_a_user() {
    let s = TestServer::start_with(|c| c.demo = true).await;
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(s.dir.path().join("demo-credentials.json")).unwrap(),
    )
    .unwrap();
    for o in doc["organizations"].as_array().unwrap() {
        let org = o["id"].as_i64().unwrap();
        let cred = Cred {
            key: o["apiKey"].as_str().unwrap().into(),
            secret: o["apiSecret"].as_str().unwrap().into(),
        };
        let sites = call(&s, "GET", &path(org, "sites"), &cred, None).await;
        let sites = sites.as_array().unwrap();
        assert!(sites.len() >= 2);
        assert!(sites
            .iter()
            .all(|x| x["internalNetworkCount"].as_i64().unwrap() >= 1));
        let nets = call(&s, "GET", &path(org, "internalnetworks"), &cred, None).await;
        assert!(!nets.as_array().unwrap().is_empty());
        for n in nets.as_array().unwrap() {
            assert_exact(n, INTERNAL_NETWORK);
        }
        let users = call(&s, "GET", &path(org, "users"), &cred, None).await;
        let users = users.as_array().unwrap();
        assert!(!users.is_empty());
        assert_exact(&users[0], USER);
        assert_eq!(users[0]["status"], "Active");
    }
}
