//! One test suite for the store, run on every engine: every operation's rules and errors,
//! through `Store`, on a new SQLite database and (when `PARASOL_TEST_POSTGRES` names a
//! PostgreSQL server, as CI's PostgreSQL pass sets it) on a new PostgreSQL database; and the
//! storage faults of each engine, through the same interface (`faults`). The rules are written
//! once (`rules`); this holds each engine's statements to them. `coverage` fails when an
//! operation of `Store` is called nowhere here.

// The integration suites' file for clusters of a test's own and for waiting, included as it is.
#[path = "../../../tests/common/cluster.rs"]
#[allow(dead_code)]
mod cluster;
mod coverage;
mod enforcement;
mod faults;
mod management;
mod postgres_faults;

use std::future::Future;

use super::*;
use crate::testdir::TempDir;

/// Runs `test` on a new SQLite store, then on a new PostgreSQL database if there is a server to
/// make one on.
fn on_each_engine<F, Fut>(name: &str, test: F)
where
    F: Fn(Store) -> Fut,
    Fut: Future<Output = ()>,
{
    runtime().block_on(async {
        let dir = TempDir::new(name);
        let store = Store::open_sqlite(&dir.join("parasol.db"), OpenRole::Server).unwrap();
        test(store.clone()).await;
        store.close();
        let Some(db) = FreshDatabase::new(&format!("suite_{name}")).await else {
            eprintln!("{name}: ran on SQLite only (PARASOL_TEST_POSTGRES is not set)");
            return;
        };
        let store = Store::open_postgres(&db.url, OpenRole::Server)
            .await
            .unwrap();
        test(store.clone()).await;
        store.close();
        db.remove().await;
    });
}

/// The suite's runtime: two workers, as the machine has cores.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A new, empty database on the PostgreSQL server of `PARASOL_TEST_POSTGRES` (CI's PostgreSQL
/// pass sets it), for a store test of its own; dropped by `remove`, and dropped first if a
/// failed run left it behind.
pub(crate) struct FreshDatabase {
    /// Its URL, as `Store::open_postgres` takes it.
    pub url: String,
    admin: tokio_postgres::Client,
    name: String,
}

impl FreshDatabase {
    /// `None` (the caller says that it ran on SQLite only) without `PARASOL_TEST_POSTGRES`.
    pub(crate) async fn new(what: &str) -> Option<FreshDatabase> {
        let admin = std::env::var("PARASOL_TEST_POSTGRES").ok()?;
        let (base, _) = admin.rsplit_once('/').unwrap();
        let name = format!("t_{what}_{}", std::process::id());
        let (client, conn) = tokio_postgres::connect(
            &format!("{base}/postgres?sslmode=disable"),
            tokio_postgres::NoTls,
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        let db = FreshDatabase {
            url: format!("{base}/{name}?sslmode=disable"),
            admin: client,
            name,
        };
        db.drop_database().await;
        let create = format!("CREATE DATABASE {}", db.name);
        db.admin.batch_execute(&create).await.unwrap();
        Some(db)
    }

    async fn drop_database(&self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        self.admin.batch_execute(&drop).await.unwrap();
    }

    /// Drops the database.
    pub(crate) async fn remove(self) {
        self.drop_database().await;
    }
}

fn org_fields(name: &str) -> OrgFields {
    OrgFields {
        name: name.into(),
        seats: 10,
        package_id: Some(1),
        ..Default::default()
    }
}

async fn organization(store: &Store, name: &str) -> CreatedOrganization {
    store
        .create_organization(Parent::None, org_fields(name), 100)
        .await
        .unwrap()
}

fn internal(name: &str, site: i64) -> InternalNetworkFields {
    InternalNetworkFields {
        name: name.into(),
        ip_address: "10.0.0.0".into(),
        prefix_length: 24,
        site_id: site,
    }
}

fn appliance(site: i64) -> NewAppliance {
    NewAppliance {
        name: "va".into(),
        site_id: site,
        is_upgradable: false,
        state: Default::default(),
        health: "ok".into(),
        kind: "virtual".into(),
        settings: Default::default(),
    }
}

fn user(email: &str, role: i64) -> UserFields {
    UserFields {
        firstname: "A".into(),
        lastname: "B".into(),
        email: email.into(),
        role_id: role,
        timezone: "UTC".into(),
    }
}

fn credential(key: &str) -> NewCredential {
    NewCredential {
        api_key: key.into(),
        secret_hash: "$argon2id$x".into(),
        label: None,
    }
}

fn conflict_text(r: Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(StoreError::Conflict(m)) => m,
        other => panic!("expected a conflict, got {other:?}"),
    }
}
