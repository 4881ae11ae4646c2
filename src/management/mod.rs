//! The management interface (`/v1/...`): authentication, scope, and one module per resource.
//!
//! Order of checks (decisions.md): the router has settled 404/405 and the server the request size;
//! here come credentials (401), scope (404), then each handler's Content-Type (415), body
//! validation (400), existence of the addressed item (404) and conflicts (409).

pub mod appliances;
pub mod auth;
pub mod blocking;
pub mod common;
pub mod customers;
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
use crate::router::{MgmtEndpoint, OrgEndpoint};
use crate::state::{AppState, RequestCtx};

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
    ep: MgmtEndpoint,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    let scope = auth::authenticate(state, ctx).await?;
    match ep {
        MgmtEndpoint::Provider { sp, ep } => {
            customers::handle(state, scope, sp, ep, ctx, body).await
        }
        MgmtEndpoint::Msp { msp, ep } => {
            msp_customers::handle(state, scope, msp, ep, ctx, body).await
        }
        MgmtEndpoint::Org { org, ep } => {
            // SECURITY: an organization outside the credential's scope is answered exactly like
            // one that does not exist.
            if !state.store.organization_visible(scope, org).await? {
                return Err(MgmtError::NotFound);
            }
            route(state, org, ep, ctx, body).await
        }
        MgmtEndpoint::Parasol { org, ep } => {
            // SECURITY: scoped exactly like `/v1/organizations/{id}/...`.
            if !state.store.organization_visible(scope, org).await? {
                return Err(MgmtError::NotFound);
            }
            blocking::handle(state, org, ep, ctx, body).await
        }
    }
}

/// Hands a per-organization endpoint to its resource, once `org` was found visible. That check
/// ran in a read of its own: every write of the organization's data checks again, in its own
/// transaction, that the organization still exists (404 if not).
async fn route(
    state: &AppState,
    org: i64,
    ep: OrgEndpoint,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    match ep {
        OrgEndpoint::Networks(ep) => networks::handle(state, ep, org, ctx, body).await,
        OrgEndpoint::RoamingComputers(ep) => roaming::handle(state, ep, org, ctx, body).await,
        OrgEndpoint::InternalNetworks(ep) => {
            internal_networks::handle(state, ep, org, ctx, body).await
        }
        OrgEndpoint::VirtualAppliances(ep) => appliances::handle(state, ep, org, ctx, body).await,
        OrgEndpoint::Sites(ep) => sites::handle(state, ep, org, ctx, body).await,
        OrgEndpoint::Users(ep) => users::handle(state, ep, org, ctx, body).await,
        OrgEndpoint::Roles => roles::list(state, ctx).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{OrgFields, Parent, Scope, Store};

    fn state(store: Store) -> AppState {
        AppState {
            store,
            reputation: std::sync::Arc::new(
                crate::reputation::ReputationHandle::open(None, None).unwrap(),
            ),
            public_url: None,
            scheme: "https",
            local_addr: "127.0.0.1:0".parse().unwrap(),
            limits: Default::default(),
            rate: crate::ratelimit::RateLimiter::new(false),
            pages: Default::default(),
            bulk: crate::bulk::BulkPool::start().unwrap(),
            metrics: Default::default(),
            access: crate::access::AccessLogger::new(crate::access::AccessLog::All),
            metrics_elsewhere: false,
            budget: std::sync::Arc::new(crate::budget::MemoryBudget::new(
                1 << 20,
                std::time::Duration::ZERO,
            )),
            console: None,
            journal: None,
            feeds: None,
        }
    }

    fn json_ctx() -> RequestCtx {
        let mut headers = hyper::HeaderMap::new();
        headers.insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        RequestCtx {
            method: hyper::Method::POST,
            query: crate::http::Query::default(),
            headers,
            tx_id: "test".into(),
            peer: None,
        }
    }

    /// What a refused write might have left behind: every site, internal network and user of
    /// the organization.
    async fn rows(store: &Store, org: i64) -> (usize, usize, usize) {
        (
            store.list_sites(org, 200, 0).await.unwrap().len(),
            store
                .list_internal_networks(org, 200, 0)
                .await
                .unwrap()
                .len(),
            store.list_users(org, 200, 0).await.unwrap().len(),
        )
    }

    /// The race of a write with the organization's deletion, made deterministic: the scope check
    /// has passed (as `dispatch` does it) and the organization is deleted before the write runs.
    /// Every write answers 404, as for an organization that never existed, and writes nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_to_an_organization_deleted_after_the_scope_check_are_404() {
        let dir = crate::testdir::TempDir::new("mgmt-race");
        let store =
            Store::open_sqlite(&dir.join("parasol.db"), crate::store::OpenRole::Server).unwrap();
        let f = OrgFields {
            name: "o".into(),
            seats: 1,
            ..Default::default()
        };
        let gone = store
            .create_organization(Parent::None, f.clone(), 0)
            .await
            .unwrap();
        let live = store.create_organization(Parent::None, f, 0).await.unwrap();
        let state = state(store.clone());
        let scope = Scope::Organization(gone.id);
        let (org, site) = (gone.id, gone.default_site_id);
        assert!(store.organization_visible(scope, org).await.unwrap());
        assert!(store.delete_organization(org).await.unwrap());
        assert_eq!(rows(&store, org).await, (0, 0, 0));
        let user = serde_json::json!({"firstname": "a", "lastname": "b", "email": "a@b.example",
            "password": "p", "roleId": 1, "timezone": "UTC"});
        let network = serde_json::json!({"name": "n", "ipAddress": "10.0.0.0", "prefixLength": 8, "siteId": site});
        let device = "0a0b0c0d".to_string();
        use crate::router::{Items, ReadCreateDelete, ReadDelete, ReadUpdateDelete};
        use OrgEndpoint::*;
        let writes = [
            (Sites(Items::Create), serde_json::json!({"name": "s"})),
            (Sites(Items::Update(site)), serde_json::json!({"name": "s"})),
            (Sites(Items::Delete(site)), serde_json::Value::Null),
            (Users(ReadCreateDelete::Create), user),
            (Users(ReadCreateDelete::Delete(1)), serde_json::Value::Null),
            (InternalNetworks(Items::Create), network.clone()),
            (InternalNetworks(Items::Update(1)), network),
            (InternalNetworks(Items::Delete(1)), serde_json::Value::Null),
            (
                VirtualAppliances(ReadUpdateDelete::Update(1)),
                serde_json::json!({"siteId": site}),
            ),
            (
                VirtualAppliances(ReadUpdateDelete::Delete(1)),
                serde_json::Value::Null,
            ),
            (
                RoamingComputers(ReadUpdateDelete::Update(device.clone())),
                serde_json::json!({"name": "pc"}),
            ),
            (
                RoamingComputers(ReadUpdateDelete::Delete(device)),
                serde_json::Value::Null,
            ),
            (Networks(ReadDelete::Delete(1)), serde_json::Value::Null),
        ];
        for (ep, body) in writes {
            let what = format!("{ep:?}");
            let body = Bytes::from(serde_json::to_vec(&body).unwrap());
            let r = route(&state, org, ep, &json_ctx(), body).await;
            assert_eq!(r.err(), Some(MgmtError::NotFound), "{what}");
        }
        assert_eq!(rows(&store, org).await, (0, 0, 0));
        // The same write to an organization that still exists goes ahead.
        let body = Bytes::from_static(br#"{"name": "s"}"#);
        let r = route(&state, live.id, Sites(Items::Create), &json_ctx(), body).await;
        assert_eq!(r.map(|r| r.status()).ok(), Some(hyper::StatusCode::OK));
        store.close();
    }
}
