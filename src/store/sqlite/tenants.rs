//! The statements of tenants and credentials on SQLite (their rules: `rules::tenants`), and
//! the few helpers the other resources' statements share.

use rusqlite::{params, Connection, OptionalExtension, ToSql};

use crate::store::model::*;
use crate::store::rules::tenants::{credential_scope, owner_table, parent_columns};
use crate::store::rules::tenants::{org_params, scope_columns, OrgColumns, Tenants};
use crate::store::rules::Hold;
use crate::store::Result;
use crate::timefmt::rfc3339;

/// Allocates a new originId from the shared identity sequence.
pub fn new_origin(conn: &Connection, kind: &str) -> Result<i64> {
    conn.execute("INSERT INTO origins (kind) VALUES (?1)", params![kind])?;
    Ok(conn.last_insert_rowid())
}

/// Creates a site; returns its siteId.
pub fn create_site(
    conn: &Connection,
    org: i64,
    name: &str,
    is_default: bool,
    now: i64,
) -> Result<i64> {
    let origin = new_origin(conn, "site")?;
    conn.execute(
        "INSERT INTO sites (organization_id, origin_id, name, is_default, type, created_at, modified_at)
         VALUES (?1, ?2, ?3, ?4, 'site', ?5, ?5)",
        params![org, origin, name, is_default, now],
    )?;
    Ok(conn.last_insert_rowid())
}

/// True when the organization exists (checked by every management write of its data).
pub fn organization_exists(conn: &Connection, org: i64) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM organizations WHERE id = ?1")?
        .query_row(params![org], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Resolves a well-formed, lower-cased customer key to its organization, if it is live.
pub fn resolve_customer_key(conn: &Connection, key: &str) -> Result<Option<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT organization_id FROM customer_keys WHERE key = ?1 AND revoked_at IS NULL",
    )?;
    Ok(stmt.query_row(params![key], |r| r.get(0)).optional()?)
}

/// Records that the organization's effective block list may have changed.
pub fn record_list_change(conn: &Connection, org: i64) -> Result<()> {
    conn.prepare_cached("INSERT OR IGNORE INTO list_changes (organization_id) VALUES (?1)")?
        .execute(params![org])?;
    Ok(())
}

/// The organizations recorded by `record_list_change` (or deleted), forgotten as they are
/// returned.
pub fn take_list_changes(conn: &Connection) -> Result<Vec<i64>> {
    let mut st = conn.prepare_cached("DELETE FROM list_changes RETURNING organization_id")?;
    let mut ids = st
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<i64>>>()?;
    ids.sort_unstable();
    Ok(ids)
}

/// The parameters of a statement writing an organization's row: `head`, then its columns
/// (`rules::tenants::org_params!`), then `now`.
pub fn org_params<'p>(
    c: &'p OrgColumns,
    head: &[&'p dyn ToSql],
    now: &'p i64,
) -> Vec<&'p dyn ToSql> {
    org_params!(c, head, now, &'p dyn ToSql)
}

/// An organization with its default site and customer key, for tests of other resources.
#[cfg(test)]
pub fn create_organization(
    conn: &Connection,
    parent: Parent,
    f: &OrgFields,
    now: i64,
) -> Result<CreatedOrganization> {
    super::settle(crate::store::rules::tenants::new_organization(
        conn, parent, f, now,
    ))
}

impl Tenants for Connection {
    async fn credential(&self, api_key: &str) -> Result<Option<StoredCredential>> {
        let mut stmt = self.prepare_cached(
            "SELECT secret_hash, service_provider_id, msp_id, organization_id FROM api_credentials
             WHERE api_key = ?1 AND revoked_at IS NULL",
        )?;
        Ok(stmt
            .query_row(params![api_key], |r| {
                Ok(StoredCredential {
                    scope: credential_scope(r.get(1)?, r.get(2)?, r.get(3)?),
                    secret_hash: r.get(0)?,
                })
            })
            .optional()?)
    }

