//! The statements of tenants and credentials on PostgreSQL (their rules: `rules::tenants`).

use super::ops::ORG_LOCK;
use super::{Db, Param};
use crate::store::model::*;
use crate::store::rules::tenants::{credential_scope, owner_table, parent_columns};
use crate::store::rules::tenants::{org_params, scope_columns, OrgColumns, Tenants};
use crate::store::rules::Hold;
use crate::store::Result;
use crate::timefmt::rfc3339;

/// Key of the advisory lock that makes the demo world's "no tenant yet" check and its creation
/// one step across nodes.
const DEMO_LOCK: i64 = 0x7061_7261_736f_6c02;

/// The parameters of a statement writing an organization's row: `head`, then its columns
/// (`rules::tenants::org_params!`), then `now`.
pub(super) fn org_params<'p>(
    c: &'p OrgColumns,
    head: &[Param<'p>],
    now: &'p i64,
) -> Vec<Param<'p>> {
    org_params!(c, head, now, Param<'p>)
}

impl Tenants for Db {
    async fn credential(&self, api_key: &str) -> Result<Option<StoredCredential>> {
        let row = self
            .opt(
                "SELECT secret_hash, service_provider_id, msp_id, organization_id
                 FROM api_credentials WHERE api_key = $1 AND revoked_at IS NULL",
                &[&api_key],
            )
            .await?;
        Ok(row.map(|r| StoredCredential {
            scope: credential_scope(r.get(1), r.get(2), r.get(3)),
            secret_hash: r.get(0),
        }))
    }

    async fn organization_parents(&self, org: i64) -> Result<Option<(Option<i64>, Option<i64>)>> {
        Ok(self
            .opt(
                "SELECT service_provider_id, msp_id FROM organizations WHERE id = $1",
                &[&org],
            )
            .await?
            .map(|r| (r.get(0), r.get(1))))
    }

    async fn hold_scope(&self, scope: Scope, hold: Option<Hold>) -> Result<bool> {
        let (table, _, id) = owner_table(scope);
        let lock = match hold {
            None => "",
            Some(Hold::Share) => " FOR KEY SHARE",
            Some(Hold::Exclusive) => " FOR UPDATE",
        };
        let sql = format!("SELECT 1 FROM {table} WHERE id = $1{lock}");
        Ok(self.opt(&sql, &[&id]).await?.is_some())
    }

    async fn any_tenant(&self) -> Result<bool> {
        Ok(self
            .one(
                "SELECT EXISTS (SELECT 1 FROM service_providers) OR EXISTS (SELECT 1 FROM msps)
                     OR EXISTS (SELECT 1 FROM organizations)",
                &[],
            )
            .await?
            .get(0))
    }

    async fn hold_tenants(&self) -> Result<()> {
        // Until the commit; READ COMMITTED: what follows sees what the holder before committed.
        self.exec("SELECT pg_advisory_xact_lock($1)", &[&DEMO_LOCK])
            .await?;
        Ok(())
    }

