//! msp customers (work in progress).

use bytes::Bytes;
use hyper::Response;

use crate::error::MgmtError;
use crate::http::Body;
use crate::router::MgmtEndpoint;
use crate::server::{AppState, RequestCtx};
use crate::store::tenants::Scope;

pub async fn handle(
    _state: &AppState,
    _scope: Scope,
    _ep: MgmtEndpoint,
    _ctx: &RequestCtx,
    _body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    Err(MgmtError::NotFound)
}
