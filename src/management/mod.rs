//! The management interface (`/v1/...`): authentication, scope, and one module per resource.
//!
//! Order of checks (decisions.md): the router has settled 404/405 and the server the request size;
//! here come credentials (401), scope (404), then each handler's Content-Type (415), body
//! validation (400), existence of the addressed item (404) and conflicts (409).

pub mod appliances;
pub mod auth;
pub mod common;
pub mod customers;
pub mod demo;
pub mod internal_networks;
pub mod msp_customers;
pub mod networks;
pub mod roaming;
pub mod roles;
pub mod sites;
pub mod timezones;
pub mod users;

use bytes::Bytes;
use hyper::Response;

use crate::error::MgmtError;
use crate::http::Body;
use crate::router::MgmtEndpoint;
use crate::server::{AppState, RequestCtx};

pub async fn handle(
    state: &AppState,
    ep: MgmtEndpoint,
    ctx: &RequestCtx,
    body: Bytes,
) -> Response<Body> {
    match dispatch(state, ep, ctx, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(&ctx.tx_id),
    }
}

/// The organization a per-organization endpoint addresses.
fn organization_of(ep: &MgmtEndpoint) -> Option<i64> {
    use MgmtEndpoint::*;
    match ep {
        ListNetworks { org }
        | GetNetwork { org, .. }
        | DeleteNetwork { org, .. }
        | ListRoamingComputers { org }
        | GetRoamingComputer { org, .. }
        | UpdateRoamingComputer { org, .. }
        | DeleteRoamingComputer { org, .. }
        | CreateInternalNetwork { org }
        | ListInternalNetworks { org }
        | GetInternalNetwork { org, .. }
        | UpdateInternalNetwork { org, .. }
        | DeleteInternalNetwork { org, .. }
        | ListVirtualAppliances { org }
        | GetVirtualAppliance { org, .. }
        | UpdateVirtualAppliance { org, .. }
        | DeleteVirtualAppliance { org, .. }
        | CreateSite { org }
        | ListSites { org }
        | GetSite { org, .. }
        | UpdateSite { org, .. }
        | DeleteSite { org, .. }
        | CreateUser { org }
        | ListUsers { org }
        | GetUser { org, .. }
        | DeleteUser { org, .. }
        | ListRoles { org } => Some(*org),
        GetServiceProvider { .. }
        | CreateCustomer { .. }
        | ListCustomers { .. }
        | GetCustomer { .. }
        | UpdateCustomer { .. }
        | DeleteCustomer { .. }
        | CreateMspCustomer { .. }
        | ListMspCustomers { .. }
        | GetMspCustomer { .. }
        | UpdateMspCustomer { .. }
        | DeleteMspCustomer { .. } => None,
    }
}

async fn dispatch(
    state: &AppState,
    ep: MgmtEndpoint,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    use MgmtEndpoint::*;
    let scope = auth::authenticate(state, ctx).await?;
    let Some(org) = organization_of(&ep) else {
        return match ep {
            GetServiceProvider { .. }
            | CreateCustomer { .. }
            | ListCustomers { .. }
            | GetCustomer { .. }
            | UpdateCustomer { .. }
            | DeleteCustomer { .. } => customers::handle(state, scope, ep, ctx, body).await,
            _ => msp_customers::handle(state, scope, ep, ctx, body).await,
        };
    };
    // SECURITY: an organization outside the credential's scope is answered exactly like one that
    // does not exist.
    let visible = state
        .store
        .read(move |conn| crate::store::tenants::organization_visible(conn, scope, org))
        .await?;
    if !visible {
        return Err(MgmtError::NotFound);
    }
    match ep {
        ListNetworks { .. } | GetNetwork { .. } | DeleteNetwork { .. } => {
            networks::handle(state, ep, org, ctx, body).await
        }
        ListRoamingComputers { .. }
        | GetRoamingComputer { .. }
        | UpdateRoamingComputer { .. }
        | DeleteRoamingComputer { .. } => roaming::handle(state, ep, org, ctx, body).await,
        CreateInternalNetwork { .. }
        | ListInternalNetworks { .. }
        | GetInternalNetwork { .. }
        | UpdateInternalNetwork { .. }
        | DeleteInternalNetwork { .. } => {
            internal_networks::handle(state, ep, org, ctx, body).await
        }
        ListVirtualAppliances { .. }
        | GetVirtualAppliance { .. }
        | UpdateVirtualAppliance { .. }
        | DeleteVirtualAppliance { .. } => appliances::handle(state, ep, org, ctx, body).await,
        CreateSite { .. }
        | ListSites { .. }
        | GetSite { .. }
        | UpdateSite { .. }
        | DeleteSite { .. } => sites::handle(state, ep, org, ctx, body).await,
        CreateUser { .. } | ListUsers { .. } | GetUser { .. } | DeleteUser { .. } => {
            users::handle(state, ep, org, ctx, body).await
        }
        ListRoles { .. } => roles::handle(state, ep, org, ctx, body).await,
        _ => Err(MgmtError::NotFound),
    }
}
