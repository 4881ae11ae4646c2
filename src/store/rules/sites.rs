//! Sites: the default site cannot go, a site in use cannot go, and a site referred to by an
//! internal network or an appliance must be one of the organization's own.

use super::{conflict, found, invalid, written, Hold, TxResult};
use crate::store::model::*;
use crate::store::Result;

/// The statements of sites. `internalNetworkCount` and `vaCount` are counted when read, so
/// they stay true whatever creates, moves or deletes internal networks and appliances.
pub(crate) trait Sites {
    /// One page of the organization's sites, ordered by `siteId`.
    async fn sites(&self, org: i64, limit: i64, offset: i64) -> Result<Vec<SiteRecord>>;
    /// One site of the organization, if it has it.
    async fn site(&self, org: i64, id: i64) -> Result<Option<SiteRecord>>;
    /// Whether the organization has the site, held as `hold` says.
    async fn hold_site(&self, org: i64, id: i64, hold: Hold) -> Result<bool>;
    /// Inserts a site (with an `originId` of its own); its `siteId`.
    async fn insert_site(&self, org: i64, name: &str, is_default: bool, now: i64) -> Result<i64>;
    /// Renames a site, if the organization has it.
    async fn rename_site_row(&self, org: i64, id: i64, name: &str, now: i64) -> Result<()>;
    /// Deletes a site, if the organization has it.
    async fn delete_site_row(&self, org: i64, id: i64) -> Result<()>;
    /// The organization's default site.
    async fn default_site_id(&self, org: i64) -> Result<Option<i64>>;
}

pub(crate) async fn list<X: Sites>(
    x: &X,
    org: i64,
    limit: i64,
    offset: i64,
) -> TxResult<Vec<SiteRecord>> {
    Ok(x.sites(org, limit, offset).await?)
}

pub(crate) async fn get<X: Sites>(x: &X, org: i64, id: i64) -> TxResult<Option<SiteRecord>> {
    Ok(x.site(org, id).await?)
}

pub(crate) async fn default_site<X: Sites>(x: &X, org: i64) -> TxResult<Option<i64>> {
    Ok(x.default_site_id(org).await?)
}

pub(crate) async fn create<X: Sites>(
    x: &X,
    org: i64,
    name: String,
    now: i64,
) -> TxResult<SiteRecord> {
    let id = x.insert_site(org, &name, false, now).await?;
    written(x.site(org, id).await?, "site")
}

pub(crate) async fn rename<X: Sites>(
    x: &X,
    org: i64,
    id: i64,
    name: String,
    now: i64,
) -> TxResult<SiteRecord> {
    x.rename_site_row(org, id, &name, now).await?;
    found(x.site(org, id).await?)
}

/// Deletes a site unless it is the default site or still holds internal networks or virtual
/// appliances. The site is held first, so that nothing moves into it meanwhile.
pub(crate) async fn delete<X: Sites>(x: &X, org: i64, id: i64) -> TxResult<SiteRecord> {
    if !x.hold_site(org, id, Hold::Exclusive).await? {
        return super::not_found();
    }
    let rec = found(x.site(org, id).await?)?;
    if rec.is_default {
        return conflict("the default site cannot be deleted");
    }
    if rec.internal_network_count > 0 || rec.va_count > 0 {
        return conflict(format!(
            "site {id} still has {} internal network(s) and {} virtual appliance(s); \
             move or delete them first",
            rec.internal_network_count, rec.va_count
        ));
    }
    x.delete_site_row(org, id).await?;
    Ok(rec)
}

/// `Invalid` naming `siteId` unless `site` is a site of the organization; the site is held until
/// the commit, so that it cannot be deleted under what is being put in it.
pub(crate) async fn check_site<X: Sites>(x: &X, org: i64, site: i64) -> TxResult<()> {
    if x.hold_site(org, site, Hold::Share).await? {
        Ok(())
    } else {
        invalid(SITE_NOT_OF_ORGANIZATION)
    }
}
