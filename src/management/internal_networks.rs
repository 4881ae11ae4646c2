//! internal networks of an organization (work in progress on the resources branch).

use bytes::Bytes;
use hyper::Response;

use crate::error::MgmtError;
use crate::http::Body;
use crate::router::MgmtEndpoint;
use crate::server::{AppState, RequestCtx};

/// Handles the endpoints of this resource for organization `org` (already checked visible).
pub async fn handle(
    _state: &AppState,
    _ep: MgmtEndpoint,
    _org: i64,
    _ctx: &RequestCtx,
    _body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    Err(MgmtError::NotFound)
}
