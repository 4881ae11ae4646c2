//! The management interface (`/v1/...`): authentication, scope, and one module per resource.

pub mod auth;
pub mod demo;

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

async fn dispatch(
    state: &AppState,
    _ep: MgmtEndpoint,
    ctx: &RequestCtx,
    _body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    let _scope = auth::authenticate(state, ctx).await?;
    Err(MgmtError::NotFound)
}
