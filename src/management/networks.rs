//! Networks of an organization (`/v1/organizations/{id}/networks`): list, read, delete. Devices
//! register networks; operators do it with `parasol network register`, validated here.

use bytes::Bytes;
use hyper::Response;
use serde_json::{Map, Value};

use super::common::{found, ok, paging, Input};
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::ReadDelete;
use crate::state::{AppState, RequestCtx};
use crate::store::NewNetwork;

/// Observed values of a network's `status`.
pub const NETWORK_STATUSES: &[&str] = &["OPEN", "CLOSED"];

/// Handles the endpoints of this resource for organization `org` (already checked visible).
pub async fn handle(
    state: &AppState,
    ep: ReadDelete,
    org: i64,
    ctx: &RequestCtx,
    _body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    let store = &state.store;
    match ep {
        ReadDelete::List => {
            let p = paging(ctx)?;
            Ok(ok(&store.list_networks(org, p.limit, p.offset).await?))
        }
        ReadDelete::Get(id) => found(store.get_network(org, id).await?),
        ReadDelete::Delete(id) => Ok(ok(&store.delete_network(org, id).await?)),
    }
}

/// Validates a network registration: `name`, `ipAddress` (IPv4) and `prefixLength` (29..32, the
/// spec's "greater than 28") required; `isDynamic`, `isVerified` (default false) and `status`
/// (OPEN or CLOSED, default OPEN) optional.
pub fn network_input(m: &Map<String, Value>) -> Result<NewNetwork, MgmtError> {
    let i = Input(m);
    Ok(NewNetwork {
        name: i.req_str("name")?,
        ip_address: i.req_ipv4("ipAddress")?,
        prefix_length: i.req_int_in("prefixLength", 29..=32)?,
        is_dynamic: i.opt_bool("isDynamic")?.unwrap_or(false),
        is_verified: i.opt_bool("isVerified")?.unwrap_or(false),
        status: i
            .opt_one_of("status", NETWORK_STATUSES)?
            .unwrap_or_else(|| "OPEN".into()),
    })
}
