//! Tenants: service providers, MSPs, organizations, enforcement customer keys and management
//! credentials. A parent must exist for what is created under it, a package must exist, a
//! provider or MSP with customers cannot go, and deleting an organization takes all its data.

use super::sites::Sites;
use super::{conflict, invalid, not_found, Hold, TxResult};
use crate::store::model::*;
use crate::store::Result;

/// The statements of tenants and credentials.
pub(crate) trait Tenants {
    /// A live credential by its API key.
    async fn credential(&self, api_key: &str) -> Result<Option<StoredCredential>>;
    /// The organization's provider and MSP, if it exists.
    async fn organization_parents(&self, org: i64) -> Result<Option<(Option<i64>, Option<i64>)>>;
    /// Whether the scope's owner exists; held as `hold` says (`None`: only looked at).
    async fn hold_scope(&self, scope: Scope, hold: Option<Hold>) -> Result<bool>;
    /// Whether the database holds any service provider, MSP or organization.
    async fn any_tenant(&self) -> Result<bool>;
    /// Makes the "no tenant yet" check and what follows one step against other nodes doing
    /// the same (the demo world).
    async fn hold_tenants(&self) -> Result<()>;
    async fn insert_service_provider(&self, sp: &NewServiceProvider, now: i64) -> Result<i64>;
    async fn insert_msp(&self, name: &str, now: i64) -> Result<i64>;
    /// Inserts an organization (without its site and key); its id.
    async fn insert_organization(&self, parent: Parent, f: &OrgFields, now: i64) -> Result<i64>;
    async fn organization_exists(&self, org: i64) -> Result<bool>;
    /// Holds the organization for its deletion (ingests in flight for it finish first, later
    /// ones find it gone); false if there is none.
    async fn hold_for_delete(&self, org: i64) -> Result<bool>;
    /// Deletes a held organization with all its data; its stored requests are left to the
    /// background purge.
    async fn delete_organization_row(&self, org: i64) -> Result<()>;
    async fn insert_customer_key(&self, org: i64, key: &str, now: i64) -> Result<()>;
    /// The organization's keys, revoked ones included, by creation time and key.
    async fn customer_keys(&self, org: i64) -> Result<Vec<CustomerKeyInfo>>;
    /// The keys, revoked ones included, of every organization whose `column` (`reach_column`)
    /// is `id`, in one statement, by key (bytewise).
    async fn customer_keys_where(&self, column: &'static str, id: i64) -> Result<Vec<String>>;
    async fn revoke_customer_key_row(&self, key: &str, now: i64) -> Result<bool>;
    /// Revokes every live key of the organization; the keys, by creation time and key.
    async fn revoke_live_keys(&self, org: i64, now: i64) -> Result<Vec<String>>;
    async fn insert_credential(&self, c: &NewCredential, scope: Scope, now: i64) -> Result<()>;
    /// Every credential, by creation time and key.
    async fn credentials(&self) -> Result<Vec<CredentialInfo>>;
    async fn revoke_credential_row(&self, api_key: &str, now: i64) -> Result<bool>;
    async fn service_providers(&self) -> Result<Vec<ServiceProviderInfo>>;
    async fn msps(&self) -> Result<Vec<MspInfo>>;
    async fn organizations(&self) -> Result<Vec<OrganizationInfo>>;
    /// The organizations under a provider or MSP.
    async fn customer_count(&self, parent: Scope) -> Result<i64>;
    /// Deletes a provider or MSP with its credentials.
    async fn delete_parent_row(&self, parent: Scope) -> Result<()>;
    async fn package_known(&self, id: i64) -> Result<bool>;
}

/// `Invalid` naming `packageId` unless the package exists.
pub(crate) async fn check_package<X: Tenants>(x: &X, package: Option<i64>) -> TxResult<()> {
    match package {
        Some(p) if !x.package_known(p).await? => {
            invalid("packageId must be the id of a known package")
        }
        _ => Ok(()),
    }
}

/// `NotFound` unless the parent (provider or MSP) exists; it is held until the commit.
pub(crate) async fn check_parent<X: Tenants>(x: &X, parent: Parent) -> TxResult<()> {
    let scope = match parent {
        Parent::None => return Ok(()),
        Parent::ServiceProvider(id) => Scope::ServiceProvider(id),
        Parent::Msp(id) => Scope::Msp(id),
    };
    if x.hold_scope(scope, Some(Hold::Share)).await? {
        Ok(())
    } else {
        not_found()
    }
}

pub(crate) async fn find_credential<X: Tenants>(
    x: &X,
    api_key: String,
) -> TxResult<Option<StoredCredential>> {
    Ok(x.credential(&api_key).await?)
}

/// Whether the organization exists and the scope reaches it.
pub(crate) async fn organization_visible<X: Tenants>(
    x: &X,
    scope: Scope,
    org: i64,
) -> TxResult<bool> {
    Ok(match (x.organization_parents(org).await?, scope) {
        (None, _) => false,
        (Some(_), Scope::Organization(o)) => o == org,
        (Some((sp, _)), Scope::ServiceProvider(s)) => sp == Some(s),
        (Some((_, msp)), Scope::Msp(m)) => msp == Some(m),
    })
}

pub(crate) async fn scope_exists<X: Tenants>(x: &X, scope: Scope) -> TxResult<bool> {
    Ok(x.hold_scope(scope, None).await?)
}

pub(crate) async fn has_tenants<X: Tenants>(x: &X) -> TxResult<bool> {
    Ok(x.any_tenant().await?)
}

pub(crate) async fn create_service_provider<X: Tenants>(
    x: &X,
    sp: NewServiceProvider,
    now: i64,
) -> TxResult<i64> {
    check_package(x, Some(sp.package_id)).await?;
    Ok(x.insert_service_provider(&sp, now).await?)
}

pub(crate) async fn create_msp<X: Tenants>(x: &X, name: String, now: i64) -> TxResult<i64> {
    Ok(x.insert_msp(&name, now).await?)
}

/// Issues a new customer key (a UUID v4) for the organization.
pub(crate) async fn create_customer_key<X: Tenants>(x: &X, org: i64, now: i64) -> TxResult<String> {
    let key = uuid::Uuid::new_v4().hyphenated().to_string();
    x.insert_customer_key(org, &key, now).await?;
    Ok(key)
}

/// An organization with its default site and a customer key, the parent and package checked.
pub(crate) async fn create_organization<X: Tenants + Sites>(
    x: &X,
    parent: Parent,
    fields: OrgFields,
    now: i64,
) -> TxResult<CreatedOrganization> {
    check_parent(x, parent).await?;
    check_package(x, fields.package_id).await?;
    new_organization(x, parent, &fields, now).await
}

/// An organization with its default site and a customer key (the caller has checked).
pub(crate) async fn new_organization<X: Tenants + Sites>(
    x: &X,
    parent: Parent,
    fields: &OrgFields,
    now: i64,
) -> TxResult<CreatedOrganization> {
    let id = x.insert_organization(parent, fields, now).await?;
    let default_site_id = x.insert_site(id, "Default Site", true, now).await?;
    let customer_key = create_customer_key(x, id, now).await?;
    Ok(CreatedOrganization {
        id,
        name: fields.name.clone(),
        default_site_id,
        customer_key,
    })
}

/// Deletes an organization with all its data; false if there is none.
pub(crate) async fn delete_organization<X: Tenants>(x: &X, org: i64) -> TxResult<bool> {
    if !x.hold_for_delete(org).await? {
        return Ok(false);
    }
    x.delete_organization_row(org).await?;
    Ok(true)
}

/// The organization's customer keys (`NotFound` if it does not exist).
pub(crate) async fn list_customer_keys<X: Tenants>(
    x: &X,
    org: i64,
) -> TxResult<Vec<CustomerKeyInfo>> {
    if !x.organization_exists(org).await? {
        return not_found();
    }
    Ok(x.customer_keys(org).await?)
}

/// The customer keys, revoked ones included, of every organization the scope reaches (the reach
/// of `organization_visible`), by key: what their journal entries are kept under.
pub(crate) async fn customer_keys_in_scope<X: Tenants>(
    x: &X,
    scope: Scope,
) -> TxResult<Vec<String>> {
    let (column, id) = reach_column(scope);
    Ok(x.customer_keys_where(column, id).await?)
}

pub(crate) async fn revoke_customer_key<X: Tenants>(
    x: &X,
    key: String,
    now: i64,
) -> TxResult<bool> {
    Ok(x.revoke_customer_key_row(&key, now).await?)
}

/// Revokes every live key of the organization and issues a new one.
pub(crate) async fn rotate_customer_key<X: Tenants>(
    x: &X,
    org: i64,
    now: i64,
) -> TxResult<(String, Vec<String>)> {
    let revoked = x.revoke_live_keys(org, now).await?;
    let key = create_customer_key(x, org, now).await?;
    Ok((key, revoked))
}

/// Stores a credential for the scope (`NotFound` if its owner does not exist; it is held
/// until the commit).
pub(crate) async fn create_credential<X: Tenants>(
    x: &X,
    scope: Scope,
    credential: NewCredential,
    now: i64,
) -> TxResult<()> {
    if !x.hold_scope(scope, Some(Hold::Share)).await? {
        return not_found();
    }
    Ok(x.insert_credential(&credential, scope, now).await?)
}

pub(crate) async fn list_credentials<X: Tenants>(x: &X) -> TxResult<Vec<CredentialInfo>> {
    Ok(x.credentials().await?)
}

pub(crate) async fn revoke_credential<X: Tenants>(
    x: &X,
    api_key: String,
    now: i64,
) -> TxResult<bool> {
    Ok(x.revoke_credential_row(&api_key, now).await?)
}

pub(crate) async fn list_service_providers<X: Tenants>(
    x: &X,
) -> TxResult<Vec<ServiceProviderInfo>> {
    Ok(x.service_providers().await?)
}

pub(crate) async fn list_msps<X: Tenants>(x: &X) -> TxResult<Vec<MspInfo>> {
    Ok(x.msps().await?)
}

pub(crate) async fn list_organizations<X: Tenants>(x: &X) -> TxResult<Vec<OrganizationInfo>> {
    Ok(x.organizations().await?)
}

/// Deletes a provider or MSP that has no customers left, with its credentials. It is held
/// first, so that no customer can be created under it meanwhile.
async fn delete_parent<X: Tenants>(x: &X, parent: Scope) -> TxResult<()> {
    if !x.hold_scope(parent, Some(Hold::Exclusive)).await? {
        return not_found();
    }
    let customers = x.customer_count(parent).await?;
    if customers > 0 {
        return conflict(format!(
            "it still has {customers} customer(s); delete them first"
        ));
    }
    Ok(x.delete_parent_row(parent).await?)
}

pub(crate) async fn delete_service_provider<X: Tenants>(x: &X, sp: i64) -> TxResult<()> {
    delete_parent(x, Scope::ServiceProvider(sp)).await
}

pub(crate) async fn delete_msp<X: Tenants>(x: &X, msp: i64) -> TxResult<()> {
    delete_parent(x, Scope::Msp(msp)).await
}

/// Whether `id` names a package.
pub(crate) async fn package_exists<X: Tenants>(x: &X, id: i64) -> TxResult<bool> {
    Ok(x.package_known(id).await?)
}

/// The table of a scope's owner, the column of `organizations` and `api_credentials` that
/// refers to it, and its id.
pub(crate) fn owner_table(scope: Scope) -> (&'static str, &'static str, i64) {
    match scope {
        Scope::ServiceProvider(id) => ("service_providers", "service_provider_id", id),
        Scope::Msp(id) => ("msps", "msp_id", id),
        Scope::Organization(id) => ("organizations", "organization_id", id),
    }
}

/// The statement of `Tenants::customer_keys_where`, both engines: the keys of the organizations
/// whose `column` is the parameter `param` (`?1`, `$1`), ordered by `key_order` (the key, in the
/// engine's bytewise collation).
pub(crate) fn customer_keys_where_query(column: &str, param: &str, key_order: &str) -> String {
    format!(
        "SELECT k.key FROM organizations o JOIN customer_keys k ON k.organization_id = o.id \
         WHERE o.{column} = {param} ORDER BY {key_order}"
    )
}

/// The column of `organizations` that says whether a scope reaches an organization, and the
/// value it must hold.
pub(crate) fn reach_column(scope: Scope) -> (&'static str, i64) {
    match scope {
        Scope::ServiceProvider(id) => ("service_provider_id", id),
        Scope::Msp(id) => ("msp_id", id),
        Scope::Organization(id) => ("id", id),
    }
}

/// The scope of a credential's row, from its `service_provider_id`, `msp_id` and
/// `organization_id`.
pub(crate) fn credential_scope(sp: Option<i64>, msp: Option<i64>, org: Option<i64>) -> Scope {
    match (sp, msp, org) {
        (Some(id), _, _) => Scope::ServiceProvider(id),
        (None, Some(id), _) => Scope::Msp(id),
        // The CHECK constraint makes a row without an owner unreachable: a hidden credential.
        (None, None, id) => Scope::Organization(id.unwrap_or(-1)),
    }
}

/// A credential's owner as its row holds it: `service_provider_id`, `msp_id`,
/// `organization_id`.
pub(crate) fn scope_columns(scope: Scope) -> (Option<i64>, Option<i64>, Option<i64>) {
    match scope {
        Scope::ServiceProvider(id) => (Some(id), None, None),
        Scope::Msp(id) => (None, Some(id), None),
        Scope::Organization(id) => (None, None, Some(id)),
    }
}

/// An organization's parent as its row holds it: `service_provider_id`, `msp_id`.
pub(crate) fn parent_columns(parent: Parent) -> (Option<i64>, Option<i64>) {
    match parent {
        Parent::None => (None, None),
        Parent::ServiceProvider(id) => (Some(id), None),
        Parent::Msp(id) => (None, Some(id)),
    }
}

/// An organization's own columns as its row holds them (the e-mail lists as JSON arrays), for
/// the statements that write the row; each engine makes its parameters with `org_params!`.
pub(crate) struct OrgColumns<'a> {
    pub(crate) f: &'a OrgFields,
    pub(crate) admin_emails: String,
    pub(crate) ccw_deal_owner_emails: String,
}

