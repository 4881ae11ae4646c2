//! Internal networks of an organization (`/v1/organizations/{id}/internalnetworks`).
//!
//! Each lies in a site of the same organization; PUT is a full replacement and moves the network
//! when `siteId` changes. A `siteId` that is not a site of this organization is a validation
//! error (400), checked in the same transaction as the write.

use bytes::Bytes;
use hyper::Response;
use serde_json::{Map, Value};

use super::common::{found, object_body, ok, paging, Input};
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::Items;
use crate::state::{AppState, RequestCtx};
use crate::store::InternalNetworkFields;
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
            Ok(ok(&store
                .list_internal_networks(org, p.limit, p.offset)
                .await?))
        }
        Items::Get(id) => found(store.get_internal_network(org, id).await?),
        Items::Create => {
            let f = internal_network_input(&object_body(ctx, &body)?)?;
            Ok(ok(&store.create_internal_network(org, f, now()).await?))
        }
        Items::Update(id) => {
            let f = internal_network_input(&object_body(ctx, &body)?)?;
            Ok(ok(&store
                .update_internal_network(org, id, f, now())
                .await?))
        }
        Items::Delete(id) => Ok(ok(&store.delete_internal_network(org, id).await?)),
    }
}

/// Validates an InternalNetwork input object (create and update), fields in the spec's order.
pub fn internal_network_input(m: &Map<String, Value>) -> Result<InternalNetworkFields, MgmtError> {
    let i = Input(m);
    Ok(InternalNetworkFields {
        name: i.req_str("name")?,
        ip_address: i.req_ipv4("ipAddress")?,
        prefix_length: i.req_int_in("prefixLength", 8..=32)?,
        site_id: i.req_int("siteId")?,
    })
}
