//! The store's operations on SQLite: each composes the SQL of the resource modules in one write
//! (a job of the writer, see `writer`) or one read transaction, with its checks inside, so that
//! a check and the change it guards can never be separated by another write.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rusqlite::Connection;

use super::writer::WriteMode;
use super::{blocking, customers, domains, purge, tenants, Sqlite};
use crate::store::*;

/// A request with this many events gets a write transaction of its own.
const ALONE_EVENTS: usize = 256;

/// `Invalid` naming `packageId` unless the package exists.
fn check_package(c: &Connection, package: Option<i64>) -> Result<()> {
    match package {
        Some(p) if !customers::package_exists(c, p)? => Err(StoreError::Invalid(
            "packageId must be the id of a known package".into(),
        )),
        _ => Ok(()),
    }
}

/// `NotFound` unless the parent (provider or MSP) exists.
fn check_parent(c: &Connection, parent: Parent) -> Result<()> {
    let scope = match parent {
        Parent::None => return Ok(()),
        Parent::ServiceProvider(id) => Scope::ServiceProvider(id),
        Parent::Msp(id) => Scope::Msp(id),
    };
    if tenants::scope_exists(c, scope)? {
        Ok(())
    } else {
        Err(StoreError::NotFound)
    }
}

/// Records a change of the organization's effective block list when `did` says something
/// changed; hands `did` back.
fn changed(c: &Connection, org: i64, did: bool) -> Result<bool> {
    if did {
        tenants::record_list_change(c, org)?;
    }
    Ok(did)
}

