//! The management operations: each one's rules and errors.

use super::*;

#[test]
fn sites_the_default_and_those_in_use_stay_and_references_must_be_the_organizations() {
    on_each_engine("sites", |s| async move {
        let a = organization(&s, "a").await;
        let b = organization(&s, "b").await;
        let default = a.default_site_id;
        assert_eq!(s.default_site(a.id).await.unwrap(), Some(default));
        let m = conflict_text(s.delete_site(a.id, default).await);
        assert_eq!(m, "the default site cannot be deleted");
        let branch = s.create_site(a.id, "Branch".into(), 200).await.unwrap();
        assert!(!branch.is_default);
        assert_eq!(s.list_sites(a.id, 10, 0).await.unwrap().len(), 2);
        assert_eq!(
            s.list_sites(a.id, 1, 1).await.unwrap(),
            vec![branch.clone()]
        );
        assert_eq!(s.get_site(b.id, branch.site_id).await.unwrap(), None);
        // Another organization's site is no site of this one.
        let foreign = internal("n", b.default_site_id);
        let e = s.create_internal_network(a.id, foreign, 1).await;
        assert_eq!(e, Err(StoreError::Invalid(SITE_NOT_OF_ORGANIZATION.into())));
        let e = s
            .register_appliance(a.id, appliance(b.default_site_id), 1)
            .await;
        assert_eq!(e, Err(StoreError::Invalid(SITE_NOT_OF_ORGANIZATION.into())));
        // A site in use stays.
        let n = s
            .create_internal_network(a.id, internal("n", branch.site_id), 300)
            .await
            .unwrap();
        assert_eq!(n.site_name, "Branch");
        let va = s
            .register_appliance(a.id, appliance(branch.site_id), 300)
            .await
            .unwrap();
        assert_eq!(
            s.get_appliance(a.id, va.origin_id).await.unwrap(),
            Some(va.clone())
        );
        assert_eq!(s.get_appliance(b.id, va.origin_id).await.unwrap(), None);
        let m = conflict_text(s.delete_site(a.id, branch.site_id).await);
        assert_eq!(
            m,
            format!(
                "site {} still has 1 internal network(s) and 1 virtual appliance(s); move or \
                 delete them first",
                branch.site_id
            )
        );
        // Renamed, the network shows the new name; moved and deleted, the site can go.
        let renamed = s
            .rename_site(a.id, branch.site_id, "Renamed".into(), 400)
            .await
            .unwrap();
        let n = s.get_internal_network(a.id, n.origin_id).await.unwrap();
        assert_eq!(n.unwrap().site_name, "Renamed");
        let e = s.rename_site(b.id, branch.site_id, "x".into(), 400).await;
        assert_eq!(e, Err(StoreError::NotFound));
        let moved = s
            .move_appliance(a.id, va.origin_id, default, 500)
            .await
            .unwrap();
        assert_eq!(moved.site_id, default);
        let e = s
            .move_appliance(a.id, va.origin_id, b.default_site_id, 500)
            .await;
        assert_eq!(e, Err(StoreError::Invalid(SITE_NOT_OF_ORGANIZATION.into())));
        let e = s
            .move_appliance(a.id, va.origin_id + 1000, default, 500)
            .await;
        assert_eq!(e, Err(StoreError::NotFound));
        let n2 = s
            .update_internal_network(a.id, n_id(&s, a.id).await, internal("m", default), 600)
            .await
            .unwrap();
        assert_eq!((n2.name.as_str(), n2.site_id), ("m", default));
        let e = s
            .update_internal_network(a.id, n2.origin_id + 1000, internal("m", default), 600)
            .await;
        assert_eq!(e, Err(StoreError::NotFound));
        let gone = s.delete_site(a.id, branch.site_id).await.unwrap();
        assert_eq!(gone.name, renamed.name);
        let e = s.delete_site(a.id, branch.site_id).await;
        assert_eq!(e, Err(StoreError::NotFound));
        assert_eq!(
            s.delete_internal_network(a.id, n2.origin_id).await.unwrap(),
            n2
        );
        let e = s.delete_internal_network(a.id, n2.origin_id).await;
        assert_eq!(e, Err(StoreError::NotFound));
        assert_eq!(s.delete_appliance(a.id, va.origin_id).await.unwrap(), moved);
        assert_eq!(
            s.delete_appliance(a.id, va.origin_id).await,
            Err(StoreError::NotFound)
        );
        assert!(s.list_appliances(a.id, 10, 0).await.unwrap().is_empty());
        assert!(s
            .list_internal_networks(a.id, 10, 0)
            .await
            .unwrap()
            .is_empty());
    });
}

