//! The statements of internal networks on PostgreSQL (their rules: `rules::internal_networks`).

use tokio_postgres::Row;

use super::Db;
use crate::store::model::*;
use crate::store::rules::internal_networks::Fields;
use crate::store::rules::internal_networks::InternalNetworks;
use crate::store::rules::{One, Rows};
use crate::store::Result;
use crate::timefmt::rfc3339;

const SELECT: &str = "SELECT n.origin_id, n.name, n.ip_address, n.prefix_length, s.name,
        n.site_id, n.created_at, n.modified_at
    FROM internal_networks n JOIN sites s ON s.id = n.site_id";

fn record(r: &Row) -> InternalNetworkRecord {
    InternalNetworkRecord {
        origin_id: r.get(0),
        name: r.get(1),
        ip_address: r.get(2),
        prefix_length: r.get(3),
        site_name: r.get(4),
        site_id: r.get(5),
        created_at: rfc3339(r.get(6)),
        modified_at: rfc3339(r.get(7)),
    }
}

/// Runs `sql`, which writes a network's row; its parameters, in this order: the organization,
/// the network's originId, name, ip_address, prefix_length, site_id, and `now`.
async fn write(db: &Db, sql: &str, org: i64, id: i64, f: &Fields, now: i64) -> Result<()> {
    let (name, address, prefix, site) = (&f.name, &f.ip_address, f.prefix_length, f.site_id);
    db.exec(sql, &[&org, &id, name, address, &prefix, &site, &now])
        .await?;
    Ok(())
}

impl InternalNetworks for Db {
    async fn inets(&self, org: i64, limit: i64, offset: i64) -> Rows<InternalNetworkRecord> {
        let sql = format!(
            "{SELECT} WHERE n.organization_id = $1 ORDER BY n.origin_id
             LIMIT $2 OFFSET $3"
        );
        self.owned_page(&sql, org, limit, offset, record).await
    }

    async fn inet(&self, org: i64, id: i64) -> One<InternalNetworkRecord> {
        let sql = format!("{SELECT} WHERE n.organization_id = $1 AND n.origin_id = $2");
        self.owned_row(&sql, org, &id, record).await
    }

    async fn insert_inet(&self, org: i64, f: &Fields, now: i64) -> Result<i64> {
        let id = self.new_origin("internal_network").await?;
        write(
            self,
            "INSERT INTO internal_networks (organization_id, origin_id, name, ip_address,
                 prefix_length, site_id, created_at, modified_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
            org,
            id,
            f,
            now,
        )
        .await?;
        Ok(id)
    }

    async fn update_inet(&self, org: i64, id: i64, f: &Fields, now: i64) -> Result<()> {
        write(
            self,
            "UPDATE internal_networks SET name = $3, ip_address = $4, prefix_length = $5,
                site_id = $6, modified_at = $7
             WHERE organization_id = $1 AND origin_id = $2",
            org,
            id,
            f,
            now,
        )
        .await
    }

    async fn delete_inet(&self, org: i64, id: i64) -> Result<()> {
        self.exec(
            "DELETE FROM internal_networks WHERE organization_id = $1 AND origin_id = $2",
            &[&org, &id],
        )
        .await?;
        Ok(())
    }
}
