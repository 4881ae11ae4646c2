//! Sites of an organization (`/v1/organizations/{id}/sites`).
//!
//! Every organization has a default site from its creation. A site that is the default, or that
//! still holds internal networks or virtual appliances, cannot be deleted (409): nothing may be
//! left pointing at a missing site.

use bytes::Bytes;
use hyper::Response;
use rusqlite::Connection;
use serde_json::{Map, Value};

use super::common::{
    found, list_page, object_body, ok, write_org, write_org_found, Checked, Input,
};
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::MgmtEndpoint;
use crate::state::{AppState, RequestCtx};
use crate::store::sites::{self as store, SiteRecord};
use crate::timefmt::now;

/// Handles the endpoints of this resource for organization `org` (already checked visible).
pub async fn handle(
    state: &AppState,
    ep: MgmtEndpoint,
    org: i64,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    use MgmtEndpoint::*;
    match ep {
        ListSites { .. } => list_page(state, ctx, move |c, l, o| store::list(c, org, l, o)).await,
        GetSite { id, .. } => found(state.store.read(move |c| store::get(c, org, id)).await?),
        CreateSite { .. } => {
            let name = site_input(&object_body(ctx, &body)?)?;
            let rec = write_org(state, org, move |c| {
                Ok(Ok(store::create(c, org, &name, now())?))
            })
            .await?;
            Ok(ok(&rec))
        }
        UpdateSite { id, .. } => {
            let name = site_input(&object_body(ctx, &body)?)?;
            write_org_found(state, org, move |c| store::rename(c, org, id, &name, now())).await
        }
        DeleteSite { id, .. } => {
            let rec = write_org(state, org, move |c| delete_site(c, org, id)).await?;
            Ok(ok(&rec))
        }
        _ => Err(MgmtError::NotFound),
    }
}

/// Validates a site's input object (create and update): its name.
pub fn site_input(m: &Map<String, Value>) -> Result<String, MgmtError> {
    Input(m).req_str("name")
}

/// Deletes a site unless it is the default site or still holds internal networks or virtual
/// appliances (409); returns it as it was.
pub fn delete_site(c: &Connection, org: i64, id: i64) -> Checked<SiteRecord> {
    let Some(rec) = store::get(c, org, id)? else {
        return Ok(Err(MgmtError::NotFound));
    };
    if rec.is_default {
        return Ok(Err(MgmtError::Conflict(
            "the default site cannot be deleted".into(),
        )));
    }
    if rec.internal_network_count > 0 || rec.va_count > 0 {
        return Ok(Err(MgmtError::Conflict(format!(
            "site {id} still has {} internal network(s) and {} virtual appliance(s); \
             move or delete them first",
            rec.internal_network_count, rec.va_count
        ))));
    }
    store::delete(c, org, id)?;
    Ok(Ok(rec))
}
