//! Every one of the 37 management endpoints, called once over HTTPS against the demo world, with
//! each response checked against the spec's field tables: no missing member, no extra member, each
//! member of the table's JSON type (null only where decisions.md allows it), timestamps in RFC 3339
//! form. Strict client schemas generated from the spec accept what passes here.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};

/// JSON type of a field in the spec's tables.
#[derive(Clone, Copy, Debug)]
enum T {
    Int,
    Str,
    Bool,
    /// A string holding an ISO 8601 timestamp.
    Time,
    StrArray,
    /// The virtual appliance's `state` object.
    VaState,
    /// The virtual appliance's `settings` object.
    VaSettings,
}

/// A field: name, type, and whether `null` is allowed (optional inputs not supplied, device
/// values never reported).
type Field = (&'static str, T, bool);

const SERVICE_PROVIDER: &[Field] = &[
    ("packageName", T::Str, false),
    ("seatsTotal", T::Int, false),
    ("seatsUsed", T::Int, false),
    ("customerCount", T::Int, false),
    ("status", T::Str, false),
    ("rebillAt", T::Time, true),
    ("expiresAt", T::Time, true),
];
const CUSTOMER: &[Field] = &[
    ("customerId", T::Int, false),
    ("customerName", T::Str, false),
    ("packageName", T::Str, false),
    ("seats", T::Int, false),
    ("streetAddress", T::Str, false),
    ("streetAddress2", T::Str, true),
    ("city", T::Str, false),
    ("state", T::Str, false),
    ("countryCode", T::Str, false),
    ("zipCode", T::Str, true),
    ("packageId", T::Int, false),
    ("dealId", T::Str, true),
    ("adminEmails", T::StrArray, false),
    ("ccwDealOwnerEmails", T::StrArray, false),
    ("createdAt", T::Time, false),
    ("modifiedAt", T::Time, false),
];
const MSP_CUSTOMER: &[Field] = &[
    ("customerId", T::Int, false),
    ("customerName", T::Str, false),
    ("seats", T::Int, false),
];
const NETWORK: &[Field] = &[
    ("originId", T::Int, false),
    ("name", T::Str, false),
    ("ipAddress", T::Str, false),
    ("prefixLength", T::Int, false),
    ("isDynamic", T::Bool, false),
    ("isVerified", T::Bool, false),
    ("status", T::Str, false),
    ("createdAt", T::Time, false),
];
const ROAMING_COMPUTER: &[Field] = &[
    ("originId", T::Int, false),
    ("name", T::Str, false),
    ("deviceId", T::Str, false),
    ("type", T::Str, false),
    ("status", T::Str, false),
    ("lastSyncStatus", T::Str, true),
    ("lastSync", T::Time, true),
    ("appliedBundle", T::Int, true),
    ("hasIpBlocking", T::Bool, false),
    ("version", T::Str, true),
    ("osVersion", T::Str, true),
    ("osVersionName", T::Str, true),
];
const INTERNAL_NETWORK: &[Field] = &[
    ("originId", T::Int, false),
    ("name", T::Str, false),
    ("ipAddress", T::Str, false),
    ("prefixLength", T::Int, false),
    ("siteName", T::Str, false),
    ("siteId", T::Int, false),
    ("createdAt", T::Time, false),
    ("modifiedAt", T::Time, false),
];
const VIRTUAL_APPLIANCE: &[Field] = &[
    ("originId", T::Int, false),
    ("name", T::Str, false),
    ("siteId", T::Int, false),
    ("isUpgradable", T::Bool, false),
    ("state", T::VaState, false),
    ("health", T::Str, false),
    ("type", T::Str, false),
    ("settings", T::VaSettings, false),
    ("createdAt", T::Time, false),
    ("modifiedAt", T::Time, false),
    ("stateUpdatedAt", T::Time, false),
];
const VA_STATE: &[Field] = &[
    ("connectedToConnector", T::Str, false),
    ("hasLocalDomainConfigured", T::Str, false),
    ("queryFailureRateAcceptable", T::Str, false),
    ("receivedInternalDNSQueries", T::Str, false),
    ("redundantWithinSite", T::Str, false),
    ("syncing", T::Str, false),
];
const VA_SETTINGS: &[Field] = &[
    ("internalIPs", T::StrArray, false),
    ("externalIP", T::Str, true),
    ("hostType", T::Str, true),
    ("uptime", T::Int, true),
    ("isDnscryptEnabled", T::Bool, false),
    ("version", T::Str, true),
    ("upgradeError", T::Str, true),
    ("domains", T::StrArray, false),
    ("lastSyncTime", T::Time, true),
];
const SITE: &[Field] = &[
    ("originId", T::Int, false),
    ("name", T::Str, false),
    ("siteId", T::Int, false),
    ("isDefault", T::Bool, false),
    ("type", T::Str, false),
    ("internalNetworkCount", T::Int, false),
    ("vaCount", T::Int, false),
    ("modifiedAt", T::Time, false),
    ("createdAt", T::Time, false),
];
const USER: &[Field] = &[
    ("id", T::Int, false),
    ("firstname", T::Str, false),
    ("lastname", T::Str, false),
    ("email", T::Str, false),
    ("roleId", T::Int, false),
    ("role", T::Str, false),
    ("timezone", T::Str, false),
    ("status", T::Str, false),
    ("lastLoginTime", T::Time, true),
    ("twoFactorEnable", T::Bool, false),
];
/// Not shown in the spec; decided in decisions.md.
const ROLE: &[Field] = &[
    ("roleId", T::Int, false),
    ("label", T::Str, false),
    ("organizationId", T::Int, false),
];

/// Checks `v` against a field table; `at` names the place for messages.
fn conforms(v: &Value, fields: &[Field], at: &str) {
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("{at}: not an object: {v}"));
    let mut got: Vec<&str> = obj.keys().map(String::as_str).collect();
    let mut want: Vec<&str> = fields.iter().map(|f| f.0).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "{at}: members differ from the spec's table: {v}");
    for &(name, ty, nullable) in fields {
        let m = &obj[name];
        let at = format!("{at}.{name}");
        if m.is_null() {
            assert!(nullable, "{at} is null");
            continue;
        }
        match ty {
            T::Int => assert!(m.is_i64(), "{at} is not an integer: {m}"),
            T::Str => assert!(m.is_string(), "{at} is not a string: {m}"),
            T::Bool => assert!(m.is_boolean(), "{at} is not a boolean: {m}"),
            T::Time => {
                let s = m
                    .as_str()
                    .unwrap_or_else(|| panic!("{at} is not a string: {m}"));
                time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                    .unwrap_or_else(|e| panic!("{at} is not an ISO 8601 timestamp: {s}: {e}"));
            }
            T::StrArray => {
                let a = m
                    .as_array()
                    .unwrap_or_else(|| panic!("{at} is not an array: {m}"));
                assert!(a.iter().all(Value::is_string), "{at}: {m}");
            }
            T::VaState => conforms(m, VA_STATE, &at),
            T::VaSettings => conforms(m, VA_SETTINGS, &at),
        }
    }
}

