//! The statements of devices on SQLite (their rules: `rules::devices`).

use rusqlite::{params, Connection, Row, ToSql};

use super::tenants::new_origin;
use crate::store::model::*;
use crate::store::rules::devices::Devices;
use crate::store::rules::devices::{appliance_json, Page, Roamer};
use crate::store::rules::{One, Rows};
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

/// Deletes the row of `table` whose `key` is `id`.
fn remove(conn: &Connection, table: &str, key: &str, org: i64, id: &dyn ToSql) -> Result<()> {
    let sql = format!("DELETE FROM {table} WHERE organization_id = ?1 AND {key} = ?2");
    conn.execute(&sql, params![org, id])?;
    Ok(())
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

impl Devices for Connection {
    async fn networks(&self, org: i64, limit: i64, offset: i64) -> Result<Vec<NetworkRecord>> {
        page_of(self, NETWORK_SELECT, org, limit, offset, network)
    }

    async fn network(&self, org: i64, id: i64) -> Result<Option<NetworkRecord>> {
        one_of(self, NETWORK_SELECT, "origin_id", org, &id, network)
    }

    async fn insert_network(&self, org: i64, n: &NewNetwork, now: i64) -> Result<i64> {
        let id = new_origin(self, "network")?;
        self.execute(
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
        Ok(id)
    }

    async fn delete_network_row(&self, org: i64, id: i64) -> Result<()> {
        remove(self, "networks", "origin_id", org, &id)
    }

    async fn roamers(&self, org: i64, filter: &RoamingFilter, page: Page) -> Rows<Roamer> {
        let sql = format!(
            "{ROAMING_SELECT} AND (?2 IS NULL OR status = ?2)
                AND (?3 IS NULL OR last_sync < ?3) AND (?4 IS NULL OR last_sync > ?4)
             ORDER BY origin_id LIMIT ?5 OFFSET ?6"
        );
        let (limit, offset) = page.unwrap_or((-1, 0));
        let mut stmt = self.prepare_cached(&sql)?;
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
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn roamer(&self, org: i64, device: &str) -> One<Roamer> {
        one_of(self, ROAMING_SELECT, "device_id", org, &device, roaming)
    }

    async fn insert_roamer(&self, org: i64, c: &NewRoamingComputer) -> Result<bool> {
        let origin = new_origin(self, "roaming_computer")?;
        self.execute(
            "INSERT INTO roaming_computers (device_id, organization_id, origin_id, name, type,
                    status, last_sync_status, last_sync, applied_bundle, has_ip_blocking, version,
                    os_version, os_version_name)
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
        Ok(true)
    }

    async fn rename_roamer(&self, org: i64, device: &str, name: &str) -> Result<()> {
        self.execute(
            "UPDATE roaming_computers SET name = ?3 WHERE organization_id = ?1 AND device_id = ?2",
            params![org, device, name],
        )?;
        Ok(())
    }

    async fn delete_roamer(&self, org: i64, device: &str) -> Result<()> {
        remove(self, "roaming_computers", "device_id", org, &device)
    }

    async fn appliances(&self, org: i64, limit: i64, offset: i64) -> Rows<ApplianceRecord> {
        page_of(self, APPLIANCE_SELECT, org, limit, offset, appliance)
    }

    async fn appliance(&self, org: i64, id: i64) -> Result<Option<ApplianceRecord>> {
        one_of(self, APPLIANCE_SELECT, "origin_id", org, &id, appliance)
    }

    async fn insert_appliance(&self, org: i64, a: &NewAppliance, now: i64) -> Result<i64> {
        let id = new_origin(self, "virtual_appliance")?;
        let (state, settings) = appliance_json(a);
        self.execute(
            "INSERT INTO virtual_appliances (origin_id, organization_id, name, site_id,
                    is_upgradable, state, health, type, settings, created_at, modified_at,
                    state_updated_at)
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
        Ok(id)
    }

    async fn move_appliance_row(&self, org: i64, id: i64, site: i64, now: i64) -> Result<()> {
        self.execute(
            "UPDATE virtual_appliances SET site_id = ?3, modified_at = ?4
             WHERE organization_id = ?1 AND origin_id = ?2",
            params![org, id, site, now],
        )?;
        Ok(())
    }

    async fn delete_appliance_row(&self, org: i64, id: i64) -> Result<()> {
        remove(self, "virtual_appliances", "origin_id", org, &id)
    }
}
