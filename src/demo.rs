//! `--demo`: on an empty data directory, a demo world (a service provider, an MSP, two
//! organizations with management resources, keys and API credentials) and
//! `DIR/demo-credentials.json` (mode 0600). On later starts the file is read back (with the
//! current base URL) so the credentials are printed again.
//!
//! The world is described here as plain data and created by the store in one transaction, only
//! if the database holds no tenant yet: two servers starting on one database create it once.

use std::path::Path;

use serde_json::{json, Value};

use crate::store::{
    ApplianceSettings, ApplianceState, DemoOrganization, DemoSite, DemoWorld, NewAppliance,
    NewCredential, NewNetwork, NewRoamingComputer, NewServiceProvider, OrgFields, Store,
    UserFields,
};
use crate::timefmt::rfc3339;

/// The credentials file inside the data directory.
pub fn credentials_path(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("demo-credentials.json")
}

/// A new credential: `(apiKey, apiSecret)` and what the store keeps of it (the secret hashed).
pub fn new_credential(label: Option<&str>) -> Result<(String, String, NewCredential), String> {
    let (key, secret) = crate::secrets::new_key_pair();
    let secret_hash = crate::secrets::try_hash(&secret).map_err(|e| e.to_string())?;
    let stored = NewCredential {
        api_key: key.clone(),
        secret_hash,
        label: label.map(str::to_string),
    };
    Ok((key, secret, stored))
}