/// Checks a list response: a bare, non-empty array of conforming items.
fn conforms_list(v: &Value, fields: &[Field], at: &str) -> Vec<Value> {
    let items = v
        .as_array()
        .unwrap_or_else(|| panic!("{at}: not a bare array: {v}"))
        .clone();
    assert!(
        !items.is_empty(),
        "{at}: the demo world should list something"
    );
    for (i, item) in items.iter().enumerate() {
        conforms(item, fields, &format!("{at}[{i}]"));
    }
    items
}

struct Demo {
    sp: i64,
    msp: i64,
    org: i64,
    sp_cred: Cred,
    msp_cred: Cred,
}

fn demo(s: &TestServer) -> Demo {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(s.dir.path().join("demo-credentials.json")).unwrap(),
    )
    .unwrap();
    let cred = |v: &Value| Cred {
        key: v["apiKey"].as_str().unwrap().to_owned(),
        secret: v["apiSecret"].as_str().unwrap().to_owned(),
    };
    Demo {
        sp: doc["serviceProvider"]["id"].as_i64().unwrap(),
        msp: doc["msp"]["id"].as_i64().unwrap(),
        org: doc["organizations"][0]["id"].as_i64().unwrap(),
        sp_cred: cred(&doc["serviceProvider"]),
        msp_cred: cred(&doc["msp"]),
    }
}

