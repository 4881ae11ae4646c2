//! Reading a whole database out, for `parasol migrate` (see `crate::store::transfer`): a
//! read-only connection holding one read transaction, so that every table is read from one
//! snapshot, the copy and its verification alike.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::types::ValueRef;
use rusqlite::Connection;

use crate::store::copied::{Cell, Table, Tally, BATCH_BYTES, BATCH_ROWS};
use crate::store::{Result, StoreError};

/// An SQLite database opened for export. Cheap to clone; one connection, used by one caller at
/// a time.
#[derive(Clone)]
pub struct Source {
    conn: Arc<Mutex<Connection>>,
}

impl Source {
    /// Opens the database at `path` read-only and starts the snapshot every read comes from. A
    /// database of another schema version is refused: the server of this version upgrades it
    /// when it starts on it.
    pub fn open(path: &Path) -> Result<Source> {
        let conn = super::conn::open_read_only(path)?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version != super::migrate::SCHEMA_VERSION {
            return Err(StoreError::Internal(format!(
                "{} has schema version {version}, this binary copies version {}: start this \
                 version's `parasol serve` on it once (it upgrades the database), then migrate",
                path.display(),
                super::migrate::SCHEMA_VERSION
            )));
        }
        conn.execute_batch("BEGIN")?;
        // The snapshot starts with the first read.
        conn.query_row("SELECT count(*) FROM packages", [], |r| r.get::<_, i64>(0))?;
        Ok(Source {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| StoreError::Internal("the source connection failed".into()))?;
        f(&conn)
    }

    /// Rows of every table of `copied::TABLES`, in that order.
    pub fn counts(&self) -> Result<Vec<u64>> {
        self.with(|c| {
            crate::store::copied::TABLES
                .iter()
                .map(|t| {
                    let n: i64 =
                        c.query_row(&format!("SELECT count(*) FROM {}", t.name), [], |r| {
                            r.get(0)
                        })?;
                    Ok(n as u64)
                })
                .collect()
        })
    }

    /// Hands `table`'s rows to `f`, a batch at a time (at most `BATCH_ROWS` rows or about
    /// `BATCH_BYTES` of text).
    pub fn each_batch(
        &self,
        table: &Table,
        mut f: impl FnMut(Vec<Vec<Cell>>) -> Result<()>,
    ) -> Result<()> {
        self.with(|c| {
            let mut batch = Vec::new();
            let mut bytes = 0usize;
            read_rows(c, table, |row| {
                bytes += row
                    .iter()
                    .map(|cell| match cell {
                        Cell::Text(s) => s.len(),
                        _ => 8,
                    })
                    .sum::<usize>();
                batch.push(row);
                if batch.len() >= BATCH_ROWS || bytes >= BATCH_BYTES {
                    bytes = 0;
                    f(std::mem::take(&mut batch))?;
                }
                Ok(())
            })?;
            if !batch.is_empty() {
                f(batch)?;
            }
            Ok(())
        })
    }

    /// `table`'s rows counted and checksummed.
    pub fn tally(&self, table: &Table) -> Result<Tally> {
        self.with(|c| {
            let mut t = Tally::default();
            read_rows(c, table, |row| {
                t.add(&row);
                Ok(())
            })?;
            Ok(t)
        })
    }

    /// The highest id each id counter has ever given (deleted rows included), by table: SQLite's
    /// AUTOINCREMENT counters, the domain list's id floor, and the request ids the purges refer
    /// to. The copy's sequences go on from there, so no id is ever given twice.
    pub fn high_water(&self) -> Result<Vec<(String, i64)>> {
        self.with(|c| {
            let mut out: Vec<(String, i64)> = c
                .prepare("SELECT name, seq FROM sqlite_sequence")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let domains: i64 = c.query_row(
                "SELECT max(coalesce((SELECT max(id) FROM domains), 0),
                            coalesce((SELECT max(floor) FROM domain_id_floor), 0))",
                [],
                |r| r.get(0),
            )?;
            out.push(("domains".into(), domains));
            let requests: i64 = c.query_row(
                "SELECT max(coalesce((SELECT max(id) FROM event_batches), 0),
                            coalesce((SELECT max(up_to) FROM event_purges), 0))",
                [],
                |r| r.get(0),
            )?;
            out.push(("event_batches".into(), requests));
            Ok(out)
        })
    }
}

/// Reads every row of `table` (its transfer columns) and hands each to `f`.
fn read_rows(
    c: &Connection,
    table: &Table,
    mut f: impl FnMut(Vec<Cell>) -> Result<()>,
) -> Result<()> {
    let cols: Vec<&str> = table.columns.iter().map(|(n, _)| *n).collect();
    let sql = format!("SELECT \"{}\" FROM {}", cols.join("\", \""), table.name);
    let mut st = c.prepare(&sql)?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let mut row = Vec::with_capacity(cols.len());
        for (i, col) in cols.iter().enumerate() {
            row.push(match r.get_ref(i)? {
                ValueRef::Null => Cell::Null,
                ValueRef::Integer(v) => Cell::Int(v),
                ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                other => {
                    return Err(StoreError::Internal(format!(
                        "{}.{}: a value of type {:?} cannot be copied",
                        table.name,
                        col,
                        other.data_type()
                    )))
                }
            });
        }
        f(row)?;
    }
    Ok(())
}