fn found<T>(rec: Option<T>) -> Result<T> {
    rec.ok_or(StoreError::NotFound)
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

    // ------------------------------------------------------------ tenants and credentials

    async fn find_credential(&self, api_key: String) -> Result<Option<StoredCredential>> {
        self.read(move |c| tenants::find_credential(c, &api_key))
            .await
    }

    async fn organization_visible(&self, scope: Scope, org: i64) -> Result<bool> {
        self.read(move |c| tenants::organization_visible(c, scope, org))
            .await
    }

    async fn scope_exists(&self, scope: Scope) -> Result<bool> {
        self.read(move |c| tenants::scope_exists(c, scope)).await
    }

    async fn has_tenants(&self) -> Result<bool> {
        self.read(tenants::has_tenants).await
    }

    async fn create_service_provider(&self, sp: NewServiceProvider, now: i64) -> Result<i64> {
        self.write(move |c| {
            check_package(c, Some(sp.package_id))?;
            tenants::create_service_provider(c, &sp, now)
        })
        .await
    }

    async fn create_msp(&self, name: String, now: i64) -> Result<i64> {
        self.write(move |c| tenants::create_msp(c, &name, now))
            .await
    }

    async fn create_organization(
        &self,
        parent: Parent,
        fields: OrgFields,
        now: i64,
    ) -> Result<CreatedOrganization> {
        self.write(move |c| {
            check_parent(c, parent)?;
            check_package(c, fields.package_id)?;
            tenants::create_organization(c, parent, &fields, now)
        })
        .await
    }

    async fn delete_organization(&self, org: i64) -> Result<bool> {
        self.write(move |c| tenants::delete_organization(c, org))
            .await
    }

    async fn service_provider_package(&self, sp: i64) -> Result<Option<i64>> {
        self.read(move |c| customers::service_provider_package(c, sp))
            .await
    }

    async fn create_customer_key(&self, org: i64, now: i64) -> Result<String> {
        self.write_org(org, move |c| tenants::create_customer_key(c, org, now))
            .await
    }

    async fn list_customer_keys(&self, org: i64) -> Result<Vec<CustomerKeyInfo>> {
        self.read(move |c| {
            if !tenants::organization_exists(c, org)? {
                return Err(StoreError::NotFound);
            }
            tenants::list_customer_keys(c, org)
        })
        .await
    }

    async fn revoke_customer_key(&self, key: String, now: i64) -> Result<bool> {
        self.write(move |c| tenants::revoke_customer_key(c, &key, now))
            .await
    }

    async fn rotate_customer_key(&self, org: i64, now: i64) -> Result<(String, Vec<String>)> {
        self.write_org(org, move |c| tenants::rotate_customer_key(c, org, now))
            .await
    }

    async fn create_credential(
        &self,
        scope: Scope,
        credential: NewCredential,
        now: i64,
    ) -> Result<()> {
        self.write(move |c| {
            if !tenants::scope_exists(c, scope)? {
                return Err(StoreError::NotFound);
            }
            tenants::insert_credential(c, &credential, scope, now)
        })
        .await
    }

    async fn list_credentials(&self) -> Result<Vec<CredentialInfo>> {
        self.read(tenants::list_credentials).await
    }

    async fn revoke_credential(&self, api_key: String, now: i64) -> Result<bool> {
        self.write(move |c| tenants::revoke_credential(c, &api_key, now))
            .await
    }

    async fn create_demo_world(&self, world: DemoWorld, now: i64) -> Result<Option<DemoIds>> {
        self.write(move |c| {
            if tenants::has_tenants(c)? {
                return Ok(None);
            }
            tenants::create_demo_world(c, &world, now).map(Some)
        })
        .await
    }

    async fn list_service_providers(&self) -> Result<Vec<ServiceProviderInfo>> {
        self.read(tenants::list_service_providers).await
    }

    async fn list_msps(&self) -> Result<Vec<MspInfo>> {
        self.read(tenants::list_msps).await
    }

    async fn list_organizations(&self) -> Result<Vec<OrganizationInfo>> {
        self.read(tenants::list_organizations).await
    }

    async fn delete_service_provider(&self, sp: i64) -> Result<()> {
        self.write(move |c| tenants::delete_service_provider(c, sp))
            .await
    }

    async fn delete_msp(&self, msp: i64) -> Result<()> {
        self.write(move |c| tenants::delete_msp(c, msp)).await
    }

    // ------------------------------------------------------------ customers

    async fn service_provider(&self, sp: i64) -> Result<Option<ServiceProviderRecord>> {
        self.read(move |c| customers::service_provider(c, sp)).await
    }

    async fn list_customers(
        &self,
        parent: Parent,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<CustomerRecord>> {
        self.read(move |c| customers::list(c, parent, limit, offset))
            .await
    }

    async fn get_customer(&self, parent: Parent, customer: i64) -> Result<Option<CustomerRecord>> {
        self.read(move |c| customers::get(c, parent, customer))
            .await
    }

    async fn create_customer(
        &self,
        parent: Parent,
        fields: OrgFields,
        now: i64,
    ) -> Result<CustomerRecord> {
        self.write(move |c| {
            check_parent(c, parent)?;
            check_package(c, fields.package_id)?;
            customers::create(c, parent, &fields, now)
        })
        .await
    }

    async fn update_customer(
        &self,
        parent: Parent,
        customer: i64,
        fields: OrgFields,
        now: i64,
    ) -> Result<CustomerRecord> {
        self.write(move |c| {
            check_package(c, fields.package_id)?;
            found(customers::update(c, parent, customer, &fields, now)?)
        })
        .await
    }

    async fn delete_customer(&self, parent: Parent, customer: i64) -> Result<CustomerRecord> {
        self.write(move |c| found(customers::delete(c, parent, customer)?))
            .await
    }

    async fn list_packages(&self) -> Result<Vec<Package>> {
        self.read(customers::list_packages).await
    }

    async fn package_exists(&self, id: i64) -> Result<bool> {
        self.read(move |c| customers::package_exists(c, id)).await
    }

    // ------------------------------------------------------------ enforcement on the appliance

    async fn allow_add(&self, org: i64, name: String, now: i64) -> Result<bool> {
        self.write_org(org, move |c| {
            changed(c, org, blocking::allow_add(c, org, &name, now)?)
        })
        .await
    }

    async fn allow_remove(&self, org: i64, name: String) -> Result<bool> {
        self.write_org(org, move |c| {
            changed(c, org, blocking::allow_remove(c, org, &name)?)
        })
        .await
    }

    async fn allow_list(&self, org: i64) -> Result<Vec<String>> {
        self.read(move |c| {
            if !tenants::organization_exists(c, org)? {
                return Err(StoreError::NotFound);
            }
            blocking::allow_list(c, org)
        })
        .await
    }

    async fn verdict(&self, org: i64, name: String) -> Result<Verdict> {
        self.read(move |c| {
            if !tenants::organization_exists(c, org)? {
                return Err(StoreError::NotFound);
            }
            blocking::verdict(c, org, &name)
        })
        .await
    }

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
}
