//! The console in the browser (`/console/`): HTML pages rendered by the server (maud) for an
//! operator or an integrator, on the main listener, signed in with a management credential and
//! showing exactly what that credential's scope reaches (a service provider its customers, an
//! MSP its customers, an organization itself).
//!
//! Security: sessions live in memory only (`session`); the cookie is `HttpOnly; Secure;
//! SameSite=Strict; Path=/console/`; every POST carries the session's CSRF token and a same-origin
//! `Origin` (or `Referer`); every answer carries a Content-Security-Policy without script, and
//! headers against framing, sniffing, referrers and caching. Data is only ever inserted into the
//! markup through maud's escaping. Handlers reach the store through its typed operations only.

pub mod journal;
mod pages;
pub mod session;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE, COOKIE, LOCATION, ORIGIN, REFERER, SET_COOKIE};
use hyper::{Response, StatusCode};

pub use journal::Journal;
pub use session::{SessionLimits, Sessions};

use crate::enforcement::domain::normalize;
use crate::error::MgmtError;
use crate::http::{cut, percent_decode, Body};
use crate::router::ConsoleEndpoint;
use crate::state::{AppState, RequestCtx};
use crate::store::{CustomerKey, OrganizationInfo, Scope};
use session::{csrf_matches, Session};

/// The session cookie's name.
const COOKIE_NAME: &str = "parasol_console";

/// The security headers of every console answer.
pub const SECURITY_HEADERS: [(&str, &str); 6] = [
    (
        "content-security-policy",
        "default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self' data:; \
         frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("cache-control", "no-store"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
];

/// Entries of the domain list per page.
pub const PAGE: i64 = 50;

/// Answers a console request; 404 (as for any unknown path) when the console is off.
pub async fn handle(
    state: &AppState,
    ep: ConsoleEndpoint,
    ctx: &RequestCtx,
    body: Bytes,
) -> Response<Body> {
    let Some(sessions) = &state.console else {
        return crate::error::EnfError::NotFound("Resource not found").into_response();
    };
    let mut res = match answer(state, sessions, ep, ctx, &body).await {
        Ok(r) => r,
        Err(e) => failure(&e),
    };
    let headers = res.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    res
}

/// A refusal or failure, as an HTML page with its status.
fn failure(e: &MgmtError) -> Response<Body> {
    let status = e.status();
    let words = match e {
        MgmtError::BadRequest(m) | MgmtError::Conflict(m) => m.clone(),
        MgmtError::Unauthorized => "The API key and secret were not accepted.".into(),
        MgmtError::NotFound => "Nothing here, or nothing your credential may see.".into(),
        MgmtError::Unavailable(_) | MgmtError::Unsettled(_) => {
            "The storage cannot answer now; try again shortly.".into()
        }
        _ => status.canonical_reason().unwrap_or("Error").to_string(),
    };
    html(status, pages::failure(status, &words))
}

fn html(status: StatusCode, markup: maud::Markup) -> Response<Body> {
    let mut res = Response::new(Full::new(Bytes::from(markup.into_string())));
    *res.status_mut() = status;
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    res
}

/// 303 to a page of the console.
fn see_other(location: &str) -> Response<Body> {
    let mut res = Response::new(Full::new(Bytes::new()));
    *res.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(v) = HeaderValue::from_str(location) {
        res.headers_mut().insert(LOCATION, v);
    }
    res
}

/// The session id the request's cookie names, if any.
fn cookie(ctx: &RequestCtx) -> Option<&str> {
    ctx.headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(COOKIE_NAME)?.strip_prefix('='))
}

