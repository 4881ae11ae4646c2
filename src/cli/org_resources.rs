//! Operators' commands for an organization's sites, internal networks and users, and the package
//! list. Input goes through the management interface's own validation and checks (the same
//! functions), so the command line accepts exactly what the API accepts; errors name the flag.

use std::io::BufRead;

use argh::{ArgsInfo, FromArgs};
use serde_json::{json, Map, Value};

use super::tenants::to_flag_message;
use super::{all_pages, no, no_flag, printed, require_org, store_err, with_store};
use crate::error::MgmtError;
use crate::management::internal_networks::internal_network_input;
use crate::management::sites::site_input;
use crate::management::users::{role_ids, user_input};
use crate::store::{StoreError, SITE_NOT_OF_ORGANIZATION, UNKNOWN_ROLE};
use crate::timefmt::now;

/// An API refusal in the command line's words: a validation message names the flag.
fn refusal(e: MgmtError) -> String {
    match e {
        MgmtError::BadRequest(m) => to_flag_message(&m),
        MgmtError::Conflict(m) => m,
        other => format!("{other:?}"),
    }
}

/// A store refusal in the command line's words (a conflict as it is, a validation message
/// naming the flag, a missing organization by its id).
fn store_refusal(org: i64) -> impl FnOnce(StoreError) -> String {
    move |e| match e {
        StoreError::Conflict(m) => m,
        e => store_err(no("organization", org))(e),
    }
}

store_command! {
    /// The options of a command that lists an organization's items.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "list")]
    pub struct OrgItems {
        /// organization id
        #[argh(option)]
        pub org: i64,
    }
}

store_command! {
    /// The options of a command that deletes one of an organization's items by its id.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "delete")]
    pub struct OrgItem {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// the item's id
        #[argh(option)]
        pub id: i64,
    }
}

/// Deletes one of an organization's items and prints it as it was: "no organization 7" when the
/// organization does not exist, "no <kind> 5" when the item does not, a conflict in its words.
pub(super) fn delete_item<T, F>(
    a: OrgItem,
    kind: &'static str,
    delete: impl FnOnce(crate::store::Store, i64, i64) -> F,
) -> Result<Value, String>
where
    T: serde::Serialize,
    F: std::future::Future<Output = crate::store::Result<T>>,
{
    with_store(&a.data_dir, a.database.as_deref(), async |store| {
        require_org(store, a.org).await?;
        let rec = delete(store.clone(), a.org, a.id)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => no(kind, a.id),
                StoreError::Conflict(m) => format!("{kind} {}: {m}", a.id),
                e => e.to_string(),
            })?;
        printed(rec)
    })
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Sites of an organization.
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "site")]
pub struct SiteCmd {
    #[argh(subcommand)]
    pub action: SiteAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum SiteAction {
    Create(SiteCreate),
    List(OrgItems),
    Delete(OrgItem),
}

store_command! {
    /// Create a site; prints it as the management interface shows it.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "create")]
    pub struct SiteCreate {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// site name
        #[argh(option)]
        pub name: String,
    }
}

pub fn site(cmd: SiteCmd) -> Result<Value, String> {
    let a = match cmd.action {
        SiteAction::Create(a) => a,
        SiteAction::List(a) => {
            return with_store(&a.data_dir, a.database.as_deref(), async |store| {
                require_org(store, a.org).await?;
                printed(all_pages(|limit, offset| store.list_sites(a.org, limit, offset)).await?)
            })
        }
        SiteAction::Delete(a) => {
            return delete_item(a, "site", async |store, org, id| {
                store.delete_site(org, id).await
            })
        }
    };
    let name = site_input(&object(json!({ "name": a.name }))).map_err(refusal)?;
    with_store(&a.data_dir, a.database.as_deref(), async |store| {
        let rec = store
            .create_site(a.org, name, now())
            .await
            .map_err(store_refusal(a.org))?;
        serde_json::to_value(rec).map_err(|e| e.to_string())
    })
}

/// Internal networks of an organization.
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "internal-network")]
pub struct InternalNetworkCmd {
    #[argh(subcommand)]
    pub action: InternalNetworkAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum InternalNetworkAction {
    Create(InternalNetworkCreate),
    List(OrgItems),
    Delete(OrgItem),
}

store_command! {
    /// Create an internal network; prints it as the management interface shows it.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "create")]
    pub struct InternalNetworkCreate {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// network name (label)
        #[argh(option)]
        pub name: String,
        /// IPv4 address of the network
        #[argh(option)]
        pub ip_address: String,
        /// prefix length, 8 to 32
        #[argh(option)]
        pub prefix_length: i64,
        /// site id (default: the organization's default site)
        #[argh(option)]
        pub site_id: Option<i64>,
    }
}

pub fn internal_network(cmd: InternalNetworkCmd) -> Result<Value, String> {
    let a = match cmd.action {
        InternalNetworkAction::Create(a) => a,
        InternalNetworkAction::List(a) => {
            return with_store(&a.data_dir, a.database.as_deref(), async |store| {
                require_org(store, a.org).await?;
                printed(
                    all_pages(|limit, offset| store.list_internal_networks(a.org, limit, offset))
                        .await?,
                )
            })
        }
        InternalNetworkAction::Delete(a) => {
            return delete_item(a, "internal network", async |store, org, id| {
                store.delete_internal_network(org, id).await
            })
        }
    };
    with_store(&a.data_dir, a.database.as_deref(), async |store| {
        let site = match a.site_id {
            Some(s) => s,
            None => store
                .default_site(a.org)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| no("organization", a.org))?,
        };
        let input = json!({
            "name": a.name,
            "ipAddress": a.ip_address,
            "prefixLength": a.prefix_length,
            "siteId": site,
        });
        let f = internal_network_input(&object(input)).map_err(refusal)?;
        let rec = store
            .create_internal_network(a.org, f, now())
            .await
            .map_err(|e| match e {
                StoreError::Invalid(m) if m == SITE_NOT_OF_ORGANIZATION => {
                    no_flag("--site-id", "site", site) + &format!(" in organization {}", a.org)
                }
                e => store_refusal(a.org)(e),
            })?;
        serde_json::to_value(rec).map_err(|e| e.to_string())
    })
}

