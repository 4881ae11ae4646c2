//! Provisioning of tenants and their credentials: service providers, MSPs, organizations,
//! enforcement customer keys and management API credentials.

use argh::{ArgsInfo, FromArgs};
use serde_json::{json, Value};

use super::{no, no_flag, printed, store_err, with_store};
use crate::management::customers::{customer_input, package_ids};
use crate::management::msp_customers::msp_customer_input;
use crate::store::{NewServiceProvider, Parent, Scope, StoreError};
use crate::timefmt::{now, parse_rfc3339, rfc3339};

/// Service providers.
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "provider")]
pub struct ProviderCmd {
    #[argh(subcommand)]
    pub action: ProviderAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum ProviderAction {
    Create(ProviderCreate),
    List(ProviderList),
    Delete(ProviderDelete),
}

store_command! {
    /// List the service providers with their customer counts.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "list")]
    pub struct ProviderList {
    }
}

store_command! {
    /// Delete a service provider that has no customers left, with its credentials.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "delete")]
    pub struct ProviderDelete {
        /// service provider id
        #[argh(option)]
        pub id: i64,
    }
}

/// A provider's or MSP's deletion in the command line's words.
fn delete_parent_err(kind: &'static str, id: i64) -> impl FnOnce(StoreError) -> String {
    move |e| match e {
        StoreError::NotFound => no(kind, id),
        StoreError::Conflict(m) => format!("{kind} {id}: {m}"),
        e => e.to_string(),
    }
}

store_command! {
    /// Create a service provider; prints its id and record.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "create")]
    pub struct ProviderCreate {
        /// provider name
        #[argh(option)]
        pub name: String,
        /// subscribed package id (see `parasol package list`)
        #[argh(option, default = "2")]
        pub package_id: i64,
        /// seats allocated (default 100)
        #[argh(option, default = "100")]
        pub seats: i64,
        /// rebilling time, RFC 3339 (default: in 30 days)
        #[argh(option)]
        pub rebill_at: Option<String>,
        /// subscription end, RFC 3339 (default: in one year)
        #[argh(option)]
        pub expires_at: Option<String>,
    }
}

fn time_arg(name: &str, v: &Option<String>, default: i64) -> Result<i64, String> {
    match v {
        None => Ok(default),
        Some(s) => {
            parse_rfc3339(s).ok_or_else(|| format!("--{name} {s:?}: expected an RFC 3339 time"))
        }
    }
}

pub fn provider(cmd: ProviderCmd) -> Result<Value, String> {
    let a = match cmd.action {
        ProviderAction::Create(a) => a,
        ProviderAction::List(a) => {
            return with_store(&a.data_dir, a.database.as_deref(), async |store| {
                printed(
                    store
                        .list_service_providers()
                        .await
                        .map_err(|e| e.to_string())?,
                )
            })
        }
        ProviderAction::Delete(a) => {
            return with_store(&a.data_dir, a.database.as_deref(), async |store| {
                store
                    .delete_service_provider(a.id)
                    .await
                    .map_err(delete_parent_err("service provider", a.id))?;
                Ok(json!({ "id": a.id, "deleted": true }))
            })
        }
    };
    if a.name.trim().is_empty() {
        return Err("--name must not be empty".into());
    }
    if a.seats < 0 {
        return Err("--seats must be 0 or more".into());
    }
    let t = now();
    let sp = NewServiceProvider {
        name: a.name.clone(),
        package_id: a.package_id,
        seats_total: a.seats,
        rebill_at: Some(time_arg("rebill-at", &a.rebill_at, t + 30 * 86400)?),
        expires_at: Some(time_arg("expires-at", &a.expires_at, t + 365 * 86400)?),
    };
    with_store(&a.data_dir, a.database.as_deref(), async |store| {
        let id = store
            .create_service_provider(sp.clone(), t)
            .await
            .map_err(|e| match e {
                StoreError::Invalid(_) => no_flag("--package-id", "package", a.package_id),
                e => e.to_string(),
            })?;
        Ok(json!({
            "id": id,
            "name": sp.name,
            "packageId": sp.package_id,
            "seatsTotal": sp.seats_total,
            "rebillAt": sp.rebill_at.map(rfc3339),
            "expiresAt": sp.expires_at.map(rfc3339),
        }))
    })
}

/// Managed-service providers (MSPs).
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "msp")]
pub struct MspCmd {
    #[argh(subcommand)]
    pub action: MspAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum MspAction {
    Create(MspCreate),
    List(MspList),
    Delete(MspDelete),
}

store_command! {
    /// List the MSPs with their customer counts.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "list")]
    pub struct MspList {
    }
}

store_command! {
    /// Delete an MSP that has no customers left, with its credentials.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "delete")]
    pub struct MspDelete {
        /// MSP id
        #[argh(option)]
        pub id: i64,
    }
}

store_command! {
    /// Create an MSP; prints its id.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "create")]
    pub struct MspCreate {
        /// MSP name
        #[argh(option)]
        pub name: String,
    }
}

pub fn msp(cmd: MspCmd) -> Result<Value, String> {
    let a = match cmd.action {
        MspAction::Create(a) => a,
        MspAction::List(a) => {
            return with_store(&a.data_dir, a.database.as_deref(), async |store| {
                printed(store.list_msps().await.map_err(|e| e.to_string())?)
            })
        }
        MspAction::Delete(a) => {
            return with_store(&a.data_dir, a.database.as_deref(), async |store| {
                store
                    .delete_msp(a.id)
                    .await
                    .map_err(delete_parent_err("MSP", a.id))?;
                Ok(json!({ "id": a.id, "deleted": true }))
            })
        }
    };
    if a.name.trim().is_empty() {
        return Err("--name must not be empty".into());
    }
    with_store(&a.data_dir, a.database.as_deref(), async |store| {
        let id = store
            .create_msp(a.name.clone(), now())
            .await
            .map_err(|e| e.to_string())?;
        Ok(json!({ "id": id, "name": a.name }))
    })
}

/// Organizations (a customer of a service provider or an MSP, or stand-alone).
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "org")]
pub struct OrgCmd {
    #[argh(subcommand)]
    pub action: OrgAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum OrgAction {
    Create(OrgCreate),
    List(OrgList),
    Delete(OrgDelete),
}

store_command! {
    /// List the organizations with their parents.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "list")]
    pub struct OrgList {
    }
}

store_command! {
    /// Create an organization with its default site and customer key.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "create")]
    pub struct OrgCreate {
        /// organization (customer) name
        #[argh(option)]
        pub name: String,
        /// make it a customer of this service provider
        #[argh(option)]
        pub provider: Option<i64>,
        /// make it a customer of this MSP
        #[argh(option)]
        pub msp: Option<i64>,
        /// seats (default 10)
        #[argh(option, default = "10")]
        pub seats: i64,
        /// package id for a service provider's customer (default: the provider's package)
        #[argh(option)]
        pub package_id: Option<i64>,
        /// street address (required for a service provider's customer)
        #[argh(option)]
        pub street_address: Option<String>,
        /// second address line
        #[argh(option)]
        pub street_address2: Option<String>,
        /// city (required for a service provider's customer)
        #[argh(option)]
        pub city: Option<String>,
        /// state or region (required for a service provider's customer)
        #[argh(option)]
        pub state: Option<String>,
        /// two-letter country code (default US)
        #[argh(option, default = "String::from(\"US\")")]
        pub country_code: String,
        /// postal code
        #[argh(option)]
        pub zip_code: Option<String>,
        /// deal id
        #[argh(option)]
        pub deal_id: Option<String>,
        /// admin e-mail address (repeatable; at least one for a service provider's customer)
        #[argh(option)]
        pub admin_email: Vec<String>,
        /// deal owner e-mail address (repeatable)
        #[argh(option)]
        pub ccw_deal_owner_email: Vec<String>,
    }
}

store_command! {
    /// Delete an organization with all of its data; its customer keys stop working.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "delete")]
    pub struct OrgDelete {
        /// organization id
        #[argh(option)]
        pub id: i64,
    }
}

pub fn org(cmd: OrgCmd) -> Result<Value, String> {
    match cmd.action {
        OrgAction::Create(a) => org_create(a),
        OrgAction::List(a) => with_store(&a.data_dir, a.database.as_deref(), async |store| {
            printed(
                store
                    .list_organizations()
                    .await
                    .map_err(|e| e.to_string())?,
            )
        }),
        OrgAction::Delete(a) => with_store(&a.data_dir, a.database.as_deref(), async |store| {
            if store
                .delete_organization(a.id)
                .await
                .map_err(|e| e.to_string())?
            {
                Ok(json!({ "id": a.id, "deleted": true }))
            } else {
                Err(no("organization", a.id))
            }
        }),
    }
}

fn org_create(a: OrgCreate) -> Result<Value, String> {
    let parent = match (a.provider, a.msp) {
        (Some(_), Some(_)) => return Err("give --provider or --msp, not both".into()),
        (Some(sp), None) => Parent::ServiceProvider(sp),
        (None, Some(m)) => Parent::Msp(m),
        (None, None) => Parent::None,
    };
    // The same input, validated by the same code as the management interface's create.
    let mut input = json!({
        "customerName": a.name,
        "seats": a.seats,
        "streetAddress": a.street_address,
        "streetAddress2": a.street_address2,
        "city": a.city,
        "state": a.state,
        "countryCode": a.country_code,
        "zipCode": a.zip_code,
        "dealId": a.deal_id,
        "adminEmails": a.admin_email,
        "ccwDealOwnerEmails": a.ccw_deal_owner_email,
        "packageId": a.package_id,
    });
    let flag = |e: crate::error::MgmtError| match e {
        crate::error::MgmtError::BadRequest(m) => to_flag_message(&m),
        other => format!("{other:?}"),
    };
    with_store(&a.data_dir, a.database.as_deref(), async |store| {
        let fields = match parent {
            Parent::ServiceProvider(sp) => {
                let pkg = store
                    .service_provider_package(sp)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| no("service provider", sp))?;
                input["packageId"] = json!(a.package_id.unwrap_or(pkg));
                let packages = package_ids(store).await.map_err(|e| format!("{e:?}"))?;
                customer_input(input.as_object().ok_or("input")?, &packages).map_err(flag)?
            }
            Parent::Msp(_) => {
                let mut f = msp_customer_input(input.as_object().ok_or("input")?).map_err(flag)?;
                f.package_id = a.package_id;
                f
            }
            Parent::None => {
                let mut f = msp_customer_input(input.as_object().ok_or("input")?).map_err(flag)?;
                f.package_id = a.package_id;
                f.country_code = Some(a.country_code.clone());
                f.admin_emails = a.admin_email.clone();
                f
            }
        };
        let package = fields.package_id;
        let missing_parent = match parent {
            Parent::ServiceProvider(sp) => no("service provider", sp),
            Parent::Msp(m) => no("MSP", m),
            Parent::None => String::new(),
        };
        let created = store
            .create_organization(parent, fields, now())
            .await
            .map_err(|e| match e {
                StoreError::NotFound => missing_parent,
                StoreError::Invalid(_) => {
                    no_flag("--package-id", "package", package.unwrap_or_default())
                }
                e => e.to_string(),
            })?;
        serde_json::to_value(created).map_err(|e| e.to_string())
    })
}

