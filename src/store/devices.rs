//! Devices of an organization that register themselves with the cloud: networks (egress IP
//! ranges), roaming computers and virtual appliances. The management interface lists, reads,
//! renames or moves and deletes them; operators register them through the command line and
//! `--demo` fills them in.

use rusqlite::{params, Connection, Row, ToSql};
use serde::{Deserialize, Serialize};

use super::tenants::new_origin;
use super::Result;
use crate::timefmt::rfc3339;

/// One page of `select` (a SELECT ending in `WHERE organization_id = ?1`), ordered by originId.
fn page_of<T>(
    conn: &Connection,
    select: &str,
    org: i64,
    limit: i64,
    offset: i64,
    map: fn(&Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>> {
    let sql = format!("{select} ORDER BY origin_id LIMIT ?2 OFFSET ?3");
    super::owned_page(conn, &sql, org, limit, offset, map)
}

/// The row of `select` whose `key` column is `id`.
fn one_of<T>(
    conn: &Connection,
    select: &str,
    key: &str,
    org: i64,
    id: &dyn ToSql,
    map: fn(&Row<'_>) -> rusqlite::Result<T>,
) -> Result<Option<T>> {
    let sql = format!("{select} AND {key} = ?2");
    super::owned_row(conn, &sql, org, id, map)
}

/// Deletes the row of `table` whose `key` is `id` when `rec` (read just before) says it exists,
/// and hands `rec` back: a delete answers with the record as it was.
fn remove<T>(
    conn: &Connection,
    rec: Option<T>,
    table: &str,
    key: &str,
    org: i64,
    id: &dyn ToSql,
) -> Result<Option<T>> {
    if rec.is_some() {
        let sql = format!("DELETE FROM {table} WHERE organization_id = ?1 AND {key} = ?2");
        conn.execute(&sql, params![org, id])?;
    }
    Ok(rec)
}

// ------------------------------------------------------------------ networks

/// A network as registered (input of [`insert_network`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NewNetwork {
    pub name: String,
    pub ip_address: String,
    pub prefix_length: i64,
    pub is_dynamic: bool,
    pub is_verified: bool,
    pub status: String,
}

/// The Network record, exactly the spec's fields. `originId` is also the `networkId`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRecord {
    pub origin_id: i64,
    pub name: String,
    pub ip_address: String,
    pub prefix_length: i64,
    pub is_dynamic: bool,
    pub is_verified: bool,
    pub status: String,
    pub created_at: String,
}

const NETWORK_SELECT: &str = "SELECT origin_id, name, ip_address, prefix_length, is_dynamic,
        is_verified, status, created_at
    FROM networks WHERE organization_id = ?1";

fn network(r: &Row<'_>) -> rusqlite::Result<NetworkRecord> {
    Ok(NetworkRecord {
        origin_id: r.get(0)?,
        name: r.get(1)?,
        ip_address: r.get(2)?,
        prefix_length: r.get(3)?,
        is_dynamic: r.get(4)?,
        is_verified: r.get(5)?,
        status: r.get(6)?,
        created_at: rfc3339(r.get(7)?),
    })
}

/// Registers a network; returns its record.
pub fn insert_network(
    conn: &Connection,
    org: i64,
    n: &NewNetwork,
    now: i64,
) -> Result<NetworkRecord> {
    let id = new_origin(conn, "network")?;
    conn.execute(
        "INSERT INTO networks (origin_id, organization_id, name, ip_address, prefix_length,
                is_dynamic, is_verified, status, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            id,
            org,
            n.name,
            n.ip_address,
            n.prefix_length,
            n.is_dynamic,
            n.is_verified,
            n.status,
            now
        ],
    )?;
    get_network(conn, org, id)?.ok_or_else(|| super::StoreError::Aborted("network vanished".into()))
}

/// One page of the organization's networks, ordered by id.
pub fn list_networks(
    conn: &Connection,
    org: i64,
    limit: i64,
    offset: i64,
) -> Result<Vec<NetworkRecord>> {
    page_of(conn, NETWORK_SELECT, org, limit, offset, network)
}

