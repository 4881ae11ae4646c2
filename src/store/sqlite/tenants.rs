//! Tenants: service providers, MSPs, organizations, enforcement customer keys and management API
//! credentials. Functions take a `&Connection` so that the server's writer and the command line
//! share them; callers supply the transaction.

use crate::store::rules::devices::Devices;
use crate::store::rules::internal_networks::InternalNetworks;
use crate::store::rules::users::Users;
use rusqlite::{params, Connection, OptionalExtension};

use crate::store::model::*;
use crate::store::Result;

pub fn create_service_provider(
    conn: &Connection,
    sp: &NewServiceProvider,
    now: i64,
) -> Result<i64> {
    conn.execute(
        "INSERT INTO service_providers (name, package_id, seats_total, status, rebill_at, expires_at, created_at)
         VALUES (?1, ?2, ?3, 'Active', ?4, ?5, ?6)",
        params![sp.name, sp.package_id, sp.seats_total, sp.rebill_at, sp.expires_at, now],
    )?;
    Ok(conn.last_insert_rowid())
}

pub fn create_msp(conn: &Connection, name: &str, now: i64) -> Result<i64> {
    conn.execute(
        "INSERT INTO msps (name, created_at) VALUES (?1, ?2)",
        params![name, now],
    )?;
    Ok(conn.last_insert_rowid())
}

/// Allocates a new originId from the shared identity sequence.
pub fn new_origin(conn: &Connection, kind: &str) -> Result<i64> {
    conn.execute("INSERT INTO origins (kind) VALUES (?1)", params![kind])?;
    Ok(conn.last_insert_rowid())
}

/// Creates an organization with its default site and an enforcement customer key.
pub fn create_organization(
    conn: &Connection,
    parent: Parent,
    f: &OrgFields,
    now: i64,
) -> Result<CreatedOrganization> {
    let (sp, msp) = match parent {
        Parent::None => (None, None),
        Parent::ServiceProvider(id) => (Some(id), None),
        Parent::Msp(id) => (None, Some(id)),
    };
    let admin = serde_json::to_string(&f.admin_emails).unwrap_or_else(|_| "[]".into());
    let ccw = serde_json::to_string(&f.ccw_deal_owner_emails).unwrap_or_else(|_| "[]".into());
    conn.execute(
        "INSERT INTO organizations (name, service_provider_id, msp_id, seats, package_id,
            street_address, street_address2, city, state, country_code, zip_code, deal_id,
            admin_emails, ccw_deal_owner_emails, created_at, modified_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?15)",
        params![
            f.name,
            sp,
            msp,
            f.seats,
            f.package_id,
            f.street_address,
            f.street_address2,
            f.city,
            f.state,
            f.country_code,
            f.zip_code,
            f.deal_id,
            admin,
            ccw,
            now
        ],
    )?;
    let id = conn.last_insert_rowid();
    let default_site_id = create_site(conn, id, "Default Site", true, now)?;
    let customer_key = create_customer_key(conn, id, now)?;
    Ok(CreatedOrganization {
        id,
        name: f.name.clone(),
        default_site_id,
        customer_key,
    })
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

/// Deletes an organization and, through the schema's cascades, all of its data.
pub fn delete_organization(conn: &Connection, org: i64) -> Result<bool> {
    Ok(conn.execute("DELETE FROM organizations WHERE id = ?1", params![org])? > 0)
}

// ------------------------------------------------------------------ customer keys

/// Issues a new customer key (UUID v4) for the organization.
pub fn create_customer_key(conn: &Connection, org: i64, now: i64) -> Result<String> {
    let key = uuid::Uuid::new_v4().hyphenated().to_string();
    conn.execute(
        "INSERT INTO customer_keys (key, organization_id, created_at) VALUES (?1, ?2, ?3)",
        params![key, org, now],
    )?;
    Ok(key)
}