    async fn insert_service_provider(&self, sp: &NewServiceProvider, now: i64) -> Result<i64> {
        Ok(self
            .one(
                "INSERT INTO service_providers (name, package_id, seats_total, status, rebill_at,
                     expires_at, created_at)
                 VALUES ($1, $2, $3, 'Active', $4, $5, $6) RETURNING id",
                &[
                    &sp.name,
                    &sp.package_id,
                    &sp.seats_total,
                    &sp.rebill_at,
                    &sp.expires_at,
                    &now,
                ],
            )
            .await?
            .get(0))
    }

    async fn insert_msp(&self, name: &str, now: i64) -> Result<i64> {
        Ok(self
            .one(
                "INSERT INTO msps (name, created_at) VALUES ($1, $2) RETURNING id",
                &[&name, &now],
            )
            .await?
            .get(0))
    }

    async fn insert_organization(&self, parent: Parent, f: &OrgFields, now: i64) -> Result<i64> {
        let (sp, msp) = parent_columns(parent);
        Ok(self
            .one(
                "INSERT INTO organizations (service_provider_id, msp_id, name, seats, package_id,
                    street_address, street_address2, city, state, country_code, zip_code,
                    deal_id, admin_emails, ccw_deal_owner_emails, created_at, modified_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15)
                 RETURNING id",
                &org_params(&OrgColumns::of(f), &[&sp, &msp], &now),
            )
            .await?
            .get(0))
    }

    async fn organization_exists(&self, org: i64) -> Result<bool> {
        Ok(self
            .opt("SELECT 1 FROM organizations WHERE id = $1", &[&org])
            .await?
            .is_some())
    }

    /// Its advisory lock (ingests in flight for it finish first, later ones wait and then find
    /// it gone) and its row.
    async fn hold_for_delete(&self, org: i64) -> Result<bool> {
        self.exec(
            "SELECT pg_advisory_xact_lock($1::bigint + $2)",
            &[&ORG_LOCK, &org],
        )
        .await?;
        Ok(self
            .opt(
                "SELECT 1 FROM organizations WHERE id = $1 FOR UPDATE",
                &[&org],
            )
            .await?
            .is_some())
    }

    /// What the schema's cascades reach, and the domain list and its counts, which have no
    /// foreign key. Its stored requests are recorded for the background purge: those with ids
    /// up to the table's highest now. Requests that were being stored for it held its advisory
    /// lock until they committed, before this transaction got it, so this statement (READ
    /// COMMITTED: a fresh snapshot) sees them all; later ones find the organization gone and
    /// store nothing.
    async fn delete_organization_row(&self, org: i64) -> Result<()> {
        for sql in [
            "DELETE FROM domains WHERE organization_id = $1",
            "DELETE FROM domain_counts WHERE organization_id = $1",
            "DELETE FROM domain_count_deltas WHERE organization_id = $1",
            "DELETE FROM organizations WHERE id = $1",
            "INSERT INTO event_purges (organization_id, up_to)
             VALUES ($1, (SELECT coalesce(max(id), 0) FROM event_batches))
             ON CONFLICT DO NOTHING",
            "INSERT INTO list_changes (organization_id) VALUES ($1) ON CONFLICT DO NOTHING",
        ] {
            self.exec(sql, &[&org]).await?;
        }
        Ok(())
    }

    async fn insert_customer_key(&self, org: i64, key: &str, now: i64) -> Result<()> {
        self.exec(
            "INSERT INTO customer_keys (key, organization_id, created_at) VALUES ($1, $2, $3)",
            &[&key, &org, &now],
        )
        .await?;
        Ok(())
    }

    async fn customer_keys(&self, org: i64) -> Result<Vec<CustomerKeyInfo>> {
        Ok(self
            .rows(
                "SELECT key, organization_id, created_at, revoked_at FROM customer_keys
                 WHERE organization_id = $1 ORDER BY created_at, key COLLATE \"C\"",
                &[&org],
            )
            .await?
            .iter()
            .map(|r| CustomerKeyInfo {
                key: r.get(0),
                organization_id: r.get(1),
                created_at: rfc3339(r.get(2)),
                revoked_at: r.get::<_, Option<i64>>(3).map(rfc3339),
            })
            .collect())
    }

    async fn customer_keys_where(&self, column: &'static str, id: i64) -> Result<Vec<String>> {
        Ok(self
            .rows(
                &crate::store::rules::tenants::customer_keys_where_query(
                    column,
                    "$1",
                    "k.key COLLATE \"C\"",
                ),
                &[&id],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    async fn revoke_customer_key_row(&self, key: &str, now: i64) -> Result<bool> {
        Ok(self
            .exec(
                "UPDATE customer_keys SET revoked_at = $2 WHERE key = $1 AND revoked_at IS NULL",
                &[&key, &now],
            )
            .await?
            > 0)
    }

    async fn revoke_live_keys(&self, org: i64, now: i64) -> Result<Vec<String>> {
        Ok(self
            .rows(
                "UPDATE customer_keys SET revoked_at = $2
                 WHERE organization_id = $1 AND revoked_at IS NULL
                 RETURNING key, created_at",
                &[&org, &now],
            )
            .await?
            .iter()
            .map(|r| (r.get::<_, i64>(1), r.get::<_, String>(0)))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|(_, k)| k)
            .collect())
    }

    async fn insert_credential(&self, c: &NewCredential, scope: Scope, now: i64) -> Result<()> {
        let (sp, msp, org) = scope_columns(scope);
        self.exec(
            "INSERT INTO api_credentials (api_key, secret_hash, service_provider_id, msp_id,
                 organization_id, label, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[&c.api_key, &c.secret_hash, &sp, &msp, &org, &c.label, &now],
        )
        .await?;
        Ok(())
    }

    async fn credentials(&self) -> Result<Vec<CredentialInfo>> {
        Ok(self
            .rows(
                "SELECT api_key, service_provider_id, msp_id, organization_id, label,
                        created_at, revoked_at
                 FROM api_credentials ORDER BY created_at, api_key COLLATE \"C\"",
                &[],
            )
            .await?
            .iter()
            .map(|r| CredentialInfo {
                api_key: r.get(0),
                scope: credential_scope(r.get(1), r.get(2), r.get(3)),
                label: r.get(4),
                created_at: rfc3339(r.get(5)),
                revoked_at: r.get::<_, Option<i64>>(6).map(rfc3339),
            })
            .collect())
    }

    async fn revoke_credential_row(&self, api_key: &str, now: i64) -> Result<bool> {
        Ok(self
            .exec(
                "UPDATE api_credentials SET revoked_at = $2
                 WHERE api_key = $1 AND revoked_at IS NULL",
                &[&api_key, &now],
            )
            .await?
            > 0)
    }

    async fn service_providers(&self) -> Result<Vec<ServiceProviderInfo>> {
        Ok(self
            .rows(
                "SELECT s.id, s.name, s.package_id, s.seats_total,
                        (SELECT count(*) FROM organizations o WHERE o.service_provider_id = s.id),
                        s.created_at
                 FROM service_providers s ORDER BY s.id",
                &[],
            )
            .await?
            .iter()
            .map(|r| ServiceProviderInfo {
                id: r.get(0),
                name: r.get(1),
                package_id: r.get(2),
                seats_total: r.get(3),
                customer_count: r.get(4),
                created_at: rfc3339(r.get(5)),
            })
            .collect())
    }

    async fn msps(&self) -> Result<Vec<MspInfo>> {
        Ok(self
            .rows(
                "SELECT m.id, m.name,
                        (SELECT count(*) FROM organizations o WHERE o.msp_id = m.id),
                        m.created_at
                 FROM msps m ORDER BY m.id",
                &[],
            )
            .await?
            .iter()
            .map(|r| MspInfo {
                id: r.get(0),
                name: r.get(1),
                customer_count: r.get(2),
                created_at: rfc3339(r.get(3)),
            })
            .collect())
    }

    async fn organizations(&self) -> Result<Vec<OrganizationInfo>> {
        Ok(self
            .rows(
                "SELECT id, name, service_provider_id, msp_id, seats, created_at
                 FROM organizations ORDER BY id",
                &[],
            )
            .await?
            .iter()
            .map(|r| OrganizationInfo {
                id: r.get(0),
                name: r.get(1),
                service_provider_id: r.get(2),
                msp_id: r.get(3),
                seats: r.get(4),
                created_at: rfc3339(r.get(5)),
            })
            .collect())
    }

    async fn customer_count(&self, parent: Scope) -> Result<i64> {
        let (_, column, id) = owner_table(parent);
        let sql = format!("SELECT count(*) FROM organizations WHERE {column} = $1");
        Ok(self.one(&sql, &[&id]).await?.get(0))
    }

    async fn delete_parent_row(&self, parent: Scope) -> Result<()> {
        let (table, column, id) = owner_table(parent);
        let sql = format!("DELETE FROM api_credentials WHERE {column} = $1");
        self.exec(&sql, &[&id]).await?;
        self.exec(&format!("DELETE FROM {table} WHERE id = $1"), &[&id])
            .await?;
        Ok(())
    }

    async fn package_known(&self, id: i64) -> Result<bool> {
        Ok(self
            .opt("SELECT 1 FROM packages WHERE id = $1", &[&id])
            .await?
            .is_some())
    }
}
