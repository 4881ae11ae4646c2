//! Users of an organization. The password is stored only as an argon2id hash, which no function
//! here ever reads back; `role` is read through the built-in roles table.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::Serialize;

use super::internal_networks::{self, InternalNetworkFields};
use super::Result;
use crate::timefmt::rfc3339;

/// The User record, exactly the spec's fields in the spec's order (never the password).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UserRecord {
    pub id: i64,
    pub firstname: String,
    pub lastname: String,
    pub email: String,
    pub role_id: i64,
    pub role: String,
    pub timezone: String,
    pub status: String,
    pub last_login_time: Option<String>,
    pub two_factor_enable: bool,
}

/// The input fields of a user, apart from the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserFields {
    pub firstname: String,
    pub lastname: String,
    pub email: String,
    pub role_id: i64,
    pub timezone: String,
}

const SELECT: &str = "SELECT u.id, u.firstname, u.lastname, u.email, u.role_id, r.label,
        u.timezone, u.status, u.last_login_time, u.two_factor_enable
    FROM users u JOIN roles r ON r.id = u.role_id";

fn record(r: &Row<'_>) -> rusqlite::Result<UserRecord> {
    Ok(UserRecord {
        id: r.get(0)?,
        firstname: r.get(1)?,
        lastname: r.get(2)?,
        email: r.get(3)?,
        role_id: r.get(4)?,
        role: r.get(5)?,
        timezone: r.get(6)?,
        status: r.get(7)?,
        last_login_time: r.get::<_, Option<i64>>(8)?.map(rfc3339),
        two_factor_enable: r.get(9)?,
    })
}

/// One page of the organization's users, ordered by id.
pub fn list(conn: &Connection, org: i64, limit: i64, offset: i64) -> Result<Vec<UserRecord>> {
    let sql = format!("{SELECT} WHERE u.organization_id = ?1 ORDER BY u.id LIMIT ?2 OFFSET ?3");
    super::owned_page(conn, &sql, org, limit, offset, record)
}

/// One user of the organization, if it exists there.
pub fn get(conn: &Connection, org: i64, id: i64) -> Result<Option<UserRecord>> {
    let sql = format!("{SELECT} WHERE u.organization_id = ?1 AND u.id = ?2");
    super::owned_row(conn, &sql, org, &id, record)
}

/// True when `id` names a built-in role.
pub fn role_exists(conn: &Connection, id: i64) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM roles WHERE id = ?1")?
        .query_row(params![id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// True when the organization already has a user with this e-mail address, ignoring (ASCII)
/// case, the same comparison as the table's UNIQUE constraint.
pub fn email_taken(conn: &Connection, org: i64, email: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT 1 FROM users WHERE organization_id = ?1 AND email = ?2 COLLATE NOCASE",
        )?
        .query_row(params![org, email], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Creates an active user without two-factor authentication who never logged in. The caller
/// has checked the role and the e-mail address and hashed the password.
pub fn create(
    conn: &Connection,
    org: i64,
    f: &UserFields,
    password_hash: &str,
    now: i64,
) -> Result<UserRecord> {
    conn.execute(
        "INSERT INTO users (organization_id, firstname, lastname, email, password_hash, role_id,
            timezone, status, last_login_time, two_factor_enable, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'Active', NULL, 0, ?8)",
        params![
            org,
            f.firstname,
            f.lastname,
            f.email,
            password_hash,
            f.role_id,
            f.timezone,
            now
        ],
    )?;
    let id = conn.last_insert_rowid();
    get(conn, org, id)?.ok_or_else(|| super::StoreError::Aborted("user vanished".into()))
}

/// Deletes a user and returns the record as it was. `None` if there is no such user.
pub fn delete(conn: &Connection, org: i64, id: i64) -> Result<Option<UserRecord>> {
    let Some(rec) = get(conn, org, id)? else {
        return Ok(None);
    };
    conn.execute(
        "DELETE FROM users WHERE organization_id = ?1 AND id = ?2",
        params![org, id],
    )?;
    Ok(Some(rec))
}

/// Demo data of organization number `n` (0 or 1): an internal network on each of its two sites
/// and one user, whose password is random and never shown (operators create their own users).
pub fn fill_people_and_networks(
    conn: &Connection,
    org: i64,
    default_site: i64,
    second_site: i64,
    n: usize,
    now: i64,
) -> Result<()> {
    let (user, domain, zone, nets) = if n == 0 {
        (
            ("Ada", "Lovelace"),
            "acme-labs.example",
            "America/New_York",
            [
                ("Head Office LAN", "10.10.0.0"),
                ("Branch Office LAN", "10.20.0.0"),
            ],
        )
    } else {
        (
            ("Grace", "Hopper"),
            "globex.example",
            "Europe/Berlin",
            [
                ("Office LAN", "192.168.10.0"),
                ("Warehouse LAN", "192.168.20.0"),
            ],
        )
    };
    for ((name, ip), site) in nets.into_iter().zip([default_site, second_site]) {
        let f = InternalNetworkFields {
            name: name.into(),
            ip_address: ip.into(),
            prefix_length: 24,
            site_id: site,
        };
        internal_networks::create(conn, org, &f, now)?;
    }
    let f = UserFields {
        firstname: user.0.into(),
        lastname: user.1.into(),
        email: format!("{}.{}@{domain}", user.0, user.1).to_ascii_lowercase(),
        role_id: 1,
        timezone: zone.into(),
    };
    let password = crate::secrets::hash(&uuid::Uuid::new_v4().to_string());
    create(conn, org, &f, &password, now)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tenants::{self, OrgFields, Parent};

    #[test]
    fn users_emails_are_unique_per_organization_ignoring_case() {
        let c = crate::store::migrate::memory_db();
        let o = OrgFields {
            name: "o".into(),
            seats: 1,
            ..Default::default()
        };
        let a = tenants::create_organization(&c, Parent::None, &o, 0).unwrap();
        let b = tenants::create_organization(&c, Parent::None, &o, 0).unwrap();
        let f = UserFields {
            firstname: "A".into(),
            lastname: "B".into(),
            email: "A.B@example.com".into(),
            role_id: 2,
            timezone: "UTC".into(),
        };
        let u = create(&c, a.id, &f, "$argon2id$x", 5).unwrap();
        assert_eq!(
            (
                u.role.as_str(),
                u.status.as_str(),
                u.last_login_time.clone(),
                u.two_factor_enable
            ),
            ("Read Only", "Active", None, false)
        );
        assert!(email_taken(&c, a.id, "a.b@EXAMPLE.com").unwrap());
        assert!(!email_taken(&c, b.id, "a.b@example.com").unwrap());
        assert!(create(&c, a.id, &f, "h", 5).unwrap_err().is_constraint());
        assert!(get(&c, b.id, u.id).unwrap().is_none());
        assert!(delete(&c, b.id, u.id).unwrap().is_none());
        assert_eq!(delete(&c, a.id, u.id).unwrap(), Some(u));
        assert!(role_exists(&c, 6).unwrap() && !role_exists(&c, 7).unwrap());
    }
}