/// Resolves a well-formed, lower-cased customer key to its organization, if it is live.
pub fn resolve_customer_key(conn: &Connection, key: &str) -> Result<Option<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT organization_id FROM customer_keys WHERE key = ?1 AND revoked_at IS NULL",
    )?;
    Ok(stmt.query_row(params![key], |r| r.get(0)).optional()?)
}

/// Revokes one key. Returns false if there was no live key of that value.
pub fn revoke_customer_key(conn: &Connection, key: &str, now: i64) -> Result<bool> {
    Ok(conn.execute(
        "UPDATE customer_keys SET revoked_at = ?2 WHERE key = ?1 AND revoked_at IS NULL",
        params![key, now],
    )? > 0)
}

/// Revokes every live key of the organization and issues a new one.
pub fn rotate_customer_key(conn: &Connection, org: i64, now: i64) -> Result<(String, Vec<String>)> {
    let revoked = live_customer_keys(conn, org)?;
    conn.execute(
        "UPDATE customer_keys SET revoked_at = ?2 WHERE organization_id = ?1 AND revoked_at IS NULL",
        params![org, now],
    )?;
    let key = create_customer_key(conn, org, now)?;
    Ok((key, revoked))
}

fn live_customer_keys(conn: &Connection, org: i64) -> Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT key FROM customer_keys WHERE organization_id = ?1 AND revoked_at IS NULL ORDER BY created_at, key",
    )?;
    let rows = stmt.query_map(params![org], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<Vec<String>>>()?)
}