/// The id of the organization's first internal network.
async fn n_id(s: &Store, org: i64) -> i64 {
    s.list_internal_networks(org, 1, 0).await.unwrap()[0].origin_id
}

#[test]
fn devices_are_found_by_id_and_a_device_registers_once_per_organization() {
    on_each_engine("devices", |s| async move {
        let a = organization(&s, "a").await;
        let b = organization(&s, "b").await;
        let net = NewNetwork {
            name: "egress".into(),
            ip_address: "192.0.2.0".into(),
            prefix_length: 30,
            is_dynamic: false,
            is_verified: true,
            status: "active".into(),
        };
        let n = s.register_network(a.id, net, 10).await.unwrap();
        assert_eq!(
            s.get_network(a.id, n.origin_id).await.unwrap(),
            Some(n.clone())
        );
        assert_eq!(s.get_network(b.id, n.origin_id).await.unwrap(), None);
        assert_eq!(
            s.delete_network(b.id, n.origin_id).await,
            Err(StoreError::NotFound)
        );
        assert_eq!(s.list_networks(a.id, 10, 0).await.unwrap(), vec![n.clone()]);
        assert_eq!(s.delete_network(a.id, n.origin_id).await.unwrap(), n);
        assert_eq!(
            s.delete_network(a.id, n.origin_id).await,
            Err(StoreError::NotFound)
        );

        let computer = |device: &str, name: &str| NewRoamingComputer {
            device_id: device.into(),
            name: name.into(),
            kind: "anyconnect".into(),
            status: "Protected".into(),
            ..Default::default()
        };
        let first = s
            .register_roaming_computer(a.id, computer("00aa", "Ärger laptop"))
            .await
            .unwrap();
        s.register_roaming_computer(a.id, computer("00bb", "desk"))
            .await
            .unwrap();
        s.register_roaming_computer(a.id, computer("00cc", "ÄRGER phone"))
            .await
            .unwrap();
        // The same device in another organization is another device.
        s.register_roaming_computer(b.id, computer("00aa", "x"))
            .await
            .unwrap();
        let m = conflict_text(
            s.register_roaming_computer(a.id, computer("00aa", "again"))
                .await,
        );
        assert_eq!(
            m,
            format!(
                "organization {} already has a roaming computer with deviceId 00aa",
                a.id
            )
        );
        // Found by its device id in any case.
        let found = s.get_roaming_computer(a.id, "00AA".into()).await.unwrap();
        assert_eq!(found, Some(first.clone()));
        // The name filter folds case beyond ASCII, and pages follow it.
        let named = |name: &str| RoamingFilter {
            name: Some(name.into()),
            ..Default::default()
        };
        let hits = s.list_roaming_computers(a.id, named("ärger"), 10, 0).await;
        assert_eq!(hits.unwrap().len(), 2);
        let page = s.list_roaming_computers(a.id, named("ärger"), 1, 1).await;
        assert_eq!(page.unwrap()[0].name, "ÄRGER phone");
        let all = s
            .list_roaming_computers(a.id, RoamingFilter::default(), 2, 0)
            .await
            .unwrap();
        assert_eq!(all.len(), 2);
        let renamed = s
            .rename_roaming_computer(a.id, "00AA".into(), "new".into())
            .await
            .unwrap();
        assert_eq!(renamed.name, "new");
        let e = s
            .rename_roaming_computer(a.id, "ffff".into(), "x".into())
            .await;
        assert_eq!(e, Err(StoreError::NotFound));
        let gone = s
            .delete_roaming_computer(a.id, "00aa".into())
            .await
            .unwrap();
        assert_eq!(gone, renamed);
        let e = s.delete_roaming_computer(a.id, "00aa".into()).await;
        assert_eq!(e, Err(StoreError::NotFound));
        assert!(s
            .get_roaming_computer(b.id, "00aa".into())
            .await
            .unwrap()
            .is_some());
    });
}

