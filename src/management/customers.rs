//! A service provider's record and its customers (`/v1/serviceproviders/{id}/...`).
//!
//! Reach: only a credential bound to that service provider. Anything else gets the same 404 as a
//! provider that does not exist.

use bytes::Bytes;
use hyper::Response;
use rusqlite::Connection;
use serde_json::{Map, Value};

use super::common::{object_body, ok, paging, Input};
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::MgmtEndpoint;
use crate::state::{AppState, RequestCtx};
use crate::store::customers::{self as store, CustomerRecord};
use crate::store::tenants::{OrgFields, Parent, Scope};
use crate::timefmt::now;

/// Largest `seats` accepted (keeps sums far from overflow).
pub const MAX_SEATS: i64 = 1_000_000_000;

pub async fn handle(
    state: &AppState,
    scope: Scope,
    ep: MgmtEndpoint,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    use MgmtEndpoint::*;
    let sp = match ep {
        GetServiceProvider { sp }
        | CreateCustomer { sp }
        | ListCustomers { sp }
        | GetCustomer { sp, .. }
        | UpdateCustomer { sp, .. }
        | DeleteCustomer { sp, .. } => sp,
        _ => return Err(MgmtError::NotFound),
    };
    // SECURITY: another provider's id is answered like a missing one.
    if scope != Scope::ServiceProvider(sp) {
        return Err(MgmtError::NotFound);
    }
    let parent = Parent::ServiceProvider(sp);
    match ep {
        GetServiceProvider { .. } => {
            let rec = state
                .store
                .read(move |c| store::service_provider(c, sp))
                .await?;
            rec.map(|r| ok(&r)).ok_or(MgmtError::NotFound)
        }
        ListCustomers { .. } => {
            let p = paging(ctx)?;
            let list = state
                .store
                .read(move |c| store::list(c, parent, p.limit, p.offset))
                .await?;
            Ok(ok(&list))
        }
        GetCustomer { customer, .. } => {
            let rec = state
                .store
                .read(move |c| store::get(c, parent, customer))
                .await?;
            rec.map(|r| ok(&r)).ok_or(MgmtError::NotFound)
        }
        CreateCustomer { .. } => {
            let m = object_body(ctx, &body)?;
            let rec = write_checked(state, m, move |c, f| {
                store::create(c, parent, f, now()).map(Some)
            })
            .await?;
            Ok(ok(&rec))
        }
        UpdateCustomer { customer, .. } => {
            let m = object_body(ctx, &body)?;
            let rec = write_checked(state, m, move |c, f| {
                store::update(c, parent, customer, f, now())
            })
            .await?;
            Ok(ok(&rec))
        }
        DeleteCustomer { customer, .. } => {
            let rec = state
                .store
                .write(move |c| store::delete(c, parent, customer))
                .await?;
            rec.map(|r| ok(&r)).ok_or(MgmtError::NotFound)
        }
        _ => Err(MgmtError::NotFound),
    }
}

/// Runs a create or update in the writer after validating the input in the same transaction
/// (400, the package's existence included) and then checking that the customer exists (404).
async fn write_checked(
    state: &AppState,
    m: Map<String, Value>,
    op: impl FnOnce(&Connection, &OrgFields) -> crate::store::Result<Option<CustomerRecord>>
        + Send
        + 'static,
) -> Result<CustomerRecord, MgmtError> {
    state
        .store
        .write(move |c| match customer_input(c, &m) {
            Ok(f) => Ok(op(c, &f)?.ok_or(MgmtError::NotFound)),
            Err(e) => Ok(Err(e)),
        })
        .await?
}

/// Validates a Customer input object (create and the full-replacement update), an unknown
/// `packageId` included.
pub fn customer_input(c: &Connection, m: &Map<String, Value>) -> Result<OrgFields, MgmtError> {
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
        if store::package_exists(c, p)? {
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
