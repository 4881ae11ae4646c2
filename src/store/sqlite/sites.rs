//! Sites of an organization and their derived fields.
//!
//! `internalNetworkCount` and `vaCount` are counted when read, so they stay true whatever creates,
//! moves or deletes internal networks and virtual appliances. A site is addressed by `siteId`
//! (`sites.id`); its `originId` comes from the shared identity sequence and differs from it.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::tenants;
use crate::store::model::*;
use crate::store::Result;
use crate::timefmt::rfc3339;

const SELECT: &str = "SELECT s.origin_id, s.name, s.id, s.is_default, s.type,
        (SELECT count(*) FROM internal_networks n WHERE n.site_id = s.id),
        (SELECT count(*) FROM virtual_appliances v WHERE v.site_id = s.id),
        s.modified_at, s.created_at
    FROM sites s";

fn record(r: &Row<'_>) -> rusqlite::Result<SiteRecord> {
    Ok(SiteRecord {
        origin_id: r.get(0)?,
        name: r.get(1)?,
        site_id: r.get(2)?,
        is_default: r.get(3)?,
        kind: r.get(4)?,
        internal_network_count: r.get(5)?,
        va_count: r.get(6)?,
        modified_at: rfc3339(r.get(7)?),
        created_at: rfc3339(r.get(8)?),
    })
}

/// One page of the organization's sites, ordered by siteId.
pub fn list(conn: &Connection, org: i64, limit: i64, offset: i64) -> Result<Vec<SiteRecord>> {
    let sql = format!("{SELECT} WHERE s.organization_id = ?1 ORDER BY s.id LIMIT ?2 OFFSET ?3");
    super::owned_page(conn, &sql, org, limit, offset, record)
}

/// One site of the organization, if it exists there.
pub fn get(conn: &Connection, org: i64, site: i64) -> Result<Option<SiteRecord>> {
    let sql = format!("{SELECT} WHERE s.organization_id = ?1 AND s.id = ?2");
    super::owned_row(conn, &sql, org, &site, record)
}

/// Creates a (non-default) site and returns its record.
pub fn create(conn: &Connection, org: i64, name: &str, now: i64) -> Result<SiteRecord> {
    let id = tenants::create_site(conn, org, name, false, now)?;
    get(conn, org, id)?.ok_or_else(|| crate::store::StoreError::Internal("site vanished".into()))
}

/// Renames a site. `None` if the organization has no such site.
pub fn rename(
    conn: &Connection,
    org: i64,
    site: i64,
    name: &str,
    now: i64,
) -> Result<Option<SiteRecord>> {
    conn.execute(
        "UPDATE sites SET name = ?3, modified_at = ?4 WHERE organization_id = ?1 AND id = ?2",
        params![org, site, name, now],
    )?;
    get(conn, org, site)
}

/// Deletes a site; the caller has checked that nothing refers to it any more.
pub fn delete(conn: &Connection, org: i64, site: i64) -> Result<bool> {
    Ok(conn.execute(
        "DELETE FROM sites WHERE organization_id = ?1 AND id = ?2",
        params![org, site],
    )? > 0)
}

/// The site's name, if the organization has a site with that id.
pub fn name_of(conn: &Connection, org: i64, site: i64) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT name FROM sites WHERE organization_id = ?1 AND id = ?2")?
        .query_row(params![org, site], |r| r.get(0))
        .optional()?)
}

/// The organization's default site, if the organization exists.
pub fn default_site(conn: &Connection, org: i64) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached("SELECT id FROM sites WHERE organization_id = ?1 AND is_default = 1")?
        .query_row(params![org], |r| r.get(0))
        .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{OrgFields, Parent};

    #[test]
    fn sites_belong_to_their_organization_and_count_what_they_hold() {
        let c = crate::store::sqlite::migrate::memory_db();
        let f = OrgFields {
            name: "o".into(),
            seats: 1,
            ..Default::default()
        };
        let a = tenants::create_organization(&c, Parent::None, &f, 0).unwrap();
        let b = tenants::create_organization(&c, Parent::None, &f, 0).unwrap();
        let s = create(&c, a.id, "Branch", 10).unwrap();
        assert_ne!(s.origin_id, s.site_id);
        assert!(!s.is_default);
        assert_eq!((s.internal_network_count, s.va_count), (0, 0));
        let all = list(&c, a.id, 100, 0).unwrap();
        assert_eq!(all.len(), 2);
        assert!(all[0].is_default && all[0].site_id == a.default_site_id);
        assert!(get(&c, b.id, s.site_id).unwrap().is_none());
        assert!(rename(&c, b.id, s.site_id, "x", 20).unwrap().is_none());
        let r = rename(&c, a.id, s.site_id, "Renamed", 20).unwrap().unwrap();
        assert_eq!(r.name, "Renamed");
        assert_eq!(r.modified_at, rfc3339(20));
        assert_eq!(r.created_at, rfc3339(10));
        assert!(!delete(&c, b.id, s.site_id).unwrap());
        assert!(delete(&c, a.id, s.site_id).unwrap());
        assert_eq!(list(&c, a.id, 100, 0).unwrap().len(), 1);
    }
}
