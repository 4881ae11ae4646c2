//! Customers of service providers and MSPs (organizations with a parent): the management
//! records and their derived fields.
//!
//! A customer is an organization: its `customerId` is the organization id. Derived fields
//! (`packageName`, a provider's `seatsUsed` and `customerCount`) are computed when read, so they
//! are always true.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::tenants;
use crate::store::model::*;
use crate::store::Result;
use crate::timefmt::rfc3339;

/// The service provider's record with its derived fields, if it exists.
pub fn service_provider(conn: &Connection, sp: i64) -> Result<Option<ServiceProviderRecord>> {
    Ok(conn
        .prepare_cached(
            "SELECT p.name, s.seats_total, s.status, s.rebill_at, s.expires_at,
                    (SELECT count(*) FROM organizations o WHERE o.service_provider_id = s.id),
                    (SELECT coalesce(sum(o.seats), 0) FROM organizations o
                      WHERE o.service_provider_id = s.id)
             FROM service_providers s JOIN packages p ON p.id = s.package_id
             WHERE s.id = ?1",
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

/// True when `id` names a package.
pub fn package_exists(conn: &Connection, id: i64) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM packages WHERE id = ?1")?
        .query_row(params![id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// The package of a service provider, if the provider exists.
pub fn service_provider_package(conn: &Connection, sp: i64) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached("SELECT package_id FROM service_providers WHERE id = ?1")?
        .query_row(params![sp], |r| r.get(0))
        .optional()?)
}

const SELECT: &str = "SELECT o.id, o.name, p.name, o.seats, o.street_address, o.street_address2,
        o.city, o.state, o.country_code, o.zip_code, o.package_id, o.deal_id, o.admin_emails,
        o.ccw_deal_owner_emails, o.created_at, o.modified_at
    FROM organizations o LEFT JOIN packages p ON p.id = o.package_id";

fn emails(json: String) -> Vec<String> {
    serde_json::from_str(&json).unwrap_or_default()
}

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

/// One page of a parent's customers, ordered by id.
pub fn list(
    conn: &Connection,
    parent: Parent,
    limit: i64,
    offset: i64,
) -> Result<Vec<CustomerRecord>> {
    let (cond, id) = parent_filter(parent);
    let sql = format!("{SELECT} WHERE {cond} ORDER BY o.id LIMIT ?2 OFFSET ?3");
    super::owned_page(conn, &sql, id, limit, offset, record)
}

/// One customer of the parent, if it exists and belongs to that parent.
pub fn get(conn: &Connection, parent: Parent, customer: i64) -> Result<Option<CustomerRecord>> {
    let (cond, id) = parent_filter(parent);
    let sql = format!("{SELECT} WHERE {cond} AND o.id = ?2");
    super::owned_row(conn, &sql, id, &customer, record)
}

/// Creates a customer: its organization, default site and enforcement customer key.
pub fn create(
    conn: &Connection,
    parent: Parent,
    f: &OrgFields,
    now: i64,
) -> Result<CustomerRecord> {
    let created = tenants::create_organization(conn, parent, f, now)?;
    get(conn, parent, created.id)?
        .ok_or_else(|| crate::store::StoreError::Internal("customer vanished".into()))
}

/// Replaces a customer's fields (a full replacement for a provider's customer; an MSP customer
/// has only a name and seats). `None` if there is no such customer of that parent.
pub fn update(
    conn: &Connection,
    parent: Parent,
    customer: i64,
    f: &OrgFields,
    now: i64,
) -> Result<Option<CustomerRecord>> {
    if get(conn, parent, customer)?.is_none() {
        return Ok(None);
    }
    match parent {
        Parent::Msp(_) => {
            conn.execute(
                "UPDATE organizations SET name = ?2, seats = ?3, modified_at = ?4 WHERE id = ?1",
                params![customer, f.name, f.seats, now],
            )?;
        }
        _ => {
            let admin = serde_json::to_string(&f.admin_emails).unwrap_or_else(|_| "[]".into());
            let ccw =
                serde_json::to_string(&f.ccw_deal_owner_emails).unwrap_or_else(|_| "[]".into());
            conn.execute(
                "UPDATE organizations SET name = ?2, seats = ?3, package_id = ?4,
                    street_address = ?5, street_address2 = ?6, city = ?7, state = ?8,
                    country_code = ?9, zip_code = ?10, deal_id = ?11, admin_emails = ?12,
                    ccw_deal_owner_emails = ?13, modified_at = ?14
                 WHERE id = ?1",
                params![
                    customer,
                    f.name,
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
        }
    }
    get(conn, parent, customer)
}

/// Deletes a customer's organization with all its data (domain list, events, resources,
/// customer keys, credentials) and returns the record as it was. `None` if there is no such
/// customer of that parent.
pub fn delete(conn: &Connection, parent: Parent, customer: i64) -> Result<Option<CustomerRecord>> {
    let Some(rec) = get(conn, parent, customer)? else {
        return Ok(None);
    };
    tenants::delete_organization(conn, customer)?;
    Ok(Some(rec))
}

/// All packages, ordered by id.
pub fn list_packages(conn: &Connection) -> Result<Vec<Package>> {
    let mut stmt = conn.prepare_cached("SELECT id, name FROM packages ORDER BY id")?;
    let rows = stmt.query_map([], |r| {
        Ok(Package {
            id: r.get(0)?,
            name: r.get(1)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let sp = tenants::create_service_provider(
            &c,
            &NewServiceProvider {
                name: "p".into(),
                package_id: 2,
                seats_total: 100,
                rebill_at: None,
                expires_at: Some(0),
            },
            0,
        )
        .unwrap();
        let p = Parent::ServiceProvider(sp);
        let rec = service_provider(&c, sp).unwrap().unwrap();
        assert_eq!((rec.customer_count, rec.seats_used), (0, 0));
        assert_eq!(rec.expires_at.as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(rec.package_name, "DNS Security Advantage");
        let a = create(&c, p, &fields("a", 5), 0).unwrap();
        create(&c, p, &fields("b", 7), 0).unwrap();
        let rec = service_provider(&c, sp).unwrap().unwrap();
        assert_eq!((rec.customer_count, rec.seats_used), (2, 12));
        update(&c, p, a.customer_id, &fields("a2", 1), 5)
            .unwrap()
            .unwrap();
        assert_eq!(service_provider(&c, sp).unwrap().unwrap().seats_used, 8);
        delete(&c, p, a.customer_id).unwrap().unwrap();
        let rec = service_provider(&c, sp).unwrap().unwrap();
        assert_eq!((rec.customer_count, rec.seats_used), (1, 7));
        assert!(get(&c, Parent::Msp(sp), a.customer_id).unwrap().is_none());
        assert!(service_provider(&c, sp + 1).unwrap().is_none());
    }
}
