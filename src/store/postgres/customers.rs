//! The statements of customers on PostgreSQL (their rules: `rules::customers`).

use tokio_postgres::Row;

use super::tenants::org_params;
use super::Db;
use crate::store::model::*;
use crate::store::rules::customers::Customers;
use crate::store::rules::tenants::emails;
use crate::store::rules::tenants::OrgColumns;
use crate::store::rules::{One, Rows};
use crate::store::Result;
use crate::timefmt::rfc3339;

const SELECT: &str = "SELECT o.id, o.name, p.name, o.seats, o.street_address,
        o.street_address2, o.city, o.state, o.country_code, o.zip_code, o.package_id, o.deal_id,
        o.admin_emails, o.ccw_deal_owner_emails, o.created_at, o.modified_at
    FROM organizations o LEFT JOIN packages p ON p.id = o.package_id";

fn record(r: &Row) -> CustomerRecord {
    CustomerRecord {
        customer_id: r.get(0),
        customer_name: r.get(1),
        package_name: r.get(2),
        seats: r.get(3),
        street_address: r.get(4),
        street_address2: r.get(5),
        city: r.get(6),
        state: r.get(7),
        country_code: r.get(8),
        zip_code: r.get(9),
        package_id: r.get(10),
        deal_id: r.get(11),
        admin_emails: emails(r.get(12)),
        ccw_deal_owner_emails: emails(r.get(13)),
        created_at: rfc3339(r.get(14)),
        modified_at: rfc3339(r.get(15)),
    }
}

/// The condition selecting a parent's customers (its id is `$1`); `None` for no parent, whose
/// organizations are nobody's customers.
fn parent_filter(parent: Parent) -> Option<(&'static str, i64)> {
    match parent {
        Parent::ServiceProvider(id) => Some(("o.service_provider_id = $1", id)),
        Parent::Msp(id) => Some(("o.msp_id = $1", id)),
        Parent::None => None,
    }
}

impl Customers for Db {
    async fn provider_record(&self, sp: i64) -> Result<Option<ServiceProviderRecord>> {
        Ok(self
            .opt(
                "SELECT p.name, s.seats_total, s.status, s.rebill_at, s.expires_at,
                        (SELECT count(*) FROM organizations o WHERE o.service_provider_id = s.id),
                        (SELECT coalesce(sum(o.seats), 0)::bigint FROM organizations o
                         WHERE o.service_provider_id = s.id)
                 FROM service_providers s JOIN packages p ON p.id = s.package_id
                 WHERE s.id = $1",
                &[&sp],
            )
            .await?
            .map(|r| ServiceProviderRecord {
                package_name: r.get(0),
                seats_total: r.get(1),
                status: r.get(2),
                rebill_at: r.get::<_, Option<i64>>(3).map(rfc3339),
                expires_at: r.get::<_, Option<i64>>(4).map(rfc3339),
                customer_count: r.get(5),
                seats_used: r.get(6),
            }))
    }

    async fn provider_package(&self, sp: i64) -> Result<Option<i64>> {
        Ok(self
            .opt(
                "SELECT package_id FROM service_providers WHERE id = $1",
                &[&sp],
            )
            .await?
            .map(|r| r.get(0)))
    }

    async fn customers(&self, parent: Parent, limit: i64, offset: i64) -> Rows<CustomerRecord> {
        let Some((cond, id)) = parent_filter(parent) else {
            return Ok(Vec::new());
        };
        let sql = format!("{SELECT} WHERE {cond} ORDER BY o.id LIMIT $2 OFFSET $3");
        self.owned_page(&sql, id, limit, offset, record).await
    }

    async fn customer(&self, parent: Parent, customer_id: i64) -> One<CustomerRecord> {
        let Some((cond, id)) = parent_filter(parent) else {
            return Ok(None);
        };
        let sql = format!("{SELECT} WHERE {cond} AND o.id = $2");
        self.owned_row(&sql, id, &customer_id, record).await
    }

    async fn update_customer(&self, id: i64, f: &OrgFields, full: bool, now: i64) -> Result<()> {
        if !full {
            self.exec(
                "UPDATE organizations SET name = $2, seats = $3, modified_at = $4 WHERE id = $1",
                &[&id, &f.name, &f.seats, &now],
            )
            .await?;
            return Ok(());
        }
        self.exec(
            "UPDATE organizations SET name = $2, seats = $3, package_id = $4,
                street_address = $5, street_address2 = $6, city = $7, state = $8,
                country_code = $9, zip_code = $10, deal_id = $11,
                admin_emails = $12, ccw_deal_owner_emails = $13, modified_at = $14
             WHERE id = $1",
            &org_params(&OrgColumns::of(f), &[&id], &now),
        )
        .await?;
        Ok(())
    }

    async fn packages(&self) -> Result<Vec<Package>> {
        Ok(self
            .rows("SELECT id, name FROM packages ORDER BY id", &[])
            .await?
            .iter()
            .map(|r| Package {
                id: r.get(0),
                name: r.get(1),
            })
            .collect())
    }
}
