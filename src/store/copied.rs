//! What a copy between the engines moves (`parasol migrate`, see `transfer`): the tables and
//! their columns, a row's cells in the form both engines compare them in, and the tally of a
//! table's rows. A leaf below both engines and the transfer that drives them.

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

/// Rows handed from the SQLite reader to the PostgreSQL writer at a time, and the bytes of text
/// a batch holds at most (a request row is up to 1 MiB).
pub const BATCH_ROWS: usize = 2000;
pub const BATCH_BYTES: usize = 8 << 20;
