//! Moving an appliance's data to a cluster: `parasol migrate --from DIR --to postgres://...`
//! copies the SQLite database of a data directory, read through the SQLite backend (read-only,
//! one snapshot), into an empty PostgreSQL database, and verifies the copy: per table, the
//! number of rows and an order-independent checksum of their values, computed on both sides.
//!
//! Interrupted and run again: the whole copy (schema included) is one PostgreSQL transaction, so
//! an interrupted run leaves the database as empty as it found it, and the next run starts over
//! cleanly. A run that finds the copy already done (its schema present) only verifies it against
//! the source again, and succeeds if it matches.

use std::path::Path;

use crate::store::copied::{Cell, TABLES};
use crate::store::{postgres, sqlite, Result, StoreError};

/// Where a copy stands, for a progress display.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub copied: u64,
    pub total: u64,
}

/// One table's outcome.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableReport {
    pub table: &'static str,
    pub rows: u64,
    /// The checksum, in hex, the same on both sides.
    pub checksum: String,
}

/// What a migration did.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// False when the target already held this copy (a run after a completed one).
    pub copied: bool,
    pub tables: Vec<TableReport>,
}

/// Copies the SQLite database of `from` (a data directory) into the empty PostgreSQL database at
/// `to` and verifies it; `progress` is called as rows are copied.
pub async fn sqlite_to_postgres(
    from: &Path,
    to: &str,
    mut progress: impl FnMut(Progress) + Send,
) -> Result<Report> {
    let source = sqlite::export::Source::open(&from.join("parasol.db"))?;
    let mut target = postgres::import::Target::connect(to).await?;
    let counts = source.counts()?;
    let total: u64 = counts.iter().sum();
    let copied = if target.holds_schema().await? {
        false
    } else {
        target.begin().await?;
        let mut done = 0u64;
        for (i, table) in TABLES.iter().enumerate() {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Vec<Cell>>>(2);
            let reader = source.clone();
            let read = tokio::task::spawn_blocking(move || {
                reader.each_batch(table, |batch| {
                    tx.blocking_send(batch)
                        .map_err(|_| StoreError::Internal("the copy stopped".into()))
                })
            });
            let mut writer = target.table(table).await?;
            while let Some(batch) = rx.recv().await {
                done += batch.len() as u64;
                writer.write(&batch).await?;
                progress(Progress {
                    copied: done,
                    total,
                });
            }
            read.await
                .map_err(|e| StoreError::Internal(format!("the reader failed: {e}")))??;
            let n = writer.finish().await?;
            if n != counts[i] {
                return Err(StoreError::Internal(format!(
                    "{}: {n} rows written, {} read",
                    table.name, counts[i]
                )));
            }
        }
        target.finish(&source.high_water()?).await?;
        true
    };
    // Verification, after the commit: what PostgreSQL now holds, read back.
    let mut tables = Vec::new();
    for (i, table) in TABLES.iter().enumerate() {
        let (expect, got) = (source.tally(table)?, target.tally(table).await?);
        if expect != got || expect.rows != counts[i] {
            return Err(StoreError::Internal(format!(
                "{}: the copy differs from the source ({} rows, checksum {:016x}; the source has \
                 {} rows, checksum {:016x}){}",
                table.name,
                got.rows,
                got.sum,
                expect.rows,
                expect.sum,
                if copied {
                    ""
                } else {
                    "; the target database is not empty and is not a copy of this source"
                }
            )));
        }
        tables.push(TableReport {
            table: table.name,
            rows: got.rows,
            checksum: format!("{:016x}", got.sum),
        });
    }
    Ok(Report { copied, tables })
}
