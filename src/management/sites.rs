//! Sites of an organization (`/v1/organizations/{id}/sites`).
//!
//! Every organization has a default site from its creation. A site that is the default, or that
//! still holds internal networks or virtual appliances, cannot be deleted (409): nothing may be
//! left pointing at a missing site. The store checks that in the delete's own transaction.

use bytes::Bytes;
use hyper::Response;
use serde_json::{Map, Value};

use super::common::{found, object_body, ok, paging, Input};
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::Items;
use crate::state::{AppState, RequestCtx};
use crate::timefmt::now;

/// Handles the endpoints of this resource for organization `org` (already checked visible).
pub async fn handle(
    state: &AppState,
    ep: Items,
    org: i64,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    let store = &state.store;
    match ep {
        Items::List => {
            let p = paging(ctx)?;
            Ok(ok(&store.list_sites(org, p.limit, p.offset).await?))
        }
        Items::Get(id) => found(store.get_site(org, id).await?),
        Items::Create => {
            let name = site_input(&object_body(ctx, &body)?)?;
            Ok(ok(&store.create_site(org, name, now()).await?))
        }
        Items::Update(id) => {
            let name = site_input(&object_body(ctx, &body)?)?;
            Ok(ok(&store.rename_site(org, id, name, now()).await?))
        }
        Items::Delete(id) => Ok(ok(&store.delete_site(org, id).await?)),
    }
}

/// Validates a site's input object (create and update): its name.
pub fn site_input(m: &Map<String, Value>) -> Result<String, MgmtError> {
    Input(m).req_str("name")
}