#[test]
fn users_need_a_known_role_and_an_address_unique_in_their_organization_ignoring_case() {
    on_each_engine("users", |s| async move {
        let a = organization(&s, "a").await;
        let b = organization(&s, "b").await;
        assert!(s.role_exists(2).await.unwrap());
        assert!(!s.role_exists(999).await.unwrap());
        let roles = s.list_roles(100, 0).await.unwrap();
        assert!(roles.len() >= 2 && roles.iter().all(|r| r.organization_id == 0));
        assert_eq!(s.list_roles(1, 1).await.unwrap(), roles[1..2].to_vec());
        let e = s
            .create_user(a.id, user("x@example.com", 999), "h".into(), 1)
            .await;
        assert_eq!(e, Err(StoreError::Invalid(UNKNOWN_ROLE.into())));
        let u = s
            .create_user(a.id, user("A.B@example.com", 2), "h".into(), 1)
            .await
            .unwrap();
        assert_eq!((u.status.as_str(), u.two_factor_enable), ("Active", false));
        let m = conflict_text(
            s.create_user(a.id, user("a.b@EXAMPLE.com", 2), "h".into(), 1)
                .await,
        );
        assert_eq!(
            m,
            "a user with email a.b@EXAMPLE.com already exists in this organization"
        );
        s.create_user(b.id, user("a.b@example.com", 2), "h".into(), 1)
            .await
            .unwrap();
        assert_eq!(s.get_user(b.id, u.id).await.unwrap(), None);
        assert_eq!(s.list_users(a.id, 10, 0).await.unwrap(), vec![u.clone()]);
        assert_eq!(s.delete_user(b.id, u.id).await, Err(StoreError::NotFound));
        assert_eq!(s.delete_user(a.id, u.id).await.unwrap(), u);
        assert_eq!(s.delete_user(a.id, u.id).await, Err(StoreError::NotFound));
    });
}

#[test]
fn tenants_need_their_parent_and_package_and_a_parent_with_customers_stays() {
    on_each_engine("tenants", |s| async move {
        assert!(!s.has_tenants().await.unwrap());
        let sp = |package| NewServiceProvider {
            name: "p".into(),
            package_id: package,
            seats_total: 100,
            rebill_at: None,
            expires_at: Some(0),
        };
        let e = s.create_service_provider(sp(999), 1).await;
        assert_eq!(
            e,
            Err(StoreError::Invalid(
                "packageId must be the id of a known package".into()
            ))
        );
        let p = s.create_service_provider(sp(2), 1).await.unwrap();
        let msp = s.create_msp("m".into(), 1).await.unwrap();
        assert!(s.has_tenants().await.unwrap());
        assert_eq!(s.service_provider_package(p).await.unwrap(), Some(2));
        assert!(s.package_exists(2).await.unwrap() && !s.package_exists(999).await.unwrap());
        let e = s
            .create_organization(Parent::ServiceProvider(p + 1000), org_fields("x"), 1)
            .await;
        assert_eq!(e.map(|o| o.id), Err(StoreError::NotFound));
        let bad_package = OrgFields {
            package_id: Some(999),
            ..org_fields("x")
        };
        let e = s.create_customer(Parent::Msp(msp), bad_package, 1).await;
        assert!(matches!(e, Err(StoreError::Invalid(m)) if m.contains("packageId")));
        let c = s
            .create_customer(Parent::ServiceProvider(p), org_fields("c"), 1)
            .await
            .unwrap();
        assert!(s.scope_exists(Scope::Msp(msp)).await.unwrap());
        assert!(!s.scope_exists(Scope::Msp(msp + 1000)).await.unwrap());
        assert!(s
            .organization_visible(Scope::ServiceProvider(p), c.customer_id)
            .await
            .unwrap());
        assert!(!s
            .organization_visible(Scope::Msp(msp), c.customer_id)
            .await
            .unwrap());
        assert!(s
            .organization_visible(Scope::Organization(c.customer_id), c.customer_id)
            .await
            .unwrap());
        // Credentials: for an existing owner only, found while live.
        let e = s
            .create_credential(Scope::Msp(msp + 1000), credential("k0"), 1)
            .await;
        assert_eq!(e, Err(StoreError::NotFound));
        s.create_credential(Scope::ServiceProvider(p), credential("k1"), 1)
            .await
            .unwrap();
        s.create_credential(Scope::Msp(msp), credential("k2"), 2)
            .await
            .unwrap();
        let found = s.find_credential("k1".into()).await.unwrap().unwrap();
        assert_eq!(found.scope, Scope::ServiceProvider(p));
        assert_eq!(s.list_credentials().await.unwrap().len(), 2);
        assert!(s.revoke_credential("k1".into(), 3).await.unwrap());
        assert!(!s.revoke_credential("k1".into(), 3).await.unwrap());
        assert!(s.find_credential("k1".into()).await.unwrap().is_none());
        // A parent with customers stays; without, it goes with its credentials.
        let m = conflict_text(s.delete_service_provider(p).await);
        assert_eq!(m, "it still has 1 customer(s); delete them first");
        let providers = s.list_service_providers().await.unwrap();
        assert_eq!(providers[0].customer_count, 1);
        assert_eq!(s.list_msps().await.unwrap()[0].customer_count, 0);
        s.delete_msp(msp).await.unwrap();
        assert!(s.find_credential("k2".into()).await.unwrap().is_none());
        assert_eq!(s.delete_msp(msp).await, Err(StoreError::NotFound));
        let e = s.delete_customer(Parent::Msp(msp), c.customer_id).await;
        assert_eq!(e, Err(StoreError::NotFound));
        s.delete_customer(Parent::ServiceProvider(p), c.customer_id)
            .await
            .unwrap();
        s.delete_service_provider(p).await.unwrap();
        assert_eq!(
            s.delete_service_provider(p).await,
            Err(StoreError::NotFound)
        );
        assert!(s.list_organizations().await.unwrap().is_empty());
    });
}