/// Users of an organization.
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "user")]
pub struct UserCmd {
    #[argh(subcommand)]
    pub action: UserAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum UserAction {
    Create(UserCreate),
    List(OrgItems),
    Delete(OrgItem),
}

store_command! {
    /// Create a user; prints it as the management interface shows it (never the password).
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "create")]
    pub struct UserCreate {
        /// organization id
        #[argh(option)]
        pub org: i64,
        /// first name
        #[argh(option)]
        pub firstname: String,
        /// last name
        #[argh(option)]
        pub lastname: String,
        /// e-mail address (unique in the organization, ignoring case)
        #[argh(option)]
        pub email: String,
        /// role id, 1 to 6 (default 1, Full Admin)
        #[argh(option, default = "1")]
        pub role_id: i64,
        /// IANA time zone name (default UTC)
        #[argh(option, default = "String::from(\"UTC\")")]
        pub timezone: String,
        /// password (visible to other local users in the process list; prefer --password-stdin)
        #[argh(option)]
        pub password: Option<String>,
        /// read the password from the first line of standard input
        #[argh(switch)]
        pub password_stdin: bool,
    }
}

pub fn user(cmd: UserCmd) -> Result<Value, String> {
    let a = match cmd.action {
        UserAction::Create(a) => a,
        UserAction::List(a) => {
            return with_store(&a.data_dir, a.database.as_deref(), async |store| {
                require_org(store, a.org).await?;
                printed(all_pages(|limit, offset| store.list_users(a.org, limit, offset)).await?)
            })
        }
        UserAction::Delete(a) => {
            return delete_item(a, "user", async |store, org, id| {
                store.delete_user(org, id).await
            })
        }
    };
    let password = match (a.password, a.password_stdin) {
        (Some(_), true) => return Err("give --password or --password-stdin, not both".into()),
        (Some(p), false) => p,
        (None, true) => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .map_err(|e| format!("standard input: {e}"))?;
            let password = line.trim_end_matches(['\n', '\r']);
            if password.is_empty() {
                return Err(
                    "--password-stdin: standard input gave no password (an empty first line)"
                        .into(),
                );
            }
            password.to_string()
        }
        (None, false) => return Err("--password or --password-stdin is required".into()),
    };
    let input = json!({
        "firstname": a.firstname,
        "lastname": a.lastname,
        "email": a.email,
        "password": password,
        "roleId": a.role_id,
        "timezone": a.timezone,
    });
    with_store(&a.data_dir, a.database.as_deref(), async |store| {
        // Validated (the role's existence included) before the slow hashing, which runs outside
        // the write transaction.
        let roles = role_ids(store).await.map_err(refusal)?;
        let role = a.role_id;
        let (f, password) = user_input(&object(input), &roles).map_err(|e| match e {
            MgmtError::BadRequest(m) if m == UNKNOWN_ROLE => no_flag("--role-id", "role", role),
            e => refusal(e),
        })?;
        let hash = crate::secrets::try_hash(&password).map_err(|e| e.to_string())?;
        let rec = store
            .create_user(a.org, f, hash, now())
            .await
            .map_err(store_refusal(a.org))?;
        serde_json::to_value(rec).map_err(|e| e.to_string())
    })
}

/// Subscribable packages (the `packageId` of providers and customers).
#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand, name = "package")]
pub struct PackageCmd {
    #[argh(subcommand)]
    pub action: PackageAction,
}

#[derive(FromArgs, ArgsInfo, Debug)]
#[argh(subcommand)]
pub enum PackageAction {
    List(PackageList),
}

store_command! {
    /// List the packages with their ids.
    #[derive(FromArgs, ArgsInfo, Debug)]
    #[argh(subcommand, name = "list")]
    pub struct PackageList {
    }
}

pub fn package(cmd: PackageCmd) -> Result<Value, String> {
    let PackageAction::List(a) = cmd.action;
    with_store(&a.data_dir, a.database.as_deref(), async |store| {
        let list = store.list_packages().await.map_err(|e| e.to_string())?;
        serde_json::to_value(list).map_err(|e| e.to_string())
    })
}
