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

/// What a page or action of an organization does for a credential that reaches it.
#[derive(Clone, Copy, Debug)]
enum Reach {
    /// The page is shown (200).
    Page,
    /// The form is done, and the browser sent back to the organization (303).
    Done,
}

/// Every page and action of an organization, for every kind of credential and every
/// organization: what it reaches answers as `Reach` says and does what it should; what it does
/// not reach answers 404 like an organization that does not exist, and changes nothing. The
/// overview lists exactly the organizations reached.
#[test]
fn each_credential_kind_sees_and_acts_on_its_own_organizations_only() {
    run(async {
        let s = TestServer::start().await;
        let w = s.world();
        let name = |org: i64| format!("org{org}.example");
        for org in [w.sp_org, w.msp_org, w.lone_org] {
            list(&s, org, &[&name(org)]).await;
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
        // (path under the organization, a form's fields or none for a page, what it does when
        // reached); the fields' id is the organization's listed name's, looked up each time.
        type Check<'a> = (&'a str, Option<&'a [(&'a str, &'a str)]>, Reach);
        let checks: [Check; 5] = [
            ("", None, Reach::Page),
            ("/journal", None, Reach::Page),
            ("/domains/delete", Some(&[("id", "")]), Reach::Done),
            (
                "/allowlist/add",
                Some(&[("name", "x.example")]),
                Reach::Done,
            ),
            (
                "/allowlist/remove",
                Some(&[("name", "x.example")]),
                Reach::Done,
            ),
        ];
        for (kind, cred, mine) in &kinds {
            let mut b = Browser::new(&s);
            let token = b.sign_in(cred).await;
            let overview = b.get("/console/").await.text();
            for (org, org_name) in all {
                let base = format!("/console/organizations/{org}");
                let ours = mine.contains(&org);
                assert_eq!(
                    overview.contains(&format!("<a href=\"{base}\">{org_name}</a>")),
                    ours,
                    "{kind}: overview and {org_name}"
                );
                for (path, fields, reach) in checks {
                    let what = format!("{kind}: {path:?} of {org_name}");
                    let id = run(s.store().search_domains(org, name(org), String::new(), 1))
                        .unwrap()[0]
                        .id
                        .to_string();
                    let r = match fields {
                        None => b.get(&format!("{base}{path}")).await,
                        Some(fields) => {
                            let mut sent = vec![("csrf", token.as_str())];
                            sent.extend(fields.iter().map(|&(k, v)| match k {
                                "id" => (k, id.as_str()),
                                _ => (k, v),
                            }));
                            b.post(&format!("{base}{path}"), &sent).await
                        }
                    };
                    let (listed, allowed_now) =
                        (run(s.store().listed_names(org)).unwrap(), allowed(&s, org));
                    if !ours {
                        assert_eq!(r.status, 404, "{what}");
                        assert!(!r.text().contains(&name(org)), "{what}");
                        assert_eq!(listed, [name(org)], "{what} changed the list");
                        assert!(allowed_now.is_empty(), "{what} changed the allow list");
                        continue;
                    }
                    match reach {
                        Reach::Page => {
                            assert_eq!(r.status, 200, "{what}");
                            if path.is_empty() {
                                assert!(r.text().contains(&name(org)), "{what}");
                            }
                        }
                        Reach::Done => {
                            assert_eq!(r.status, 303, "{what}: {}", r.text());
                            match path {
                                "/domains/delete" => {
                                    assert!(listed.is_empty(), "{what}");
                                    // Listed again for the next credential.
                                    list(&s, org, &[&name(org)]).await;
                                }
                                "/allowlist/add" => assert_eq!(allowed_now, ["x.example"]),
                                _ => assert!(allowed_now.is_empty(), "{what}"),
                            }
                        }
                    }
                }
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
        // A cross-site post arrives without the cookie (SameSite=Strict): refused as such,
        // not sent to the sign-in page, and nothing changes.
        let cookieless = Browser::new(&s);
        for path in [add.as_str(), "/console/signout"] {
            let r = cookieless
                .post_from(
                    Some("https://evil.example"),
                    path,
                    &[("csrf", &token), ("name", "a.example")],
                )
                .await;
            assert_eq!(r.status, 400, "{path} without a session, from another site");
        }
        assert!(allowed(&s, w.lone_org).is_empty());
        // Without a session from the console's own origin: the sign-in page.
        let r = cookieless
            .post_from(
                Some(&origin),
                &add,
                &[("csrf", &token), ("name", "a.example")],
            )
            .await;
        assert_eq!(r.status, 303);
        assert!(allowed(&s, w.lone_org).is_empty());
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
        // Without exports or the RPZ primary, the feeds are off: one line says so, to everyone.
        let off = "<h2>Feeds</h2><p>Feeds are off: this server neither writes export files for \
                   resolvers nor serves the RPZ zones.</p>";
        assert!(theirs.contains(off) && overview.contains(off), "{theirs}");
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

/// The overview's feeds section, on a server with export files and the RPZ primary: a transfer
/// pulled by a secondary (a loopback address of its own) shows on the owning organization's
/// overview with the secondary's address, the request and the serials, and so do a refused
/// request for its zone and a serial change (an IXFR from the old serial to the new);
/// credentials of other organizations see none of it, and only the operator's credential sees
/// the server's configuration, its NOTIFYs (answered here) and its rounds, a failed one too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_shows_the_feeds_of_its_scope_only() {
    use common::dns::*;
    {
        let dir = TempDir::new();
        let notify = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        notify
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let rpz = rpz_config(dir.path(), &[], vec![notify.local_addr().unwrap()]);
        let addr = rpz.listen;
        let exports = dir.path().join("exports");
        let s = TestServer::start_in(dir, |c| {
            c.rpz = Some(rpz);
            c.export = Some(parasol::export::ExportConfig::new(&exports));
        })
        .await;
        let w = s.world();
        let org = w.sp_org;
        let key = signer("parasol-rpz", SECRET);
        // Listed, then in the organization's files and zone (the files follow the zone in a
        // round).
        let file = exports.join(format!("org-{org}.rpz"));
        let listed = |name: &'static str| {
            let file = file.clone();
            move || {
                std::fs::read_to_string(&file)
                    .ok()
                    .filter(|t| t.contains(name))
                    .map(|_| ())
            }
        };
        list(&s, org, &["ads.example"]).await;
        wait_for("ads.example in the files", listed("ads.example")).await;
        let secondary: std::net::IpAddr = "127.0.0.3".parse().unwrap();
        let axfr = request(&zone(org), hickory_proto::rr::RecordType::AXFR);
        let got = records(&exchange(
            connect_from(secondary, addr).await,
            axfr.clone(),
            Some(&key),
        ));
        let s1: u32 = got[0].strip_prefix("SOA ").unwrap().parse().unwrap();
        assert!(got.iter().any(|r| r.starts_with("ads.example.")), "{got:?}");
        // Unsigned from another address: refused.
        let refused = exchange(
            connect_from("127.0.0.4".parse().unwrap(), addr).await,
            axfr,
            None,
        );
        assert_eq!(
            refused[0].metadata.response_code,
            hickory_proto::op::ResponseCode::Refused
        );

        let mut owner = Browser::new(&s);
        owner.sign_in(&w.sp_org_cred).await;
        let pulled = format!(
            "<td>Acme</td><td>127.0.0.3</td><td>AXFR</td><td>{s1}</td><td>the whole zone</td>\
             <td>signed with parasol-rpz.</td>"
        );
        let page = overview_until(&owner, "the serial on the owner's overview", |p| {
            p.contains(&format!("<td>{s1} (since "))
        })
        .await;
        assert!(page.contains(&pulled), "{page}");
        assert!(
            page.contains("<td>127.0.0.4</td><td>AXFR</td><td>Acme</td>")
                && page
                    .contains("refused: neither signed with the key nor from an allowed address"),
            "{page}"
        );
        assert!(!page.contains("not since the server started"), "{page}");
        // The server's facts are not an organization's.
        for fact in [
            "RPZ primary",
            "NOTIFY targets",
            "Export directory",
            &addr.to_string(),
        ] {
            assert!(!page.contains(fact), "{fact}: {page}");
        }

        // A change: a new serial, and the secondary's IXFR from the old one.
        list(&s, org, &["more.example"]).await;
        wait_for("more.example in the files", listed("more.example")).await;
        let got = records(&exchange(
            connect_from(secondary, addr).await,
            ixfr(&zone(org), s1),
            Some(&key),
        ));
        let s2: u32 = got[0].strip_prefix("SOA ").unwrap().parse().unwrap();
        assert_ne!(s1, s2);
        let page = overview_until(&owner, "the new serial on the owner's overview", |p| {
            p.contains(&format!("<td>{s2} (since "))
        })
        .await;
        assert!(
            page.contains(&format!(
                "<td>127.0.0.3</td><td>IXFR</td><td>{s1} to {s2}</td>\
                 <td>the differences (1 version)</td><td>signed with parasol-rpz.</td>"
            )) && page.contains("</td><td>2</td></tr>"),
            "{page}"
        );
        assert!(
            !page.contains(&pulled),
            "the secondary's last transfer only: {page}"
        );

        // Other organizations' credentials: their own zones, none of this one's.
        for cred in [&w.msp_cred, &w.msp_org_cred, &w.lone_org_cred] {
            let mut other = Browser::new(&s);
            other.sign_in(cred).await;
            let theirs = other.get("/console/").await.text();
            assert!(theirs.contains("<h2>Feeds</h2>"), "{theirs}");
            for secret in ["127.0.0.3", "127.0.0.4", "Acme"] {
                assert!(!theirs.contains(secret), "{secret}: {theirs}");
            }
            assert!(theirs.contains("No secondary has transferred these zones"));
        }

        // The operator: the configuration, the NOTIFY of the new serial (answered), the rounds,
        // and every refusal.
        wait_for("the NOTIFY of the new serial", || {
            answer_notify(&notify).filter(|(_, serial)| *serial == s2)
        })
        .await;
        let mut operator = Browser::new(&s);
        operator.sign_in(&w.sp_cred).await;
        let page = overview_until(&operator, "the NOTIFY's answer on the overview", |p| {
            p.contains(&format!("zone at serial {s2}, ")) && p.contains(": answered</li>")
        })
        .await;
        for fact in [
            format!("on <code>{addr}</code>"),
            "transfers signed with key <code>parasol-rpz.</code>".to_string(),
            format!(
                "<code>{}</code> (rpz, unbound, dnsmasq, hosts)",
                exports.display()
            ),
            "<dt>Last round that wrote</dt>".to_string(),
            "<td>127.0.0.4</td>".to_string(),
            "<td>Acme</td><td>127.0.0.3</td><td>IXFR</td>".to_string(),
        ] {
            assert!(page.contains(&fact), "{fact}: {page}");
        }
        assert!(!page.contains("Last round that failed"), "{page}");

        // A round that cannot write (the directory replaced by a file): the operator sees it
        // failed and why; the organization's credential sees none of it.
        std::fs::rename(&exports, exports.with_extension("moved")).unwrap();
        std::fs::write(&exports, b"").unwrap();
        list(&s, org, &["fault.example"]).await;
        let failed = format!("organization {org}: {}", exports.display());
        let page = overview_until(&operator, "the failed round on the overview", |p| {
            p.contains("<dt>Last round that failed</dt>") && p.contains(&failed)
        })
        .await;
        assert!(page.contains(&failed), "{page}");
        let theirs = owner.get("/console/").await.text();
        assert!(
            !theirs.contains("Last round that failed") && !theirs.contains(&failed),
            "{theirs}"
        );
        std::fs::remove_file(&exports).unwrap();
        s.stop().await;
    }
}

/// The overview, read again until `done` holds of it (for at most `WAIT`).
async fn overview_until(b: &Browser<'_>, what: &str, done: impl Fn(&str) -> bool) -> String {
    common::cluster::wait_within_async(what, common::WAIT, || async {
        let page = b.get("/console/").await.text();
        done(&page).then_some(page)
    })
    .await
}