#[test]
fn customer_keys_rotate_and_revoke_and_deleted_organizations_take_no_writes() {
    on_each_engine("keys", |s| async move {
        let a = organization(&s, "a").await;
        let second = s.create_customer_key(a.id, 200).await.unwrap();
        let (third, revoked) = s.rotate_customer_key(a.id, 300).await.unwrap();
        let mut expected = vec![a.customer_key.clone(), second.clone()];
        expected.sort();
        let mut got = revoked.clone();
        got.sort();
        assert_eq!(got, expected);
        let keys = s.list_customer_keys(a.id).await.unwrap();
        assert_eq!(keys.len(), 3);
        assert_eq!(keys.iter().filter(|k| k.revoked_at.is_none()).count(), 1);
        assert!(s.revoke_customer_key(third.clone(), 400).await.unwrap());
        assert!(!s.revoke_customer_key(third, 400).await.unwrap());
        let e = s.list_customer_keys(a.id + 1000).await;
        assert!(matches!(e, Err(StoreError::NotFound)));
        // Writes of a deleted organization's data find it gone.
        assert!(s.delete_organization(a.id).await.unwrap());
        assert!(!s.delete_organization(a.id).await.unwrap());
        let e = s.create_site(a.id, "x".into(), 1).await;
        assert_eq!(e, Err(StoreError::NotFound));
        let e = s.create_customer_key(a.id, 1).await;
        assert_eq!(e, Err(StoreError::NotFound));
        let e = s
            .create_user(a.id, user("u@example.com", 2), "h".into(), 1)
            .await;
        assert_eq!(e, Err(StoreError::NotFound));
        assert_eq!(
            s.allow_add(a.id, "x.example".into(), 1).await,
            Err(StoreError::NotFound)
        );
    });
}

#[test]
fn the_customer_keys_in_a_scope_are_those_of_every_organization_it_reaches_and_no_other() {
    on_each_engine("scope_keys", |s| async move {
        let sp = |name: &str| NewServiceProvider {
            name: name.into(),
            package_id: 2,
            seats_total: 100,
            rebill_at: None,
            expires_at: None,
        };
        let p = s.create_service_provider(sp("p"), 1).await.unwrap();
        let other = s.create_service_provider(sp("q"), 1).await.unwrap();
        let msp = s.create_msp("m".into(), 1).await.unwrap();
        let create = async |parent, name: &str| {
            s.create_organization(parent, org_fields(name), 1)
                .await
                .unwrap()
        };
        let a = create(Parent::ServiceProvider(p), "a").await;
        let b = create(Parent::ServiceProvider(p), "b").await;
        let c = create(Parent::ServiceProvider(other), "c").await;
        let d = create(Parent::Msp(msp), "d").await;
        let lone = create(Parent::None, "e").await;
        // A second key of b, and a revoked one: its batches stay in its journal.
        let (b_new, b_revoked) = s.rotate_customer_key(b.id, 2).await.unwrap();
        assert_eq!(b_revoked, std::slice::from_ref(&b.customer_key));
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        let keys = |scope| s.customer_keys_in_scope(scope);
        assert_eq!(
            keys(Scope::ServiceProvider(p)).await.unwrap(),
            sorted(vec![a.customer_key.clone(), b.customer_key.clone(), b_new])
        );
        assert_eq!(
            keys(Scope::ServiceProvider(other)).await.unwrap(),
            std::slice::from_ref(&c.customer_key)
        );
        assert_eq!(keys(Scope::Msp(msp)).await.unwrap(), [d.customer_key]);
        assert_eq!(
            keys(Scope::Organization(lone.id)).await.unwrap(),
            [lone.customer_key]
        );
        assert_eq!(
            keys(Scope::Organization(a.id)).await.unwrap(),
            [a.customer_key]
        );
        // Nothing for a scope that reaches nothing, or an owner that does not exist.
        let empty = s.create_msp("n".into(), 1).await.unwrap();
        assert!(keys(Scope::Msp(empty)).await.unwrap().is_empty());
        assert!(keys(Scope::ServiceProvider(p + 1000))
            .await
            .unwrap()
            .is_empty());
        assert!(s.delete_organization(c.id).await.unwrap());
        assert!(keys(Scope::ServiceProvider(other))
            .await
            .unwrap()
            .is_empty());
    });
}

