//! The demo world (see `crate::demo`): a service provider and an MSP, each with its credential
//! and one customer organization filled with sites, internal networks, a user, networks,
//! roaming computers and virtual appliances; created in one transaction, and only into a
//! database that holds no tenant yet.

use super::devices::Devices;
use super::internal_networks::InternalNetworks;
use super::sites::Sites;
use super::tenants::{new_organization, Tenants};
use super::users::Users;
use super::TxResult;
use crate::store::model::*;

/// All the statements the demo world is made with.
pub(crate) trait World: Tenants + Sites + InternalNetworks + Users + Devices {}
impl<X: Tenants + Sites + InternalNetworks + Users + Devices> World for X {}

/// Creates the demo world; `None` if the database already holds a tenant.
pub(crate) async fn create_world<X: World>(
    x: &X,
    world: DemoWorld,
    now: i64,
) -> TxResult<Option<DemoIds>> {
    // Nodes starting at once take turns here: the first creates the world, the others find its
    // tenants.
    x.hold_tenants().await?;
    if x.any_tenant().await? {
        return Ok(None);
    }
    let provider = x.insert_service_provider(&world.provider, now).await?;
    let scope = Scope::ServiceProvider(provider);
    x.insert_credential(&world.provider_credential, scope, now)
        .await?;
    let msp = x.insert_msp(&world.msp_name, now).await?;
    x.insert_credential(&world.msp_credential, Scope::Msp(msp), now)
        .await?;
    let parent = Parent::ServiceProvider(provider);
    let first = organization(x, parent, &world.provider_customer, now).await?;
    let second = organization(x, Parent::Msp(msp), &world.msp_customer, now).await?;
    Ok(Some(DemoIds {
        provider,
        msp,
        organizations: [first, second],
    }))
}

async fn organization<X: World>(
    x: &X,
    parent: Parent,
    o: &DemoOrganization,
    now: i64,
) -> TxResult<CreatedOrganization> {
    let created = new_organization(x, parent, &o.fields, now).await?;
    let org = created.id;
    let second = x.insert_site(org, &o.second_site, false, now).await?;
    let site = |s: DemoSite| match s {
        DemoSite::Default => created.default_site_id,
        DemoSite::Second => second,
    };
    for (name, ip, prefix, s) in &o.internal_networks {
        let f = InternalNetworkFields {
            name: name.clone(),
            ip_address: ip.clone(),
            prefix_length: *prefix,
            site_id: site(*s),
        };
        x.insert_inet(org, &f, now).await?;
    }
    for (fields, hash) in &o.users {
        x.insert_user(org, fields, hash, now).await?;
    }
    for (n, at) in &o.networks {
        x.insert_network(org, n, *at).await?;
    }
    for c in &o.roaming_computers {
        x.insert_roamer(org, c).await?;
    }
    for (a, s, at) in &o.appliances {
        let a = NewAppliance {
            site_id: site(*s),
            ..a.clone()
        };
        x.insert_appliance(org, &a, *at).await?;
    }
    x.insert_credential(&o.credential, Scope::Organization(org), now)
        .await?;
    Ok(created)
}
