//! Writing a copy into an empty PostgreSQL database, for `parasol migrate` (see
//! `crate::store::transfer`): the schema and every table's rows in one transaction (binary COPY),
//! the sequences set past every id the source ever gave, the paging counts built, then one
//! commit; and the verification's reading back.

use std::pin::Pin;

use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

use super::{classify, DatabaseUrl};
use crate::store::copied::{Cell, Kind, Table, Tally};
use crate::store::{Result, StoreError};

/// The target database: one connection of its own.
pub struct Target {
    client: Client,
    url: String,
}

impl Target {
    pub async fn connect(url: &str) -> Result<Target> {
        let parsed = DatabaseUrl::parse(url)?;
        let (client, conn) = parsed
            .config
            .connect(parsed.tls()?)
            .await
            .map_err(classify)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                log::debug!("migrate: connection ended: {e}");
            }
        });
        Ok(Target {
            client,
            url: parsed.redacted,
        })
    }

    /// Whether the database already holds a Parasol schema (a finished copy, to be verified). A
    /// database that holds anything else is refused: the copy goes into an empty one only.
    pub async fn holds_schema(&self) -> Result<bool> {
        let row = self
            .client
            .query_one(
                "SELECT to_regclass('parasol_schema') IS NOT NULL,
                        (SELECT count(*) FROM pg_class c JOIN pg_namespace n
                           ON n.oid = c.relnamespace WHERE n.nspname = current_schema())",
                &[],
            )
            .await
            .map_err(classify)?;
        let (parasol, relations): (bool, i64) = (row.get(0), row.get(1));
        if !parasol && relations > 0 {
            return Err(StoreError::Internal(format!(
                "{} is not empty ({relations} tables, sequences or indexes): parasol migrate \
                 copies into an empty database only",
                self.url
            )));
        }
        Ok(parasol)
    }

    /// Starts the copy's transaction: the schema, without the rows it ships (the source's come).
    pub async fn begin(&mut self) -> Result<()> {
        self.client.batch_execute("BEGIN").await.map_err(classify)?;
        self.client
            .batch_execute(super::migrate::SCHEMA)
            .await
            .map_err(classify)?;
        self.client
            .execute(
                "INSERT INTO parasol_schema (version) VALUES ($1)",
                &[&(super::migrate::SCHEMA_VERSION as i32)],
            )
            .await
            .map_err(classify)?;
        self.client
            .batch_execute("DELETE FROM packages; DELETE FROM roles;")
            .await
            .map_err(classify)
    }

    /// A writer of `table`'s rows.
    pub async fn table(&self, table: &'static Table) -> Result<TableWriter> {
        let mut cols: Vec<&str> = table.columns.iter().map(|(n, _)| *n).collect();
        let mut types: Vec<Type> = table
            .columns
            .iter()
            .map(|(_, k)| match k {
                Kind::Int => Type::INT8,
                Kind::Text => Type::TEXT,
                Kind::Bool => Type::BOOL,
            })
            .collect();
        let users = table.name == "users";
        if users {
            cols.push("email_folded");
            types.push(Type::TEXT);
        }
        let sql = format!(
            "COPY {} (\"{}\") FROM STDIN BINARY",
            table.name,
            cols.join("\", \"")
        );
        let sink = self.client.copy_in(&sql).await.map_err(classify)?;
        Ok(TableWriter {
            table,
            users,
            writer: Box::pin(BinaryCopyInWriter::new(sink, &types)),
            rows: 0,
        })
    }

    /// Ends the copy: every sequence past the highest id the source ever gave (`high_water`, by
    /// table, and the ids now present), the paging counts built from the list, and the commit.
    pub async fn finish(&mut self, high_water: &[(String, i64)]) -> Result<()> {
        let hw = |t: &str| {
            high_water
                .iter()
                .filter(|(n, _)| n == t)
                .map(|(_, v)| *v)
                .max()
                .unwrap_or(0)
        };
        for t in [
            "service_providers",
            "msps",
            "organizations",
            "sites",
            "users",
            "event_batches",
        ] {
            let present: i64 = self
                .client
                .query_one(&format!("SELECT coalesce(max(id), 0) FROM {t}"), &[])
                .await
                .map_err(classify)?
                .get(0);
            let top = present.max(hw(t));
            if top > 0 {
                self.client
                    .execute(
                        "SELECT setval(pg_get_serial_sequence($1, 'id'), $2)",
                        &[&t, &top],
                    )
                    .await
                    .map_err(classify)?;
            }
        }
        let origins: i64 = self
            .client
            .query_one("SELECT coalesce(max(id), 0) FROM origins", &[])
            .await
            .map_err(classify)?
            .get(0);
        let origins = origins.max(hw("origins")).max(10_000_000);
        self.client
            .execute("SELECT setval('origin_ids', $1)", &[&origins])
            .await
            .map_err(classify)?;
        let domains = hw("domains");
        if domains > 0 {
            self.client
                .execute("SELECT setval('domain_ids', $1)", &[&domains])
                .await
                .map_err(classify)?;
        }
        self.client
            .batch_execute(concat!(
                "INSERT INTO domain_counts
                         (organization_id, level, block, count, residue_sum, square_sum)
                     SELECT organization_id, 0, id >> 16, ",
                crate::store::residue_sums_sql!(),
                " FROM domains GROUP BY 1, 3;
                     INSERT INTO domain_counts
                         (organization_id, level, block, count, residue_sum, square_sum)
                     SELECT organization_id, 1, id >> 10, ",
                crate::store::residue_sums_sql!(),
                " FROM domains GROUP BY 1, 3;
                     COMMIT;
                     ANALYZE;"
            ))
            .await
            .map_err(classify)
    }

    /// `table`'s rows as PostgreSQL holds them, counted and checksummed as the source's.
    pub async fn tally(&self, table: &Table) -> Result<Tally> {
        use futures_util::StreamExt;
        let cols: Vec<&str> = table.columns.iter().map(|(n, _)| *n).collect();
        let sql = format!("SELECT \"{}\" FROM {}", cols.join("\", \""), table.name);
        let stream = self
            .client
            .query_raw(&sql, std::iter::empty::<i64>())
            .await
            .map_err(classify)?;
        let mut stream = std::pin::pin!(stream);
        let mut t = Tally::default();
        while let Some(row) = stream.next().await {
            let row = row.map_err(classify)?;
            let cells: Vec<Cell> = table
                .columns
                .iter()
                .enumerate()
                .map(|(i, (_, k))| match k {
                    Kind::Int => row.get::<_, Option<i64>>(i).map_or(Cell::Null, Cell::Int),
                    Kind::Bool => row
                        .get::<_, Option<bool>>(i)
                        .map_or(Cell::Null, |b| Cell::Int(b as i64)),
                    Kind::Text => row
                        .get::<_, Option<String>>(i)
                        .map_or(Cell::Null, Cell::Text),
                })
                .collect();
            t.add(&cells);
        }
        Ok(t)
    }
}

