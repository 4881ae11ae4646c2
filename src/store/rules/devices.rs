//! Devices that register themselves with the cloud: networks (egress IP ranges), roaming
//! computers and virtual appliances. The management interface lists, reads, renames or moves and
//! deletes them; operators register them through the command line and `--demo` fills them in.

use super::sites::{check_site, Sites};
use super::{conflict, found, written, TxResult};
use super::{One, Rows};
use crate::store::model::*;
use crate::store::Result;

/// A roaming computer's record.
pub(crate) type Roamer = RoamingComputerRecord;

/// A page (limit, offset), or (`None`) everything.
pub(crate) type Page = Option<(i64, i64)>;

/// The statements of devices. Pages are ordered by `originId` (registration order); a roaming
/// computer is addressed by its device id in lower case.
pub(crate) trait Devices {
    async fn networks(&self, org: i64, limit: i64, offset: i64) -> Result<Vec<NetworkRecord>>;
    async fn network(&self, org: i64, id: i64) -> Result<Option<NetworkRecord>>;
    /// Inserts a network; its `originId`.
    async fn insert_network(&self, org: i64, n: &NewNetwork, now: i64) -> Result<i64>;
    async fn delete_network_row(&self, org: i64, id: i64) -> Result<()>;

    /// The roaming computers that pass `filter`'s status and sync-time conditions (its name
    /// condition is the rule's), one page of them or (`None`) all.
    async fn roamers(&self, org: i64, filter: &RoamingFilter, page: Page) -> Rows<Roamer>;
    async fn roamer(&self, org: i64, device: &str) -> One<Roamer>;
    /// Inserts a roaming computer; false if the organization has that device already (found by the unique index, against concurrent registrations too).
    async fn insert_roamer(&self, org: i64, c: &NewRoamingComputer) -> Result<bool>;
    async fn rename_roamer(&self, org: i64, device: &str, name: &str) -> Result<()>;
    async fn delete_roamer(&self, org: i64, device: &str) -> Result<()>;

    async fn appliances(&self, org: i64, limit: i64, offset: i64) -> Rows<ApplianceRecord>;
    async fn appliance(&self, org: i64, id: i64) -> Result<Option<ApplianceRecord>>;
    /// Inserts an appliance; its `originId`.
    async fn insert_appliance(&self, org: i64, a: &NewAppliance, now: i64) -> Result<i64>;
    async fn move_appliance_row(&self, org: i64, id: i64, site: i64, now: i64) -> Result<()>;
    async fn delete_appliance_row(&self, org: i64, id: i64) -> Result<()>;
}

// ------------------------------------------------------------------ networks

pub(crate) async fn list_networks<X: Devices>(
    x: &X,
    org: i64,
    limit: i64,
    offset: i64,
) -> TxResult<Vec<NetworkRecord>> {
    Ok(x.networks(org, limit, offset).await?)
}

pub(crate) async fn get_network<X: Devices>(
    x: &X,
    org: i64,
    id: i64,
) -> TxResult<Option<NetworkRecord>> {
    Ok(x.network(org, id).await?)
}

pub(crate) async fn delete_network<X: Devices>(
    x: &X,
    org: i64,
    id: i64,
) -> TxResult<NetworkRecord> {
    let rec = found(x.network(org, id).await?)?;
    x.delete_network_row(org, id).await?;
    Ok(rec)
}

pub(crate) async fn register_network<X: Devices>(
    x: &X,
    org: i64,
    network: NewNetwork,
    now: i64,
) -> TxResult<NetworkRecord> {
    let id = x.insert_network(org, &network, now).await?;
    written(x.network(org, id).await?, "network")
}

// ------------------------------------------------------------------ roaming computers