/// Turns an API validation message (`streetAddress is required`) into the flag's spelling
/// (`--street-address is required`).
pub(super) fn to_flag_message(m: &str) -> String {
    let (field, rest) = m.split_once(' ').unwrap_or((m, ""));
    let flag = match field {
        "customerName" => "--name".to_string(),
        "adminEmails" => "--admin-email".to_string(),
        "ccwDealOwnerEmails" => "--ccw-deal-owner-email".to_string(),
        f => {
            let mut out = String::from("--");
            for ch in f.chars() {
                if ch.is_ascii_uppercase() {
                    out.push('-');
                    out.push(ch.to_ascii_lowercase());
                } else {
                    out.push(ch);
                }
            }
            out
        }
    };
    format!("{flag} {rest}")
}

/// Enforcement customer keys.
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "key")]
pub struct KeyCmd {
    #[argh(subcommand)]
    pub action: KeyAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum KeyAction {
    Create(KeyCreate),
    List(KeyList),
    Revoke(KeyRevoke),
    Rotate(KeyRotate),
}

store_command! {
    /// Issue an additional customer key for an organization.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "create")]
    pub struct KeyCreate {
        /// organization id
        #[argh(option)]
        pub org: i64,
    }
}

store_command! {
    /// List an organization's customer keys, revoked ones included.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "list")]
    pub struct KeyList {
        /// organization id
        #[argh(option)]
        pub org: i64,
    }
}

store_command! {
    /// Revoke one customer key: requests with it get 403 from then on.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "revoke")]
    pub struct KeyRevoke {
        /// the customer key
        #[argh(option)]
        pub key: String,
    }
}

store_command! {
    /// Revoke all of an organization's keys and issue a new one.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "rotate")]
    pub struct KeyRotate {
        /// organization id
        #[argh(option)]
        pub org: i64,
    }
}

pub fn key(cmd: KeyCmd) -> Result<Value, String> {
    match cmd.action {
        KeyAction::Create(a) => with_store(&a.data_dir, a.database.as_deref(), async |store| {
            let k = store
                .create_customer_key(a.org, now())
                .await
                .map_err(store_err(no("organization", a.org)))?;
            Ok(json!({ "organizationId": a.org, "customerKey": k }))
        }),
        KeyAction::List(a) => with_store(&a.data_dir, a.database.as_deref(), async |store| {
            let keys = store
                .list_customer_keys(a.org)
                .await
                .map_err(store_err(no("organization", a.org)))?;
            serde_json::to_value(keys).map_err(|e| e.to_string())
        }),
        KeyAction::Revoke(a) => with_store(&a.data_dir, a.database.as_deref(), async |store| {
            let key = a.key.trim().to_ascii_lowercase();
            if store
                .revoke_customer_key(key.clone(), now())
                .await
                .map_err(|e| e.to_string())?
            {
                Ok(json!({ "customerKey": key, "revoked": true }))
            } else {
                Err(no("live customer key", key))
            }
        }),
        KeyAction::Rotate(a) => with_store(&a.data_dir, a.database.as_deref(), async |store| {
            let (k, revoked) = store
                .rotate_customer_key(a.org, now())
                .await
                .map_err(store_err(no("organization", a.org)))?;
            Ok(json!({ "organizationId": a.org, "customerKey": k, "revoked": revoked }))
        }),
    }
}

/// Management API credentials (HTTP Basic key and secret).
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "credential")]
pub struct CredentialCmd {
    #[argh(subcommand)]
    pub action: CredentialAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum CredentialAction {
    Create(CredentialCreate),
    List(CredentialList),
    Revoke(CredentialRevoke),
}

store_command! {
    /// Issue a credential bound to one scope; the secret is shown only here.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "create")]
    pub struct CredentialCreate {
        /// scope: this service provider, its customers and their organizations
        #[argh(option)]
        pub provider: Option<i64>,
        /// scope: this MSP, its customers and their organizations
        #[argh(option)]
        pub msp: Option<i64>,
        /// scope: this organization only
        #[argh(option)]
        pub org: Option<i64>,
        /// free-text label
        #[argh(option)]
        pub label: Option<String>,
    }
}

store_command! {
    /// List credentials (never secrets).
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "list")]
    pub struct CredentialList {
    }
}

