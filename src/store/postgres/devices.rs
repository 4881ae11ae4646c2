//! The statements of devices on PostgreSQL (their rules: `rules::devices`).

use tokio_postgres::Row;

use super::{Db, Param};
use crate::store::model::*;
use crate::store::rules::devices::Devices;
use crate::store::rules::devices::{appliance_json, Page, Roamer};
use crate::store::rules::{One, Rows};
use crate::store::Result;
use crate::timefmt::rfc3339;

/// One page of `select` (a SELECT ending in `WHERE organization_id = $1`), ordered by originId.
async fn page_of<T>(
    db: &Db,
    select: &str,
    org: i64,
    limit: i64,
    offset: i64,
    map: fn(&Row) -> T,
) -> Result<Vec<T>> {
    let sql = format!("{select} ORDER BY origin_id LIMIT $2 OFFSET $3");
    db.owned_page(&sql, org, limit, offset, map).await
}

/// The row of `select` whose `key` column is `id`.
async fn one_of<T>(
    db: &Db,
    select: &str,
    key: &str,
    org: i64,
    id: Param<'_>,
    map: fn(&Row) -> T,
) -> Result<Option<T>> {
    let sql = format!("{select} AND {key} = $2");
    db.owned_row(&sql, org, id, map).await
}

/// Deletes the row of `table` whose `key` is `id`.
async fn remove(db: &Db, table: &str, key: &str, org: i64, id: Param<'_>) -> Result<()> {
    let sql = format!("DELETE FROM {table} WHERE organization_id = $1 AND {key} = $2");
    db.exec(&sql, &[&org, id]).await?;
    Ok(())
}

const NETWORK_SELECT: &str = "SELECT origin_id, name, ip_address, prefix_length, is_dynamic,
        is_verified, status, created_at
    FROM networks WHERE organization_id = $1";

fn network(r: &Row) -> NetworkRecord {
    NetworkRecord {
        origin_id: r.get(0),
        name: r.get(1),
        ip_address: r.get(2),
        prefix_length: r.get(3),
        is_dynamic: r.get(4),
        is_verified: r.get(5),
        status: r.get(6),
        created_at: rfc3339(r.get(7)),
    }
}

const ROAMING_SELECT: &str = "SELECT origin_id, name, device_id, type, status, last_sync_status,
        last_sync, applied_bundle, has_ip_blocking, version, os_version, os_version_name
    FROM roaming_computers WHERE organization_id = $1";

fn roaming(r: &Row) -> RoamingComputerRecord {
    RoamingComputerRecord {
        origin_id: r.get(0),
        name: r.get(1),
        device_id: r.get(2),
        kind: r.get(3),
        status: r.get(4),
        last_sync_status: r.get(5),
        last_sync: r.get::<_, Option<i64>>(6).map(rfc3339),
        applied_bundle: r.get(7),
        has_ip_blocking: r.get(8),
        version: r.get(9),
        os_version: r.get(10),
        os_version_name: r.get(11),
    }
}

const APPLIANCE_SELECT: &str = "SELECT origin_id, name, site_id, is_upgradable, state, health,
        type, settings, created_at, modified_at, state_updated_at
    FROM virtual_appliances WHERE organization_id = $1";

fn appliance(r: &Row) -> ApplianceRecord {
    ApplianceRecord {
        origin_id: r.get(0),
        name: r.get(1),
        site_id: r.get(2),
        is_upgradable: r.get(3),
        state: serde_json::from_str(r.get::<_, &str>(4)).unwrap_or_default(),
        health: r.get(5),
        kind: r.get(6),
        settings: serde_json::from_str(r.get::<_, &str>(7)).unwrap_or_default(),
        created_at: rfc3339(r.get(8)),
        modified_at: rfc3339(r.get(9)),
        state_updated_at: rfc3339(r.get(10)),
    }
}

impl Devices for Db {
    async fn networks(&self, org: i64, limit: i64, offset: i64) -> Result<Vec<NetworkRecord>> {
        page_of(self, NETWORK_SELECT, org, limit, offset, network).await
    }

    async fn network(&self, org: i64, id: i64) -> Result<Option<NetworkRecord>> {
        one_of(self, NETWORK_SELECT, "origin_id", org, &id, network).await
    }

