//! The statements of users and roles on PostgreSQL (their rules: `rules::users`).

use tokio_postgres::Row;

use super::Db;
use crate::store::model::*;
use crate::store::rules::users::Users;
use crate::store::rules::One;
use crate::store::Result;
use crate::timefmt::rfc3339;

const SELECT: &str = "SELECT u.id, u.firstname, u.lastname, u.email, u.role_id, r.label,
        u.timezone, u.status, u.last_login_time, u.two_factor_enable
    FROM users u JOIN roles r ON r.id = u.role_id";

fn record(r: &Row) -> UserRecord {
    UserRecord {
        id: r.get(0),
        firstname: r.get(1),
        lastname: r.get(2),
        email: r.get(3),
        role_id: r.get(4),
        role: r.get(5),
        timezone: r.get(6),
        status: r.get(7),
        last_login_time: r.get::<_, Option<i64>>(8).map(rfc3339),
        two_factor_enable: r.get(9),
    }
}

impl Users for Db {
    async fn users(&self, org: i64, limit: i64, offset: i64) -> Result<Vec<UserRecord>> {
        let sql = format!("{SELECT} WHERE u.organization_id = $1 ORDER BY u.id LIMIT $2 OFFSET $3");
        self.owned_page(&sql, org, limit, offset, record).await
    }

    async fn user(&self, org: i64, id: i64) -> Result<Option<UserRecord>> {
        let sql = format!("{SELECT} WHERE u.organization_id = $1 AND u.id = $2");
        self.owned_row(&sql, org, &id, record).await
    }

    async fn role_known(&self, id: i64) -> Result<bool> {
        Ok(self
            .opt("SELECT 1 FROM roles WHERE id = $1", &[&id])
            .await?
            .is_some())
    }

    async fn insert_user(&self, org: i64, f: &UserFields, hash: &str, now: i64) -> One<i64> {
        let folded = f.email.to_ascii_lowercase();
        // The unique index decides, against every node's concurrent creations.
        Ok(self
            .opt(
                "INSERT INTO users (organization_id, firstname, lastname, email, email_folded,
                     password_hash, role_id, timezone, status, last_login_time,
                     two_factor_enable, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'Active', NULL, false, $9)
                 ON CONFLICT (organization_id, email_folded) DO NOTHING
                 RETURNING id",
                &[
                    &org,
                    &f.firstname,
                    &f.lastname,
                    &f.email,
                    &folded,
                    &hash,
                    &f.role_id,
                    &f.timezone,
                    &now,
                ],
            )
            .await?
            .map(|r| r.get(0)))
    }

    async fn delete_user_row(&self, org: i64, id: i64) -> Result<()> {
        self.exec(
            "DELETE FROM users WHERE organization_id = $1 AND id = $2",
            &[&org, &id],
        )
        .await?;
        Ok(())
    }

    async fn roles(&self, limit: i64, offset: i64) -> Result<Vec<Role>> {
        Ok(self
            .rows(
                "SELECT id, label FROM roles ORDER BY id LIMIT $1 OFFSET $2",
                &[&limit, &offset],
            )
            .await?
            .iter()
            .map(|r| Role {
                role_id: r.get(0),
                label: r.get(1),
                organization_id: 0,
            })
            .collect())
    }
}
