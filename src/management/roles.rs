//! Roles of an organization (`GET /v1/organizations/{id}/roles`).
//!
//! Roles are built in and shared by every organization: each is answered with `organizationId`
//! 0.

use bytes::Bytes;
use hyper::Response;

use super::common::{ok, paging};
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::MgmtEndpoint;
use crate::state::{AppState, RequestCtx};

/// Handles the endpoints of this resource for organization `org` (already checked visible).
pub async fn handle(
    state: &AppState,
    ep: MgmtEndpoint,
    _org: i64,
    ctx: &RequestCtx,
    _body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    match ep {
        MgmtEndpoint::ListRoles { .. } => {
            let p = paging(ctx)?;
            Ok(ok(&state.store.list_roles(p.limit, p.offset).await?))
        }
        _ => Err(MgmtError::NotFound),
    }
}