    async fn insert_network(&self, org: i64, n: &NewNetwork, now: i64) -> Result<i64> {
        let id = self.new_origin("network").await?;
        self.exec(
            "INSERT INTO networks (origin_id, organization_id, name, ip_address, prefix_length,
                 is_dynamic, is_verified, status, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                &id,
                &org,
                &n.name,
                &n.ip_address,
                &n.prefix_length,
                &n.is_dynamic,
                &n.is_verified,
                &n.status,
                &now,
            ],
        )
        .await?;
        Ok(id)
    }

    async fn delete_network_row(&self, org: i64, id: i64) -> Result<()> {
        remove(self, "networks", "origin_id", org, &id).await
    }

    async fn roamers(&self, org: i64, filter: &RoamingFilter, page: Page) -> Rows<Roamer> {
        let sql = format!(
            "{ROAMING_SELECT} AND ($2::text IS NULL OR status = $2)
                AND ($3::bigint IS NULL OR last_sync < $3)
                AND ($4::bigint IS NULL OR last_sync > $4)
             ORDER BY origin_id LIMIT $5 OFFSET $6"
        );
        let (limit, offset) = match page {
            Some((limit, offset)) => (Some(limit), offset),
            None => (None, 0),
        };
        let params: [Param<'_>; 6] = [
            &org,
            &filter.status,
            &filter.before,
            &filter.after,
            &limit,
            &offset,
        ];
        Ok(self
            .rows(&sql, &params)
            .await?
            .iter()
            .map(roaming)
            .collect())
    }

    async fn roamer(&self, org: i64, device: &str) -> One<Roamer> {
        one_of(self, ROAMING_SELECT, "device_id", org, &device, roaming).await
    }

    async fn insert_roamer(&self, org: i64, c: &NewRoamingComputer) -> Result<bool> {
        let origin = self.new_origin("roaming_computer").await?;
        let inserted = self
            .exec_unique(
                "INSERT INTO roaming_computers (device_id, organization_id, origin_id, name, type,
                     status, last_sync_status, last_sync, applied_bundle, has_ip_blocking,
                     version, os_version, os_version_name)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                &[
                    &c.device_id,
                    &org,
                    &origin,
                    &c.name,
                    &c.kind,
                    &c.status,
                    &c.last_sync_status,
                    &c.last_sync,
                    &c.applied_bundle,
                    &c.has_ip_blocking,
                    &c.version,
                    &c.os_version,
                    &c.os_version_name,
                ],
            )
            .await?;
        // `None`: another node registered the same device meanwhile.
        Ok(inserted.is_some())
    }

    async fn rename_roamer(&self, org: i64, device: &str, name: &str) -> Result<()> {
        self.exec(
            "UPDATE roaming_computers SET name = $3 WHERE organization_id = $1 AND device_id = $2",
            &[&org, &device, &name],
        )
        .await?;
        Ok(())
    }

    async fn delete_roamer(&self, org: i64, device: &str) -> Result<()> {
        remove(self, "roaming_computers", "device_id", org, &device).await
    }

    async fn appliances(&self, org: i64, limit: i64, offset: i64) -> Rows<ApplianceRecord> {
        page_of(self, APPLIANCE_SELECT, org, limit, offset, appliance).await
    }

    async fn appliance(&self, org: i64, id: i64) -> Result<Option<ApplianceRecord>> {
        one_of(self, APPLIANCE_SELECT, "origin_id", org, &id, appliance).await
    }

    async fn insert_appliance(&self, org: i64, a: &NewAppliance, now: i64) -> Result<i64> {
        let id = self.new_origin("virtual_appliance").await?;
        let (state, settings) = appliance_json(a);
        self.exec(
            "INSERT INTO virtual_appliances (origin_id, organization_id, name, site_id,
                 is_upgradable, state, health, type, settings, created_at, modified_at,
                 state_updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $10)",
            &[
                &id,
                &org,
                &a.name,
                &a.site_id,
                &a.is_upgradable,
                &state,
                &a.health,
                &a.kind,
                &settings,
                &now,
            ],
        )
        .await?;
        Ok(id)
    }

    async fn move_appliance_row(&self, org: i64, id: i64, site: i64, now: i64) -> Result<()> {
        self.exec(
            "UPDATE virtual_appliances SET site_id = $3, modified_at = $4
             WHERE organization_id = $1 AND origin_id = $2",
            &[&org, &id, &site, &now],
        )
        .await?;
        Ok(())
    }

    async fn delete_appliance_row(&self, org: i64, id: i64) -> Result<()> {
        remove(self, "virtual_appliances", "origin_id", org, &id).await
    }
}