/// One network of the organization.
pub fn get_network(conn: &Connection, org: i64, id: i64) -> Result<Option<NetworkRecord>> {
    one_of(conn, NETWORK_SELECT, "origin_id", org, &id, network)
}

/// Deletes a network; returns its record as it was.
pub fn delete_network(conn: &Connection, org: i64, id: i64) -> Result<Option<NetworkRecord>> {
    let rec = get_network(conn, org, id)?;
    remove(conn, rec, "networks", "origin_id", org, &id)
}

// ------------------------------------------------------------------ roaming computers

/// A roaming computer as registered. `device_id` is lower-case hex; `last_sync` epoch seconds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewRoamingComputer {
    pub device_id: String,
    pub name: String,
    pub kind: String,
    pub status: String,
    pub last_sync_status: Option<String>,
    pub last_sync: Option<i64>,
    pub applied_bundle: Option<i64>,
    pub has_ip_blocking: bool,
    pub version: Option<String>,
    pub os_version: Option<String>,
    pub os_version_name: Option<String>,
}

/// The RoamingComputer record, exactly the spec's fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoamingComputerRecord {
    pub origin_id: i64,
    pub name: String,
    pub device_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    pub last_sync_status: Option<String>,
    pub last_sync: Option<String>,
    pub applied_bundle: Option<i64>,
    pub has_ip_blocking: bool,
    pub version: Option<String>,
    pub os_version: Option<String>,
    pub os_version_name: Option<String>,
}

/// Filters of the roaming-computer list. Times are epoch seconds; the comparisons are strict and
/// a computer that never synced matches neither time filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoamingFilter {
    /// Case-insensitive substring of the name.
    pub name: Option<String>,
    /// Exact status.
    pub status: Option<String>,
    /// `lastSync < before`.
    pub before: Option<i64>,
    /// `lastSync > after`.
    pub after: Option<i64>,
}

const ROAMING_SELECT: &str = "SELECT origin_id, name, device_id, type, status, last_sync_status,
        last_sync, applied_bundle, has_ip_blocking, version, os_version, os_version_name
    FROM roaming_computers WHERE organization_id = ?1";

fn roaming(r: &Row<'_>) -> rusqlite::Result<RoamingComputerRecord> {
    Ok(RoamingComputerRecord {
        origin_id: r.get(0)?,
        name: r.get(1)?,
        device_id: r.get(2)?,
        kind: r.get(3)?,
        status: r.get(4)?,
        last_sync_status: r.get(5)?,
        last_sync: r.get::<_, Option<i64>>(6)?.map(rfc3339),
        applied_bundle: r.get(7)?,
        has_ip_blocking: r.get(8)?,
        version: r.get(9)?,
        os_version: r.get(10)?,
        os_version_name: r.get(11)?,
    })
}

/// Registers a roaming computer; `None` if the organization already has that device id.
pub fn insert_roaming_computer(
    conn: &Connection,
    org: i64,
    c: &NewRoamingComputer,
) -> Result<Option<RoamingComputerRecord>> {
    if get_roaming_computer(conn, org, &c.device_id)?.is_some() {
        return Ok(None);
    }
    let origin = new_origin(conn, "roaming_computer")?;
    conn.execute(
        "INSERT INTO roaming_computers (device_id, organization_id, origin_id, name, type, status,
                last_sync_status, last_sync, applied_bundle, has_ip_blocking, version, os_version,
                os_version_name)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![
            c.device_id,
            org,
            origin,
            c.name,
            c.kind,
            c.status,
            c.last_sync_status,
            c.last_sync,
            c.applied_bundle,
            c.has_ip_blocking,
            c.version,
            c.os_version,
            c.os_version_name
        ],
    )?;
    get_roaming_computer(conn, org, &c.device_id)
}

