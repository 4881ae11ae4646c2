//! Virtual appliances of an organization (`/v1/organizations/{id}/virtualappliances`): list,
//! read, move to another site of the organization, delete. Operators register them with
//! `parasol va register`, validated here.

use bytes::Bytes;
use hyper::Response;
use serde_json::{Map, Value};

use super::common::{found, object_body, ok, paging, Input};
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::ReadUpdateDelete;
use crate::state::{AppState, RequestCtx};
use crate::store::{ApplianceSettings, ApplianceState, NewAppliance};
use crate::timefmt::{now, rfc3339};

/// Handles the endpoints of this resource for organization `org` (already checked visible).
pub async fn handle(
    state: &AppState,
    ep: ReadUpdateDelete<i64>,
    org: i64,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    use ReadUpdateDelete::*;
    let store = &state.store;
    match ep {
        List => {
            let p = paging(ctx)?;
            Ok(ok(&store.list_appliances(org, p.limit, p.offset).await?))
        }
        Get(id) => found(store.get_appliance(org, id).await?),
        Update(id) => {
            // `siteId` is the only input field; the rest of the record is output only. The site
            // check is validation (400) and so comes before the appliance's existence (404);
            // the store runs both in the move's transaction.
            let site = Input(&object_body(ctx, &body)?).req_int("siteId")?;
            Ok(ok(&store.move_appliance(org, id, site, now()).await?))
        }
        Delete(id) => Ok(ok(&store.delete_appliance(org, id).await?)),
    }
}

/// Prefixes a nested object's validation message with the member holding it (`state.syncing`).
fn within(member: &str, e: MgmtError) -> MgmtError {
    match e {
        MgmtError::BadRequest(m) => MgmtError::BadRequest(format!("{member}.{m}")),
        other => other,
    }
}

/// The optional object member `member` (absent or null: empty), refusing members outside
/// `allowed` so that a misspelt one is not silently dropped.
fn sub_object<'a>(
    m: &'a Map<String, Value>,
    member: &str,
    allowed: &[&str],
) -> Result<Option<&'a Map<String, Value>>, MgmtError> {
    match m.get(member) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => match o.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(MgmtError::BadRequest(format!(
                "{member}.{k} is not a member of {member} (allowed: {})",
                allowed.join(", ")
            ))),
            None => Ok(Some(o)),
        },
        Some(_) => Err(MgmtError::BadRequest(format!("{member} must be an object"))),
    }
}

/// The members of a virtual appliance's `state`.
pub const STATE_MEMBERS: &[&str] = &[
    "connectedToConnector",
    "hasLocalDomainConfigured",
    "queryFailureRateAcceptable",
    "receivedInternalDNSQueries",
    "redundantWithinSite",
    "syncing",
];
const SETTINGS_MEMBERS: &[&str] = &[
    "internalIPs",
    "externalIP",
    "hostType",
    "uptime",
    "isDnscryptEnabled",
    "version",
    "upgradeError",
    "domains",
    "lastSyncTime",
];

/// Validates a virtual appliance's registration, fields in the spec's order: `name` and `siteId`
/// required (that the site is one of the organization's, the store checks); `isUpgradable`, `type`
/// (default virtual_appliance), `health` (default okay) optional; `state` and `settings` objects
/// with the spec's members only, each of the spec's type (IPv4 addresses, `uptime` >= 0,
/// `lastSyncTime` RFC 3339).
pub fn appliance_input(m: &Map<String, Value>) -> Result<NewAppliance, MgmtError> {
    let i = Input(m);
    let name = i.req_str("name")?;
    let site_id = i.req_int("siteId")?;
    let is_upgradable = i.opt_bool("isUpgradable")?.unwrap_or(false);
    let empty = Map::new();
    let s = Input(sub_object(m, "state", STATE_MEMBERS)?.unwrap_or(&empty));
    let state = (|| {
        Ok(ApplianceState {
            connected_to_connector: s.opt_str("connectedToConnector")?,
            has_local_domain_configured: s.opt_str("hasLocalDomainConfigured")?,
            query_failure_rate_acceptable: s.opt_str("queryFailureRateAcceptable")?,
            received_internal_dns_queries: s.opt_str("receivedInternalDNSQueries")?,
            redundant_within_site: s.opt_str("redundantWithinSite")?,
            syncing: s.opt_str("syncing")?,
        })
    })()
    .map_err(|e| within("state", e))?;
    let health = i.opt_str("health")?.unwrap_or_else(|| "okay".into());
    let kind = i
        .opt_str("type")?
        .unwrap_or_else(|| "virtual_appliance".into());
    let t = Input(sub_object(m, "settings", SETTINGS_MEMBERS)?.unwrap_or(&empty));
    let settings = (|| {
        let internal_ips = t.opt_strings("internalIPs")?;
        if internal_ips
            .iter()
            .any(|a| a.parse::<std::net::Ipv4Addr>().is_err())
        {
            return Err(MgmtError::BadRequest(
                "internalIPs must be an array of IPv4 addresses".into(),
            ));
        }
        Ok(ApplianceSettings {
            internal_ips,
            external_ip: t.opt_ipv4("externalIP")?,
            host_type: t.opt_str("hostType")?,
            uptime: t.opt_int_in("uptime", 0..=i64::MAX)?,
            is_dnscrypt_enabled: t.opt_bool("isDnscryptEnabled")?,
            version: t.opt_str("version")?,
            upgrade_error: t.opt_str("upgradeError")?,
            domains: t.opt_strings("domains")?,
            last_sync_time: t.opt_time("lastSyncTime")?.map(rfc3339),
        })
    })()
    .map_err(|e| within("settings", e))?;
    Ok(NewAppliance {
        name,
        site_id,
        is_upgradable,
        state,
        health,
        kind,
        settings,
    })
}