store_command! {
    /// Revoke a credential: requests with it get 401 from then on.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "revoke")]
    pub struct CredentialRevoke {
        /// the API key
        #[argh(option)]
        pub key: String,
    }
}

pub fn credential(cmd: CredentialCmd) -> Result<Value, String> {
    match cmd.action {
        CredentialAction::Create(a) => {
            let scope = match (a.provider, a.msp, a.org) {
                (Some(id), None, None) => Scope::ServiceProvider(id),
                (None, Some(id), None) => Scope::Msp(id),
                (None, None, Some(id)) => Scope::Organization(id),
                _ => return Err("give exactly one of --provider, --msp, --org".into()),
            };
            let (k, secret, credential) = crate::demo::new_credential(a.label.as_deref())?;
            with_store(&a.data_dir, a.database.as_deref(), async |store| {
                store
                    .create_credential(scope, credential, now())
                    .await
                    .map_err(store_err(match scope {
                        Scope::ServiceProvider(id) => no("service provider", id),
                        Scope::Msp(id) => no("MSP", id),
                        Scope::Organization(id) => no("organization", id),
                    }))?;
                Ok(json!({ "apiKey": k, "apiSecret": secret, "scope": scope, "label": a.label }))
            })
        }
        CredentialAction::List(a) => {
            with_store(&a.data_dir, a.database.as_deref(), async |store| {
                let list = store.list_credentials().await.map_err(|e| e.to_string())?;
                serde_json::to_value(list).map_err(|e| e.to_string())
            })
        }
        CredentialAction::Revoke(a) => {
            with_store(&a.data_dir, a.database.as_deref(), async |store| {
                if store
                    .revoke_credential(a.key.clone(), now())
                    .await
                    .map_err(|e| e.to_string())?
                {
                    Ok(json!({ "apiKey": a.key, "revoked": true }))
                } else {
                    Err(no("live credential", &a.key))
                }
            })
        }
    }
}