/// One page of the organization's roaming computers that pass `filter`, ordered by originId
/// (registration order).
pub fn list_roaming_computers(
    conn: &Connection,
    org: i64,
    filter: &RoamingFilter,
    limit: i64,
    offset: i64,
) -> Result<Vec<RoamingComputerRecord>> {
    let sql = format!(
        "{ROAMING_SELECT} AND (?2 IS NULL OR status = ?2)
            AND (?3 IS NULL OR last_sync < ?3) AND (?4 IS NULL OR last_sync > ?4)
         ORDER BY origin_id LIMIT ?5 OFFSET ?6"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    // The name filter folds case beyond ASCII (SQLite's LIKE and lower() do not), so it runs here
    // and paging follows it.
    let Some(needle) = filter.name.as_deref().map(str::to_lowercase) else {
        let rows = stmt.query_map(
            params![
                org,
                filter.status,
                filter.before,
                filter.after,
                limit,
                offset
            ],
            roaming,
        )?;
        return Ok(rows.collect::<rusqlite::Result<_>>()?);
    };
    let rows = stmt.query_map(
        params![org, filter.status, filter.before, filter.after, -1, 0],
        roaming,
    )?;
    let mut out = Vec::new();
    let mut skip = offset;
    for r in rows {
        let r = r?;
        if !r.name.to_lowercase().contains(&needle) {
            continue;
        }
        if skip > 0 {
            skip -= 1;
            continue;
        }
        out.push(r);
        if out.len() as i64 >= limit {
            break;
        }
    }
    Ok(out)
}

/// One roaming computer of the organization by device id (hex, any case).
pub fn get_roaming_computer(
    conn: &Connection,
    org: i64,
    device: &str,
) -> Result<Option<RoamingComputerRecord>> {
    let device = device.to_ascii_lowercase();
    one_of(conn, ROAMING_SELECT, "device_id", org, &device, roaming)
}

/// Renames a roaming computer; `None` if there is no such computer.
pub fn rename_roaming_computer(
    conn: &Connection,
    org: i64,
    device: &str,
    name: &str,
) -> Result<Option<RoamingComputerRecord>> {
    conn.execute(
        "UPDATE roaming_computers SET name = ?3 WHERE organization_id = ?1 AND device_id = ?2",
        params![org, device.to_ascii_lowercase(), name],
    )?;
    get_roaming_computer(conn, org, device)
}

/// Deletes a roaming computer; returns its record as it was.
pub fn delete_roaming_computer(
    conn: &Connection,
    org: i64,
    device: &str,
) -> Result<Option<RoamingComputerRecord>> {
    let rec = get_roaming_computer(conn, org, device)?;
    let device = device.to_ascii_lowercase();
    remove(conn, rec, "roaming_computers", "device_id", org, &device)
}

// ------------------------------------------------------------------ virtual appliances

/// A virtual appliance's `state`: exactly the spec's members, all strings (null when unknown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApplianceState {
    pub connected_to_connector: Option<String>,
    pub has_local_domain_configured: Option<String>,
    pub query_failure_rate_acceptable: Option<String>,
    #[serde(rename = "receivedInternalDNSQueries")]
    pub received_internal_dns_queries: Option<String>,
    pub redundant_within_site: Option<String>,
    pub syncing: Option<String>,
}

/// A virtual appliance's `settings`: exactly the spec's members. Arrays are `[]` when empty,
/// other members null when unknown; `lastSyncTime` is already in the output time form.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApplianceSettings {
    #[serde(rename = "internalIPs")]
    pub internal_ips: Vec<String>,
    #[serde(rename = "externalIP")]
    pub external_ip: Option<String>,
    pub host_type: Option<String>,
    pub uptime: Option<i64>,
    pub is_dnscrypt_enabled: Option<bool>,
    pub version: Option<String>,
    pub upgrade_error: Option<String>,
    pub domains: Vec<String>,
    pub last_sync_time: Option<String>,
}

/// A virtual appliance as registered.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAppliance {
    pub name: String,
    pub site_id: i64,
    pub is_upgradable: bool,
    pub state: ApplianceState,
    pub health: String,
    pub kind: String,
    pub settings: ApplianceSettings,
}

/// The VirtualAppliance record, exactly the spec's fields. `originId` is also the
/// `virtualApplianceId`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplianceRecord {
    pub origin_id: i64,
    pub name: String,
    pub site_id: i64,
    pub is_upgradable: bool,
    pub state: ApplianceState,
    pub health: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub settings: ApplianceSettings,
    pub created_at: String,
    pub modified_at: String,
    pub state_updated_at: String,
}

