//! What the resources' statements on PostgreSQL share.

use tokio_postgres::Row;

use super::{Db, Param};
use crate::store::Result;

impl Db {
    /// One page of `sql`'s rows (its parameters: the owner `$1`, LIMIT `$2` and OFFSET `$3`).
    pub(super) async fn owned_page<T>(
        &self,
        sql: &str,
        owner: i64,
        limit: i64,
        offset: i64,
        map: fn(&Row) -> T,
    ) -> Result<Vec<T>> {
        Ok(self
            .rows(sql, &[&owner, &limit, &offset])
            .await?
            .iter()
            .map(map)
            .collect())
    }

    /// The row of `sql`, whose parameters are the owner's id (`$1`) and the item's key (`$2`), if
    /// there is one: the read query of every management resource.
    pub(super) async fn owned_row<T>(
        &self,
        sql: &str,
        owner: i64,
        key: Param<'_>,
        map: fn(&Row) -> T,
    ) -> Result<Option<T>> {
        Ok(self.opt(sql, &[&owner, key]).await?.as_ref().map(map))
    }

    /// A new `originId` (the identity shared by sites, networks and devices) for a `kind`.
    pub(super) async fn new_origin(&self, kind: &str) -> Result<i64> {
        Ok(self
            .one(
                "INSERT INTO origins (kind) VALUES ($1) RETURNING id",
                &[&kind],
            )
            .await?
            .get(0))
    }
}
