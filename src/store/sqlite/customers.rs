//! The statements of customers on SQLite (their rules: `rules::customers`).

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::tenants::org_params;
use crate::store::model::*;
use crate::store::rules::customers::Customers;
use crate::store::rules::tenants::emails;
use crate::store::rules::tenants::OrgColumns;
use crate::store::rules::{One, Rows};
use crate::store::Result;
use crate::timefmt::rfc3339;

const SELECT: &str = "SELECT o.id, o.name, p.name, o.seats, o.street_address, o.street_address2,
        o.city, o.state, o.country_code, o.zip_code, o.package_id, o.deal_id, o.admin_emails,
        o.ccw_deal_owner_emails, o.created_at, o.modified_at
    FROM organizations o LEFT JOIN packages p ON p.id = o.package_id";

fn record(r: &Row<'_>) -> rusqlite::Result<CustomerRecord> {
    Ok(CustomerRecord {
        customer_id: r.get(0)?,
        customer_name: r.get(1)?,
        package_name: r.get(2)?,
        seats: r.get(3)?,
        street_address: r.get(4)?,
        street_address2: r.get(5)?,
        city: r.get(6)?,
        state: r.get(7)?,
        country_code: r.get(8)?,
        zip_code: r.get(9)?,
        package_id: r.get(10)?,
        deal_id: r.get(11)?,
        admin_emails: emails(r.get(12)?),
        ccw_deal_owner_emails: emails(r.get(13)?),
        created_at: rfc3339(r.get(14)?),
        modified_at: rfc3339(r.get(15)?),
    })
}

/// The SQL condition selecting the parent's customers, and the parent's id.
fn parent_filter(parent: Parent) -> (&'static str, i64) {
    match parent {
        Parent::ServiceProvider(id) => ("o.service_provider_id = ?1", id),
        Parent::Msp(id) => ("o.msp_id = ?1", id),
        // Stand-alone organizations are nobody's customers: match nothing.
        Parent::None => ("0 AND ?1", 0),
    }
}

impl Customers for Connection {
    async fn provider_record(&self, sp: i64) -> Result<Option<ServiceProviderRecord>> {
        Ok(self
            .prepare_cached(
                "SELECT p.name, s.seats_total, s.status, s.rebill_at, s.expires_at,
                     (SELECT count(*) FROM organizations o
                      WHERE o.service_provider_id = s.id),
                     (SELECT coalesce(sum(o.seats), 0) FROM organizations o
                      WHERE o.service_provider_id = s.id)
                 FROM service_providers s JOIN packages p ON p.id = s.package_id WHERE s.id = ?1",
            )?
            .query_row(params![sp], |r| {
                Ok(ServiceProviderRecord {
                    package_name: r.get(0)?,
                    seats_total: r.get(1)?,
                    status: r.get(2)?,
                    rebill_at: r.get::<_, Option<i64>>(3)?.map(rfc3339),
                    expires_at: r.get::<_, Option<i64>>(4)?.map(rfc3339),
                    customer_count: r.get(5)?,
                    seats_used: r.get(6)?,
                })
            })
            .optional()?)
    }

    async fn provider_package(&self, sp: i64) -> Result<Option<i64>> {
        Ok(self
            .prepare_cached("SELECT package_id FROM service_providers WHERE id = ?1")?
            .query_row(params![sp], |r| r.get(0))
            .optional()?)
    }

    async fn customers(&self, parent: Parent, limit: i64, offset: i64) -> Rows<CustomerRecord> {
        let (cond, id) = parent_filter(parent);
        let sql = format!("{SELECT} WHERE {cond} ORDER BY o.id LIMIT ?2 OFFSET ?3");
        super::owned_page(self, &sql, id, limit, offset, record)
    }

    async fn customer(&self, parent: Parent, customer: i64) -> One<CustomerRecord> {
        let (cond, id) = parent_filter(parent);
        let sql = format!("{SELECT} WHERE {cond} AND o.id = ?2");
        super::owned_row(self, &sql, id, &customer, record)
    }

    async fn update_customer(&self, id: i64, f: &OrgFields, full: bool, now: i64) -> Result<()> {
        if !full {
            self.execute(
                "UPDATE organizations SET name = ?2, seats = ?3, modified_at = ?4 WHERE id = ?1",
                params![id, f.name, f.seats, now],
            )?;
            return Ok(());
        }
        self.execute(
            "UPDATE organizations SET name = ?2, seats = ?3, package_id = ?4,
                street_address = ?5, street_address2 = ?6, city = ?7, state = ?8,
                country_code = ?9, zip_code = ?10, deal_id = ?11, admin_emails = ?12,
                ccw_deal_owner_emails = ?13, modified_at = ?14
             WHERE id = ?1",
            org_params(&OrgColumns::of(f), &[&id], &now).as_slice(),
        )?;
        Ok(())
    }

    async fn packages(&self) -> Result<Vec<Package>> {
        let mut stmt = self.prepare_cached("SELECT id, name FROM packages ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok(Package {
                id: r.get(0)?,
                name: r.get(1)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::model::*;
    use crate::store::rules::{customers, tenants};
    use crate::store::sqlite::settle;

    fn fields(name: &str, seats: i64) -> OrgFields {
        OrgFields {
            name: name.into(),
            seats,
            package_id: Some(1),
            admin_emails: vec!["a@b.c".into()],
            ..Default::default()
        }
    }

    #[test]
    fn derived_fields_follow_customers() {
        let c = crate::store::sqlite::migrate::memory_db();
        let provider = NewServiceProvider {
            name: "p".into(),
            package_id: 2,
            seats_total: 100,
            rebill_at: None,
            expires_at: Some(0),
        };
        let sp = settle(tenants::create_service_provider(&c, provider, 0)).unwrap();
        let p = Parent::ServiceProvider(sp);
        let record = |sp| settle(customers::service_provider(&c, sp)).unwrap();
        let rec = record(sp).unwrap();
        assert_eq!((rec.customer_count, rec.seats_used), (0, 0));
        assert_eq!(rec.expires_at.as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(rec.package_name, "DNS Security Advantage");
        let a = settle(customers::create(&c, p, fields("a", 5), 0)).unwrap();
        settle(customers::create(&c, p, fields("b", 7), 0)).unwrap();
        let rec = record(sp).unwrap();
        assert_eq!((rec.customer_count, rec.seats_used), (2, 12));
        settle(customers::update(&c, p, a.customer_id, fields("a2", 1), 5)).unwrap();
        assert_eq!(record(sp).unwrap().seats_used, 8);
        settle(customers::delete(&c, p, a.customer_id)).unwrap();
        let rec = record(sp).unwrap();
        assert_eq!((rec.customer_count, rec.seats_used), (1, 7));
        let elsewhere = settle(customers::get(&c, Parent::Msp(sp), a.customer_id));
        assert!(elsewhere.unwrap().is_none());
        assert!(record(sp + 1).is_none());
    }
}