    async fn organization_parents(&self, org: i64) -> Result<Option<(Option<i64>, Option<i64>)>> {
        Ok(self
            .prepare_cached("SELECT service_provider_id, msp_id FROM organizations WHERE id = ?1")?
            .query_row(params![org], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    async fn hold_scope(&self, scope: Scope, _: Option<Hold>) -> Result<bool> {
        let (table, _, id) = owner_table(scope);
        let sql = format!("SELECT 1 FROM {table} WHERE id = ?1");
        Ok(self
            .prepare_cached(&sql)?
            .query_row(params![id], |_| Ok(()))
            .optional()?
            .is_some())
    }

    async fn any_tenant(&self) -> Result<bool> {
        let n: i64 = self.query_row(
            "SELECT (SELECT count(*) FROM service_providers) + (SELECT count(*) FROM msps)
                  + (SELECT count(*) FROM organizations)",
            [],
            |r| r.get(0),
        )?;
        Ok(n > 0)
    }

    async fn hold_tenants(&self) -> Result<()> {
        // The single writer: nothing else creates tenants meanwhile.
        Ok(())
    }

    async fn insert_service_provider(&self, sp: &NewServiceProvider, now: i64) -> Result<i64> {
        self.execute(
            "INSERT INTO service_providers (name, package_id, seats_total, status, rebill_at,
                expires_at, created_at)
             VALUES (?1, ?2, ?3, 'Active', ?4, ?5, ?6)",
            params![
                sp.name,
                sp.package_id,
                sp.seats_total,
                sp.rebill_at,
                sp.expires_at,
                now
            ],
        )?;
        Ok(self.last_insert_rowid())
    }

    async fn insert_msp(&self, name: &str, now: i64) -> Result<i64> {
        self.execute(
            "INSERT INTO msps (name, created_at) VALUES (?1, ?2)",
            params![name, now],
        )?;
        Ok(self.last_insert_rowid())
    }

    async fn insert_organization(&self, parent: Parent, f: &OrgFields, now: i64) -> Result<i64> {
        let (sp, msp) = parent_columns(parent);
        self.execute(
            "INSERT INTO organizations (service_provider_id, msp_id, name, seats, package_id,
                street_address, street_address2, city, state, country_code, zip_code, deal_id,
                admin_emails, ccw_deal_owner_emails, created_at, modified_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?15)",
            org_params(&OrgColumns::of(f), &[&sp, &msp], &now).as_slice(),
        )?;
        Ok(self.last_insert_rowid())
    }

    async fn organization_exists(&self, org: i64) -> Result<bool> {
        organization_exists(self, org)
    }

    async fn hold_for_delete(&self, org: i64) -> Result<bool> {
        organization_exists(self, org)
    }

    async fn delete_organization_row(&self, org: i64) -> Result<()> {
        // The schema's cascades and triggers take its data and record the purge.
        self.execute("DELETE FROM organizations WHERE id = ?1", params![org])?;
        Ok(())
    }

    async fn insert_customer_key(&self, org: i64, key: &str, now: i64) -> Result<()> {
        self.execute(
            "INSERT INTO customer_keys (key, organization_id, created_at) VALUES (?1, ?2, ?3)",
            params![key, org, now],
        )?;
        Ok(())
    }

    async fn customer_keys(&self, org: i64) -> Result<Vec<CustomerKeyInfo>> {
        let mut stmt = self.prepare(
            "SELECT key, organization_id, created_at, revoked_at FROM customer_keys
             WHERE organization_id = ?1 ORDER BY created_at, key",
        )?;
        let rows = stmt.query_map(params![org], |r| {
            Ok(CustomerKeyInfo {
                key: r.get(0)?,
                organization_id: r.get(1)?,
                created_at: rfc3339(r.get(2)?),
                revoked_at: r.get::<_, Option<i64>>(3)?.map(rfc3339),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    async fn customer_keys_where(&self, column: &'static str, id: i64) -> Result<Vec<String>> {
        let mut stmt = self.prepare_cached(
            &crate::store::rules::tenants::customer_keys_where_query(column, "?1", "k.key"),
        )?;
        let rows = stmt.query_map(params![id], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    async fn revoke_customer_key_row(&self, key: &str, now: i64) -> Result<bool> {
        Ok(self.execute(
            "UPDATE customer_keys SET revoked_at = ?2 WHERE key = ?1 AND revoked_at IS NULL",
            params![key, now],
        )? > 0)
    }

    async fn revoke_live_keys(&self, org: i64, now: i64) -> Result<Vec<String>> {
        let live: Vec<String> = self
            .prepare(
                "SELECT key FROM customer_keys WHERE organization_id = ?1 AND revoked_at IS NULL
                 ORDER BY created_at, key",
            )?
            .query_map(params![org], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        self.execute(
            "UPDATE customer_keys SET revoked_at = ?2
             WHERE organization_id = ?1 AND revoked_at IS NULL",
            params![org, now],
        )?;
        Ok(live)
    }

    async fn insert_credential(&self, c: &NewCredential, scope: Scope, now: i64) -> Result<()> {
        let (sp, msp, org) = scope_columns(scope);
        self.execute(
            "INSERT INTO api_credentials (api_key, secret_hash, service_provider_id, msp_id,
                organization_id, label, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![c.api_key, c.secret_hash, sp, msp, org, c.label, now],
        )?;
        Ok(())
    }

    async fn credentials(&self) -> Result<Vec<CredentialInfo>> {
        let mut stmt = self.prepare(
            "SELECT api_key, service_provider_id, msp_id, organization_id, label, created_at,
                revoked_at
             FROM api_credentials ORDER BY created_at, api_key",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(CredentialInfo {
                api_key: r.get(0)?,
                scope: credential_scope(r.get(1)?, r.get(2)?, r.get(3)?),
                label: r.get(4)?,
                created_at: rfc3339(r.get(5)?),
                revoked_at: r.get::<_, Option<i64>>(6)?.map(rfc3339),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    async fn revoke_credential_row(&self, api_key: &str, now: i64) -> Result<bool> {
        Ok(self.execute(
            "UPDATE api_credentials SET revoked_at = ?2 WHERE api_key = ?1 AND revoked_at IS NULL",
            params![api_key, now],
        )? > 0)
    }

    async fn service_providers(&self) -> Result<Vec<ServiceProviderInfo>> {
        let mut st = self.prepare(
            "SELECT s.id, s.name, s.package_id, s.seats_total,
                    (SELECT count(*) FROM organizations o WHERE o.service_provider_id = s.id),
                    s.created_at
             FROM service_providers s ORDER BY s.id",
        )?;
        let rows = st.query_map([], |r| {
            Ok(ServiceProviderInfo {
                id: r.get(0)?,
                name: r.get(1)?,
                package_id: r.get(2)?,
                seats_total: r.get(3)?,
                customer_count: r.get(4)?,
                created_at: rfc3339(r.get(5)?),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn msps(&self) -> Result<Vec<MspInfo>> {
        let mut st = self.prepare(
            "SELECT m.id, m.name, (SELECT count(*) FROM organizations o WHERE o.msp_id = m.id),
                    m.created_at
             FROM msps m ORDER BY m.id",
        )?;
        let rows = st.query_map([], |r| {
            Ok(MspInfo {
                id: r.get(0)?,
                name: r.get(1)?,
                customer_count: r.get(2)?,
                created_at: rfc3339(r.get(3)?),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn organizations(&self) -> Result<Vec<OrganizationInfo>> {
        let mut st = self.prepare(
            "SELECT id, name, service_provider_id, msp_id, seats, created_at
             FROM organizations ORDER BY id",
        )?;
        let rows = st.query_map([], |r| {
            Ok(OrganizationInfo {
                id: r.get(0)?,
                name: r.get(1)?,
                service_provider_id: r.get(2)?,
                msp_id: r.get(3)?,
                seats: r.get(4)?,
                created_at: rfc3339(r.get(5)?),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn customer_count(&self, parent: Scope) -> Result<i64> {
        let (_, column, id) = owner_table(parent);
        let sql = format!("SELECT count(*) FROM organizations WHERE {column} = ?1");
        Ok(self.query_row(&sql, params![id], |r| r.get(0))?)
    }

    async fn delete_parent_row(&self, parent: Scope) -> Result<()> {
        let (table, column, id) = owner_table(parent);
        let sql = format!("DELETE FROM api_credentials WHERE {column} = ?1");
        self.execute(&sql, params![id])?;
        self.execute(&format!("DELETE FROM {table} WHERE id = ?1"), params![id])?;
        Ok(())
    }

    async fn package_known(&self, id: i64) -> Result<bool> {
        Ok(self
            .prepare_cached("SELECT 1 FROM packages WHERE id = ?1")?
            .query_row(params![id], |_| Ok(()))
            .optional()?
            .is_some())
    }
}