#[test]
fn customers_updates_replace_their_fields_and_an_msps_customer_has_only_name_and_seats() {
    on_each_engine("customers", |s| async move {
        let p = s
            .create_service_provider(
                NewServiceProvider {
                    name: "p".into(),
                    package_id: 2,
                    seats_total: 100,
                    rebill_at: None,
                    expires_at: None,
                },
                1,
            )
            .await
            .unwrap();
        let msp = s.create_msp("m".into(), 1).await.unwrap();
        let pc = Parent::ServiceProvider(p);
        let c = s.create_customer(pc, org_fields("c"), 1).await.unwrap();
        let changed = OrgFields {
            seats: 7,
            package_id: Some(2),
            city: Some("Ghent".into()),
            ..org_fields("c2")
        };
        let u = s
            .update_customer(pc, c.customer_id, changed.clone(), 5)
            .await
            .unwrap();
        assert_eq!(
            (u.seats, u.package_id, u.city.as_deref()),
            (7, Some(2), Some("Ghent"))
        );
        let rec = s.service_provider(p).await.unwrap().unwrap();
        assert_eq!((rec.customer_count, rec.seats_used), (1, 7));
        let e = s
            .update_customer(pc, c.customer_id + 1000, changed.clone(), 5)
            .await;
        assert_eq!(e, Err(StoreError::NotFound));
        let bad = OrgFields {
            package_id: Some(999),
            ..changed.clone()
        };
        let e = s.update_customer(pc, c.customer_id, bad, 5).await;
        assert!(matches!(e, Err(StoreError::Invalid(_))));
        let mc = s
            .create_customer(Parent::Msp(msp), org_fields("mc"), 1)
            .await
            .unwrap();
        let u = s
            .update_customer(Parent::Msp(msp), mc.customer_id, changed, 6)
            .await
            .unwrap();
        assert_eq!((u.customer_name.as_str(), u.seats), ("c2", 7));
        assert_eq!((u.package_id, u.city), (mc.package_id, None));
        assert_eq!(s.get_customer(pc, mc.customer_id).await.unwrap(), None);
        assert_eq!(s.list_customers(pc, 10, 0).await.unwrap().len(), 1);
        assert!(s
            .list_customers(Parent::None, 10, 0)
            .await
            .unwrap()
            .is_empty());
        assert!(!s.list_packages().await.unwrap().is_empty());
        let gone = s.delete_customer(pc, c.customer_id).await.unwrap();
        assert_eq!(gone.customer_id, c.customer_id);
        assert_eq!(s.service_provider(p + 1000).await.unwrap(), None);
    });
}

#[test]
fn the_allow_list_records_its_changes_and_needs_its_organization() {
    on_each_engine("allow", |s| async move {
        let a = organization(&s, "a").await;
        s.take_list_changes().await.unwrap();
        assert!(s.allow_add(a.id, "b.example".into(), 1).await.unwrap());
        assert!(!s.allow_add(a.id, "b.example".into(), 1).await.unwrap());
        assert!(s.allow_add(a.id, "a.example".into(), 1).await.unwrap());
        assert_eq!(s.take_list_changes().await.unwrap(), vec![a.id]);
        assert!(!s.allow_remove(a.id, "c.example".into()).await.unwrap());
        assert_eq!(s.take_list_changes().await.unwrap(), Vec::<i64>::new());
        assert_eq!(
            s.allow_list(a.id).await.unwrap(),
            vec!["a.example".to_string(), "b.example".to_string()]
        );
        assert!(s.allow_remove(a.id, "a.example".into()).await.unwrap());
        assert_eq!(s.take_list_changes().await.unwrap(), vec![a.id]);
        assert_eq!(s.allow_list(a.id + 1000).await, Err(StoreError::NotFound));
    });
}

