//! Handlers of the enforcement interface. Order of checks (decisions.md): route and method were
//! settled by the router and the size by the server; then credentials (403), Content-Type (415),
//! body validation (400), existence (404).

use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde::Serialize;

use crate::error::EnfError;
use crate::http::{is_json_content_type, json_response, no_content, query_encode, Body};
use crate::router::EnfEndpoint;
use crate::state::{AppState, RequestCtx};
use crate::store::{CustomerKey, Ingest, Ingested, PreparedBatch, PreparedEvent};

use super::domain::normalize;
use super::event::{validate_events, EventsError};
use crate::page_cache::CachedPage;

/// Default and largest page size of GET /1.0/domains.
pub const MAX_PAGE_LIMIT: u64 = 200;

/// A request with this many events frees its memory back to the system once answered.
const LARGE_BATCH: usize = 256;

/// Event bodies larger than this are validated on the bulk threads (`crate::bulk`).
const BLOCKING_BODY_BYTES: usize = 32 * 1024;

/// The `meta` member of a GET /1.0/domains body (the `data` member comes serialised from the
/// page cache, see `list_domains`).
#[derive(Serialize)]
struct PageMeta {
    page: u64,
    limit: u64,
    prev: Link,
    next: Link,
}

/// `false`, or the absolute URL of another page.
#[derive(Serialize)]
#[serde(untagged)]
enum Link {
    None(bool),
    Url(String),
}

pub async fn handle(
    state: &AppState,
    ep: EnfEndpoint,
    ctx: &RequestCtx,
    body: Bytes,
) -> Response<Body> {
    let result = match ep {
        EnfEndpoint::PostEvents => {
            let key = customer_key(ctx);
            let r = post_events(state, ctx, key, body).await;
            if let Some(why) = r.as_ref().err().and_then(crate::metrics::Refusal::of) {
                state.metrics.event_request_refused(why);
            }
            // The journal: nothing for a refused key (403: no organization), and for another
            // refusal the answer's own bytes (shared, not copied), read when its page is drawn.
            let (Some(journal), Some(key)) = (&state.journal, key) else {
                return r.map_or_else(EnfError::into_response, |(res, _)| res);
            };
            let client = ctx.peer.map(|p| p.ip());
            return match r {
                Ok((res, events)) => {
                    journal.record(key, client, 202, events, None);
                    res
                }
                Err(EnfError::InvalidCredentials) => EnfError::InvalidCredentials.into_response(),
                Err(e) => {
                    let (parts, answer) = e.into_response().into_parts();
                    let answer = answer.into_inner().unwrap_or_default();
                    journal.record(key, client, parts.status.as_u16(), 0, Some(answer.clone()));
                    Response::from_parts(parts, Body::new(answer))
                }
            };
        }
        EnfEndpoint::ListDomains => list_domains(state, ctx).await,
        EnfEndpoint::DeleteDomainById(id) => delete_domain(state, ctx, Target::Id(id)).await,
        EnfEndpoint::DeleteDomainByName(name) => {
            delete_domain(state, ctx, Target::Name(Some(name))).await
        }
        EnfEndpoint::DeleteDomainsWhere => {
            let name = ctx
                .query
                .get("where[name]")
                .map(std::borrow::Cow::into_owned);
            delete_domain(state, ctx, Target::Name(name)).await
        }
    };
    result.unwrap_or_else(EnfError::into_response)
}

/// The request's customer key in canonical form, if it is well-formed.
fn customer_key(ctx: &RequestCtx) -> Option<CustomerKey> {
    CustomerKey::parse(&ctx.query.get("customerKey")?)
}

/// Resolves the request's key to its organization, or 403.
async fn organization(state: &AppState, ctx: &RequestCtx) -> Result<(CustomerKey, i64), EnfError> {
    let key = customer_key(ctx).ok_or(EnfError::InvalidCredentials)?;
    let org = state
        .store
        .resolve_customer_key(key)
        .await?
        .ok_or(EnfError::InvalidCredentials)?;
    Ok((key, org))
}

/// The cloud's rendering of a batch id: a UUID whose first three hyphens are commas. (Built from
/// the encoded form's fixed fields: a single event's answer is a few microseconds of work, and
/// the formatting machinery and a search-and-replace were a noticeable part of it.)
pub fn cloud_id(u: &uuid::Uuid) -> String {
    let mut out = String::with_capacity(uuid::fmt::Hyphenated::LENGTH);
    push_cloud_id(u, &mut out);
    out
}

/// Appends `cloud_id(u)` to `out`.
fn push_cloud_id(u: &uuid::Uuid, out: &mut String) {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let t = u.hyphenated().encode_lower(&mut text);
    // Hyphens at 8, 13, 18 and 23; the last one stays.
    out.push_str(&t[..8]);
    out.push(',');
    out.push_str(&t[9..13]);
    out.push(',');
    out.push_str(&t[14..18]);
    out.push(',');
    out.push_str(&t[19..]);
}

