//! Roles of an organization (`GET /v1/organizations/{id}/roles`).
//!
//! Roles are built in and shared by every organization: each is answered with `organizationId`
//! 0.

use hyper::Response;

use super::common::{ok, paging};
use crate::error::MgmtError;
use crate::http::Body;
use crate::state::{AppState, RequestCtx};

/// One page of the built-in roles (`GET /v1/organizations/{id}/roles`, the organization
/// already checked visible).
pub async fn list(state: &AppState, ctx: &RequestCtx) -> Result<Response<Body>, MgmtError> {
    let p = paging(ctx)?;
    Ok(ok(&state.store.list_roles(p.limit, p.offset).await?))
}
