//! The allow list's statements on PostgreSQL (its rules: `rules::allow`).

use super::Db;
use crate::store::rules::allow::{Allow, List};
use crate::store::rules::Rows;
use crate::store::Result;

impl Allow for Db {
    async fn insert_allowed(&self, org: i64, name: &str, now: i64) -> Result<bool> {
        Ok(self
            .exec(
                "INSERT INTO allow_list (organization_id, name, created_at)
                 VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                &[&org, &name, &now],
            )
            .await?
            > 0)
    }

    async fn delete_allowed(&self, org: i64, name: &str) -> Result<bool> {
        Ok(self
            .exec(
                "DELETE FROM allow_list WHERE organization_id = $1 AND name = $2",
                &[&org, &name],
            )
            .await?
            > 0)
    }

    async fn allowed(&self, org: i64) -> Result<Vec<String>> {
        Ok(self
            .rows(
                "SELECT name FROM allow_list WHERE organization_id = $1 ORDER BY name COLLATE \"C\"",
                &[&org],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    async fn present(&self, org: i64, list: List, names: &[&str]) -> Rows<String> {
        let sql = match list {
            List::Listed => {
                "SELECT name FROM domains WHERE organization_id = $1 AND name = ANY($2)"
            }
            List::Allowed => {
                "SELECT name FROM allow_list WHERE organization_id = $1 AND name = ANY($2)"
            }
        };
        Ok(self
            .rows(sql, &[&org, &names])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    async fn record_list_change(&self, org: i64) -> Result<()> {
        self.exec(
            "INSERT INTO list_changes (organization_id) VALUES ($1) ON CONFLICT DO NOTHING",
            &[&org],
        )
        .await?;
        Ok(())
    }
}