pub fn list_customer_keys(conn: &Connection, org: i64) -> Result<Vec<CustomerKeyInfo>> {
    let mut stmt = conn.prepare(
        "SELECT key, organization_id, created_at, revoked_at FROM customer_keys
         WHERE organization_id = ?1 ORDER BY created_at, key",
    )?;
    let rows = stmt.query_map(params![org], |r| {
        Ok(CustomerKeyInfo {
            key: r.get(0)?,
            organization_id: r.get(1)?,
            created_at: crate::timefmt::rfc3339(r.get(2)?),
            revoked_at: r.get::<_, Option<i64>>(3)?.map(crate::timefmt::rfc3339),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

// ------------------------------------------------------------------ API credentials

/// True when the organization exists and the credential's scope reaches it.
pub fn organization_visible(conn: &Connection, scope: Scope, org: i64) -> Result<bool> {
    let row: Option<(Option<i64>, Option<i64>)> = conn
        .prepare_cached("SELECT service_provider_id, msp_id FROM organizations WHERE id = ?1")?
        .query_row(params![org], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(match (row, scope) {
        (None, _) => false,
        (Some(_), Scope::Organization(o)) => o == org,
        (Some((sp, _)), Scope::ServiceProvider(s)) => sp == Some(s),
        (Some((_, msp)), Scope::Msp(m)) => msp == Some(m),
    })
}

/// Stores a credential whose secret the caller has already hashed.
pub fn insert_credential(
    conn: &Connection,
    credential: &NewCredential,
    scope: Scope,
    now: i64,
) -> Result<()> {
    let (sp, msp, org) = match scope {
        Scope::ServiceProvider(id) => (Some(id), None, None),
        Scope::Msp(id) => (None, Some(id), None),
        Scope::Organization(id) => (None, None, Some(id)),
    };
    conn.execute(
        "INSERT INTO api_credentials (api_key, secret_hash, service_provider_id, msp_id, organization_id, label, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            credential.api_key,
            credential.secret_hash,
            sp,
            msp,
            org,
            credential.label,
            now
        ],
    )?;
    Ok(())
}

/// Looks up a live credential by its API key.
pub fn find_credential(conn: &Connection, api_key: &str) -> Result<Option<StoredCredential>> {
    let mut stmt = conn.prepare_cached(
        "SELECT secret_hash, service_provider_id, msp_id, organization_id FROM api_credentials
         WHERE api_key = ?1 AND revoked_at IS NULL",
    )?;
    Ok(stmt
        .query_row(params![api_key], |r| {
            let hash: String = r.get(0)?;
            let sp: Option<i64> = r.get(1)?;
            let msp: Option<i64> = r.get(2)?;
            let org: Option<i64> = r.get(3)?;
            let scope = match (sp, msp, org) {
                (Some(id), _, _) => Scope::ServiceProvider(id),
                (None, Some(id), _) => Scope::Msp(id),
                (None, None, Some(id)) => Scope::Organization(id),
                // The CHECK constraint makes this unreachable; treat as a hidden credential.
                (None, None, None) => Scope::Organization(-1),
            };
            Ok(StoredCredential {
                scope,
                secret_hash: hash,
            })
        })
        .optional()?)
}

pub fn list_credentials(conn: &Connection) -> Result<Vec<CredentialInfo>> {
    let mut stmt = conn.prepare(
        "SELECT api_key, service_provider_id, msp_id, organization_id, label, created_at, revoked_at
         FROM api_credentials ORDER BY created_at, api_key",
    )?;
    let rows = stmt.query_map([], |r| {
        let sp: Option<i64> = r.get(1)?;
        let msp: Option<i64> = r.get(2)?;
        let org: Option<i64> = r.get(3)?;
        let scope = match (sp, msp, org) {
            (Some(id), _, _) => Scope::ServiceProvider(id),
            (None, Some(id), _) => Scope::Msp(id),
            (None, None, id) => Scope::Organization(id.unwrap_or(-1)),
        };
        Ok(CredentialInfo {
            api_key: r.get(0)?,
            scope,
            label: r.get(4)?,
            created_at: crate::timefmt::rfc3339(r.get(5)?),
            revoked_at: r.get::<_, Option<i64>>(6)?.map(crate::timefmt::rfc3339),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

pub fn revoke_credential(conn: &Connection, api_key: &str, now: i64) -> Result<bool> {
    Ok(conn.execute(
        "UPDATE api_credentials SET revoked_at = ?2 WHERE api_key = ?1 AND revoked_at IS NULL",
        params![api_key, now],
    )? > 0)
}

/// Whether the scope's owner exists (a credential for a missing tenant is refused).
pub fn scope_exists(conn: &Connection, scope: Scope) -> Result<bool> {
    let (sql, id) = match scope {
        Scope::ServiceProvider(id) => ("SELECT 1 FROM service_providers WHERE id = ?1", id),
        Scope::Msp(id) => ("SELECT 1 FROM msps WHERE id = ?1", id),
        Scope::Organization(id) => ("SELECT 1 FROM organizations WHERE id = ?1", id),
    };
    Ok(conn
        .query_row(sql, params![id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Whether the database holds any service provider, MSP or organization.
pub fn has_tenants(conn: &Connection) -> Result<bool> {
    let n: i64 = conn.query_row(
        "SELECT (SELECT count(*) FROM service_providers) + (SELECT count(*) FROM msps)
              + (SELECT count(*) FROM organizations)",
        [],
        |r| r.get(0),
    )?;
    Ok(n > 0)
}

/// Creates the demo world (see `crate::demo`): a service provider and an MSP, each with its
/// credential and one customer organization filled with sites, internal networks, a user,
/// networks, roaming computers and virtual appliances.
pub fn create_demo_world(conn: &Connection, world: &DemoWorld, now: i64) -> Result<DemoIds> {
    let provider = create_service_provider(conn, &world.provider, now)?;
    insert_credential(
        conn,
        &world.provider_credential,
        Scope::ServiceProvider(provider),
        now,
    )?;
    let msp = create_msp(conn, &world.msp_name, now)?;
    insert_credential(conn, &world.msp_credential, Scope::Msp(msp), now)?;
    let first = demo_organization(
        conn,
        Parent::ServiceProvider(provider),
        &world.provider_customer,
        now,
    )?;
    let second = demo_organization(conn, Parent::Msp(msp), &world.msp_customer, now)?;
    Ok(DemoIds {
        provider,
        msp,
        organizations: [first, second],
    })
}

fn demo_organization(
    conn: &Connection,
    parent: Parent,
    o: &DemoOrganization,
    now: i64,
) -> Result<CreatedOrganization> {
    let created = create_organization(conn, parent, &o.fields, now)?;
    let org = created.id;
    let second = create_site(conn, org, &o.second_site, false, now)?;
    let site = |s: DemoSite| match s {
        DemoSite::Default => created.default_site_id,
        DemoSite::Second => second,
    };
    for (name, ip, prefix, s) in &o.internal_networks {
        let f = InternalNetworkFields {
            name: name.clone(),
            ip_address: ip.clone(),
            prefix_length: *prefix,
            site_id: site(*s),
        };
        super::settle(conn.insert_internal_network(org, &f, now))?;
    }
    for (fields, hash) in &o.users {
        super::settle(conn.insert_user(org, fields, hash, now))?;
    }
    for (n, at) in &o.networks {
        super::settle(conn.insert_network(org, n, *at))?;
    }
    for c in &o.roaming_computers {
        super::settle(conn.insert_roaming_computer(org, c))?;
    }
    for (a, s, at) in &o.appliances {
        let a = NewAppliance {
            site_id: site(*s),
            ..a.clone()
        };
        super::settle(conn.insert_appliance(org, &a, *at))?;
    }
    insert_credential(conn, &o.credential, Scope::Organization(org), now)?;
    Ok(created)
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

pub fn list_service_providers(conn: &Connection) -> Result<Vec<ServiceProviderInfo>> {
    let mut st = conn.prepare(
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
            created_at: crate::timefmt::rfc3339(r.get(5)?),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn list_msps(conn: &Connection) -> Result<Vec<MspInfo>> {
    let mut st = conn.prepare(
        "SELECT m.id, m.name, (SELECT count(*) FROM organizations o WHERE o.msp_id = m.id),
                m.created_at
         FROM msps m ORDER BY m.id",
    )?;
    let rows = st.query_map([], |r| {
        Ok(MspInfo {
            id: r.get(0)?,
            name: r.get(1)?,
            customer_count: r.get(2)?,
            created_at: crate::timefmt::rfc3339(r.get(3)?),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn list_organizations(conn: &Connection) -> Result<Vec<OrganizationInfo>> {
    let mut st = conn.prepare(
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
            created_at: crate::timefmt::rfc3339(r.get(5)?),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Deletes a service provider or MSP (`table`) that has no customers (`parent_column` of
/// `organizations`), with its credentials.
fn delete_parent(conn: &Connection, table: &str, parent_column: &str, id: i64) -> Result<()> {
    let exists: Option<i64> = conn
        .query_row(
            &format!("SELECT id FROM {table} WHERE id = ?1"),
            params![id],
            |r| r.get(0),
        )
        .optional()?;
    if exists.is_none() {
        return Err(crate::store::StoreError::NotFound);
    }
    let customers: i64 = conn.query_row(
        &format!("SELECT count(*) FROM organizations WHERE {parent_column} = ?1"),
        params![id],
        |r| r.get(0),
    )?;
    if customers > 0 {
        return Err(crate::store::StoreError::Conflict(format!(
            "it still has {customers} customer(s); delete them first"
        )));
    }
    let credential_column = match table {
        "msps" => "msp_id",
        _ => "service_provider_id",
    };
    conn.execute(
        &format!("DELETE FROM api_credentials WHERE {credential_column} = ?1"),
        params![id],
    )?;
    conn.execute(&format!("DELETE FROM {table} WHERE id = ?1"), params![id])?;
    Ok(())
}

pub fn delete_service_provider(conn: &Connection, sp: i64) -> Result<()> {
    delete_parent(conn, "service_providers", "service_provider_id", sp)
}

pub fn delete_msp(conn: &Connection, msp: i64) -> Result<()> {
    delete_parent(conn, "msps", "msp_id", msp)
}
