//! Users and the built-in roles: a user's role must exist, and its e-mail address is unique in
//! its organization, ignoring case.

use super::One;
use super::{conflict, found, invalid, written, TxResult};
use crate::store::model::*;
use crate::store::Result;

/// The statements of users and roles. The password is stored only as an argon2id hash, which
/// no statement reads back; `role` is read through the built-in roles table.
pub(crate) trait Users {
    /// One page of the organization's users, ordered by id.
    async fn users(&self, org: i64, limit: i64, offset: i64) -> Result<Vec<UserRecord>>;
    async fn user(&self, org: i64, id: i64) -> Result<Option<UserRecord>>;
    async fn role_known(&self, id: i64) -> Result<bool>;
    /// Inserts an active user without two-factor authentication who never logged in; `None`
    /// when the organization has a user with that e-mail address, ignoring ASCII case (found by
    /// the unique index, against concurrent creations too).
    async fn insert_user(&self, org: i64, f: &UserFields, hash: &str, now: i64) -> One<i64>;
    async fn delete_user_row(&self, org: i64, id: i64) -> Result<()>;
    /// One page of the built-in roles, ordered by id.
    async fn roles(&self, limit: i64, offset: i64) -> Result<Vec<Role>>;
}

pub(crate) async fn list<X: Users>(
    x: &X,
    org: i64,
    limit: i64,
    offset: i64,
) -> TxResult<Vec<UserRecord>> {
    Ok(x.users(org, limit, offset).await?)
}

pub(crate) async fn get<X: Users>(x: &X, org: i64, id: i64) -> TxResult<Option<UserRecord>> {
    Ok(x.user(org, id).await?)
}

pub(crate) async fn role_exists<X: Users>(x: &X, id: i64) -> TxResult<bool> {
    Ok(x.role_known(id).await?)
}

/// Creates a user with an already hashed password (`Invalid` for an unknown role, `Conflict`
/// for an e-mail address taken in the organization).
pub(crate) async fn create<X: Users>(
    x: &X,
    org: i64,
    fields: UserFields,
    password_hash: String,
    now: i64,
) -> TxResult<UserRecord> {
    if !x.role_known(fields.role_id).await? {
        return invalid(UNKNOWN_ROLE);
    }
    let Some(id) = x.insert_user(org, &fields, &password_hash, now).await? else {
        return conflict(format!(
            "a user with email {} already exists in this organization",
            fields.email
        ));
    };
    written(x.user(org, id).await?, "user")
}

pub(crate) async fn delete<X: Users>(x: &X, org: i64, id: i64) -> TxResult<UserRecord> {
    let rec = found(x.user(org, id).await?)?;
    x.delete_user_row(org, id).await?;
    Ok(rec)
}

/// Roles are shared by every organization: each is answered with `organizationId` 0.
pub(crate) async fn list_roles<X: Users>(x: &X, limit: i64, offset: i64) -> TxResult<Vec<Role>> {
    Ok(x.roles(limit, offset).await?)
}
