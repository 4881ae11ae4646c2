//! The statements of sites on PostgreSQL (their rules: `rules::sites`).

use tokio_postgres::Row;

use super::Db;
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

fn record(r: &Row) -> SiteRecord {
    SiteRecord {
        origin_id: r.get(0),
        name: r.get(1),
        site_id: r.get(2),
        is_default: r.get(3),
        kind: r.get(4),
        internal_network_count: r.get(5),
        va_count: r.get(6),
        modified_at: rfc3339(r.get(7)),
        created_at: rfc3339(r.get(8)),
    }
}

impl Sites for Db {
    async fn sites(&self, org: i64, limit: i64, offset: i64) -> Result<Vec<SiteRecord>> {
        let sql = format!("{SELECT} WHERE s.organization_id = $1 ORDER BY s.id LIMIT $2 OFFSET $3");
        self.owned_page(&sql, org, limit, offset, record).await
    }

    async fn site(&self, org: i64, id: i64) -> Result<Option<SiteRecord>> {
        let sql = format!("{SELECT} WHERE s.organization_id = $1 AND s.id = $2");
        self.owned_row(&sql, org, &id, record).await
    }

    async fn hold_site(&self, org: i64, id: i64, hold: Hold) -> Result<bool> {
        let sql = match hold {
            Hold::Share => {
                "SELECT 1 FROM sites WHERE organization_id = $1 AND id = $2 FOR KEY SHARE"
            }
            Hold::Exclusive => {
                "SELECT 1 FROM sites WHERE organization_id = $1 AND id = $2 FOR UPDATE"
            }
        };
        Ok(self.opt(sql, &[&org, &id]).await?.is_some())
    }

    async fn insert_site(&self, org: i64, name: &str, is_default: bool, now: i64) -> Result<i64> {
        let origin = self.new_origin("site").await?;
        Ok(self
            .one(
                "INSERT INTO sites (organization_id, origin_id, name, is_default, type,
                     created_at, modified_at)
                 VALUES ($1, $2, $3, $4, 'site', $5, $5) RETURNING id",
                &[&org, &origin, &name, &is_default, &now],
            )
            .await?
            .get(0))
    }

    async fn rename_site_row(&self, org: i64, id: i64, name: &str, now: i64) -> Result<()> {
        self.exec(
            "UPDATE sites SET name = $3, modified_at = $4 WHERE organization_id = $1 AND id = $2",
            &[&org, &id, &name, &now],
        )
        .await?;
        Ok(())
    }

    async fn delete_site_row(&self, org: i64, id: i64) -> Result<()> {
        self.exec(
            "DELETE FROM sites WHERE organization_id = $1 AND id = $2",
            &[&org, &id],
        )
        .await?;
        Ok(())
    }

    async fn default_site_id(&self, org: i64) -> Result<Option<i64>> {
        Ok(self
            .opt(
                "SELECT id FROM sites WHERE organization_id = $1 AND is_default",
                &[&org],
            )
            .await?
            .map(|r| r.get(0)))
    }
}
