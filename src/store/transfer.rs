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

use crate::store::{postgres, sqlite, Result, StoreError};

/// How a column's values are kept: SQLite's integers stand for PostgreSQL's booleans too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    Text,
    Bool,
}

/// One value of a copied row, in the form both engines' rows are compared in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Null,
    Int(i64),
    Text(String),
}

/// A copied table: its columns (those both schemas have) in order.
pub struct Table {
    pub name: &'static str,
    pub columns: &'static [(&'static str, Kind)],
}

use Kind::{Bool as B, Int as I, Text as T};

/// The tables copied, parents before children. Not copied but rebuilt: the paging counts (by
/// block of positions on SQLite, of ids on PostgreSQL), SQLite's id counters (they become the
/// sequences' positions) and its id floor of deleted domains (likewise).
pub const TABLES: &[Table] = &[
    Table {
        name: "packages",
        columns: &[("id", I), ("name", T)],
    },
    Table {
        name: "roles",
        columns: &[("id", I), ("label", T)],
    },
    Table {
        name: "service_providers",
        columns: &[
            ("id", I),
            ("name", T),
            ("package_id", I),
            ("seats_total", I),
            ("status", T),
            ("rebill_at", I),
            ("expires_at", I),
            ("created_at", I),
        ],
    },
    Table {
        name: "msps",
        columns: &[("id", I), ("name", T), ("created_at", I)],
    },
    Table {
        name: "organizations",
        columns: &[
            ("id", I),
            ("name", T),
            ("service_provider_id", I),
            ("msp_id", I),
            ("seats", I),
            ("package_id", I),
            ("street_address", T),
            ("street_address2", T),
            ("city", T),
            ("state", T),
            ("country_code", T),
            ("zip_code", T),
            ("deal_id", T),
            ("admin_emails", T),
            ("ccw_deal_owner_emails", T),
            ("created_at", I),
            ("modified_at", I),
        ],
    },
    Table {
        name: "customer_keys",
        columns: &[
            ("key", T),
            ("organization_id", I),
            ("created_at", I),
            ("revoked_at", I),
        ],
    },
    Table {
        name: "api_credentials",
        columns: &[
            ("api_key", T),
            ("secret_hash", T),
            ("service_provider_id", I),
            ("msp_id", I),
            ("organization_id", I),
            ("label", T),
            ("created_at", I),
            ("revoked_at", I),
        ],
    },
    Table {
        name: "origins",
        columns: &[("id", I), ("kind", T)],
    },
    Table {
        name: "sites",
        columns: &[
            ("id", I),
            ("organization_id", I),
            ("origin_id", I),
            ("name", T),
            ("is_default", B),
            ("type", T),
            ("created_at", I),
            ("modified_at", I),
        ],
    },
    Table {
        name: "networks",
        columns: &[
            ("origin_id", I),
            ("organization_id", I),
            ("name", T),
            ("ip_address", T),
            ("prefix_length", I),
            ("is_dynamic", B),
            ("is_verified", B),
            ("status", T),
            ("created_at", I),
        ],
    },
    Table {
        name: "roaming_computers",
        columns: &[
            ("device_id", T),
            ("organization_id", I),
            ("origin_id", I),
            ("name", T),
            ("type", T),
            ("status", T),
            ("last_sync_status", T),
            ("last_sync", I),
            ("applied_bundle", I),
            ("has_ip_blocking", B),
            ("version", T),
            ("os_version", T),
            ("os_version_name", T),
        ],
    },
    Table {
        name: "internal_networks",
        columns: &[
            ("origin_id", I),
            ("organization_id", I),
            ("name", T),
            ("ip_address", T),
            ("prefix_length", I),
            ("site_id", I),
            ("created_at", I),
            ("modified_at", I),
        ],
    },
    Table {
        name: "virtual_appliances",
        columns: &[
            ("origin_id", I),
            ("organization_id", I),
            ("name", T),
            ("site_id", I),
            ("is_upgradable", B),
            ("state", T),
            ("health", T),
            ("type", T),
            ("settings", T),
            ("created_at", I),
            ("modified_at", I),
            ("state_updated_at", I),
        ],
    },
    Table {
        name: "users",
        columns: &[
            ("id", I),
            ("organization_id", I),
            ("firstname", T),
            ("lastname", T),
            ("email", T),
            ("password_hash", T),
            ("role_id", I),
            ("timezone", T),
            ("status", T),
            ("last_login_time", I),
            ("two_factor_enable", B),
            ("created_at", I),
        ],
    },
    Table {
        name: "allow_list",
        columns: &[("organization_id", I), ("name", T), ("created_at", I)],
    },
    Table {
        name: "domains",
        columns: &[
            ("id", I),
            ("organization_id", I),
            ("name", T),
            ("created_at", I),
            ("last_seen_at", I),
        ],
    },
    Table {
        name: "event_batches",
        columns: &[
            ("id", I),
            ("organization_id", I),
            ("uuid", T),
            ("received_at", I),
            ("event_count", I),
            ("domains", T),
            ("listed", T),
            ("events", T),
        ],
    },
    Table {
        name: "event_purges",
        columns: &[("organization_id", I), ("up_to", I), ("done", I)],
    },
    Table {
        name: "list_changes",
        columns: &[("organization_id", I)],
    },
];

/// A table's rows counted and checksummed: the wrapping sum of each row's hash (SHA-256 of its
/// cells, typed and length-prefixed), so that the order rows are read in does not matter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub rows: u64,
    pub sum: u64,
}

impl Tally {
    pub fn add(&mut self, row: &[Cell]) {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        for c in row {
            match c {
                Cell::Null => ctx.update(&[0]),
                Cell::Int(v) => {
                    ctx.update(&[1]);
                    ctx.update(&v.to_le_bytes());
                }
                Cell::Text(s) => {
                    ctx.update(&[2]);
                    ctx.update(&(s.len() as u64).to_le_bytes());
                    ctx.update(s.as_bytes());
                }
            }
        }
        let d = ctx.finish();
        let mut eight = [0u8; 8];
        eight.copy_from_slice(&d.as_ref()[..8]);
        self.rows += 1;
        self.sum = self.sum.wrapping_add(u64::from_le_bytes(eight));
    }
}

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

/// Rows handed from the SQLite reader to the PostgreSQL writer at a time, and the bytes of text
/// a batch holds at most (a request row is up to 1 MiB).
pub const BATCH_ROWS: usize = 2000;
pub const BATCH_BYTES: usize = 8 << 20;

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