#[test]
fn a_verdict_names_the_nearest_listed_and_allowing_names_and_the_allow_list_wins() {
    on_each_engine("verdict", |s| async move {
        let a = organization(&s, "a").await;
        let b = organization(&s, "b").await;
        let listed = |names: &[&str]| {
            let batch = PreparedBatch::new(
                names
                    .iter()
                    .map(|n| PreparedEvent {
                        domain: n.to_string(),
                        listed: true,
                    })
                    .collect(),
                "[{}]".into(),
            );
            Ingest {
                key: CustomerKey::parse(&a.customer_key).unwrap(),
                batch_id: uuid::Uuid::new_v4(),
                now: 1,
                batch,
                new_domain_budget: None,
            }
        };
        let stored = s
            .ingest(listed(&["bad.example", "x.bad.example"]))
            .await
            .unwrap();
        assert!(matches!(stored, Ingested::Stored { added: 2 }));
        let v = s.verdict(a.id, "www.x.bad.example".into()).await.unwrap();
        assert_eq!(v.listed_as.as_deref(), Some("x.bad.example"));
        assert!(v.blocked && v.allowed_by.is_none());
        s.allow_add(a.id, "bad.example".into(), 2).await.unwrap();
        s.allow_add(a.id, "x.bad.example".into(), 2).await.unwrap();
        let v = s.verdict(a.id, "www.x.bad.example".into()).await.unwrap();
        assert_eq!(v.allowed_by.as_deref(), Some("x.bad.example"));
        assert!(!v.blocked);
        let v = s.verdict(a.id, "unlisted.example".into()).await.unwrap();
        assert!(!v.blocked && v.listed_as.is_none());
        let v = s.verdict(b.id, "bad.example".into()).await.unwrap();
        assert!(!v.blocked && v.listed_as.is_none());
        let e = s.verdict(a.id + 1000, "bad.example".into()).await;
        assert!(matches!(e, Err(StoreError::NotFound)));
    });
}

#[test]
fn the_demo_world_is_made_once_and_only_into_a_database_without_tenants() {
    on_each_engine("demo", |s| async move {
        let org = |name: &str| DemoOrganization {
            fields: org_fields(name),
            second_site: "Branch".into(),
            internal_networks: vec![("lan".into(), "10.1.0.0".into(), 16, DemoSite::Second)],
            users: vec![(user(&format!("{name}@example.com"), 2), "h".into())],
            networks: vec![],
            roaming_computers: vec![NewRoamingComputer {
                device_id: format!("0{}", name.len()),
                name: "laptop".into(),
                ..Default::default()
            }],
            appliances: vec![(appliance(0), DemoSite::Default, 5)],
            credential: credential(&format!("{name}-key")),
        };
        let world = DemoWorld {
            provider: NewServiceProvider {
                name: "p".into(),
                package_id: 2,
                seats_total: 10,
                rebill_at: None,
                expires_at: None,
            },
            provider_credential: credential("p-key"),
            msp_name: "m".into(),
            msp_credential: credential("m-key"),
            provider_customer: org("acme"),
            msp_customer: org("globex"),
        };
        let ids = s
            .create_demo_world(world.clone(), 1)
            .await
            .unwrap()
            .unwrap();
        let [first, second] = &ids.organizations;
        let sites = s.list_sites(first.id, 10, 0).await.unwrap();
        assert_eq!(sites.len(), 2);
        assert_eq!((sites[1].internal_network_count, sites[0].va_count), (1, 1));
        assert_eq!(s.list_users(second.id, 10, 0).await.unwrap().len(), 1);
        let cred = s
            .find_credential("globex-key".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(cred.scope, Scope::Organization(second.id));
        assert!(s.create_demo_world(world, 2).await.unwrap().is_none());
        assert_eq!(s.list_organizations().await.unwrap().len(), 2);
    });
}
