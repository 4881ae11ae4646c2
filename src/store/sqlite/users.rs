//! The statements of users and roles on SQLite (their rules: `rules::users`).

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::store::model::*;
use crate::store::rules::users::Users;
use crate::store::rules::One;
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

impl Users for Connection {
    async fn users(&self, org: i64, limit: i64, offset: i64) -> Result<Vec<UserRecord>> {
        let sql = format!("{SELECT} WHERE u.organization_id = ?1 ORDER BY u.id LIMIT ?2 OFFSET ?3");
        super::owned_page(self, &sql, org, limit, offset, record)
    }

    async fn user(&self, org: i64, id: i64) -> Result<Option<UserRecord>> {
        let sql = format!("{SELECT} WHERE u.organization_id = ?1 AND u.id = ?2");
        super::owned_row(self, &sql, org, &id, record)
    }

    async fn role_known(&self, id: i64) -> Result<bool> {
        Ok(self
            .prepare_cached("SELECT 1 FROM roles WHERE id = ?1")?
            .query_row(params![id], |_| Ok(()))
            .optional()?
            .is_some())
    }

    async fn insert_user(&self, org: i64, f: &UserFields, hash: &str, now: i64) -> One<i64> {
        // The single writer: nothing can take the address between this look and the insert.
        let taken = self
            .prepare_cached(
                "SELECT 1 FROM users WHERE organization_id = ?1 AND email = ?2 COLLATE NOCASE",
            )?
            .query_row(params![org, f.email], |_| Ok(()))
            .optional()?
            .is_some();
        if taken {
            return Ok(None);
        }
        self.execute(
            "INSERT INTO users (organization_id, firstname, lastname, email, password_hash,
                role_id, timezone, status, last_login_time, two_factor_enable, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'Active', NULL, 0, ?8)",
            params![
                org,
                f.firstname,
                f.lastname,
                f.email,
                hash,
                f.role_id,
                f.timezone,
                now
            ],
        )?;
        Ok(Some(self.last_insert_rowid()))
    }

    async fn delete_user_row(&self, org: i64, id: i64) -> Result<()> {
        self.execute(
            "DELETE FROM users WHERE organization_id = ?1 AND id = ?2",
            params![org, id],
        )?;
        Ok(())
    }

    async fn roles(&self, limit: i64, offset: i64) -> Result<Vec<Role>> {
        let mut st =
            self.prepare_cached("SELECT id, label FROM roles ORDER BY id LIMIT ?1 OFFSET ?2")?;
        let rows = st.query_map(params![limit, offset], |r| {
            Ok(Role {
                role_id: r.get(0)?,
                label: r.get(1)?,
                organization_id: 0,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tenants;
    use super::*;
    use crate::store::rules::users;
    use crate::store::sqlite::settle;
    use crate::store::{OrgFields, Parent, StoreError};

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
        let create = |org: i64, f: &UserFields| {
            settle(users::create(&c, org, f.clone(), "$argon2id$x".into(), 5))
        };
        let u = create(a.id, &f).unwrap();
        assert_eq!(
            (
                u.role.as_str(),
                u.status.as_str(),
                u.last_login_time.clone(),
                u.two_factor_enable
            ),
            ("Read Only", "Active", None, false)
        );
        let shouted = UserFields {
            email: "a.b@EXAMPLE.com".into(),
            ..f.clone()
        };
        assert!(matches!(
            create(a.id, &shouted),
            Err(StoreError::Conflict(_))
        ));
        assert!(create(b.id, &shouted).is_ok());
        assert!(settle(users::get(&c, b.id, u.id)).unwrap().is_none());
        assert_eq!(
            settle(users::delete(&c, b.id, u.id)),
            Err(StoreError::NotFound)
        );
        assert_eq!(settle(users::delete(&c, a.id, u.id)), Ok(u));
        assert!(settle(users::role_exists(&c, 6)).unwrap());
        assert!(!settle(users::role_exists(&c, 7)).unwrap());
    }
}
