//! Roles of an organization (`GET /v1/organizations/{id}/roles`).
//!
//! Roles are built in and shared by every organization (decisions.md): they live in the `roles`
//! table that `schema.sql` fills, and each is answered with `organizationId` 0.

use bytes::Bytes;
use hyper::Response;
use rusqlite::{params, Connection};
use serde::Serialize;

use super::common::list_page;
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::MgmtEndpoint;
use crate::state::{AppState, RequestCtx};

/// A role as the management interface answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Role {
    pub role_id: i64,
    pub label: String,
    pub organization_id: i64,
}

/// One page of the built-in roles, ordered by id.
pub fn list(conn: &Connection, limit: i64, offset: i64) -> crate::store::Result<Vec<Role>> {
    let mut st =
        conn.prepare_cached("SELECT id, label FROM roles ORDER BY id LIMIT ?1 OFFSET ?2")?;
    let rows = st.query_map(params![limit, offset], |r| {
        Ok(Role {
            role_id: r.get(0)?,
            label: r.get(1)?,
            organization_id: 0,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Handles the endpoints of this resource for organization `org` (already checked visible).
pub async fn handle(
    state: &AppState,
    ep: MgmtEndpoint,
    _org: i64,
    ctx: &RequestCtx,
    _body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    match ep {
        MgmtEndpoint::ListRoles { .. } => list_page(state, ctx, list).await,
        _ => Err(MgmtError::NotFound),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_six_built_in_roles_in_id_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::store::migrate::migrate(&mut conn).unwrap();
        let all = list(&conn, 100, 0).unwrap();
        let labels: Vec<_> = all.iter().map(|r| (r.role_id, r.label.as_str())).collect();
        assert_eq!(
            labels,
            [
                (1, "Full Admin"),
                (2, "Read Only"),
                (3, "Block Page Bypass"),
                (4, "Reporting Only"),
                (5, "Investigate Only"),
                (6, "Security Administrator")
            ]
        );
        assert!(all.iter().all(|r| r.organization_id == 0));
        assert_eq!(list(&conn, 2, 2).unwrap()[0].role_id, 3);
    }
}