/// The decoded fields of an `application/x-www-form-urlencoded` body.
fn form(body: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    let decode = |s: &str| percent_decode(&s.replace('+', " ")).unwrap_or_default();
    let mut out = Vec::new();
    let mut rest = Some(text.as_ref());
    while let Some(r) = rest {
        let (pair, next) = cut(r, b'&');
        rest = next;
        if pair.is_empty() {
            continue;
        }
        let (k, v) = cut(pair, b'=');
        out.push((decode(k), decode(v.unwrap_or(""))));
    }
    out
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

/// SECURITY: a form posted to the console must come from a page of the console's own origin.
/// Browsers send `Origin` with every POST; `Referer` stands in where it is stripped. A request
/// with neither, or naming another origin, is refused.
fn same_origin(state: &AppState, ctx: &RequestCtx) -> Result<(), MgmtError> {
    let own = state.base_url(&ctx.headers);
    let refused = || MgmtError::BadRequest("The form was not sent from this console.".into());
    if let Some(origin) = ctx.headers.get(ORIGIN) {
        return if origin.as_bytes() == own.as_bytes() {
            Ok(())
        } else {
            Err(refused())
        };
    }
    match ctx.headers.get(REFERER).and_then(|r| r.to_str().ok()) {
        Some(r)
            if r.strip_prefix(own.as_str())
                .is_some_and(|p| p.starts_with('/')) =>
        {
            Ok(())
        }
        _ => Err(refused()),
    }
}

/// The organizations a scope reaches, from the list of all (the same reach as
/// `Store::organization_visible`, which every action checks again on its own).
fn in_scope(scope: Scope, all: Vec<OrganizationInfo>) -> Vec<OrganizationInfo> {
    all.into_iter()
        .filter(|o| match scope {
            Scope::Organization(id) => o.id == id,
            Scope::ServiceProvider(sp) => o.service_provider_id == Some(sp),
            Scope::Msp(m) => o.msp_id == Some(m),
        })
        .collect()
}

/// The customer keys of the organizations a scope reaches (what their journal entries are kept
/// under): one store call, however many organizations it reaches.
async fn keys_of(state: &AppState, scope: Scope) -> Result<Vec<CustomerKey>, MgmtError> {
    let listed = state.store.customer_keys_in_scope(scope).await?;
    Ok(listed
        .iter()
        .filter_map(|k| CustomerKey::parse(k))
        .collect())
}

/// What the feeds did for these organizations (those in the credential's scope), and the
/// server-wide part for the operator's credentials only.
fn feeds_of(state: &AppState, scope: Scope, orgs: &[OrganizationInfo]) -> pages::FeedsView {
    let Some(feeds) = &state.feeds else {
        return pages::FeedsView::default();
    };
    let ids: Vec<i64> = orgs.iter().map(|o| o.id).collect();
    let server = feeds.server();
    pages::FeedsView {
        rpz: server.rpz.is_some(),
        files: server.export.is_some(),
        key: server.rpz.as_ref().and_then(|r| r.key.clone()),
        orgs: feeds.of(&ids),
        // SECURITY: the configuration, NOTIFYs, rounds and refusals of every zone are the
        // server's: the operator's alone.
        server: matches!(scope, Scope::ServiceProvider(_)).then_some(server),
    }
}

async fn answer(
    state: &AppState,
    sessions: &Sessions,
    ep: ConsoleEndpoint,
    ctx: &RequestCtx,
    body: &[u8],
) -> Result<Response<Body>, MgmtError> {
    let id = cookie(ctx).map(str::to_string);
    let mut session = id.as_deref().and_then(|id| sessions.get(id));
    // SECURITY: the credential is read again on every request, as the management interface
    // reads it: a session of a credential revoked since sign-in ends at once.
    if let (Some(s), Some(id)) = (&session, &id) {
        let stored = state.store.find_credential(s.api_key.clone()).await?;
        if stored.is_none_or(|c| c.scope != s.scope) {
            sessions.end(id);
            session = None;
        }
    }
    match ep {
        ConsoleEndpoint::Style => {
            let mut res = Response::new(Full::new(Bytes::from_static(include_bytes!("style.css"))));
            res.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/css; charset=utf-8"),
            );
            Ok(res)
        }
        ConsoleEndpoint::SignIn => {
            same_origin(state, ctx)?;
            let fields = form(body);
            let key = field(&fields, "api_key").trim().to_string();
            let secret = field(&fields, "secret").to_string();
            let scope = match crate::management::auth::verify(state, key.clone(), secret).await {
                Ok(scope) => scope,
                Err(MgmtError::Unauthorized) => {
                    return Ok(html(
                        StatusCode::UNAUTHORIZED,
                        pages::sign_in(Some("The API key and secret were not accepted.")),
                    ))
                }
                Err(e) => return Err(e),
            };
            let Some(new) = sessions.start(scope, key) else {
                log::error!("console: no randomness for a session id");
                return Err(MgmtError::Internal);
            };
            if let Some(old) = &id {
                sessions.end(old);
            }
            let mut res = see_other("/console/");
            let cookie =
                format!("{COOKIE_NAME}={new}; HttpOnly; Secure; SameSite=Strict; Path=/console/");
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                res.headers_mut().insert(SET_COOKIE, v);
            }
            Ok(res)
        }
        ConsoleEndpoint::Overview => match session {
            None => Ok(html(StatusCode::OK, pages::sign_in(None))),
            Some(s) => {
                let orgs = in_scope(s.scope, state.store.list_organizations().await?);
                let (_, counts) = state
                    .store
                    .domain_counts(crate::own::DOMAIN_COUNT_ORGANIZATIONS)
                    .await?;
                // SECURITY: the counts are those of the organizations in scope only (their
                // keys' journal entries); the server's own facts go to the operator only.
                let keys = keys_of(state, s.scope).await?;
                let now = crate::timefmt::now();
                let health = state.store.health();
                let facts = pages::Facts {
                    ready: health.writable,
                    counts: match &state.journal {
                        Some(j) => j.counts(&keys, now),
                        None => Journal::default().counts(&[], now),
                    },
                    server: matches!(s.scope, Scope::ServiceProvider(_)).then(|| {
                        pages::ServerFacts {
                            health,
                            stats: state.store.storage_stats(),
                            reputation_loaded: state.reputation.loaded_at(),
                        }
                    }),
                    feeds: feeds_of(state, s.scope, &orgs),
                };
                Ok(html(
                    StatusCode::OK,
                    pages::overview(&s, &facts, &orgs, &counts),
                ))
            }
        },
        // Every other page and form needs a session: without one, the sign-in page. A form
        // without one is held to the origin first, so that a cross-site post (whose cookie a
        // browser withholds under SameSite=Strict) is refused as such, not sent to sign in.
        _ if session.is_none() => {
            if ep.is_form() {
                same_origin(state, ctx)?;
            }
            Ok(see_other("/console/"))
        }
        ConsoleEndpoint::SignOut => {
            let s = session.ok_or(MgmtError::Unauthorized)?;
            checked_form(state, ctx, &s, body)?;
            if let Some(id) = &id {
                sessions.end(id);
            }
            let mut res = see_other("/console/");
            res.headers_mut().insert(
                SET_COOKIE,
                HeaderValue::from_static(
                    "parasol_console=; HttpOnly; Secure; SameSite=Strict; Path=/console/; Max-Age=0",
                ),
            );
            Ok(res)
        }
        ConsoleEndpoint::Organization(org) => {
            let s = session.ok_or(MgmtError::Unauthorized)?;
            let info = visible(state, &s, org).await?;
            let prefix = ctx
                .query
                .get("q")
                .map(|q| q.trim().to_ascii_lowercase())
                .unwrap_or_default();
            let after = ctx.query.get("after").unwrap_or_default().into_owned();
            let mut domains = state
                .store
                .search_domains(org, prefix.clone(), after.clone(), PAGE + 1)
                .await?;
            let more = domains.len() as i64 > PAGE;
            domains.truncate(PAGE as usize);
            let allow = state.store.allow_list(org).await?;
            let verdict = match ctx.query.get("name") {
                Some(n) if !n.trim().is_empty() => Some(match normalize(n.trim()) {
                    Ok(name) => Ok(state.store.verdict(org, name).await?),
                    Err(_) => Err(n.into_owned()),
                }),
                _ => None,
            };
            let view = pages::OrgView {
                info: &info,
                prefix: &prefix,
                after: &after,
                domains: &domains,
                more,
                allow: &allow,
                verdict,
                notice: ctx.query.get("done").map(|d| d.into_owned()),
            };
            Ok(html(StatusCode::OK, pages::organization(&s, &view)))
        }
        ConsoleEndpoint::Journal(org) => {
            let s = session.ok_or(MgmtError::Unauthorized)?;
            let info = visible(state, &s, org).await?;
            let keys = keys_of(state, Scope::Organization(org)).await?;
            let status = ctx.query.get("status").and_then(|s| s.parse::<u16>().ok());
            let records = state
                .journal
                .as_ref()
                .map(|j| j.latest(&keys, status))
                .unwrap_or_default();
            Ok(html(
                StatusCode::OK,
                pages::journal(&s, &info, status, &records),
            ))
        }
        ConsoleEndpoint::DeleteDomain(org) => {
            let s = session.ok_or(MgmtError::Unauthorized)?;
            let fields = checked_form(state, ctx, &s, body)?;
            visible(state, &s, org).await?;
            let id: i64 = field(&fields, "id")
                .parse()
                .map_err(|_| MgmtError::BadRequest("id must be a domain's id".into()))?;
            if !state.store.delete_domain_by_id(org, id).await? {
                return Err(MgmtError::NotFound);
            }
            Ok(see_other(&format!(
                "/console/organizations/{org}?done=deleted"
            )))
        }
        ConsoleEndpoint::AllowAdd(org) | ConsoleEndpoint::AllowRemove(org) => {
            let s = session.ok_or(MgmtError::Unauthorized)?;
            let fields = checked_form(state, ctx, &s, body)?;
            visible(state, &s, org).await?;
            let name = normalize(field(&fields, "name").trim())
                .map_err(|_| MgmtError::BadRequest("name must be a domain name".into()))?;
            let done = if matches!(ep, ConsoleEndpoint::AllowAdd(_)) {
                state
                    .store
                    .allow_add(org, name, crate::timefmt::now())
                    .await?;
                "allowed"
            } else {
                if !state.store.allow_remove(org, name).await? {
                    return Err(MgmtError::NotFound);
                }
                "removed"
            };
            Ok(see_other(&format!(
                "/console/organizations/{org}?done={done}"
            )))
        }
    }
}

/// The fields of a POSTed form, once its origin and CSRF token are found to be the session's.
fn checked_form(
    state: &AppState,
    ctx: &RequestCtx,
    s: &Session,
    body: &[u8],
) -> Result<Vec<(String, String)>, MgmtError> {
    same_origin(state, ctx)?;
    let fields = form(body);
    if !csrf_matches(s, field(&fields, "csrf")) {
        return Err(MgmtError::BadRequest(
            "The form's token is missing or stale: reload the page and try again.".into(),
        ));
    }
    Ok(fields)
}

/// The organization `org` if the session's scope reaches it; 404 (as for one that does not
/// exist) otherwise.
async fn visible(state: &AppState, s: &Session, org: i64) -> Result<OrganizationInfo, MgmtError> {
    if !state.store.organization_visible(s.scope, org).await? {
        return Err(MgmtError::NotFound);
    }
    state
        .store
        .list_organizations()
        .await?
        .into_iter()
        .find(|o| o.id == org)
        .ok_or(MgmtError::NotFound)
}