/// Calls one endpoint, expects 200 with JSON, and returns the body.
async fn call(s: &TestServer, method: &str, path: &str, cred: &Cred, body: Option<Value>) -> Value {
    let r = s.mgmt(method, path, cred, body.as_ref()).await;
    assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "{method} {path}"
    );
    r.json()
}

fn customer_input(name: &str) -> Value {
    json!({
        "customerName": name,
        "seats": 25,
        "streetAddress": "1 Infinite Loop",
        "city": "Cupertino",
        "state": "CA",
        "countryCode": "US",
        "packageId": 2,
        "adminEmails": ["it@example.com"]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_exactly_the_spec_fields() {
    let s = TestServer::start_with(|c| c.demo = true).await;
    let d = demo(&s);
    let mut called = 0;
    macro_rules! check {
        ($method:expr, $path:expr, $cred:expr, $body:expr, $fields:expr) => {{
            let path: String = $path;
            let v = call(&s, $method, &path, $cred, $body).await;
            conforms(&v, $fields, &format!("{} {}", $method, path));
            called += 1;
            v
        }};
    }
    macro_rules! check_list {
        ($path:expr, $cred:expr, $fields:expr) => {{
            let path: String = $path;
            let v = call(&s, "GET", &path, $cred, None).await;
            called += 1;
            conforms_list(&v, $fields, &format!("GET {path}"))
        }};
    }

    // Service provider and its customers (6 endpoints).
    let sp = format!("/v1/serviceproviders/{}", d.sp);
    check!("GET", sp.clone(), &d.sp_cred, None, SERVICE_PROVIDER);
    let c = check!(
        "POST",
        format!("{sp}/customers"),
        &d.sp_cred,
        Some(customer_input("Conformance Inc")),
        CUSTOMER
    );
    let cust = c["customerId"].as_i64().unwrap();
    check_list!(format!("{sp}/customers"), &d.sp_cred, CUSTOMER);
    check!(
        "GET",
        format!("{sp}/customers/{cust}"),
        &d.sp_cred,
        None,
        CUSTOMER
    );
    let mut full = customer_input("Conformance Inc renamed");
    full["zipCode"] = json!("95014");
    full["dealId"] = json!("D-1");
    full["streetAddress2"] = json!("Building 2");
    full["ccwDealOwnerEmails"] = json!(["owner@example.com"]);
    check!(
        "PUT",
        format!("{sp}/customers/{cust}"),
        &d.sp_cred,
        Some(full),
        CUSTOMER
    );

    // MSP customers (5 endpoints, delete at the end).
    let msp = format!("/v1/msps/{}/customers", d.msp);
    let m = check!(
        "POST",
        msp.clone(),
        &d.msp_cred,
        Some(json!({"customerName": "Conformance MSP customer", "seats": 3})),
        MSP_CUSTOMER
    );
    let mcust = m["customerId"].as_i64().unwrap();
    check_list!(msp.clone(), &d.msp_cred, MSP_CUSTOMER);
    check!(
        "GET",
        format!("{msp}/{mcust}"),
        &d.msp_cred,
        None,
        MSP_CUSTOMER
    );
    check!(
        "PUT",
        format!("{msp}/{mcust}"),
        &d.msp_cred,
        Some(json!({"customerName": "Renamed", "seats": 4})),
        MSP_CUSTOMER
    );

    // Per-organization resources of the first demo organization, through the provider's reach.
    let org = format!("/v1/organizations/{}", d.org);
    let cred = &d.sp_cred;

    // Sites (5).
    let site = check!(
        "POST",
        format!("{org}/sites"),
        cred,
        Some(json!({"name": "Conformance site"})),
        SITE
    );
    let site_id = site["siteId"].as_i64().unwrap();
    let sites = check_list!(format!("{org}/sites"), cred, SITE);
    let default_site = sites
        .iter()
        .find(|s| s["isDefault"] == true)
        .expect("a default site")["siteId"]
        .as_i64()
        .unwrap();
    check!("GET", format!("{org}/sites/{site_id}"), cred, None, SITE);
    check!(
        "PUT",
        format!("{org}/sites/{site_id}"),
        cred,
        Some(json!({"name": "Conformance site 2"})),
        SITE
    );

    // Internal networks (5).
    let inet = check!(
        "POST",
        format!("{org}/internalnetworks"),
        cred,
        Some(
            json!({"name": "Lab", "ipAddress": "10.20.0.0", "prefixLength": 16, "siteId": default_site})
        ),
        INTERNAL_NETWORK
    );
    let inet_id = inet["originId"].as_i64().unwrap();
    check_list!(format!("{org}/internalnetworks"), cred, INTERNAL_NETWORK);
    check!(
        "GET",
        format!("{org}/internalnetworks/{inet_id}"),
        cred,
        None,
        INTERNAL_NETWORK
    );
    check!(
        "PUT",
        format!("{org}/internalnetworks/{inet_id}"),
        cred,
        Some(
            json!({"name": "Lab 2", "ipAddress": "10.21.0.0", "prefixLength": 16, "siteId": site_id})
        ),
        INTERNAL_NETWORK
    );
    check!(
        "DELETE",
        format!("{org}/internalnetworks/{inet_id}"),
        cred,
        None,
        INTERNAL_NETWORK
    );
    check!("DELETE", format!("{org}/sites/{site_id}"), cred, None, SITE);

    // Networks (3).
    let nets = check_list!(format!("{org}/networks"), cred, NETWORK);
    let net_id = nets[0]["originId"].as_i64().unwrap();
    check!(
        "GET",
        format!("{org}/networks/{net_id}"),
        cred,
        None,
        NETWORK
    );
    check!(
        "DELETE",
        format!("{org}/networks/{net_id}"),
        cred,
        None,
        NETWORK
    );

    // Roaming computers (4).
    let rcs = check_list!(format!("{org}/roamingcomputers"), cred, ROAMING_COMPUTER);
    let dev = rcs[0]["deviceId"].as_str().unwrap().to_owned();
    check!(
        "GET",
        format!("{org}/roamingcomputers/{dev}"),
        cred,
        None,
        ROAMING_COMPUTER
    );
    check!(
        "PUT",
        format!("{org}/roamingcomputers/{dev}"),
        cred,
        Some(json!({"name": "renamed-laptop"})),
        ROAMING_COMPUTER
    );
    check!(
        "DELETE",
        format!("{org}/roamingcomputers/{dev}"),
        cred,
        None,
        ROAMING_COMPUTER
    );

    // Virtual appliances (4).
    let vas = check_list!(format!("{org}/virtualappliances"), cred, VIRTUAL_APPLIANCE);
    let va_id = vas[0]["originId"].as_i64().unwrap();
    check!(
        "GET",
        format!("{org}/virtualappliances/{va_id}"),
        cred,
        None,
        VIRTUAL_APPLIANCE
    );
    check!(
        "PUT",
        format!("{org}/virtualappliances/{va_id}"),
        cred,
        Some(json!({"siteId": default_site})),
        VIRTUAL_APPLIANCE
    );
    check!(
        "DELETE",
        format!("{org}/virtualappliances/{va_id}"),
        cred,
        None,
        VIRTUAL_APPLIANCE
    );

    // Users (4).
    let user = check!(
        "POST",
        format!("{org}/users"),
        cred,
        Some(json!({
            "firstname": "Grace", "lastname": "Hopper", "email": "grace@example.com",
            "password": "correct horse battery staple", "roleId": 2, "timezone": "Europe/Berlin"
        })),
        USER
    );
    let user_id = user["id"].as_i64().unwrap();
    check_list!(format!("{org}/users"), cred, USER);
    check!("GET", format!("{org}/users/{user_id}"), cred, None, USER);
    check!("DELETE", format!("{org}/users/{user_id}"), cred, None, USER);

    // Roles (1).
    check_list!(format!("{org}/roles"), cred, ROLE);

    // The customer deletes last (2).
    check!(
        "DELETE",
        format!("{sp}/customers/{cust}"),
        &d.sp_cred,
        None,
        CUSTOMER
    );
    check!(
        "DELETE",
        format!("{msp}/{mcust}"),
        &d.msp_cred,
        None,
        MSP_CUSTOMER
    );

    assert_eq!(
        called, 37,
        "every endpoint of the spec's table is called once"
    );
}
