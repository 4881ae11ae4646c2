//! An MSP's customers (`/v1/msps/{id}/customers...`).
//!
//! Reach: only a credential bound to that MSP. Anything else gets the same 404 as an MSP that
//! does not exist.

use bytes::Bytes;
use hyper::Response;

use super::common::{object_body, ok, paging, Input};
use super::customers::MAX_SEATS;
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::MgmtEndpoint;
use crate::state::{AppState, RequestCtx};
use crate::store::customers::{self as store, MspCustomerRecord};
use crate::store::tenants::{OrgFields, Parent, Scope};
use crate::timefmt::now;

pub async fn handle(
    state: &AppState,
    scope: Scope,
    ep: MgmtEndpoint,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    use MgmtEndpoint::*;
    let msp = match ep {
        CreateMspCustomer { msp }
        | ListMspCustomers { msp }
        | GetMspCustomer { msp, .. }
        | UpdateMspCustomer { msp, .. }
        | DeleteMspCustomer { msp, .. } => msp,
        _ => return Err(MgmtError::NotFound),
    };
    // SECURITY: another MSP's id is answered like a missing one.
    if scope != Scope::Msp(msp) {
        return Err(MgmtError::NotFound);
    }
    let parent = Parent::Msp(msp);
    let found = |rec: Option<store::CustomerRecord>| {
        rec.map(|r| ok(&MspCustomerRecord::from(r)))
            .ok_or(MgmtError::NotFound)
    };
    match ep {
        ListMspCustomers { .. } => {
            let p = paging(ctx)?;
            let list = state
                .store
                .read(move |c| store::list(c, parent, p.limit, p.offset))
                .await?;
            let list: Vec<MspCustomerRecord> = list.into_iter().map(Into::into).collect();
            Ok(ok(&list))
        }
        GetMspCustomer { customer, .. } => found(
            state
                .store
                .read(move |c| store::get(c, parent, customer))
                .await?,
        ),
        CreateMspCustomer { .. } => {
            let f = msp_customer_input(&object_body(ctx, &body)?)?;
            let rec = state
                .store
                .write(move |c| store::create(c, parent, &f, now()))
                .await?;
            found(Some(rec))
        }
        UpdateMspCustomer { customer, .. } => {
            let f = msp_customer_input(&object_body(ctx, &body)?)?;
            found(
                state
                    .store
                    .write(move |c| store::update(c, parent, customer, &f, now()))
                    .await?,
            )
        }
        DeleteMspCustomer { customer, .. } => found(
            state
                .store
                .write(move |c| store::delete(c, parent, customer))
                .await?,
        ),
        _ => Err(MgmtError::NotFound),
    }
}

/// Validates an MspCustomer input object.
pub fn msp_customer_input(
    m: &serde_json::Map<String, serde_json::Value>,
) -> Result<OrgFields, MgmtError> {
    let i = Input(m);
    Ok(OrgFields {
        name: i.req_str("customerName")?,
        seats: i.req_int_in("seats", 1..=MAX_SEATS)?,
        ..Default::default()
    })
}
