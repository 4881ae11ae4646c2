//! The statements of sites on SQLite (their rules: `rules::sites`). A site is addressed by
//! `siteId` (`sites.id`); its `originId` comes from the shared identity sequence and differs
//! from it.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::tenants;
use crate::store::model::*;
use crate::store::rules::sites::Sites;
use crate::store::rules::Hold;
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

impl Sites for Connection {
    async fn sites(&self, org: i64, limit: i64, offset: i64) -> Result<Vec<SiteRecord>> {
        let sql = format!("{SELECT} WHERE s.organization_id = ?1 ORDER BY s.id LIMIT ?2 OFFSET ?3");
        super::owned_page(self, &sql, org, limit, offset, record)
    }

    async fn site(&self, org: i64, id: i64) -> Result<Option<SiteRecord>> {
        let sql = format!("{SELECT} WHERE s.organization_id = ?1 AND s.id = ?2");
        super::owned_row(self, &sql, org, &id, record)
    }

    async fn hold_site(&self, org: i64, id: i64, _: Hold) -> Result<bool> {
        Ok(self
            .prepare_cached("SELECT 1 FROM sites WHERE organization_id = ?1 AND id = ?2")?
            .query_row(params![org, id], |_| Ok(()))
            .optional()?
            .is_some())
    }

    async fn insert_site(&self, org: i64, name: &str, is_default: bool, now: i64) -> Result<i64> {
        tenants::create_site(self, org, name, is_default, now)
    }

    async fn rename_site_row(&self, org: i64, id: i64, name: &str, now: i64) -> Result<()> {
        self.execute(
            "UPDATE sites SET name = ?3, modified_at = ?4 WHERE organization_id = ?1 AND id = ?2",
            params![org, id, name, now],
        )?;
        Ok(())
    }

    async fn delete_site_row(&self, org: i64, id: i64) -> Result<()> {
        self.execute(
            "DELETE FROM sites WHERE organization_id = ?1 AND id = ?2",
            params![org, id],
        )?;
        Ok(())
    }

    async fn default_site_id(&self, org: i64) -> Result<Option<i64>> {
        Ok(self
            .prepare_cached("SELECT id FROM sites WHERE organization_id = ?1 AND is_default = 1")?
            .query_row(params![org], |r| r.get(0))
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::rules::sites;
    use crate::store::sqlite::settle;
    use crate::store::{OrgFields, Parent, StoreError};
    use crate::timefmt::rfc3339;

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
        let s = settle(sites::create(&c, a.id, "Branch".into(), 10)).unwrap();
        assert_ne!(s.origin_id, s.site_id);
        assert!(!s.is_default);
        assert_eq!((s.internal_network_count, s.va_count), (0, 0));
        let all = settle(sites::list(&c, a.id, 100, 0)).unwrap();
        assert_eq!(all.len(), 2);
        assert!(all[0].is_default && all[0].site_id == a.default_site_id);
        assert!(settle(sites::get(&c, b.id, s.site_id)).unwrap().is_none());
        let moved = settle(sites::rename(&c, b.id, s.site_id, "x".into(), 20));
        assert_eq!(moved, Err(StoreError::NotFound));
        let r = settle(sites::rename(&c, a.id, s.site_id, "Renamed".into(), 20)).unwrap();
        assert_eq!(r.name, "Renamed");
        assert_eq!(r.modified_at, rfc3339(20));
        assert_eq!(r.created_at, rfc3339(10));
        assert_eq!(
            settle(sites::delete(&c, b.id, s.site_id)),
            Err(StoreError::NotFound)
        );
        assert_eq!(settle(sites::delete(&c, a.id, s.site_id)), Ok(r));
        assert_eq!(settle(sites::list(&c, a.id, 100, 0)).unwrap().len(), 1);
    }
}