/// Length of the 202 answer's body.
const ACCEPTED_BODY_LEN: usize = r#"{"id":""}"#.len() + uuid::fmt::Hyphenated::LENGTH;

/// The 202 answer's body: `{"id":"<cloud id>"}`, in one buffer. The id holds only hex digits,
/// commas and a hyphen: no JSON escaping needed. The buffer's capacity is exactly its length:
/// `Bytes` takes such a `Vec` over as it is, and any other costs it an allocation more.
fn accepted_body(batch: &uuid::Uuid) -> Vec<u8> {
    let mut body = String::with_capacity(ACCEPTED_BODY_LEN);
    body.push_str("{\"id\":\"");
    push_cloud_id(batch, &mut body);
    body.push_str("\"}");
    debug_assert_eq!(body.len(), body.capacity());
    body.into_bytes()
}

/// `--cloud-limits`: one request and its size against the key's budget (after the key is known
/// to be valid).
fn admit(state: &AppState, key: &str, bytes: usize) -> Result<(), EnfError> {
    state
        .rate
        .admit(key, bytes)
        .map_err(EnfError::TooManyRequests)
}

/// Answers a batch sent with `key` (the request's, if well-formed); with the answer, the number
/// of events it held.
async fn post_events(
    state: &AppState,
    ctx: &RequestCtx,
    key: Option<CustomerKey>,
    body: Bytes,
) -> Result<(Response<Body>, usize), EnfError> {
    let key = key.ok_or(EnfError::InvalidCredentials)?;
    if state.rate.enabled() {
        organization(state, ctx).await?;
        admit(state, &key, body.len())?;
    }
    if !is_json_content_type(&ctx.headers) {
        organization(state, ctx).await?;
        return Err(EnfError::UnsupportedMediaType);
    }
    // The body is checked before the key is looked up, so that a valid request needs one trip to
    // the database; a refused body still answers 403 first when the key is bad.
    let reputation = state.reputation.get();
    // The batch, and how many of its events the acceptance checks keep off the list (metrics).
    let check = move |body: &[u8]| {
        validate_events(body).map(|(events, text)| {
            let events: Vec<PreparedEvent> = events
                .into_iter()
                .map(|e| PreparedEvent {
                    listed: reputation.accepts(&e.domain, e.disable_safeguards),
                    domain: e.domain,
                })
                .collect();
            let not_listed = events.iter().filter(|e| !e.listed).count();
            (PreparedBatch::new(events, text), not_listed)
        })
    };
    // A large batch takes milliseconds to parse: off the runtime's threads and at a lower
    // priority (`crate::bulk`), so that the small requests of other connections (reads above
    // all) are not held up behind it.
    let checked = if body.len() > BLOCKING_BODY_BYTES {
        state.bulk.run(move || check(&body)).await.map_err(|e| {
            log::error!("validating a large batch: {e}");
            EnfError::Internal
        })?
    } else {
        check(&body)
    };
    let (prepared, not_listed) = match checked {
        Ok(prepared) => prepared,
        Err(e) => {
            organization(state, ctx).await?;
            return Err(match e {
                EventsError::Malformed(m) => EnfError::BadRequest(m),
                EventsError::Fields(f) => EnfError::Validation(f),
            });
        }
    };
    let n_events = prepared.len();
    let batch = crate::ids::request_id();
    let stored = state
        .store
        .ingest(Ingest {
            key,
            batch_id: batch,
            now: crate::timefmt::now(),
            batch: prepared,
            new_domain_budget: state.rate.new_domain_allowance(&key),
        })
        .await;
    if n_events >= LARGE_BATCH {
        crate::state::release_freed_memory();
    }
    let added = match stored? {
        Ingested::Stored { added } => added,
        Ingested::UnknownKey => return Err(EnfError::InvalidCredentials),
        Ingested::OverBudget { would_add } => {
            // Retry-After: until the budget holds all of them (a full minute's budget for a
            // request that adds more than it ever holds).
            return Err(EnfError::TooManyNewDomains(
                state.rate.new_domains_wait(&key, would_add.max(1)),
            ));
        }
    };
    state.rate.spend_new_domains(&key, added);
    state.metrics.events_accepted(n_events, not_listed);
    Ok((
        crate::http::json_response(StatusCode::ACCEPTED, accepted_body(&batch)),
        n_events,
    ))
}

