//! The management operations as methods of `Store`: each declared once with the kind of
//! transaction it runs in and its rule (written once, in `rules/`), and handed to the engine the
//! store was opened on. It sits above both the rules and the engines, so neither imports the
//! other's caller.

use super::rules::{allow, customers, demo, devices, internal_networks, sites, tenants, users};
use super::{model::*, sqlite, Engine, Result, Store, StoreError};

/// Declares the operations whose rules live here as methods of `Store`. Each names how it runs:
/// `read` (one statement, or SQLite's read transaction), `snapshot` (several reads from one
/// snapshot), `write`, or `write_org[org]` (a write of organization `org`'s data: `NotFound`
/// unless it exists, and it cannot be deleted until the commit). The rule gets the engine's
/// connection, which implements the statements of every resource.
macro_rules! managed {
    ($( $(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty
        = $mode:ident $([$org:ident])? ($($rule:ident)::+); )*) => {
        impl Store {
            $( $(#[$doc])* pub async fn $name(&self $(, $arg: $ty)*) -> Result<$ret> {
                match &self.engine {
                    Engine::Sqlite(s) => {
                        s.$mode($($org,)? move |c| sqlite::settle($($rule)::+(c $(, $arg)*)))
                            .await
                    }
                    Engine::Postgres(p) => {
                        p.$mode($($org,)? move |db| {
                            Box::pin(async move {
                                $($rule)::+(db $(, $arg)*).await.map_err(StoreError::from)
                            })
                        })
                        .await
                    }
                }
            } )*
        }
    };
}

managed! {
    // ------------------------------------------------------------ tenants and credentials

    /// A live management credential by its API key.
    fn find_credential(&self, api_key: String) -> Option<StoredCredential>
        = read(tenants::find_credential);
    /// Whether the organization exists and the scope reaches it.
    fn organization_visible(&self, scope: Scope, org: i64) -> bool
        = read(tenants::organization_visible);
    /// Whether the scope's provider, MSP or organization exists.
    fn scope_exists(&self, scope: Scope) -> bool = read(tenants::scope_exists);
    /// Whether the database holds any service provider, MSP or organization.
    fn has_tenants(&self) -> bool = read(tenants::has_tenants);
    /// Creates a service provider (`Invalid` for an unknown package); returns its id.
    fn create_service_provider(&self, sp: NewServiceProvider, now: i64) -> i64
        = write(tenants::create_service_provider);
    /// Creates an MSP; returns its id.
    fn create_msp(&self, name: String, now: i64) -> i64 = write(tenants::create_msp);
    /// Creates an organization with its default site and a customer key (`NotFound` for a
    /// missing parent, `Invalid` for an unknown package).
    fn create_organization(&self, parent: Parent, fields: OrgFields, now: i64)
        -> CreatedOrganization = write(tenants::create_organization);
    /// Deletes an organization with all its data; false if there is none.
    fn delete_organization(&self, org: i64) -> bool = write(tenants::delete_organization);
    /// The package of a service provider, if it exists.
    fn service_provider_package(&self, sp: i64) -> Option<i64>
        = read(customers::service_provider_package);
    /// Issues another customer key for the organization.
    fn create_customer_key(&self, org: i64, now: i64) -> String
        = write_org[org](tenants::create_customer_key);
    /// The organization's customer keys, revoked ones included.
    fn list_customer_keys(&self, org: i64) -> Vec<CustomerKeyInfo>
        = snapshot(tenants::list_customer_keys);
    /// The customer keys, revoked ones included, of every organization the scope reaches, by
    /// key (one statement, however many organizations).
    fn customer_keys_in_scope(&self, scope: Scope) -> Vec<String>
        = read(tenants::customer_keys_in_scope);
    /// Revokes one live key; false if there was none of that value.
    fn revoke_customer_key(&self, key: String, now: i64) -> bool
        = write(tenants::revoke_customer_key);
    /// Revokes every live key of the organization and issues a new one; returns it and the
    /// revoked ones.
    fn rotate_customer_key(&self, org: i64, now: i64) -> (String, Vec<String>)
        = write_org[org](tenants::rotate_customer_key);
    /// Stores a management credential for the scope (`NotFound` if its owner does not exist).
    fn create_credential(&self, scope: Scope, credential: NewCredential, now: i64) -> ()
        = write(tenants::create_credential);
    /// Every credential (never a secret or its hash).
    fn list_credentials(&self) -> Vec<CredentialInfo> = read(tenants::list_credentials);
    /// Revokes a live credential; false if there was none with that key.
    fn revoke_credential(&self, api_key: String, now: i64) -> bool
        = write(tenants::revoke_credential);
    /// Creates the demo world in one transaction if the database holds no tenant yet; `None`
    /// if it already does.
    fn create_demo_world(&self, world: DemoWorld, now: i64) -> Option<DemoIds>
        = write(demo::create_world);
    /// Every service provider, ordered by id.
    fn list_service_providers(&self) -> Vec<ServiceProviderInfo>
        = read(tenants::list_service_providers);
    /// Every MSP, ordered by id.
    fn list_msps(&self) -> Vec<MspInfo> = read(tenants::list_msps);
    /// Every organization, ordered by id.
    fn list_organizations(&self) -> Vec<OrganizationInfo> = read(tenants::list_organizations);
    /// Deletes a service provider that has no customers left (`Conflict` if it has, `NotFound`
    /// if there is none), with its credentials.
    fn delete_service_provider(&self, sp: i64) -> () = write(tenants::delete_service_provider);
    /// Deletes an MSP that has no customers left (`Conflict`, `NotFound`), with its
    /// credentials.
    fn delete_msp(&self, msp: i64) -> () = write(tenants::delete_msp);

    // ------------------------------------------------------------ customers

    /// A service provider's record with its derived fields.
    fn service_provider(&self, sp: i64) -> Option<ServiceProviderRecord>
        = read(customers::service_provider);
    /// One page of a parent's customers, ordered by id.
    fn list_customers(&self, parent: Parent, limit: i64, offset: i64) -> Vec<CustomerRecord>
        = read(customers::list);
    /// One customer of the parent.
    fn get_customer(&self, parent: Parent, customer: i64) -> Option<CustomerRecord>
        = read(customers::get);
    /// Creates a customer (`Invalid` naming `packageId` for an unknown package).
    fn create_customer(&self, parent: Parent, fields: OrgFields, now: i64) -> CustomerRecord
        = write(customers::create);
    /// Replaces a customer's fields (`NotFound`, `Invalid`).
    fn update_customer(&self, parent: Parent, customer: i64, fields: OrgFields, now: i64)
        -> CustomerRecord = write(customers::update);
    /// Deletes a customer's organization with all its data; returns the record as it was.
    fn delete_customer(&self, parent: Parent, customer: i64) -> CustomerRecord
        = write(customers::delete);
    /// Every package, ordered by id.
    fn list_packages(&self) -> Vec<Package> = read(customers::list_packages);
    /// Whether `id` names a package.
    fn package_exists(&self, id: i64) -> bool = read(tenants::package_exists);

    // ------------------------------------------------------------ the allow list

    /// Adds a (normalised) name to the organization's allow list; false if it was there.
    fn allow_add(&self, org: i64, name: String, now: i64) -> bool = write_org[org](allow::add);
    /// Removes a name from the allow list; false if it was not there.
    fn allow_remove(&self, org: i64, name: String) -> bool = write_org[org](allow::remove);
    /// The allow list, by name.
    fn allow_list(&self, org: i64) -> Vec<String> = snapshot(allow::list);
    /// Is `name` (normalised) blocked for the organization, and why.
    fn verdict(&self, org: i64, name: String) -> Verdict = snapshot(allow::verdict);

    // ------------------------------------------------------------ sites

    /// One page of the organization's sites, ordered by `siteId`.
    fn list_sites(&self, org: i64, limit: i64, offset: i64) -> Vec<SiteRecord>
        = read(sites::list);
    /// One site of the organization.
    fn get_site(&self, org: i64, id: i64) -> Option<SiteRecord> = read(sites::get);
    /// Creates a (non-default) site.
    fn create_site(&self, org: i64, name: String, now: i64) -> SiteRecord
        = write_org[org](sites::create);
    /// Renames a site (`NotFound`).
    fn rename_site(&self, org: i64, id: i64, name: String, now: i64) -> SiteRecord
        = write_org[org](sites::rename);
    /// Deletes a site unless it is the default site or still holds internal networks or virtual
    /// appliances (`Conflict`); returns it as it was.
    fn delete_site(&self, org: i64, id: i64) -> SiteRecord = write_org[org](sites::delete);
    /// The organization's default site.
    fn default_site(&self, org: i64) -> Option<i64> = read(sites::default_site);

    // ------------------------------------------------------------ networks

    /// One page of the organization's networks, by `originId`.
    fn list_networks(&self, org: i64, limit: i64, offset: i64) -> Vec<NetworkRecord>
        = read(devices::list_networks);
    fn get_network(&self, org: i64, id: i64) -> Option<NetworkRecord> = read(devices::get_network);
    /// Deletes a network (`NotFound`); returns it as it was.
    fn delete_network(&self, org: i64, id: i64) -> NetworkRecord
        = write_org[org](devices::delete_network);
    /// Registers a network (operators and the demo; devices register them with the cloud).
    fn register_network(&self, org: i64, network: NewNetwork, now: i64) -> NetworkRecord
        = write_org[org](devices::register_network);

    // ------------------------------------------------------------ roaming computers

    /// One page of the roaming computers that pass the filter, by `originId`.
    fn list_roaming_computers(
        &self,
        org: i64,
        filter: RoamingFilter,
        limit: i64,
        offset: i64,
    ) -> Vec<RoamingComputerRecord> = read(devices::list_roaming_computers);
    fn get_roaming_computer(&self, org: i64, device: String) -> Option<RoamingComputerRecord>
        = read(devices::get_roaming_computer);
    /// Renames a roaming computer (`NotFound`).
    fn rename_roaming_computer(&self, org: i64, device: String, name: String)
        -> RoamingComputerRecord = write_org[org](devices::rename_roaming_computer);
    /// Deletes a roaming computer (`NotFound`); returns it as it was.
    fn delete_roaming_computer(&self, org: i64, device: String) -> RoamingComputerRecord
        = write_org[org](devices::delete_roaming_computer);
    /// Registers a roaming computer (`Conflict` if the organization has that device already).
    fn register_roaming_computer(&self, org: i64, computer: NewRoamingComputer)
        -> RoamingComputerRecord = write_org[org](devices::register_roaming_computer);

    // ------------------------------------------------------------ internal networks

    fn list_internal_networks(&self, org: i64, limit: i64, offset: i64)
        -> Vec<InternalNetworkRecord> = read(internal_networks::list);
    fn get_internal_network(&self, org: i64, id: i64) -> Option<InternalNetworkRecord>
        = read(internal_networks::get);
    /// Creates an internal network (`Invalid` naming `siteId` for a site not of the
    /// organization).
    fn create_internal_network(&self, org: i64, fields: InternalNetworkFields, now: i64)
        -> InternalNetworkRecord = write_org[org](internal_networks::create);
    /// Replaces an internal network's fields (`NotFound`, `Invalid`).
    fn update_internal_network(
        &self,
        org: i64,
        id: i64,
        fields: InternalNetworkFields,
        now: i64,
    ) -> InternalNetworkRecord = write_org[org](internal_networks::update);
    /// Deletes an internal network (`NotFound`); returns it as it was.
    fn delete_internal_network(&self, org: i64, id: i64) -> InternalNetworkRecord
        = write_org[org](internal_networks::delete);

    // ------------------------------------------------------------ virtual appliances

    fn list_appliances(&self, org: i64, limit: i64, offset: i64) -> Vec<ApplianceRecord>
        = read(devices::list_appliances);
    fn get_appliance(&self, org: i64, id: i64) -> Option<ApplianceRecord>
        = read(devices::get_appliance);
    /// Moves an appliance to another site of the organization (`NotFound`, `Invalid`).
    fn move_appliance(&self, org: i64, id: i64, site: i64, now: i64) -> ApplianceRecord
        = write_org[org](devices::move_appliance);
    /// Deletes an appliance (`NotFound`); returns it as it was.
    fn delete_appliance(&self, org: i64, id: i64) -> ApplianceRecord
        = write_org[org](devices::delete_appliance);
    /// Registers an appliance in one of the organization's sites (`Invalid` naming `siteId`).
    fn register_appliance(&self, org: i64, appliance: NewAppliance, now: i64) -> ApplianceRecord
        = write_org[org](devices::register_appliance);

    // ------------------------------------------------------------ users and roles

    fn list_users(&self, org: i64, limit: i64, offset: i64) -> Vec<UserRecord>
        = read(users::list);
    fn get_user(&self, org: i64, id: i64) -> Option<UserRecord> = read(users::get);
    /// Whether `id` names a role.
    fn role_exists(&self, id: i64) -> bool = read(users::role_exists);
    /// Creates a user with an already hashed password (`Conflict` when the e-mail address is
    /// taken in the organization, ignoring case; `Invalid` for an unknown role).
    fn create_user(&self, org: i64, fields: UserFields, password_hash: String, now: i64)
        -> UserRecord = write_org[org](users::create);
    /// Deletes a user (`NotFound`); returns the record as it was.
    fn delete_user(&self, org: i64, id: i64) -> UserRecord = write_org[org](users::delete);
    /// One page of the built-in roles, ordered by id.
    fn list_roles(&self, limit: i64, offset: i64) -> Vec<Role> = read(users::list_roles);
}
