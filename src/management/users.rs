//! Users of an organization (`/v1/organizations/{id}/users`): create, list, read, delete.
//!
//! The password is required on input and kept only as an argon2id hash, computed on the bounded
//! hashing executor; no response carries it. E-mail addresses are unique per organization,
//! ignoring case (409).

use bytes::Bytes;
use hyper::Response;
use serde_json::{Map, Value};

use super::common::{found, object_body, ok, paging, Input};
use super::timezones;
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::ReadCreateDelete;
use crate::state::{AppState, RequestCtx};
use crate::store::{UserFields, UNKNOWN_ROLE};
use crate::timefmt::now;

/// Handles the endpoints of this resource for organization `org` (already checked visible).
pub async fn handle(
    state: &AppState,
    ep: ReadCreateDelete,
    org: i64,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    use ReadCreateDelete::*;
    let store = &state.store;
    match ep {
        List => {
            let p = paging(ctx)?;
            Ok(ok(&store.list_users(org, p.limit, p.offset).await?))
        }
        Get(id) => found(store.get_user(org, id).await?),
        Create => {
            let m = object_body(ctx, &body)?;
            // The role's existence is part of the validation, before the hashing.
            let (f, password) = user_input(&m, &role_ids(store).await?)?;
            // SECURITY: argon2 is slow and memory-hungry on purpose; the bounded executor keeps a
            // burst of creates from running more hashes at once than there are cores.
            let hash = crate::secrets::run_limited(move || crate::secrets::try_hash(&password))
                .await
                .ok_or(MgmtError::Internal)?
                .map_err(|e| {
                    log::error!("cannot hash a password: {e}");
                    MgmtError::Internal
                })?;
            Ok(ok(&store.create_user(org, f, hash, now()).await?))
        }
        Delete(id) => Ok(ok(&store.delete_user(org, id).await?)),
    }
}

/// The ids of the built-in roles.
pub async fn role_ids(store: &crate::store::Store) -> Result<Vec<i64>, MgmtError> {
    Ok(store
        .list_roles(200, 0)
        .await?
        .iter()
        .map(|r| r.role_id)
        .collect())
}

/// Validates a User input object against the known `roles`, fields in the spec's order (an
/// unknown `roleId` included); returns the fields and the password (to be hashed by the caller).
pub fn user_input(
    m: &Map<String, Value>,
    roles: &[i64],
) -> Result<(UserFields, String), MgmtError> {
    let i = Input(m);
    let firstname = i.req_str("firstname")?;
    let lastname = i.req_str("lastname")?;
    let email = i.req_email("email")?;
    let password = i.req_secret("password")?;
    let role_id = i.req_int("roleId")?;
    if !roles.contains(&role_id) {
        return Err(MgmtError::BadRequest(UNKNOWN_ROLE.into()));
    }
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
