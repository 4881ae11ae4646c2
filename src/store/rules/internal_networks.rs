//! Internal networks: each lies in one of its organization's sites, whose name it shows
//! (`siteName` is read through the site, so it follows renames).

use super::sites::{check_site, Sites};
use super::{found, written, TxResult};
use super::{One, Rows};
use crate::store::model::*;
use crate::store::Result;

/// An internal network's fields.
pub(crate) type Fields = InternalNetworkFields;

/// The statements of internal networks (`internalNetworkId` is the network's `originId`).
pub(crate) trait InternalNetworks {
    /// One page of the organization's internal networks, ordered by id.
    async fn inets(&self, org: i64, limit: i64, offset: i64) -> Rows<InternalNetworkRecord>;
    async fn inet(&self, org: i64, id: i64) -> One<InternalNetworkRecord>;
    /// Inserts an internal network; its id.
    async fn insert_inet(&self, org: i64, f: &Fields, now: i64) -> Result<i64>;
    /// Replaces its fields (a move when the site changes), if the organization has it.
    async fn update_inet(&self, org: i64, id: i64, f: &Fields, now: i64) -> Result<()>;
    async fn delete_inet(&self, org: i64, id: i64) -> Result<()>;
}

pub(crate) async fn list<X: InternalNetworks>(
    x: &X,
    org: i64,
    limit: i64,
    offset: i64,
) -> TxResult<Vec<InternalNetworkRecord>> {
    Ok(x.inets(org, limit, offset).await?)
}

pub(crate) async fn get<X: InternalNetworks>(
    x: &X,
    org: i64,
    id: i64,
) -> TxResult<Option<InternalNetworkRecord>> {
    Ok(x.inet(org, id).await?)
}

/// Creates an internal network in one of the organization's sites (`Invalid` naming `siteId`).
pub(crate) async fn create<X: InternalNetworks + Sites>(
    x: &X,
    org: i64,
    fields: InternalNetworkFields,
    now: i64,
) -> TxResult<InternalNetworkRecord> {
    check_site(x, org, fields.site_id).await?;
    let id = x.insert_inet(org, &fields, now).await?;
    written(x.inet(org, id).await?, "network")
}

/// Replaces an internal network's fields (`NotFound`, `Invalid` naming `siteId`).
pub(crate) async fn update<X: InternalNetworks + Sites>(
    x: &X,
    org: i64,
    id: i64,
    fields: InternalNetworkFields,
    now: i64,
) -> TxResult<InternalNetworkRecord> {
    check_site(x, org, fields.site_id).await?;
    x.update_inet(org, id, &fields, now).await?;
    found(x.inet(org, id).await?)
}

pub(crate) async fn delete<X: InternalNetworks>(
    x: &X,
    org: i64,
    id: i64,
) -> TxResult<InternalNetworkRecord> {
    let rec = found(x.inet(org, id).await?)?;
    x.delete_inet(org, id).await?;
    Ok(rec)
}
