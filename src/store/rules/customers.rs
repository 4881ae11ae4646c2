//! Customers of service providers and MSPs (organizations with a parent). A customer is an
//! organization: its `customerId` is the organization id. Derived fields (`packageName`, a
//! provider's `seatsUsed` and `customerCount`) are computed when read, so they are always true.

use super::sites::Sites;
use super::tenants::{check_package, create_organization, Tenants};
use super::{found, not_found, written, TxResult};
use super::{One, Rows};
use crate::store::model::*;
use crate::store::Result;

/// The statements of customers.
pub(crate) trait Customers {
    /// The provider's record with its derived fields, if it exists.
    async fn provider_record(&self, sp: i64) -> Result<Option<ServiceProviderRecord>>;
    /// The package of a service provider, if it exists.
    async fn provider_package(&self, sp: i64) -> Result<Option<i64>>;
    /// One page of the parent's customers, by id (none for `Parent::None`).
    async fn customers(&self, parent: Parent, limit: i64, offset: i64) -> Rows<CustomerRecord>;
    async fn customer(&self, parent: Parent, id: i64) -> One<CustomerRecord>;
    /// Replaces an organization's fields: all of them (`full`), or its name and seats.
    async fn update_customer(&self, id: i64, f: &OrgFields, full: bool, now: i64) -> Result<()>;
    /// Every package, by id.
    async fn packages(&self) -> Result<Vec<Package>>;
}

pub(crate) async fn service_provider<X: Customers>(
    x: &X,
    sp: i64,
) -> TxResult<Option<ServiceProviderRecord>> {
    Ok(x.provider_record(sp).await?)
}

pub(crate) async fn service_provider_package<X: Customers>(
    x: &X,
    sp: i64,
) -> TxResult<Option<i64>> {
    Ok(x.provider_package(sp).await?)
}

pub(crate) async fn list<X: Customers>(
    x: &X,
    parent: Parent,
    limit: i64,
    offset: i64,
) -> TxResult<Vec<CustomerRecord>> {
    Ok(x.customers(parent, limit, offset).await?)
}

pub(crate) async fn get<X: Customers>(
    x: &X,
    parent: Parent,
    id: i64,
) -> TxResult<Option<CustomerRecord>> {
    Ok(x.customer(parent, id).await?)
}

/// Creates a customer: its organization, default site and customer key (`NotFound` for a
/// missing parent, `Invalid` naming `packageId`).
pub(crate) async fn create<X: Customers + Tenants + Sites>(
    x: &X,
    parent: Parent,
    fields: OrgFields,
    now: i64,
) -> TxResult<CustomerRecord> {
    let created = create_organization(x, parent, fields, now).await?;
    written(x.customer(parent, created.id).await?, "customer")
}

/// Replaces a customer's fields: all of them for a provider's customer; an MSP's customer has
/// only a name and seats (`NotFound`, `Invalid` naming `packageId`).
pub(crate) async fn update<X: Customers + Tenants>(
    x: &X,
    parent: Parent,
    id: i64,
    fields: OrgFields,
    now: i64,
) -> TxResult<CustomerRecord> {
    check_package(x, fields.package_id).await?;
    found(x.customer(parent, id).await?)?;
    let full = !matches!(parent, Parent::Msp(_));
    x.update_customer(id, &fields, full, now).await?;
    found(x.customer(parent, id).await?)
}

/// Deletes a customer's organization with all its data; returns the record as it was.
pub(crate) async fn delete<X: Customers + Tenants>(
    x: &X,
    parent: Parent,
    id: i64,
) -> TxResult<CustomerRecord> {
    if !x.hold_for_delete(id).await? {
        return not_found();
    }
    let rec = found(x.customer(parent, id).await?)?;
    x.delete_organization_row(id).await?;
    Ok(rec)
}

pub(crate) async fn list_packages<X: Customers>(x: &X) -> TxResult<Vec<Package>> {
    Ok(x.packages().await?)
}
