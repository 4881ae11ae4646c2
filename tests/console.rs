//! The console in the browser (`/console/`), over HTTPS against the real server: sign-in with
//! each credential kind and the scope each sees, sessions (sign-out, expiry), CSRF and origin
//! checks on every form, the security headers, escaping, searching and paging, and the flag
//! that turns it off.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use parasol::console::SessionLimits;

/// The headers every console answer carries.
const HEADERS: [(&str, &str); 4] = [
    (
        "content-security-policy",
        "default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("cache-control", "no-store"),
];

fn assert_headers(r: &Resp, what: &str) {
    for (name, value) in HEADERS {
        assert_eq!(r.header(name), Some(value), "{what}: {name}");
    }
}

/// A browser's view of the console: the server, its origin, and the session cookie.
struct Browser<'a> {
    s: &'a TestServer,
    origin: String,
    cookie: Option<String>,
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn form(fields: &[(&str, &str)]) -> Vec<u8> {
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect::<Vec<_>>()
        .join("&")
        .into_bytes()
}

/// The value of the hidden `csrf` field of a page.
fn csrf(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a token")
        + 19;
    page[at..at + 64].to_string()
}

impl<'a> Browser<'a> {
    fn new(s: &'a TestServer) -> Browser<'a> {
        Browser {
            s,
            origin: format!("https://{}", s.addr),
            cookie: None,
        }
    }

    async fn get(&self, path: &str) -> Resp {
        let cookie = self.cookie.clone().map(|c| format!("parasol_console={c}"));
        let mut headers = vec![];
        if let Some(c) = &cookie {
            headers.push(("cookie", c.as_str()));
        }
        let r = self.s.request("GET", path, &headers, None).await;
        assert_headers(&r, path);
        r
    }

    /// POSTs a form with the given `Origin` (`None`: none at all).
    async fn post_from(&self, origin: Option<&str>, path: &str, fields: &[(&str, &str)]) -> Resp {
        let cookie = self.cookie.clone().map(|c| format!("parasol_console={c}"));
        let mut headers = vec![("content-type", "application/x-www-form-urlencoded")];
        if let Some(c) = &cookie {
            headers.push(("cookie", c.as_str()));
        }
        if let Some(o) = origin {
            headers.push(("origin", o));
        }
        let r = self
            .s
            .request("POST", path, &headers, Some(form(fields)))
            .await;
        assert_headers(&r, path);
        r
    }

    async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Resp {
        let origin = self.origin.clone();
        self.post_from(Some(&origin), path, fields).await
    }

    /// Signs in; panics unless the server answers with a session.
    async fn sign_in(&mut self, cred: &Cred) -> String {
        let r = self
            .post(
                "/console/signin",
                &[("api_key", &cred.key), ("secret", &cred.secret)],
            )
            .await;
        assert_eq!(r.status, 303, "{}", r.text());
        assert_eq!(r.header("location"), Some("/console/"));
        let set = r.header("set-cookie").unwrap().to_string();
        assert!(
            set.ends_with("; HttpOnly; Secure; SameSite=Strict; Path=/console/"),
            "{set}"
        );
        let id = set
            .strip_prefix("parasol_console=")
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_string();
        assert_eq!(id.len(), 64, "a 256-bit id in hex: {id}");
        self.cookie = Some(id);
        let page = self.get("/console/").await;
        assert_eq!(page.status, 200);
        csrf(&page.text())
    }
}

fn key_of(s: &TestServer, org: i64) -> String {
    run(s.store().list_customer_keys(org)).unwrap()[0]
        .key
        .clone()
}

/// Lists `names` for organization `org` through the enforcement interface.
async fn list(s: &TestServer, org: i64, names: &[&str]) {
    let key = key_of(s, org);
    let events: Vec<_> = names.iter().map(|n| event(n)).collect();
    let r = s
        .post_json(
            &format!("/1.0/events?customerKey={key}"),
            &serde_json::Value::Array(events),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text());
}

fn allowed(s: &TestServer, org: i64) -> Vec<String> {
    run(s.store().allow_list(org)).unwrap()
}

#[test]
fn each_credential_kind_sees_and_acts_on_its_own_organizations_only() {
    run(async {
        let s = TestServer::start().await;
        let w = s.world();
        for org in [w.sp_org, w.msp_org, w.lone_org] {
            list(&s, org, &[&format!("org{org}.example")]).await;
        }
        let all = [
            (w.sp_org, "Acme"),
            (w.msp_org, "Globex"),
            (w.lone_org, "Initech"),
        ];
        let kinds = [
            ("service provider", &w.sp_cred, vec![w.sp_org]),
            ("MSP", &w.msp_cred, vec![w.msp_org]),
            ("provider's customer", &w.sp_org_cred, vec![w.sp_org]),
            ("MSP's customer", &w.msp_org_cred, vec![w.msp_org]),
            (
                "stand-alone organization",
                &w.lone_org_cred,
                vec![w.lone_org],
            ),
        ];
        for (kind, cred, mine) in kinds {
            let mut b = Browser::new(&s);
            let token = b.sign_in(cred).await;
            let overview = b.get("/console/").await.text();
            for (org, name) in all {
                let path = format!("/console/organizations/{org}");
                let page = b.get(&path).await;
                let ours = mine.contains(&org);
                assert_eq!(
                    overview.contains(&format!("<a href=\"{path}\">{name}</a>")),
                    ours,
                    "{kind}: overview and {name}"
                );
                if ours {
                    assert_eq!(page.status, 200, "{kind}: {path}");
                    assert!(page.text().contains(&format!("org{org}.example")));
                    continue;
                }
                // Another's organization: 404 for the page and for every action, and nothing
                // changes.
                assert_eq!(page.status, 404, "{kind}: {path}");
                assert!(!page.text().contains(&format!("org{org}.example")));
                let id = run(s
                    .store()
                    .search_domains(org, String::new(), String::new(), 1))
                .unwrap()[0]
                    .id
                    .to_string();
                let actions = [
                    (
                        "domains/delete",
                        vec![("csrf", token.as_str()), ("id", id.as_str())],
                    ),
                    (
                        "allowlist/add",
                        vec![("csrf", token.as_str()), ("name", "x.example")],
                    ),
                    (
                        "allowlist/remove",
                        vec![("csrf", token.as_str()), ("name", "x.example")],
                    ),
                ];
                for (action, fields) in actions {
                    let r = b.post(&format!("{path}/{action}"), &fields).await;
                    assert_eq!(r.status, 404, "{kind}: {action} on {name}");
                }
                assert_eq!(
                    run(s.store().listed_names(org)).unwrap(),
                    [format!("org{org}.example")]
                );
                assert!(allowed(&s, org).is_empty());
            }
            // An organization that does not exist reads the same.
            assert_eq!(b.get("/console/organizations/999999").await.status, 404);
        }
        s.stop().await;
    });
}

#[test]
fn a_wrong_secret_or_no_session_gets_the_sign_in_form() {
    run(async {
        let s = TestServer::start().await;
        let w = s.world();
        let b = Browser::new(&s);
        let r = b
            .post(
                "/console/signin",
                &[("api_key", &w.sp_cred.key), ("secret", "wrong")],
            )
            .await;
        assert_eq!(r.status, 401);
        assert!(r.header("set-cookie").is_none());
        assert!(r.text().contains("were not accepted"));
        let r = b.get("/console/").await;
        assert_eq!(r.status, 200);
        assert!(r.text().contains("action=\"/console/signin\""));
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        // Pages behind the session send the browser to the sign-in form.
        let r = b.get(&format!("/console/organizations/{}", w.sp_org)).await;
        assert_eq!(r.status, 303);
        assert_eq!(r.header("location"), Some("/console/"));
        // A made-up session id is no session.
        let mut forged = Browser::new(&s);
        forged.cookie = Some("0".repeat(64));
        assert_eq!(
            forged
                .get(&format!("/console/organizations/{}", w.sp_org))
                .await
                .status,
            303
        );
        // The stylesheet is served by the binary, with the same headers.
        let css = b.get("/console/style.css").await;
        assert_eq!(css.status, 200);
        assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
        s.stop().await;
    });
}

#[test]
fn forms_without_the_token_or_from_another_origin_are_refused_and_change_nothing() {
    run(async {
        let s = TestServer::start().await;
        let w = s.world();
        let mut b = Browser::new(&s);
        let token = b.sign_in(&w.lone_org_cred).await;
        let add = format!("/console/organizations/{}/allowlist/add", w.lone_org);
        let origin = b.origin.clone();
        let wrong = "f".repeat(64);
        type Refusal<'a> = (&'a str, Option<&'a str>, Vec<(&'a str, &'a str)>);
        let refusals: [Refusal; 5] = [
            ("no token", Some(&origin), vec![("name", "a.example")]),
            (
                "an empty token",
                Some(&origin),
                vec![("csrf", ""), ("name", "a.example")],
            ),
            (
                "a wrong token",
                Some(&origin),
                vec![("csrf", &wrong), ("name", "a.example")],
            ),
            (
                "a cross-site origin",
                Some("https://evil.example"),
                vec![("csrf", &token), ("name", "a.example")],
            ),
            (
                "no origin at all",
                None,
                vec![("csrf", &token), ("name", "a.example")],
            ),
        ];
        for (what, from, fields) in &refusals {
            let r = b.post_from(*from, &add, fields).await;
            assert_eq!(r.status, 400, "{what}");
            assert!(allowed(&s, w.lone_org).is_empty(), "{what}");
        }
        // Sign-out and sign-in are held to the origin too.
        let r = b
            .post_from(
                Some("https://evil.example"),
                "/console/signout",
                &[("csrf", &token)],
            )
            .await;
        assert_eq!(r.status, 400);
        let r = b
            .post_from(
                Some("https://evil.example"),
                "/console/signin",
                &[("api_key", &w.sp_cred.key), ("secret", &w.sp_cred.secret)],
            )
            .await;
        assert_eq!(r.status, 400);
        assert!(r.header("set-cookie").is_none());
        // Another session's token is not this session's.
        let mut other = Browser::new(&s);
        let theirs = other.sign_in(&w.lone_org_cred).await;
        assert_ne!(theirs, token);
        let r = b
            .post(&add, &[("csrf", &theirs), ("name", "a.example")])
            .await;
        assert_eq!(r.status, 400);
        // The same form with its own token and origin goes through.
        let r = b
            .post(&add, &[("csrf", &token), ("name", "a.example")])
            .await;
        assert_eq!(r.status, 303, "{}", r.text());
        assert_eq!(allowed(&s, w.lone_org), ["a.example"]);
        s.stop().await;
    });
}

#[test]
fn sign_out_ends_the_session_and_sessions_expire() {
    run(async {
        let s = TestServer::start_with(|c| {
            c.console = Some(SessionLimits {
                lifetime: Duration::from_millis(300),
                ..SessionLimits::default()
            })
        })
        .await;
        let w = s.world();
        let page = format!("/console/organizations/{}", w.lone_org);
        let mut b = Browser::new(&s);
        b.sign_in(&w.lone_org_cred).await;
        // However active, a session ends with its lifetime.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let r = b.get(&page).await;
            if r.status == 303 {
                break;
            }
            assert_eq!(r.status, 200);
            assert!(
                tokio::time::Instant::now() < deadline,
                "the session did not expire"
            );
            tokio::task::yield_now().await;
        }
        s.stop().await;

        let s = TestServer::start().await;
        let w = s.world();
        let page = format!("/console/organizations/{}", w.lone_org);
        let mut b = Browser::new(&s);
        let token = b.sign_in(&w.lone_org_cred).await;
        assert_eq!(b.get(&page).await.status, 200);
        // Revoking the credential ends its sessions at once.
        let mut revoked = Browser::new(&s);
        revoked.sign_in(&w.sp_org_cred).await;
        let theirs = format!("/console/organizations/{}", w.sp_org);
        assert_eq!(revoked.get(&theirs).await.status, 200);
        assert!(run(s.store().revoke_credential(w.sp_org_cred.key.clone(), 1)).unwrap());
        assert_eq!(revoked.get(&theirs).await.status, 303);
        let r = b.post("/console/signout", &[("csrf", &token)]).await;
        assert_eq!(r.status, 303);
        assert!(r.header("set-cookie").unwrap().contains("Max-Age=0"));
        // The old cookie, replayed, names no session.
        assert_eq!(b.get(&page).await.status, 303);
        s.stop().await;
    });
}

#[test]
fn search_pages_delete_allow_and_decide() {
    run(async {
        let s = TestServer::start().await;
        let w = s.world();
        let org = w.lone_org;
        let names: Vec<String> = (0..120).map(|i| format!("ads{i:03}.example")).collect();
        let mut all: Vec<&str> = names.iter().map(String::as_str).collect();
        all.push("shop.example");
        list(&s, org, &all).await;
        let mut b = Browser::new(&s);
        let token = b.sign_in(&w.lone_org_cred).await;
        let base = format!("/console/organizations/{org}");
        // Pages of 50 names with the prefix, in name order, then the next from after the last.
        let first = b.get(&format!("{base}?q=ads")).await.text();
        assert!(first.contains("ads000.example") && first.contains("ads049.example"));
        assert!(!first.contains("ads050.example") && !first.contains("shop.example"));
        let next = format!("{base}?q=ads&amp;after=ads049.example");
        assert!(first.contains(&format!("href=\"{next}\"")), "{first}");
        let second = b.get(&next.replace("&amp;", "&")).await.text();
        assert!(second.contains("ads050.example") && !second.contains("ads049.example"));
        let third = b
            .get(&format!("{base}?q=ads&after=ads099.example"))
            .await
            .text();
        assert!(third.contains("ads119.example") && !third.contains("Next page"));
        // Delete one by its id.
        let id = run(s
            .store()
            .search_domains(org, "ads007".into(), String::new(), 1))
        .unwrap()[0]
            .id
            .to_string();
        let r = b
            .post(
                &format!("{base}/domains/delete"),
                &[("csrf", &token), ("id", &id)],
            )
            .await;
        assert_eq!(r.status, 303);
        assert!(!run(s.store().listed_names(org))
            .unwrap()
            .contains(&"ads007.example".to_string()));
        // Deleting it again: not found.
        let r = b
            .post(
                &format!("{base}/domains/delete"),
                &[("csrf", &token), ("id", &id)],
            )
            .await;
        assert_eq!(r.status, 404);
        // Allow a listed name: the decision says so, then remove it.
        let r = b
            .post(
                &format!("{base}/allowlist/add"),
                &[("csrf", &token), ("name", "Shop.Example.")],
            )
            .await;
        assert_eq!(r.status, 303);
        assert_eq!(allowed(&s, org), ["shop.example"]);
        let page = b.get(&format!("{base}?name=www.shop.example")).await.text();
        assert!(
            page.contains("<code>www.shop.example</code> is <span class=\"ok\">not blocked</span>"),
            "{page}"
        );
        assert!(page.contains("allowed by the allow-list entry <code>shop.example</code>"));
        let r = b
            .post(
                &format!("{base}/allowlist/remove"),
                &[("csrf", &token), ("name", "shop.example")],
            )
            .await;
        assert_eq!(r.status, 303);
        assert!(allowed(&s, org).is_empty());
        let page = b.get(&format!("{base}?name=www.shop.example")).await.text();
        assert!(
            page.contains(
                "<span class=\"bad\">blocked</span>; listed as <code>shop.example</code>"
            ),
            "{page}"
        );
        s.stop().await;
    });
}

#[test]
fn markup_in_names_and_input_is_shown_as_text() {
    run(async {
        let s = TestServer::start().await;
        let w = s.world();
        let evil = "<script>alert(1)</script><b onmouseover=x>";
        let org = run(s.store().create_organization(
            parasol::store::Parent::ServiceProvider(w.sp),
            parasol::store::OrgFields {
                name: evil.into(),
                seats: 1,
                ..Default::default()
            },
            1,
        ))
        .unwrap()
        .id;
        let mut b = Browser::new(&s);
        let token = b.sign_in(&w.sp_cred).await;
        let escaped = "&lt;script&gt;alert(1)&lt;/script&gt;&lt;b onmouseover=x&gt;";
        for path in [
            "/console/".to_string(),
            format!("/console/organizations/{}", org),
        ] {
            let page = b.get(&path).await.text();
            assert!(page.contains(escaped), "{path}: {page}");
            assert!(
                !page.contains("<script>") && !page.contains("<b onmouseover"),
                "{path}"
            );
        }
        // Text that is not a domain name, echoed back in a decision and a search.
        let page = b
            .get(&format!(
                "/console/organizations/{}?name=%3Cimg%20src%3Dx%3E&q=%22%3E%3Cimg%3E",
                org
            ))
            .await
            .text();
        assert!(
            page.contains("Not a domain name: &lt;img src=x&gt;"),
            "{page}"
        );
        assert!(page.contains("value=\"&quot;&gt;&lt;img&gt;\""), "{page}");
        assert!(!page.contains("<img"));
        let r = b
            .post(
                &format!("/console/organizations/{}/allowlist/add", org),
                &[("csrf", &token), ("name", "<i>x</i>")],
            )
            .await;
        assert_eq!(r.status, 400);
        assert!(!r.text().contains("<i>"));
        s.stop().await;
    });
}

#[test]
fn the_console_can_be_turned_off() {
    run(async {
        let s = TestServer::start_with(|c| c.console = None).await;
        let w = s.world();
        for path in ["/console/", "/console/style.css"] {
            let r = s.get(path).await;
            assert_eq!(r.status, 404, "{path}");
            assert!(r.header("set-cookie").is_none());
        }
        let r = s
            .request(
                "POST",
                "/console/signin",
                &[("content-type", "application/x-www-form-urlencoded")],
                Some(form(&[
                    ("api_key", &w.sp_cred.key),
                    ("secret", &w.sp_cred.secret),
                ])),
            )
            .await;
        assert_eq!(r.status, 404);
        assert!(r.header("set-cookie").is_none());
        s.stop().await;
    });
}

#[test]
fn the_journal_shows_each_request_and_why_one_was_refused_within_its_bound() {
    run(async {
        let s = TestServer::start().await;
        let w = s.world();
        let org = w.lone_org;
        let key = key_of(&s, org);
        let path = format!("/1.0/events?customerKey={key}");
        list(&s, org, &["a.example", "b.example"]).await;
        // A refusal naming a field, and a member name carrying markup.
        let mut bad = event("c.example");
        bad.as_object_mut().unwrap().remove("dstDomain");
        let r = s
            .post_json(&path, &serde_json::json!([event("d.example"), bad]))
            .await;
        assert_eq!(r.status, 400);
        let body = format!(
            "[{}]",
            serde_json::to_string(&event("e.example"))
                .unwrap()
                .replacen('{', "{\"<b>x</b>\":1,\"<b>x</b>\":2,", 1)
        );
        let r = s
            .request(
                "POST",
                &path,
                &[("content-type", "application/json")],
                Some(body.into_bytes()),
            )
            .await;
        assert_eq!(r.status, 400, "{}", r.text());
        // Another organization's requests are not this one's.
        list(&s, w.sp_org, &["other.example"]).await;

        let mut b = Browser::new(&s);
        b.sign_in(&w.lone_org_cred).await;
        // A refused key (403) belongs to no organization: in no one's counts.
        let r = s
            .post_json(
                "/1.0/events?customerKey=ba6a59f4-e692-4724-ba36-c28132c761de",
                &serde_json::json!([event("f.example")]),
            )
            .await;
        assert_eq!(r.status, 403);
        // The overview's chart of the last hour and its totals, drawn by the server: this
        // organization's requests only (2 events accepted, 2 requests refused), not the other
        // organization's event nor the refused key.
        let overview = b.get("/console/").await.text();
        assert!(
            overview.contains("Last hour: 2 events accepted (most in a minute: ")
                && overview.contains("2 event requests refused"),
            "{overview}"
        );
        assert!(
            overview.contains("<dt>Events accepted since start</dt><dd>2</dd>")
                && overview.contains("<dt>Event requests refused since start</dt><dd>2</dd>"),
            "{overview}"
        );
        assert!(overview.contains("<svg") && overview.contains("class=\"refused\""));
        // The server's own facts are the operator's (a service provider's credential): an
        // organization's credential sees readiness alone, without details.
        assert!(
            overview.contains("<span class=\"ok\">Ready</span></dd>"),
            "{overview}"
        );
        for fact in [
            "Free disk",
            "Reputation data loaded",
            "the storage takes writes",
        ] {
            assert!(!overview.contains(fact), "{fact}: {overview}");
        }
        // The provider's credential: its customer's one event, nothing of this organization,
        // and the server's facts.
        let mut provider = Browser::new(&s);
        provider.sign_in(&w.sp_cred).await;
        let theirs = provider.get("/console/").await.text();
        assert!(
            theirs.contains("Last hour: 1 events accepted (most in a minute: 1)")
                && theirs.contains("0 event requests refused")
                && theirs.contains("<dt>Events accepted since start</dt><dd>1</dd>")
                && theirs.contains("<dt>Event requests refused since start</dt><dd>0</dd>"),
            "{theirs}"
        );
        for fact in [
            "Free disk",
            "Reputation data loaded",
            "the storage takes writes",
        ] {
            assert!(theirs.contains(fact), "{fact}: {theirs}");
        }
        let journal = format!("/console/organizations/{org}/journal");
        let page = b.get(&journal).await.text();
        assert!(page.contains("<td>202</td><td>2</td>"), "{page}");
        assert!(page.contains("<code>dstDomain</code>"), "{page}");
        assert!(page.contains("event 1: "), "{page}");
        assert!(
            page.contains("&lt;b&gt;x&lt;/b&gt;") && !page.contains("<b>x"),
            "{page}"
        );
        assert!(page.contains("127.0.0.1"));
        assert_eq!(page.matches("<td>POST /1.0/events</td>").count(), 3);
        // Filtered by status.
        let refused = b.get(&format!("{journal}?status=400")).await.text();
        assert_eq!(refused.matches("<td>POST /1.0/events</td>").count(), 2);
        assert!(!refused.contains("<td>202</td>"));
        // Another credential cannot read it.
        let mut other = Browser::new(&s);
        other.sign_in(&w.sp_org_cred).await;
        assert_eq!(other.get(&journal).await.status, 404);
        // The bound: the oldest records go.
        for i in 0..parasol::console::journal::PER_KEY {
            list(&s, org, &[&format!("n{i}.example")]).await;
        }
        let page = b.get(&journal).await.text();
        assert_eq!(
            page.matches("<td>POST /1.0/events</td>").count(),
            parasol::console::journal::PER_KEY
        );
        assert!(!page.contains("dstDomain") && !page.contains("<td>2</td>"));
        s.stop().await;
    });
}
