//! Registration of an organization's devices by operators: networks, roaming computers and
//! virtual appliances. In the cloud the devices register themselves; the management interface
//! has no create endpoint for them. Input is validated by the management interface's own code
//! and each command prints the record as the interface returns it.

use argh::{ArgsInfo, FromArgs};
use serde_json::{json, Map, Value};

use super::org_resources::{delete_item, OrgItem, OrgItems};
use super::tenants::to_flag_message;
use super::{all_pages, no, no_flag, printed, require_org, store_err, with_store};
use crate::error::MgmtError;
use crate::management::appliances::{appliance_input, STATE_MEMBERS};
use crate::management::networks::network_input;
use crate::management::roaming::roaming_input;
use crate::timefmt::now;

/// Networks (egress addresses) of an organization.
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "network")]
pub struct NetworkCmd {
    #[argh(subcommand)]
    pub action: NetworkAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum NetworkAction {
    Register(NetworkRegister),
    List(OrgItems),
    Delete(OrgItem),
}

store_command! {
    /// Register a network; prints its record (originId is the networkId).
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "register")]
    pub struct NetworkRegister {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// network name
        #[argh(option)]
        pub name: String,
        /// the network's IPv4 address
        #[argh(option)]
        pub ip_address: String,
        /// prefix length, 29 to 32 (default 32)
        #[argh(option, default = "32")]
        pub prefix_length: i64,
        /// status: OPEN or CLOSED (default OPEN)
        #[argh(option, default = "String::from(\"OPEN\")")]
        pub status: String,
        /// the address is dynamic
        #[argh(switch)]
        pub dynamic: bool,
        /// the network is verified
        #[argh(switch)]
        pub verified: bool,
    }
}

/// Roaming computers of an organization.
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "roaming")]
pub struct RoamingCmd {
    #[argh(subcommand)]
    pub action: RoamingAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum RoamingAction {
    Register(RoamingRegister),
    List(OrgItems),
    Delete(RoamingDelete),
}

store_command! {
    /// Delete a roaming computer; prints it as it was.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "delete")]
    pub struct RoamingDelete {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// the computer's device id
        #[argh(option)]
        pub device_id: String,
    }
}

store_command! {
    /// Register a roaming computer; prints its record.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "register")]
    pub struct RoamingRegister {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// computer name
        #[argh(option)]
        pub name: String,
        /// device id, 8 to 64 hex digits (default: 16 random ones)
        #[argh(option)]
        pub device_id: Option<String>,
        /// roaming or anyconnect (default roaming)
        #[argh(option, default = "String::from(\"roaming\")")]
        pub r#type: String,
        /// status: Off, Open, Transparent, Encrypted, VA, Network, Disabled or Uninstalled (default Off)
        #[argh(option, default = "String::from(\"Off\")")]
        pub status: String,
        /// status of the last sync (free text, e.g. success)
        #[argh(option)]
        pub last_sync_status: Option<String>,
        /// time of the last sync, RFC 3339 (default: never synced)
        #[argh(option)]
        pub last_sync: Option<String>,
        /// applied policy id
        #[argh(option)]
        pub applied_bundle: Option<i64>,
        /// IP-layer enforcement is on
        #[argh(switch)]
        pub ip_blocking: bool,
        /// client version
        #[argh(option)]
        pub version: Option<String>,
        /// operating system version
        #[argh(option)]
        pub os_version: Option<String>,
        /// operating system name
        #[argh(option)]
        pub os_version_name: Option<String>,
    }
}

/// Virtual appliances of an organization.
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "va")]
pub struct VaCmd {
    #[argh(subcommand)]
    pub action: VaAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum VaAction {
    Register(VaRegister),
    List(OrgItems),
    Delete(OrgItem),
}

store_command! {
    /// Register a virtual appliance on a site; prints its record (originId is the
    /// virtualApplianceId).
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "register")]
    pub struct VaRegister {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// appliance name
        #[argh(option)]
        pub name: String,
        /// site id (default: the organization's default site)
        #[argh(option)]
        pub site_id: Option<i64>,
        /// an upgrade to the latest appliance version is available
        #[argh(switch)]
        pub upgradable: bool,
        /// type (default virtual_appliance)
        #[argh(option, default = "String::from(\"virtual_appliance\")")]
        pub r#type: String,
        /// health (default okay)
        #[argh(option, default = "String::from(\"okay\")")]
        pub health: String,
        /// a state member as NAME=VALUE (repeatable); members not given are "yes"
        #[argh(option)]
        pub state: Vec<String>,
        /// internal IPv4 address (repeatable)
        #[argh(option)]
        pub internal_ip: Vec<String>,
        /// external IPv4 address
        #[argh(option)]
        pub external_ip: Option<String>,
        /// host type, e.g. VMware or Hyper-V
        #[argh(option)]
        pub host_type: Option<String>,
        /// uptime in seconds
        #[argh(option)]
        pub uptime: Option<i64>,
        /// dnscrypt is enabled
        #[argh(switch)]
        pub dnscrypt: bool,
        /// appliance version
        #[argh(option)]
        pub version: Option<String>,
        /// error of the last upgrade
        #[argh(option)]
        pub upgrade_error: Option<String>,
        /// local domain (repeatable)
        #[argh(option)]
        pub domain: Vec<String>,
        /// time of the last sync, RFC 3339 (default: now)
        #[argh(option)]
        pub last_sync_time: Option<String>,
    }
}

