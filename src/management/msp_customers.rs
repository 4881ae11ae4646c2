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
use crate::router::Items;
use crate::state::{AppState, RequestCtx};
use crate::store::{CustomerRecord, MspCustomerRecord, OrgFields, Parent, Scope};
use crate::timefmt::now;

/// Handles MSP `msp`'s customer endpoints.
pub async fn handle(
    state: &AppState,
    scope: Scope,
    msp: i64,
    ep: Items,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    // SECURITY: another MSP's id is answered like a missing one.
    if scope != Scope::Msp(msp) {
        return Err(MgmtError::NotFound);
    }
    let parent = Parent::Msp(msp);
    let store = &state.store;
    let answer = |rec: CustomerRecord| Ok(ok(&MspCustomerRecord::from(rec)));
    match ep {
        Items::List => {
            let p = paging(ctx)?;
            let list = store.list_customers(parent, p.limit, p.offset).await?;
            let list: Vec<MspCustomerRecord> = list.into_iter().map(Into::into).collect();
            Ok(ok(&list))
        }
        Items::Get(customer) => match store.get_customer(parent, customer).await? {
            Some(rec) => answer(rec),
            None => Err(MgmtError::NotFound),
        },
        Items::Create => {
            let f = msp_customer_input(&object_body(ctx, &body)?)?;
            answer(store.create_customer(parent, f, now()).await?)
        }
        Items::Update(customer) => {
            let f = msp_customer_input(&object_body(ctx, &body)?)?;
            answer(store.update_customer(parent, customer, f, now()).await?)
        }
        Items::Delete(customer) => answer(store.delete_customer(parent, customer).await?),
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