/// The rows of one table going in through COPY.
pub struct TableWriter {
    table: &'static Table,
    users: bool,
    writer: Pin<Box<BinaryCopyInWriter>>,
    rows: u64,
}

impl TableWriter {
    pub async fn write(&mut self, batch: &[Vec<Cell>]) -> Result<()> {
        for row in batch {
            let mut values: Vec<Box<dyn ToSql + Sync + Send>> = Vec::with_capacity(row.len() + 1);
            for (cell, (name, kind)) in row.iter().zip(self.table.columns) {
                values.push(match (cell, kind) {
                    (Cell::Null, Kind::Int) => Box::new(None::<i64>),
                    (Cell::Null, Kind::Bool) => Box::new(None::<bool>),
                    (Cell::Null, Kind::Text) => Box::new(None::<String>),
                    (Cell::Int(v), Kind::Int) => Box::new(*v),
                    (Cell::Int(v), Kind::Bool) => Box::new(*v != 0),
                    (Cell::Text(s), Kind::Text) => Box::new(s.clone()),
                    (c, k) => {
                        return Err(StoreError::Internal(format!(
                            "{}.{name}: {c:?} is not a {k:?}",
                            self.table.name
                        )))
                    }
                });
            }
            if self.users {
                // users.email (the fifth column) folded as on SQLite's NOCASE.
                let folded = match row.get(4) {
                    Some(Cell::Text(e)) => e.to_ascii_lowercase(),
                    _ => String::new(),
                };
                values.push(Box::new(folded));
            }
            let refs: Vec<&(dyn ToSql + Sync)> = values
                .iter()
                .map(|v| v.as_ref() as &(dyn ToSql + Sync))
                .collect();
            self.writer.as_mut().write(&refs).await.map_err(classify)?;
            self.rows += 1;
        }
        Ok(())
    }

    /// Ends the table's COPY; the rows it took.
    pub async fn finish(mut self) -> Result<u64> {
        self.writer.as_mut().finish().await.map_err(classify)?;
        Ok(self.rows)
    }
}