/// Turns an API validation message into the flag's spelling (`prefixLength must ...` becomes
/// `--prefix-length must ...`); the table holds the fields whose flag is not their kebab-case
/// name, the rest go through `to_flag_message`.
fn flag_message(e: MgmtError) -> String {
    const RENAMED: &[(&str, &str)] = &[
        ("settings.internalIPs", "--internal-ip"),
        ("settings.externalIP", "--external-ip"),
        ("settings.domains", "--domain"),
        ("settings.hostType", "--host-type"),
        ("settings.uptime", "--uptime"),
        ("settings.version", "--version"),
        ("settings.upgradeError", "--upgrade-error"),
        ("settings.lastSyncTime", "--last-sync-time"),
    ];
    let m = match e {
        MgmtError::BadRequest(m) => m,
        other => return format!("{other:?}"),
    };
    let (field, rest) = m.split_once(' ').unwrap_or((&m, ""));
    match RENAMED.iter().find(|(f, _)| *f == field) {
        Some((_, flag)) => format!("{flag} {rest}"),
        None => match field.strip_prefix("state.") {
            Some(member) => format!("--state {member}: {rest}"),
            None => to_flag_message(&m),
        },
    }
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

pub fn network(cmd: NetworkCmd) -> Result<Value, String> {
    let a = match cmd.action {
        NetworkAction::Register(a) => a,
        NetworkAction::List(a) => {
            return with_store(&a.data_dir, a.database.as_deref(), async |store| {
                require_org(store, a.org).await?;
                printed(all_pages(|limit, offset| store.list_networks(a.org, limit, offset)).await?)
            })
        }
        NetworkAction::Delete(a) => {
            return delete_item(a, "network", async |store, org, id| {
                store.delete_network(org, id).await
            })
        }
    };
    let input = object(json!({
        "name": a.name,
        "ipAddress": a.ip_address,
        "prefixLength": a.prefix_length,
        "isDynamic": a.dynamic,
        "isVerified": a.verified,
        "status": a.status,
    }));
    let n = network_input(&input).map_err(flag_message)?;
    with_store(&a.data_dir, a.database.as_deref(), async |store| {
        let rec = store
            .register_network(a.org, n, now())
            .await
            .map_err(store_err(no("organization", a.org)))?;
        serde_json::to_value(rec).map_err(|e| e.to_string())
    })
}

pub fn roaming(cmd: RoamingCmd) -> Result<Value, String> {
    let a = match cmd.action {
        RoamingAction::Register(a) => a,
        RoamingAction::List(a) => {
            return with_store(&a.data_dir, a.database.as_deref(), async |store| {
                require_org(store, a.org).await?;
                printed(
                    all_pages(|limit, offset| {
                        store.list_roaming_computers(a.org, Default::default(), limit, offset)
                    })
                    .await?,
                )
            })
        }
        RoamingAction::Delete(a) => {
            return with_store(&a.data_dir, a.database.as_deref(), async |store| {
                require_org(store, a.org).await?;
                let rec = store
                    .delete_roaming_computer(a.org, a.device_id.clone())
                    .await
                    .map_err(store_err(no("roaming computer", &a.device_id)))?;
                printed(rec)
            })
        }
    };
    let device_id = a
        .device_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string()[..16].to_string());
    let input = object(json!({
        "name": a.name,
        "deviceId": device_id,
        "type": a.r#type,
        "status": a.status,
        "lastSyncStatus": a.last_sync_status,
        "lastSync": a.last_sync,
        "appliedBundle": a.applied_bundle,
        "hasIpBlocking": a.ip_blocking,
        "version": a.version,
        "osVersion": a.os_version,
        "osVersionName": a.os_version_name,
    }));
    let r = roaming_input(&input).map_err(flag_message)?;
    let taken = format!(
        "--device-id {}: organization {} already has that device",
        r.device_id, a.org
    );
    with_store(&a.data_dir, a.database.as_deref(), async |store| {
        let rec = store
            .register_roaming_computer(a.org, r)
            .await
            .map_err(|e| match e {
                crate::store::StoreError::Conflict(_) => taken,
                e => store_err(no("organization", a.org))(e),
            })?;
        serde_json::to_value(rec).map_err(|e| e.to_string())
    })
}

