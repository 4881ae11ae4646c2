//! Internal networks of an organization. `internalNetworkId` is the network's `originId`, drawn
//! from the shared identity sequence; `siteName` is read through the site, so it follows renames.

use rusqlite::{params, Connection, Row};

use super::tenants;
use crate::store::model::*;
use crate::store::Result;
use crate::timefmt::rfc3339;

const SELECT: &str = "SELECT n.origin_id, n.name, n.ip_address, n.prefix_length, s.name,
        n.site_id, n.created_at, n.modified_at
    FROM internal_networks n JOIN sites s ON s.id = n.site_id";

fn record(r: &Row<'_>) -> rusqlite::Result<InternalNetworkRecord> {
    Ok(InternalNetworkRecord {
        origin_id: r.get(0)?,
        name: r.get(1)?,
        ip_address: r.get(2)?,
        prefix_length: r.get(3)?,
        site_name: r.get(4)?,
        site_id: r.get(5)?,
        created_at: rfc3339(r.get(6)?),
        modified_at: rfc3339(r.get(7)?),
    })
}

/// One page of the organization's internal networks, ordered by id.
pub fn list(
    conn: &Connection,
    org: i64,
    limit: i64,
    offset: i64,
) -> Result<Vec<InternalNetworkRecord>> {
    let sql =
        format!("{SELECT} WHERE n.organization_id = ?1 ORDER BY n.origin_id LIMIT ?2 OFFSET ?3");
    super::owned_page(conn, &sql, org, limit, offset, record)
}

/// One internal network of the organization, if it exists there.
pub fn get(conn: &Connection, org: i64, id: i64) -> Result<Option<InternalNetworkRecord>> {
    let sql = format!("{SELECT} WHERE n.organization_id = ?1 AND n.origin_id = ?2");
    super::owned_row(conn, &sql, org, &id, record)
}

/// Creates an internal network; the caller has checked that the site belongs to `org`.
pub fn create(
    conn: &Connection,
    org: i64,
    f: &InternalNetworkFields,
    now: i64,
) -> Result<InternalNetworkRecord> {
    let id = tenants::new_origin(conn, "internal_network")?;
    conn.execute(
        "INSERT INTO internal_networks (origin_id, organization_id, name, ip_address,
            prefix_length, site_id, created_at, modified_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
        params![
            id,
            org,
            f.name,
            f.ip_address,
            f.prefix_length,
            f.site_id,
            now
        ],
    )?;
    get(conn, org, id)?.ok_or_else(|| crate::store::StoreError::Internal("network vanished".into()))
}

/// Replaces an internal network's fields (a move when the site changes). `None` if the
/// organization has no such network; the caller has checked the site.
pub fn update(
    conn: &Connection,
    org: i64,
    id: i64,
    f: &InternalNetworkFields,
    now: i64,
) -> Result<Option<InternalNetworkRecord>> {
    conn.execute(
        "UPDATE internal_networks SET name = ?3, ip_address = ?4, prefix_length = ?5,
            site_id = ?6, modified_at = ?7
         WHERE organization_id = ?1 AND origin_id = ?2",
        params![
            org,
            id,
            f.name,
            f.ip_address,
            f.prefix_length,
            f.site_id,
            now
        ],
    )?;
    get(conn, org, id)
}

/// Deletes an internal network and returns it as it was. `None` if there is no such network.
pub fn delete(conn: &Connection, org: i64, id: i64) -> Result<Option<InternalNetworkRecord>> {
    let Some(rec) = get(conn, org, id)? else {
        return Ok(None);
    };
    conn.execute(
        "DELETE FROM internal_networks WHERE organization_id = ?1 AND origin_id = ?2",
        params![org, id],
    )?;
    Ok(Some(rec))
}
