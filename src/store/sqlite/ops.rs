//! The store's operations on SQLite: each composes the SQL of the resource modules in one write
//! (a job of the writer, see `writer`) or one read transaction, with its checks inside, so that
//! a check and the change it guards can never be separated by another write.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rusqlite::Connection;

use super::writer::WriteMode;
use super::{blocking, domains, purge, tenants, Sqlite};
use crate::store::*;

/// A request with this many events gets a write transaction of its own.
const ALONE_EVENTS: usize = 256;

/// Records a change of the organization's effective block list when `did` says something
/// changed; hands `did` back.
fn changed(c: &Connection, org: i64, did: bool) -> Result<bool> {
    if did {
        tenants::record_list_change(c, org)?;
    }
    Ok(did)
}

impl Backend for Sqlite {
    // ------------------------------------------------------------ enforcement

    async fn resolve_customer_key(&self, key: CustomerKey) -> Result<Option<i64>> {
        self.read_short(move |c| tenants::resolve_customer_key(c, &key))
            .await
    }

    async fn ingest(&self, request: Ingest) -> Result<Ingested> {
        let Ingest {
            key,
            batch_id,
            now,
            batch,
            new_domain_budget,
        } = request;
        let n_events = batch.len();
        // Under a new-domain budget, how many new domains a refused request would have added.
        let refused = Arc::new(AtomicU64::new(0));
        let refused_in_write = refused.clone();
        let track = self.tracking_list_changes();
        // What the write was given travels back with its result, so that its memory is freed on
        // this thread, where it was allocated: freed on the writer's, it left this thread's
        // allocator cache empty, and every request's allocations took the allocator's slow path.
        let write = move |conn: &Connection,
                          cache: &mut super::WriterCache,
                          statements: &mut super::Statements<'_>| {
            // The key is resolved again inside the write: a key revoked meanwhile stores
            // nothing.
            let Some(org) = cache.organization_of_key(conn, &key)? else {
                return Ok((Ingested::UnknownKey, batch));
            };
            let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
            let batch_text = batch_id.hyphenated().encode_lower(&mut text);
            let added = domains::ingest(conn, cache, statements, org, batch_text, now, &batch)?;
            match new_domain_budget {
                // Over the budget: undo this request's writes (its savepoint).
                Some(max) if added > max => {
                    refused_in_write.store(added, Ordering::Relaxed);
                    Err(StoreError::Conflict(format!("{added} new domains")))
                }
                _ => {
                    if track && added > 0 {
                        tenants::record_list_change(conn, org)?;
                    }
                    Ok((Ingested::Stored { added }, batch))
                }
            }
        };
        let mode = if n_events >= ALONE_EVENTS {
            WriteMode::Alone
        } else if new_domain_budget.is_none() {
            // Without a new-domain budget the write fails only if the database does.
            WriteMode::Shared
        } else {
            WriteMode::Savepoint
        };
        match self.write_events(mode, write).await {
            Ok((outcome, _given)) => Ok(outcome),
            Err(StoreError::Conflict(_)) if new_domain_budget.is_some() => {
                Ok(Ingested::OverBudget {
                    would_add: refused.load(Ordering::Relaxed),
                })
            }
            Err(e) => Err(e),
        }
    }

    async fn list_domains(
        &self,
        key: CustomerKey,
        page: u64,
        limit: u64,
    ) -> Result<Option<(Vec<DomainEntry>, bool)>> {
        // One read transaction: the key and the page come from the same snapshot.
        self.read_short(move |c| {
            let Some(org) = tenants::resolve_customer_key(c, &key)? else {
                return Ok(None);
            };
            Ok(Some(domains::list_page(c, org, page, limit)?))
        })
        .await
    }

    async fn delete_domain_by_id(&self, org: i64, id: i64) -> Result<bool> {
        self.write(move |c| changed(c, org, domains::delete_by_id(c, org, id)?))
            .await
    }

    async fn delete_domain_by_name(&self, org: i64, name: String) -> Result<bool> {
        self.write(move |c| changed(c, org, domains::delete_by_name(c, org, &name)?))
            .await
    }

    async fn purge_step(&self) -> Result<Option<PurgeStep>> {
        // Looked for on a read connection first, so that finding none takes no write lock.
        if !self.read(purge::pending).await? {
            return Ok(None);
        }
        // It changes nothing the writer's cache holds; it runs at the bulk writes' lower
        // priority.
        self.write_events(WriteMode::Alone, |conn, _, _| {
            purge::step(conn, purge::STEP_IDS)
        })
        .await
    }

    async fn event_count(&self, org: i64) -> Result<i64> {
        self.read(move |c| domains::event_count(c, org)).await
    }

    async fn listed_names(&self, org: i64) -> Result<Vec<String>> {
        self.read(move |c| domains::all_names(c, org)).await
    }

    async fn search_domains(
        &self,
        org: i64,
        prefix: String,
        after: String,
        limit: i64,
    ) -> Result<Vec<DomainEntry>> {
        self.read(move |c| domains::search(c, org, &prefix, &after, limit))
            .await
    }

    // ------------------------------------------------------------ enforcement on the appliance

    async fn domain_counts(&self, limit: i64) -> Result<(i64, Vec<(i64, i64)>)> {
        self.read(move |c| domains::counts_per_organization(c, limit))
            .await
    }

    async fn take_list_changes(&self) -> Result<Vec<i64>> {
        self.write(tenants::take_list_changes).await
    }

    async fn effective_block_list(&self, org: i64) -> Result<(Vec<String>, Vec<String>)> {
        self.read_background(move |c| {
            if !tenants::organization_exists(c, org)? {
                return Err(StoreError::NotFound);
            }
            blocking::effective(c, org)
        })
        .await
    }

    async fn block_list_since(&self, org: i64, after: Option<ListCursor>) -> Result<ListRead> {
        self.read_background(move |c| {
            if !tenants::organization_exists(c, org)? {
                return Err(StoreError::NotFound);
            }
            blocking::list_since(c, org, after)
        })
        .await
    }
}
