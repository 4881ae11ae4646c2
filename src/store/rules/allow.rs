//! The allow list: names the organization never blocks, with every name below them. A change
//! that changes the effective block list is recorded for the resolver exporter.

use super::tenants::Tenants;
use super::{not_found, Rows, TxResult};
use crate::names::self_and_parents;
use crate::store::model::Verdict;
use crate::store::Result;

/// The lists a name can be on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum List {
    /// The domain list.
    Listed,
    /// The allow list.
    Allowed,
}

/// The statements of the allow list.
pub(crate) trait Allow {
    /// Adds a name; false if it was there.
    async fn insert_allowed(&self, org: i64, name: &str, now: i64) -> Result<bool>;
    /// Removes a name; false if it was not there.
    async fn delete_allowed(&self, org: i64, name: &str) -> Result<bool>;
    /// The allow list, by name (bytewise).
    async fn allowed(&self, org: i64) -> Result<Vec<String>>;
    /// Records that the organization's effective block list may have changed.
    async fn record_list_change(&self, org: i64) -> Result<()>;
    /// Which of `names` are on the organization's `list`, in any order.
    async fn present(&self, org: i64, list: List, names: &[&str]) -> Rows<String>;
}

/// Records a change of the organization's effective block list when `did` says something
/// changed; hands `did` back.
async fn changed<X: Allow>(x: &X, org: i64, did: bool) -> TxResult<bool> {
    if did {
        x.record_list_change(org).await?;
    }
    Ok(did)
}

pub(crate) async fn add<X: Allow>(x: &X, org: i64, name: String, now: i64) -> TxResult<bool> {
    let did = x.insert_allowed(org, &name, now).await?;
    changed(x, org, did).await
}

pub(crate) async fn remove<X: Allow>(x: &X, org: i64, name: String) -> TxResult<bool> {
    let did = x.delete_allowed(org, &name).await?;
    changed(x, org, did).await
}

/// The allow list (`NotFound` if the organization does not exist).
pub(crate) async fn list<X: Allow + Tenants>(x: &X, org: i64) -> TxResult<Vec<String>> {
    if !x.organization_exists(org).await? {
        return not_found();
    }
    Ok(x.allowed(org).await?)
}

/// Is `name` (normalised) blocked for the organization, and why: it or a parent is on the
/// domain list, and neither it nor a parent is on the allow list (the allow list wins).
pub(crate) async fn verdict<X: Allow + Tenants>(
    x: &X,
    org: i64,
    name: String,
) -> TxResult<Verdict> {
    if !x.organization_exists(org).await? {
        return not_found();
    }
    let candidates: Vec<&str> = self_and_parents(&name).collect();
    // The nearest: the name itself, then its parents upwards.
    let first = |hits: Vec<String>| {
        candidates
            .iter()
            .find(|c| hits.iter().any(|h| h == *c))
            .map(|c| c.to_string())
    };
    let listed_as = first(x.present(org, List::Listed, &candidates).await?);
    let allowed_by = first(x.present(org, List::Allowed, &candidates).await?);
    Ok(Verdict {
        blocked: listed_as.is_some() && allowed_by.is_none(),
        name,
        listed_as,
        allowed_by,
    })
}
