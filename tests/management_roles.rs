//! The built-in roles of `GET /v1/organizations/{id}/roles`, over HTTPS against the real server.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};

fn roles_path(org: i64, query: &str) -> String {
    format!("/v1/organizations/{org}/roles{query}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_are_the_six_built_in_ones_for_every_reaching_credential() {
    let s = TestServer::start().await;
    let w = s.world();
    let expected = json!([
        {"roleId": 1, "label": "Full Admin", "organizationId": 0},
        {"roleId": 2, "label": "Read Only", "organizationId": 0},
        {"roleId": 3, "label": "Block Page Bypass", "organizationId": 0},
        {"roleId": 4, "label": "Reporting Only", "organizationId": 0},
        {"roleId": 5, "label": "Investigate Only", "organizationId": 0},
        {"roleId": 6, "label": "Security Administrator", "organizationId": 0},
    ]);
    for (org, cred) in [
        (w.sp_org, &w.sp_cred),
        (w.sp_org, &w.sp_org_cred),
        (w.msp_org, &w.msp_cred),
        (w.msp_org, &w.msp_org_cred),
        (w.lone_org, &w.lone_org_cred),
    ] {
        let r = s.mgmt("GET", &roles_path(org, ""), cred, None).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        // Exactly these members in this order: strict client schemas accept nothing else.
        assert_eq!(r.json(), expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_page_and_limit() {
    let s = TestServer::start().await;
    let w = s.world();
    let ids = |v: Value| -> Vec<i64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["roleId"].as_i64().unwrap())
            .collect()
    };
    for (query, want) in [
        ("?limit=2", vec![1, 2]),
        ("?limit=2&page=2", vec![3, 4]),
        ("?limit=2&page=0", vec![1, 2]),
        ("?limit=4&page=2", vec![5, 6]),
        ("?page=9", vec![]),
    ] {
        let r = s
            .mgmt("GET", &roles_path(w.sp_org, query), &w.sp_org_cred, None)
            .await;
        assert_eq!(r.status, 200, "{query}: {}", r.text());
        assert_eq!(ids(r.json()), want, "{query}");
    }
    for query in ["?limit=0", "?limit=201", "?page=-1", "?limit=x"] {
        let r = s
            .mgmt("GET", &roles_path(w.sp_org, query), &w.sp_org_cred, None)
            .await;
        assert_eq!(r.status, 400, "{query}: {}", r.text());
        assert_eq!(r.json()["statusCode"], 400);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_of_an_organization_out_of_scope_are_404() {
    let s = TestServer::start().await;
    let w = s.world();
    for (org, cred) in [
        (w.msp_org, &w.sp_cred),
        (w.lone_org, &w.sp_cred),
        (w.sp_org, &w.msp_cred),
        (w.msp_org, &w.sp_org_cred),
        (w.sp_org, &w.lone_org_cred),
        (999_999, &w.sp_cred),
    ] {
        let r = s.mgmt("GET", &roles_path(org, ""), cred, None).await;
        assert_eq!(r.status, 404, "org {org}: {}", r.text());
        assert_eq!(r.json()["message"], "Not found");
    }
    let r = s
        .request(
            "GET",
            &roles_path(w.sp_org, ""),
            &[("authorization", "Basic bm9wZTpub3Bl")],
            None,
        )
        .await;
    assert_eq!(r.status, 401);
}