const APPLIANCE_SELECT: &str = "SELECT origin_id, name, site_id, is_upgradable, state, health,
        type, settings, created_at, modified_at, state_updated_at
    FROM virtual_appliances WHERE organization_id = ?1";

fn appliance(r: &Row<'_>) -> rusqlite::Result<ApplianceRecord> {
    // The JSON columns are written only by `insert_appliance`; an unreadable one reads as empty
    // rather than failing the whole list.
    Ok(ApplianceRecord {
        origin_id: r.get(0)?,
        name: r.get(1)?,
        site_id: r.get(2)?,
        is_upgradable: r.get(3)?,
        state: serde_json::from_str(&r.get::<_, String>(4)?).unwrap_or_default(),
        health: r.get(5)?,
        kind: r.get(6)?,
        settings: serde_json::from_str(&r.get::<_, String>(7)?).unwrap_or_default(),
        created_at: rfc3339(r.get(8)?),
        modified_at: rfc3339(r.get(9)?),
        state_updated_at: rfc3339(r.get(10)?),
    })
}

/// Registers a virtual appliance (its site must belong to the organization; the caller checks).
pub fn insert_appliance(
    conn: &Connection,
    org: i64,
    a: &NewAppliance,
    now: i64,
) -> Result<ApplianceRecord> {
    let id = new_origin(conn, "virtual_appliance")?;
    let state = serde_json::to_string(&a.state).unwrap_or_else(|_| "{}".into());
    let settings = serde_json::to_string(&a.settings).unwrap_or_else(|_| "{}".into());
    conn.execute(
        "INSERT INTO virtual_appliances (origin_id, organization_id, name, site_id, is_upgradable,
                state, health, type, settings, created_at, modified_at, state_updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?10)",
        params![
            id,
            org,
            a.name,
            a.site_id,
            a.is_upgradable,
            state,
            a.health,
            a.kind,
            settings,
            now
        ],
    )?;
    get_appliance(conn, org, id)?
        .ok_or_else(|| super::StoreError::Aborted("virtual appliance vanished".into()))
}

/// One page of the organization's virtual appliances, ordered by id.
pub fn list_appliances(
    conn: &Connection,
    org: i64,
    limit: i64,
    offset: i64,
) -> Result<Vec<ApplianceRecord>> {
    page_of(conn, APPLIANCE_SELECT, org, limit, offset, appliance)
}

/// One virtual appliance of the organization.
pub fn get_appliance(conn: &Connection, org: i64, id: i64) -> Result<Option<ApplianceRecord>> {
    one_of(conn, APPLIANCE_SELECT, "origin_id", org, &id, appliance)
}

/// Moves a virtual appliance to `site` (already checked to belong to the organization) and
/// stamps `modifiedAt`; `None` if there is no such appliance.
pub fn move_appliance(
    conn: &Connection,
    org: i64,
    id: i64,
    site: i64,
    now: i64,
) -> Result<Option<ApplianceRecord>> {
    conn.execute(
        "UPDATE virtual_appliances SET site_id = ?3, modified_at = ?4
         WHERE organization_id = ?1 AND origin_id = ?2",
        params![org, id, site, now],
    )?;
    get_appliance(conn, org, id)
}

/// Deletes a virtual appliance; returns its record as it was.
pub fn delete_appliance(conn: &Connection, org: i64, id: i64) -> Result<Option<ApplianceRecord>> {
    let rec = get_appliance(conn, org, id)?;
    remove(conn, rec, "virtual_appliances", "origin_id", org, &id)
}

// ------------------------------------------------------------------ demo data

