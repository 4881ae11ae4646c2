//! Users of an organization. The password is stored only as an argon2id hash, which no function
//! here ever reads back; `role` is read through the built-in roles table.

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::store::model::*;
use crate::store::Result;
use crate::timefmt::rfc3339;

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
    get(conn, org, id)?.ok_or_else(|| crate::store::StoreError::Internal("user vanished".into()))
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

/// One page of the built-in roles, ordered by id. Roles are shared by every organization: each
/// is answered with `organizationId` 0.
pub fn list_roles(conn: &Connection, limit: i64, offset: i64) -> Result<Vec<Role>> {
    let mut st =
        conn.prepare_cached("SELECT id, label FROM roles ORDER BY id LIMIT ?1 OFFSET ?2")?;
    let rows = st.query_map(params![limit, offset], |r| {
        Ok(Role {
            role_id: r.get(0)?,
            label: r.get(1)?,
            organization_id: 0,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

#[cfg(test)]
mod tests {
    use super::super::tenants;
    use super::*;
    use crate::store::{OrgFields, Parent};

    #[test]
    fn users_emails_are_unique_per_organization_ignoring_case() {
        let c = crate::store::sqlite::migrate::memory_db();
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
        assert!(matches!(
            create(&c, a.id, &f, "h", 5),
            Err(crate::store::StoreError::Internal(m)) if m.contains("UNIQUE")
        ));
        assert!(get(&c, b.id, u.id).unwrap().is_none());
        assert!(delete(&c, b.id, u.id).unwrap().is_none());
        assert_eq!(delete(&c, a.id, u.id).unwrap(), Some(u));
        assert!(role_exists(&c, 6).unwrap() && !role_exists(&c, 7).unwrap());
    }
}