/// One page of the roaming computers that pass `filter`. The name condition folds case beyond
/// ASCII (neither engine's own comparison does), so it runs here and paging follows it.
pub(crate) async fn list_roaming_computers<X: Devices>(
    x: &X,
    org: i64,
    filter: RoamingFilter,
    limit: i64,
    offset: i64,
) -> TxResult<Vec<Roamer>> {
    let Some(needle) = filter.name.as_deref().map(str::to_lowercase) else {
        return Ok(x.roamers(org, &filter, Some((limit, offset))).await?);
    };
    Ok(x.roamers(org, &filter, None)
        .await?
        .into_iter()
        .filter(|r| r.name.to_lowercase().contains(&needle))
        .skip(offset.max(0) as usize)
        .take(limit.max(0) as usize)
        .collect())
}

pub(crate) async fn get_roaming_computer<X: Devices>(
    x: &X,
    org: i64,
    device: String,
) -> TxResult<Option<Roamer>> {
    Ok(x.roamer(org, &device.to_ascii_lowercase()).await?)
}

pub(crate) async fn rename_roaming_computer<X: Devices>(
    x: &X,
    org: i64,
    device: String,
    name: String,
) -> TxResult<RoamingComputerRecord> {
    let device = device.to_ascii_lowercase();
    x.rename_roamer(org, &device, &name).await?;
    found(x.roamer(org, &device).await?)
}

pub(crate) async fn delete_roaming_computer<X: Devices>(
    x: &X,
    org: i64,
    device: String,
) -> TxResult<RoamingComputerRecord> {
    let device = device.to_ascii_lowercase();
    let rec = found(x.roamer(org, &device).await?)?;
    x.delete_roamer(org, &device).await?;
    Ok(rec)
}

/// Registers a roaming computer; `Conflict` if the organization has that device already.
pub(crate) async fn register_roaming_computer<X: Devices>(
    x: &X,
    org: i64,
    computer: NewRoamingComputer,
) -> TxResult<RoamingComputerRecord> {
    let device = computer.device_id.to_ascii_lowercase();
    let taken = x.roamer(org, &device).await?.is_some() || !x.insert_roamer(org, &computer).await?;
    if taken {
        return conflict(format!(
            "organization {org} already has a roaming computer with deviceId {}",
            computer.device_id
        ));
    }
    written(x.roamer(org, &device).await?, "roaming computer")
}

// ------------------------------------------------------------------ virtual appliances

pub(crate) async fn list_appliances<X: Devices>(
    x: &X,
    org: i64,
    limit: i64,
    offset: i64,
) -> TxResult<Vec<ApplianceRecord>> {
    Ok(x.appliances(org, limit, offset).await?)
}

pub(crate) async fn get_appliance<X: Devices>(
    x: &X,
    org: i64,
    id: i64,
) -> TxResult<Option<ApplianceRecord>> {
    Ok(x.appliance(org, id).await?)
}

/// Moves an appliance to another site of the organization (`Invalid` naming `siteId`).
pub(crate) async fn move_appliance<X: Devices + Sites>(
    x: &X,
    org: i64,
    id: i64,
    site: i64,
    now: i64,
) -> TxResult<ApplianceRecord> {
    check_site(x, org, site).await?;
    x.move_appliance_row(org, id, site, now).await?;
    found(x.appliance(org, id).await?)
}

pub(crate) async fn delete_appliance<X: Devices>(
    x: &X,
    org: i64,
    id: i64,
) -> TxResult<ApplianceRecord> {
    let rec = found(x.appliance(org, id).await?)?;
    x.delete_appliance_row(org, id).await?;
    Ok(rec)
}

/// Registers an appliance in one of the organization's sites (`Invalid` naming `siteId`).
pub(crate) async fn register_appliance<X: Devices + Sites>(
    x: &X,
    org: i64,
    appliance: NewAppliance,
    now: i64,
) -> TxResult<ApplianceRecord> {
    check_site(x, org, appliance.site_id).await?;
    let id = x.insert_appliance(org, &appliance, now).await?;
    written(x.appliance(org, id).await?, "virtual appliance")
}

/// An appliance's `state` and `settings` as their columns hold them (JSON objects).
pub(crate) fn appliance_json(a: &NewAppliance) -> (String, String) {
    let state = serde_json::to_string(&a.state).unwrap_or_else(|_| "{}".into());
    let settings = serde_json::to_string(&a.settings).unwrap_or_else(|_| "{}".into());
    (state, settings)
}
