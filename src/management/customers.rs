//! A service provider's record and its customers (`/v1/serviceproviders/{id}/...`).
//!
//! Reach: only a credential bound to that service provider. Anything else gets the same 404 as a
//! provider that does not exist.

use bytes::Bytes;
use hyper::Response;
use serde_json::{Map, Value};

use super::common::{found, object_body, ok, paging, Input};
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::{Items, ProviderEndpoint};
use crate::state::{AppState, RequestCtx};
use crate::store::{OrgFields, Parent, Scope};
use crate::timefmt::now;

/// Largest `seats` accepted (keeps sums far from overflow).
pub const MAX_SEATS: i64 = 1_000_000_000;

/// Handles service provider `sp`'s endpoints.
pub async fn handle(
    state: &AppState,
    scope: Scope,
    sp: i64,
    ep: ProviderEndpoint,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    // SECURITY: another provider's id is answered like a missing one.
    if scope != Scope::ServiceProvider(sp) {
        return Err(MgmtError::NotFound);
    }
    let parent = Parent::ServiceProvider(sp);
    let store = &state.store;
    let ep = match ep {
        ProviderEndpoint::Get => return found(store.service_provider(sp).await?),
        ProviderEndpoint::Customers(ep) => ep,
    };
    match ep {
        Items::List => {
            let p = paging(ctx)?;
            Ok(ok(&store.list_customers(parent, p.limit, p.offset).await?))
        }
        Items::Get(customer) => found(store.get_customer(parent, customer).await?),
        Items::Create => {
            let m = object_body(ctx, &body)?;
            let f = customer_input(&m, &package_ids(store).await?)?;
            Ok(ok(&store.create_customer(parent, f, now()).await?))
        }
        Items::Update(customer) => {
            let m = object_body(ctx, &body)?;
            let f = customer_input(&m, &package_ids(store).await?)?;
            Ok(ok(&store
                .update_customer(parent, customer, f, now())
                .await?))
        }
        Items::Delete(customer) => Ok(ok(&store.delete_customer(parent, customer).await?)),
    }
}

/// The ids of the packages a customer may subscribe to.
pub async fn package_ids(store: &crate::store::Store) -> Result<Vec<i64>, MgmtError> {
    Ok(store.list_packages().await?.iter().map(|p| p.id).collect())
}

/// Validates a Customer input object (create and the full-replacement update) against the known
/// `packages`, fields in the order of the spec's table: the first bad one is named, an unknown
/// `packageId` included. (The store checks the package again in the write's transaction.)
pub fn customer_input(m: &Map<String, Value>, packages: &[i64]) -> Result<OrgFields, MgmtError> {
    let i = Input(m);
    let country = || -> Result<String, MgmtError> {
        let c = i.req_str("countryCode")?;
        if c.len() != 2 || !c.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(MgmtError::BadRequest(
                "countryCode must be a two-letter country code".into(),
            ));
        }
        Ok(c.to_ascii_uppercase())
    };
    let package = || -> Result<i64, MgmtError> {
        let p = i.req_int("packageId")?;
        if packages.contains(&p) {
            Ok(p)
        } else {
            Err(MgmtError::BadRequest(
                "packageId must be the id of a known package".into(),
            ))
        }
    };
    // Fields are checked in the order of the spec's table; the first bad one is named.
    Ok(OrgFields {
        name: i.req_str("customerName")?,
        seats: i.req_int_in("seats", 1..=MAX_SEATS)?,
        street_address: Some(i.req_str("streetAddress")?),
        street_address2: i.opt_str("streetAddress2")?,
        city: Some(i.req_str("city")?),
        state: Some(i.req_str("state")?),
        country_code: Some(country()?),
        zip_code: i.opt_str("zipCode")?,
        package_id: Some(package()?),
        deal_id: i.opt_str("dealId")?,
        admin_emails: i.req_emails("adminEmails")?,
        ccw_deal_owner_emails: i.opt_emails("ccwDealOwnerEmails")?,
    })
}