/// Creates the demo world if the database holds no tenants; returns the credentials document, or
/// `None` when the data directory already holds other tenants and no demo file.
pub async fn ensure(
    store: &Store,
    data_dir: &Path,
    base_url: &str,
) -> Result<Option<Value>, String> {
    let path = credentials_path(data_dir);
    let created = if store.has_tenants().await.map_err(|e| e.to_string())? {
        None
    } else {
        let (world, doc) = world(crate::timefmt::now())?;
        let ids = store
            .create_demo_world(world, crate::timefmt::now())
            .await
            .map_err(|e| e.to_string())?;
        ids.map(|ids| {
            let mut doc = doc;
            doc["serviceProvider"]["id"] = json!(ids.provider);
            doc["msp"]["id"] = json!(ids.msp);
            for (entry, org) in doc["organizations"]
                .as_array_mut()
                .into_iter()
                .flatten()
                .zip(&ids.organizations)
            {
                entry["id"] = json!(org.id);
                entry["name"] = json!(org.name);
                entry["customerKey"] = json!(org.customer_key);
            }
            doc
        })
    };
    let mut doc = match created {
        Some(doc) => {
            log::info!("demo world created; credentials in {}", path.display());
            doc
        }
        None if path.exists() => {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => {
            // On a database shared by several nodes, the node that made the world wrote the
            // credentials into its own data directory; the secrets are stored only hashed, so
            // this node cannot print them (copy that file here to have them printed).
            log::warn!(
                "--demo: the database already holds tenants and {} has no demo credentials; no \
                 demo world was made (on a shared database, the node that made it holds them)",
                path.display()
            );
            return Ok(None);
        }
    };
    doc["baseUrl"] = json!(base_url);
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    crate::tls::write_private(&path, format!("{text}\n").as_bytes())?;
    Ok(Some(doc))
}

/// The demo world, and its credentials document with the secrets (the ids are filled in once the
/// store has made them).
fn world(now: i64) -> Result<(DemoWorld, Value), String> {
    let year = 365 * 24 * 3600;
    let (sp_key, sp_secret, provider_credential) = new_credential(Some("demo"))?;
    let (msp_key, msp_secret, msp_credential) = new_credential(Some("demo"))?;
    let acme = OrgFields {
        name: "Acme Labs".into(),
        seats: 120,
        package_id: Some(2),
        street_address: Some("1 Research Park".into()),
        street_address2: None,
        city: Some("Cambridge".into()),
        state: Some("MA".into()),
        country_code: Some("US".into()),
        zip_code: Some("02139".into()),
        deal_id: Some("DEMO-1001".into()),
        admin_emails: vec!["it-admin@acme-labs.example".into()],
        ccw_deal_owner_emails: vec![],
    };
    let globex = OrgFields {
        name: "Globex Branch Office".into(),
        seats: 35,
        ..Default::default()
    };
    let mut orgs = Vec::new();
    let mut docs = Vec::new();
    for (n, fields) in [acme, globex].into_iter().enumerate() {
        let (key, secret, credential) = new_credential(Some("demo"))?;
        docs.push(json!({
            "id": 0,
            "name": fields.name,
            "customerKey": "",
            "apiKey": key,
            "apiSecret": secret,
        }));
        orgs.push(organization(n, fields, credential, now)?);
    }
    let mut orgs = orgs.into_iter();
    let (Some(provider_customer), Some(msp_customer)) = (orgs.next(), orgs.next()) else {
        return Err("the demo world needs two organizations".into());
    };
    let world = DemoWorld {
        provider: NewServiceProvider {
            name: "Demo Service Provider".into(),
            package_id: 2,
            seats_total: 500,
            rebill_at: Some(now + year / 12),
            expires_at: Some(now + year),
        },
        provider_credential,
        msp_name: "Demo MSP".into(),
        msp_credential,
        provider_customer,
        msp_customer,
    };
    let doc = json!({
        "baseUrl": "",
        "serviceProvider": { "id": 0, "apiKey": sp_key, "apiSecret": sp_secret },
        "msp": { "id": 0, "apiKey": msp_key, "apiSecret": msp_secret },
        "organizations": docs,
    });
    Ok((world, doc))
}

/// Organization number `n` (0 or 1) of the demo world with its resources.
fn organization(
    n: usize,
    fields: OrgFields,
    credential: NewCredential,
    now: i64,
) -> Result<DemoOrganization, String> {
    let (second_site, user, mail_domain, zone, lans) = if n == 0 {
        (
            "Branch Office",
            ("Ada", "Lovelace"),
            "acme-labs.example",
            "America/New_York",
            [
                ("Head Office LAN", "10.10.0.0"),
                ("Branch Office LAN", "10.20.0.0"),
            ],
        )
    } else {
        (
            "Warehouse",
            ("Grace", "Hopper"),
            "globex.example",
            "Europe/Berlin",
            [
                ("Office LAN", "192.168.10.0"),
                ("Warehouse LAN", "192.168.20.0"),
            ],
        )
    };
    let internal_networks = lans
        .into_iter()
        .zip([DemoSite::Default, DemoSite::Second])
        .map(|((name, ip), site)| (name.to_string(), ip.to_string(), 24, site))
        .collect();
    let user = UserFields {
        firstname: user.0.into(),
        lastname: user.1.into(),
        email: format!("{}.{}@{mail_domain}", user.0, user.1).to_ascii_lowercase(),
        role_id: 1,
        timezone: zone.into(),
    };
    // Nobody logs in as the demo user: its password is random and never shown.
    let password =
        crate::secrets::try_hash(&uuid::Uuid::new_v4().to_string()).map_err(|e| e.to_string())?;
    let (tag, net, domain) = if n == 0 {
        ("CAM", "203.0.113", "acme-labs.local")
    } else {
        ("GLX", "198.51.100", "globex.corp")
    };
    let networks = [
        ("Headquarters", format!("{net}.8"), 29, false, true, "OPEN"),
        ("Lab egress", format!("{net}.32"), 30, true, true, "OPEN"),
        (
            "Old DSL line",
            format!("{net}.77"),
            32,
            false,
            false,
            "CLOSED",
        ),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (name, ip, prefix, dynamic, verified, status))| {
        let network = NewNetwork {
            name: name.into(),
            ip_address: ip,
            prefix_length: prefix,
            is_dynamic: dynamic,
            is_verified: verified,
            status: status.into(),
        };
        (network, now - 86_400 * (90 - 10 * i as i64))
    })
    .collect();
    let computers = [
        (
            "alice-macbook",
            "roaming",
            "Encrypted",
            Some(300),
            "macOS 14.4.1",
            "Sonoma",
        ),
        (
            "bob-thinkpad",
            "roaming",
            "Open",
            Some(5 * 3600),
            "10.0.22631",
            "Windows 11",
        ),
        (
            "carol-surface",
            "anyconnect",
            "VA",
            Some(3 * 86_400),
            "10.0.19045",
            "Windows 10",
        ),
        (
            "kiosk-lobby",
            "roaming",
            "Off",
            Some(21 * 86_400),
            "10.0.22631",
            "Windows 11",
        ),
        (
            "new-hire-laptop",
            "roaming",
            "Uninstalled",
            None,
            "macOS 15.1",
            "Sequoia",
        ),
    ];
    let roaming_computers = computers
        .into_iter()
        .enumerate()
        .map(
            |(i, (name, kind, status, ago, os, os_name))| NewRoamingComputer {
                device_id: format!("01{:06x}{:08x}", n + 1, 0x5eed_0000 + i),
                name: name.into(),
                kind: kind.into(),
                status: status.into(),
                last_sync_status: ago.map(|_| "success".to_string()),
                last_sync: ago.map(|a| now - a),
                applied_bundle: Some(10_000 + n as i64 * 100 + i as i64 % 2),
                has_ip_blocking: kind == "anyconnect",
                version: Some(
                    if kind == "anyconnect" {
                        "5.1.2.42"
                    } else {
                        "3.0.345"
                    }
                    .into(),
                ),
                os_version: Some(os.into()),
                os_version_name: Some(os_name.into()),
            },
        )
        .collect();
    let appliances = [DemoSite::Default, DemoSite::Second]
        .into_iter()
        .enumerate()
        .map(|(i, site)| {
            let a = NewAppliance {
                name: format!("VA-{tag}-{:02}", i + 1),
                site_id: 0,
                is_upgradable: i == 1,
                state: ApplianceState {
                    connected_to_connector: Some("yes".into()),
                    has_local_domain_configured: Some("yes".into()),
                    query_failure_rate_acceptable: Some("yes".into()),
                    received_internal_dns_queries: Some("yes".into()),
                    redundant_within_site: Some("never".into()),
                    syncing: Some("yes".into()),
                },
                health: "okay".into(),
                kind: "virtual_appliance".into(),
                settings: ApplianceSettings {
                    internal_ips: vec![
                        format!("10.{n}.{}.10", i + 1),
                        format!("10.{n}.{}.11", i + 1),
                    ],
                    external_ip: Some(format!("{net}.{}", 9 + i)),
                    host_type: Some(if i == 0 { "VMware" } else { "Hyper-V" }.into()),
                    uptime: Some(86_400 * (12 + i as i64)),
                    is_dnscrypt_enabled: Some(true),
                    version: Some(if i == 0 { "3.4.6" } else { "3.3.2" }.into()),
                    upgrade_error: None,
                    domains: vec![domain.into()],
                    last_sync_time: Some(rfc3339(now - 60)),
                },
            };
            (a, site, now - 86_400 * 30)
        })
        .collect();
    Ok(DemoOrganization {
        fields,
        second_site: second_site.into(),
        internal_networks,
        users: vec![(user, password)],
        networks,
        roaming_computers,
        appliances,
        credential,
    })
}
