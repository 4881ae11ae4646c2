//! Users of an organization (`/v1/organizations/{id}/users`): create, list, read, delete.
//!
//! The password is required on input and kept only as an argon2id hash, computed on the bounded
//! hashing executor; no response carries it. E-mail addresses are unique per organization,
//! ignoring case (409).

use bytes::Bytes;
use hyper::Response;
use rusqlite::Connection;
use serde_json::{Map, Value};

use super::common::{
    found, list_page, object_body, ok, write_org, write_org_found, Checked, Input,
};
use super::timezones;
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::MgmtEndpoint;
use crate::state::{AppState, RequestCtx};
use crate::store::users::{self as store, UserFields, UserRecord};
use crate::timefmt::now;

/// Handles the endpoints of this resource for organization `org` (already checked visible).
pub async fn handle(
    state: &AppState,
    ep: MgmtEndpoint,
    org: i64,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    use MgmtEndpoint::*;
    match ep {
        ListUsers { .. } => list_page(state, ctx, move |c, l, o| store::list(c, org, l, o)).await,
        GetUser { id, .. } => found(state.store.read(move |c| store::get(c, org, id)).await?),
        CreateUser { .. } => {
            let m = object_body(ctx, &body)?;
            // The role's existence is part of the validation, before the hashing.
            let (f, password) = state.store.read(move |c| Ok(user_input(c, &m))).await??;
            // SECURITY: argon2 is slow and memory-hungry on purpose; the bounded executor keeps a
            // burst of creates from running more hashes at once than there are cores.
            let hash = crate::secrets::run_limited(move || crate::secrets::hash(&password))
                .await
                .ok_or(MgmtError::Internal)?;
            let rec = write_org(state, org, move |c| create_user(c, org, &f, &hash, now())).await?;
            Ok(ok(&rec))
        }
        DeleteUser { id, .. } => {
            write_org_found(state, org, move |c| store::delete(c, org, id)).await
        }
        _ => Err(MgmtError::NotFound),
    }
}

/// Validates a User input object, fields in the spec's order, an unknown `roleId` included;
/// returns the fields and the password (to be hashed by the caller).
pub fn user_input(
    c: &Connection,
    m: &Map<String, Value>,
) -> Result<(UserFields, String), MgmtError> {
    let i = Input(m);
    let firstname = i.req_str("firstname")?;
    let lastname = i.req_str("lastname")?;
    let email = i.req_email("email")?;
    let password = i.req_secret("password")?;
    let role_id = i.req_int("roleId")?;
    check_role(c, role_id)?;
    let timezone = i.req_str("timezone")?;
    if !timezones::is_iana(&timezone) {
        return Err(MgmtError::BadRequest(
            "timezone must be an IANA time zone name such as UTC or Europe/Berlin".into(),
        ));
    }
    let f = UserFields {
        firstname,
        lastname,
        email,
        role_id,
        timezone,
    };
    Ok((f, password))
}

/// 400 naming `roleId` unless it is the id of a role.
fn check_role(c: &Connection, role_id: i64) -> Result<(), MgmtError> {
    if store::role_exists(c, role_id)? {
        Ok(())
    } else {
        Err(MgmtError::BadRequest(
            "roleId must be the id of a role (see GET /v1/organizations/{organizationId}/roles)"
                .into(),
        ))
    }
}

/// Creates a user validated by `user_input` (the role included: roles are built in and never
/// deleted) after checking, in the write's transaction, that the e-mail address is free in the
/// organization (409). Used by the API and the command line.
pub fn create_user(
    c: &Connection,
    org: i64,
    f: &UserFields,
    password_hash: &str,
    now: i64,
) -> Checked<UserRecord> {
    if store::email_taken(c, org, &f.email)? {
        return Ok(Err(MgmtError::Conflict(format!(
            "a user with email {} already exists in this organization",
            f.email
        ))));
    }
    Ok(Ok(store::create(c, org, f, password_hash, now)?))
}