/// Fills demo organization number `n` (0 or 1) with networks (prefix lengths 29..32, OPEN and
/// CLOSED), roaming computers (varied status and type, all but one synced) and a virtual
/// appliance on each of its two sites. Addresses come from the documentation ranges.
pub fn fill_devices(
    conn: &Connection,
    org: i64,
    default_site: i64,
    second_site: i64,
    n: usize,
    now: i64,
) -> Result<()> {
    let (tag, net, domain) = if n == 0 {
        ("CAM", "203.0.113", "acme-labs.local")
    } else {
        ("GLX", "198.51.100", "globex.corp")
    };
    let networks = [
        ("Headquarters", format!("{net}.8"), 29, false, true, "OPEN"),
        ("Lab egress", format!("{net}.32"), 30, true, true, "OPEN"),
        (
            "Old DSL line",
            format!("{net}.77"),
            32,
            false,
            false,
            "CLOSED",
        ),
    ];
    for (i, (name, ip, prefix, dynamic, verified, status)) in networks.into_iter().enumerate() {
        let n = NewNetwork {
            name: name.into(),
            ip_address: ip,
            prefix_length: prefix,
            is_dynamic: dynamic,
            is_verified: verified,
            status: status.into(),
        };
        insert_network(conn, org, &n, now - 86_400 * (90 - 10 * i as i64))?;
    }
    let computers = [
        (
            "alice-macbook",
            "roaming",
            "Encrypted",
            Some(300),
            "macOS 14.4.1",
            "Sonoma",
        ),
        (
            "bob-thinkpad",
            "roaming",
            "Open",
            Some(5 * 3600),
            "10.0.22631",
            "Windows 11",
        ),
        (
            "carol-surface",
            "anyconnect",
            "VA",
            Some(3 * 86_400),
            "10.0.19045",
            "Windows 10",
        ),
        (
            "kiosk-lobby",
            "roaming",
            "Off",
            Some(21 * 86_400),
            "10.0.22631",
            "Windows 11",
        ),
        (
            "new-hire-laptop",
            "roaming",
            "Uninstalled",
            None,
            "macOS 15.1",
            "Sequoia",
        ),
    ];
    for (i, (name, kind, status, ago, os, os_name)) in computers.into_iter().enumerate() {
        let c = NewRoamingComputer {
            device_id: format!("01{org:06x}{:08x}", 0x5eed_0000 + i),
            name: name.into(),
            kind: kind.into(),
            status: status.into(),
            last_sync_status: ago.map(|_| "success".to_string()),
            last_sync: ago.map(|a| now - a),
            applied_bundle: Some(10_000 + n as i64 * 100 + i as i64 % 2),
            has_ip_blocking: kind == "anyconnect",
            version: Some(
                if kind == "anyconnect" {
                    "5.1.2.42"
                } else {
                    "3.0.345"
                }
                .into(),
            ),
            os_version: Some(os.into()),
            os_version_name: Some(os_name.into()),
        };
        insert_roaming_computer(conn, org, &c)?;
    }
    for (i, site) in [default_site, second_site].into_iter().enumerate() {
        let a = NewAppliance {
            name: format!("VA-{tag}-{:02}", i + 1),
            site_id: site,
            is_upgradable: i == 1,
            state: ApplianceState {
                connected_to_connector: Some("yes".into()),
                has_local_domain_configured: Some("yes".into()),
                query_failure_rate_acceptable: Some("yes".into()),
                received_internal_dns_queries: Some("yes".into()),
                redundant_within_site: Some("never".into()),
                syncing: Some("yes".into()),
            },
            health: "okay".into(),
            kind: "virtual_appliance".into(),
            settings: ApplianceSettings {
                internal_ips: vec![
                    format!("10.{n}.{}.10", i + 1),
                    format!("10.{n}.{}.11", i + 1),
                ],
                external_ip: Some(format!("{net}.{}", 9 + i)),
                host_type: Some(if i == 0 { "VMware" } else { "Hyper-V" }.into()),
                uptime: Some(86_400 * (12 + i as i64)),
                is_dnscrypt_enabled: Some(true),
                version: Some(if i == 0 { "3.4.6" } else { "3.3.2" }.into()),
                upgrade_error: None,
                domains: vec![domain.into()],
                last_sync_time: Some(rfc3339(now - 60)),
            },
        };
        insert_appliance(conn, org, &a, now - 86_400 * 30)?;
    }
    Ok(())
}
