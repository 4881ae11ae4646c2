//! Internal networks of an organization (`/v1/organizations/{id}/internalnetworks`).
//!
//! Each lies in a site of the same organization; PUT is a full replacement and moves the network
//! when `siteId` changes. A `siteId` that is not a site of this organization is a validation
//! error (400), checked in the same transaction as the write.

use bytes::Bytes;
use hyper::Response;
use rusqlite::Connection;
use serde_json::{Map, Value};

use super::common::{
    check_site, found, list_page, object_body, ok, write_org, write_org_found, Checked, Input,
};
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::MgmtEndpoint;
use crate::state::{AppState, RequestCtx};
use crate::store::internal_networks::{
    self as store, InternalNetworkFields, InternalNetworkRecord,
};
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
        ListInternalNetworks { .. } => {
            list_page(state, ctx, move |c, l, o| store::list(c, org, l, o)).await
        }
        GetInternalNetwork { id, .. } => {
            found(state.store.read(move |c| store::get(c, org, id)).await?)
        }
        CreateInternalNetwork { .. } => {
            let f = internal_network_input(&object_body(ctx, &body)?)?;
            let rec = write_org(state, org, move |c| {
                create_internal_network(c, org, &f, now())
            })
            .await?;
            Ok(ok(&rec))
        }
        UpdateInternalNetwork { id, .. } => {
            let f = internal_network_input(&object_body(ctx, &body)?)?;
            let rec = write_org(state, org, move |c| {
                if let Err(e) = check_site(c, org, f.site_id)? {
                    return Ok(Err(e));
                }
                Ok(store::update(c, org, id, &f, now())?.ok_or(MgmtError::NotFound))
            })
            .await?;
            Ok(ok(&rec))
        }
        DeleteInternalNetwork { id, .. } => {
            write_org_found(state, org, move |c| store::delete(c, org, id)).await
        }
        _ => Err(MgmtError::NotFound),
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

/// Creates an internal network after checking its site (used by the API and the command line).
pub fn create_internal_network(
    c: &Connection,
    org: i64,
    f: &InternalNetworkFields,
    now: i64,
) -> Checked<InternalNetworkRecord> {
    if let Err(e) = check_site(c, org, f.site_id)? {
        return Ok(Err(e));
    }
    Ok(Ok(store::create(c, org, f, now)?))
}