/// Parses `page` and `limit` per decisions.md.
fn paging(ctx: &RequestCtx) -> Result<(u64, u64), EnfError> {
    let page = match ctx.query.get("page") {
        None => 1,
        Some(p) => match p.parse::<i64>() {
            Ok(n) if n >= 1 => n as u64,
            Ok(_) => {
                return Err(EnfError::BadRequest(
                    "Page must be a number greater than or equal to 1".into(),
                ))
            }
            Err(_) => return Err(EnfError::BadRequest("Page must be a number".into())),
        },
    };
    let limit = match ctx.query.get("limit") {
        None => MAX_PAGE_LIMIT,
        Some(l) => match l.parse::<i64>() {
            Ok(n) if n > MAX_PAGE_LIMIT as i64 => {
                return Err(EnfError::BadRequest(
                    "Limit must be a number less than or equal to 200".into(),
                ))
            }
            Ok(n) if n >= 1 => n as u64,
            Ok(_) => {
                return Err(EnfError::BadRequest(
                    "Limit must be a number greater than or equal to 1".into(),
                ))
            }
            Err(_) => return Err(EnfError::BadRequest("Limit must be a number".into())),
        },
    };
    Ok((page, limit))
}

async fn list_domains(state: &AppState, ctx: &RequestCtx) -> Result<Response<Body>, EnfError> {
    let key = customer_key(ctx).ok_or(EnfError::InvalidCredentials)?;
    let (page, limit) = match paging(ctx) {
        Ok(p) => p,
        Err(bad) => {
            // Credentials are checked before the parameters (403 before 400).
            organization(state, ctx).await?;
            admit(state, &key, 0)?;
            return Err(bad);
        }
    };
    // Read before the page, so that an entry never claims to be newer than it is.
    let version = state.store.version();
    let cached = version.and_then(|v| state.pages.get(&key, page, limit, v));
    let listing = match cached {
        Some(hit) => hit,
        None => {
            let found = state.store.list_domains(key, page, limit).await?;
            let (entries, more) = found.ok_or(EnfError::InvalidCredentials)?;
            let data = serde_json::to_vec(&entries).map_err(|e| {
                log::error!("cannot serialise a page of the domain list: {e}");
                EnfError::Internal
            })?;
            let listing = CachedPage {
                data: Bytes::from(data),
                more,
            };
            if let Some(v) = version {
                state.pages.put(&key, page, limit, v, listing.clone());
            }
            listing
        }
    };
    admit(state, &key, 0)?;
    let base = state.base_url(&ctx.headers);
    let key = query_encode(&key);
    let link = |p: u64| {
        Link::Url(format!(
            "{base}/1.0/domains?customerKey={key}&page={p}&limit={limit}"
        ))
    };
    let meta = PageMeta {
        page,
        limit,
        prev: if page > 1 {
            link(page - 1)
        } else {
            Link::None(false)
        },
        // A page number is at most i64::MAX (`paging`): no link to one beyond it.
        next: if listing.more && page < i64::MAX as u64 {
            link(page + 1)
        } else {
            Link::None(false)
        },
    };
    let meta = serde_json::to_vec(&meta).map_err(|e| {
        log::error!("cannot serialise page links: {e}");
        EnfError::Internal
    })?;
    // {"meta":{...},"data":[...]}: meta first, as the cloud sends it.
    let mut body = Vec::with_capacity(meta.len() + listing.data.len() + 18);
    body.extend_from_slice(b"{\"meta\":");
    body.extend_from_slice(&meta);
    body.extend_from_slice(b",\"data\":");
    body.extend_from_slice(&listing.data);
    body.push(b'}');
    Ok(json_response(StatusCode::OK, body))
}

enum Target {
    Id(i64),
    /// `None`: `where[name]` was missing.
    Name(Option<String>),
}

async fn delete_domain(
    state: &AppState,
    ctx: &RequestCtx,
    target: Target,
) -> Result<Response<Body>, EnfError> {
    let (key, org) = organization(state, ctx).await?;
    admit(state, &key, 0)?;
    const NOT_LISTED: EnfError = EnfError::NotFound("Domain not in domain list");
    let deleted = match target {
        Target::Id(id) => state.store.delete_domain_by_id(org, id).await?,
        Target::Name(None) => return Err(EnfError::BadRequest("where[name] is required".into())),
        Target::Name(Some(raw)) => {
            // A name that is not a valid domain cannot be on the list.
            let Ok(name) = normalize(&raw) else {
                return Err(NOT_LISTED);
            };
            state.store.delete_domain_by_name(org, name).await?
        }
    };
    if deleted {
        Ok(no_content())
    } else {
        Err(NOT_LISTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_id_form() {
        let u = uuid::Uuid::parse_str("6ece47ef-7afc-4a50-89e6-b0a10adc2d8a").unwrap();
        assert_eq!(cloud_id(&u), "6ece47ef,7afc,4a50,89e6-b0a10adc2d8a");
        assert_eq!(
            String::from_utf8(accepted_body(&u)).unwrap(),
            r#"{"id":"6ece47ef,7afc,4a50,89e6-b0a10adc2d8a"}"#
        );
        for _ in 0..100 {
            let u = uuid::Uuid::new_v4();
            assert_eq!(
                cloud_id(&u),
                u.hyphenated().to_string().replacen('-', ",", 3)
            );
        }
    }
}