pub fn va(cmd: VaCmd) -> Result<Value, String> {
    let a = match cmd.action {
        VaAction::Register(a) => a,
        VaAction::List(a) => {
            return with_store(&a.data_dir, a.database.as_deref(), async |store| {
                require_org(store, a.org).await?;
                printed(
                    all_pages(|limit, offset| store.list_appliances(a.org, limit, offset)).await?,
                )
            })
        }
        VaAction::Delete(a) => {
            return delete_item(a, "virtual appliance", async |store, org, id| {
                store.delete_appliance(org, id).await
            })
        }
    };
    let mut state: Map<String, Value> = STATE_MEMBERS
        .iter()
        .map(|k| (k.to_string(), json!("yes")))
        .collect();
    for s in &a.state {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("--state {s:?}: expected NAME=VALUE"))?;
        // Unknown names are refused by the validation below.
        state.insert(k.trim().to_string(), json!(v.trim()));
    }
    let last_sync = a
        .last_sync_time
        .clone()
        .unwrap_or_else(|| crate::timefmt::rfc3339(now()));
    with_store(&a.data_dir, a.database.as_deref(), async |store| {
        let site = match a.site_id {
            Some(s) => s,
            None => store
                .default_site(a.org)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| no("organization", a.org))?,
        };
        // The site is named before bad fields after it in the spec's table, as the interface
        // does (the store checks it again with the write).
        if store
            .get_site(a.org, site)
            .await
            .map_err(|e| e.to_string())?
            .is_none()
        {
            return Err(no_flag("--site-id", "site", site) + &format!(" in organization {}", a.org));
        }
        let input = object(json!({
            "name": a.name,
            "siteId": site,
            "isUpgradable": a.upgradable,
            "type": a.r#type,
            "health": a.health,
            "state": state,
            "settings": {
                "internalIPs": a.internal_ip,
                "externalIP": a.external_ip,
                "hostType": a.host_type,
                "uptime": a.uptime,
                "isDnscryptEnabled": a.dnscrypt,
                "version": a.version,
                "upgradeError": a.upgrade_error,
                "domains": a.domain,
                "lastSyncTime": last_sync,
            },
        }));
        let n = appliance_input(&input).map_err(flag_message)?;
        let rec = store
            .register_appliance(a.org, n, now())
            .await
            .map_err(store_err(no("organization", a.org)))?;
        serde_json::to_value(rec).map_err(|e| e.to_string())
    })
}
