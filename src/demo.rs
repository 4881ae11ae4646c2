//! `--demo`: on an empty data directory, a demo world (a service provider, an MSP, two
//! organizations with management resources, keys and API credentials) and
//! `DIR/demo-credentials.json` (mode 0600). On later starts the file is read back (with the
//! current base URL) so the credentials are printed again.

use std::path::Path;

use rusqlite::Connection;
use serde_json::{json, Value};

use crate::store::tenants::{self, NewServiceProvider, OrgFields, Parent, Scope};

/// The credentials file inside the data directory.
pub fn credentials_path(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("demo-credentials.json")
}

/// Creates the demo world if the database holds no tenants; returns the credentials document, or
/// `None` when the data directory already holds other tenants and no demo file.
pub fn ensure(db_path: &Path, data_dir: &Path, base_url: &str) -> Result<Option<Value>, String> {
    let path = credentials_path(data_dir);
    let mut conn = crate::store::open_migrated(db_path).map_err(|e| e.to_string())?;
    let tenants: i64 = conn
        .query_row(
            "SELECT (SELECT count(*) FROM service_providers) + (SELECT count(*) FROM msps)
                  + (SELECT count(*) FROM organizations)",
            [],
            |r| r.get(0),
        )
        .map_err(|e| e.to_string())?;
    let mut doc = if tenants == 0 {
        let tx = conn.transaction().map_err(|e| e.to_string())?;
        let doc = create_world(&tx, crate::timefmt::now()).map_err(|e| e.to_string())?;
        tx.commit().map_err(|e| e.to_string())?;
        log::info!("demo world created; credentials in {}", path.display());
        doc
    } else if path.exists() {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
    } else {
        log::warn!("--demo: the data directory already holds tenants; no demo world was made");
        return Ok(None);
    };
    doc["baseUrl"] = json!(base_url);
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    crate::tls::write_private(&path, format!("{text}\n").as_bytes())?;
    Ok(Some(doc))
}

/// Issues an API credential for `scope`; returns `(apiKey, apiSecret)`. When the secret cannot
/// be hashed nothing is inserted, and the error (`StoreError::Aborted`) rolls back the caller's
/// transaction.
pub fn issue_credential(
    conn: &Connection,
    scope: Scope,
    label: Option<&str>,
    now: i64,
) -> crate::store::Result<(String, String)> {
    let (key, secret) = crate::secrets::new_key_pair();
    let hash = crate::secrets::try_hash(&secret)
        .map_err(|e| crate::store::StoreError::Aborted(e.to_string()))?;
    tenants::insert_credential(conn, &key, &hash, scope, label, now)?;
    Ok((key, secret))
}

fn create_world(conn: &Connection, now: i64) -> crate::store::Result<Value> {
    let year = 365 * 24 * 3600;
    let sp = tenants::create_service_provider(
        conn,
        &NewServiceProvider {
            name: "Demo Service Provider".into(),
            package_id: 2,
            seats_total: 500,
            rebill_at: Some(now + year / 12),
            expires_at: Some(now + year),
        },
        now,
    )?;
    let msp = tenants::create_msp(conn, "Demo MSP", now)?;
    let (sp_key, sp_secret) =
        issue_credential(conn, Scope::ServiceProvider(sp), Some("demo"), now)?;
    let (msp_key, msp_secret) = issue_credential(conn, Scope::Msp(msp), Some("demo"), now)?;

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
    for (fields, parent) in [
        (acme, Parent::ServiceProvider(sp)),
        (globex, Parent::Msp(msp)),
    ] {
        let created = tenants::create_organization(conn, parent, &fields, now)?;
        crate::management::demo::fill_organization(
            conn,
            created.id,
            created.default_site_id,
            orgs.len(),
            now,
        )?;
        let (k, s) = issue_credential(conn, Scope::Organization(created.id), Some("demo"), now)?;
        orgs.push(json!({
            "id": created.id,
            "name": created.name,
            "customerKey": created.customer_key,
            "apiKey": k,
            "apiSecret": s,
        }));
    }
    Ok(json!({
        "baseUrl": "",
        "serviceProvider": { "id": sp, "apiKey": sp_key, "apiSecret": sp_secret },
        "msp": { "id": msp, "apiKey": msp_key, "apiSecret": msp_secret },
        "organizations": orgs,
    }))
}