impl<'a> OrgColumns<'a> {
    pub(crate) fn of(f: &'a OrgFields) -> OrgColumns<'a> {
        OrgColumns {
            f,
            admin_emails: emails_json(&f.admin_emails),
            ccw_deal_owner_emails: emails_json(&f.ccw_deal_owner_emails),
        }
    }
}

/// The parameters of a statement writing an organization's row (`OrgColumns`), as the engine's
/// parameter type `$param`, numbered in this order: `$head`, then name, seats, package_id,
/// street_address, street_address2, city, state, country_code, zip_code, deal_id, admin_emails,
/// ccw_deal_owner_emails, then `$now`.
macro_rules! org_params {
    ($columns:expr, $head:expr, $now:expr, $param:ty) => {{
        let c = $columns;
        let f = c.f;
        let columns: [$param; 13] = [
            &f.name,
            &f.seats,
            &f.package_id,
            &f.street_address,
            &f.street_address2,
            &f.city,
            &f.state,
            &f.country_code,
            &f.zip_code,
            &f.deal_id,
            &c.admin_emails,
            &c.ccw_deal_owner_emails,
            $now,
        ];
        [$head, &columns[..]].concat()
    }};
}
pub(crate) use org_params;

/// A list of e-mail addresses as its column holds it (a JSON array).
pub(crate) fn emails_json(emails: &[String]) -> String {
    serde_json::to_string(emails).unwrap_or_else(|_| "[]".into())
}

/// A list of e-mail addresses from its column (unreadable: empty, rather than failing a list).
pub(crate) fn emails(json: String) -> Vec<String> {
    serde_json::from_str(&json).unwrap_or_default()
}
