//! Parasol's own endpoints for enforcement on the appliance
//! (`/parasol/v1/organizations/{id}/...`): the decision on one name, and the allow list. They use
//! the management interface's credentials, scopes and error shape, and the command line's rules:
//! names are normalised like an event's `dstDomain`, and one that is not a domain name is a 400.

use bytes::Bytes;
use hyper::Response;
use serde::Serialize;

use super::common::{object_body, ok, paging, Input};
use crate::enforcement::domain::normalize;
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::{AllowListEndpoint, ParasolEndpoint};
use crate::state::{AppState, RequestCtx};
use crate::timefmt::now;

/// An entry of the allow list.
#[derive(Serialize)]
struct Entry {
    name: String,
}

/// The answer to an addition: the entry, and whether it is new.
#[derive(Serialize)]
struct Added {
    name: String,
    added: bool,
}

/// Handles the endpoints for organization `org` (already checked visible).
pub async fn handle(
    state: &AppState,
    org: i64,
    ep: ParasolEndpoint,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    let store = &state.store;
    match ep {
        ParasolEndpoint::Decision => {
            let name = match ctx.query.get("name") {
                Some(n) if !n.trim().is_empty() => domain("name", &n)?,
                _ => return Err(MgmtError::BadRequest("name is required".into())),
            };
            Ok(ok(&store.verdict(org, name).await?))
        }
        ParasolEndpoint::AllowList(AllowListEndpoint::List) => {
            let p = paging(ctx)?;
            let page: Vec<Entry> = store
                .allow_list(org)
                .await?
                .into_iter()
                .skip(usize::try_from(p.offset).unwrap_or(usize::MAX))
                .take(usize::try_from(p.limit).unwrap_or(0))
                .map(|name| Entry { name })
                .collect();
            Ok(ok(&page))
        }
        ParasolEndpoint::AllowList(AllowListEndpoint::Add) => {
            let input = object_body(ctx, &body)?;
            let name = domain("name", &Input(&input).req_str("name")?)?;
            let added = store.allow_add(org, name.clone(), now()).await?;
            Ok(ok(&Added { name, added }))
        }
        ParasolEndpoint::AllowList(AllowListEndpoint::Remove(raw)) => {
            let name = domain("name", &raw)?;
            if store.allow_remove(org, name.clone()).await? {
                Ok(ok(&Entry { name }))
            } else {
                Err(MgmtError::NotFound)
            }
        }
    }
}

/// A name normalised like `dstDomain` (IDN to punycode, lower case, no final dot), or a 400
/// naming the field.
fn domain(field: &str, raw: &str) -> Result<String, MgmtError> {
    normalize(raw.trim())
        .map_err(|_| MgmtError::BadRequest(format!("{field} must be a domain name")))
}
