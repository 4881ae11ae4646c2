//! Devices of an organization that register themselves with the cloud: networks (egress IP
//! ranges), roaming computers and virtual appliances. The management interface lists, reads,
//! renames or moves and deletes them; operators register them through the command line and
//! `--demo` fills them in.

use rusqlite::{params, Connection, Row, ToSql};

use super::tenants::new_origin;
use crate::store::model::*;
use crate::store::Result;
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
    get_network(conn, org, id)?
        .ok_or_else(|| crate::store::StoreError::Internal("network vanished".into()))
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
        .ok_or_else(|| crate::store::StoreError::Internal("virtual appliance vanished".into()))
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
