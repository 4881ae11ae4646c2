//! The store's domain types: what operations take and return, the same for every backend.
//! Records derive `Serialize` in the management interface's exact field names, so a handler
//! answers with them as they are; inputs are plain structs filled by the handlers' validation.

use serde::{Deserialize, Serialize};

// ------------------------------------------------------------------ tenants and credentials

/// A service provider as created by an operator.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewServiceProvider {
    pub name: String,
    pub package_id: i64,
    pub seats_total: i64,
    pub rebill_at: Option<i64>,
    pub expires_at: Option<i64>,
}

/// Which parent an organization belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parent {
    None,
    ServiceProvider(i64),
    Msp(i64),
}

/// Customer fields of an organization (the management interface's Customer record).
#[derive(Debug, Clone, Default)]
pub struct OrgFields {
    pub name: String,
    pub seats: i64,
    pub package_id: Option<i64>,
    pub street_address: Option<String>,
    pub street_address2: Option<String>,
    pub city: Option<String>,
    pub state: Option<String>,
    pub country_code: Option<String>,
    pub zip_code: Option<String>,
    pub deal_id: Option<String>,
    pub admin_emails: Vec<String>,
    pub ccw_deal_owner_emails: Vec<String>,
}

/// Result of creating an organization: its id, default site and first customer key.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedOrganization {
    pub id: i64,
    pub name: String,
    pub default_site_id: i64,
    pub customer_key: String,
}

/// A customer key as listed for operators.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomerKeyInfo {
    pub key: String,
    pub organization_id: i64,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// What a management credential may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "id", rename_all = "camelCase")]
pub enum Scope {
    ServiceProvider(i64),
    Msp(i64),
    Organization(i64),
}

/// A stored credential: the scope and the secret's hash.
#[derive(Debug, Clone)]
pub struct StoredCredential {
    pub scope: Scope,
    pub secret_hash: String,
}

/// A credential as listed for operators (never the secret or its hash).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialInfo {
    pub api_key: String,
    pub scope: Scope,
    pub label: Option<String>,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

// ------------------------------------------------------------------ customers of service providers and msps

/// The ServiceProvider record, exactly the spec's fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceProviderRecord {
    pub package_name: String,
    pub seats_total: i64,
    pub seats_used: i64,
    pub customer_count: i64,
    pub status: String,
    pub rebill_at: Option<String>,
    pub expires_at: Option<String>,
}

/// The Customer record (under a service provider), exactly the spec's fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomerRecord {
    pub customer_id: i64,
    pub customer_name: String,
    pub package_name: Option<String>,
    pub seats: i64,
    pub street_address: Option<String>,
    pub street_address2: Option<String>,
    pub city: Option<String>,
    pub state: Option<String>,
    pub country_code: Option<String>,
    pub zip_code: Option<String>,
    pub package_id: Option<i64>,
    pub deal_id: Option<String>,
    pub admin_emails: Vec<String>,
    pub ccw_deal_owner_emails: Vec<String>,
    pub created_at: String,
    pub modified_at: String,
}

/// The MspCustomer record, exactly the spec's fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MspCustomerRecord {
    pub customer_id: i64,
    pub customer_name: String,
    pub seats: i64,
}

impl From<CustomerRecord> for MspCustomerRecord {
    fn from(c: CustomerRecord) -> Self {
        MspCustomerRecord {
            customer_id: c.customer_id,
            customer_name: c.customer_name,
            seats: c.seats,
        }
    }
}

/// A subscribable package, as listed for operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Package {
    pub id: i64,
    pub name: String,
}

// ------------------------------------------------------------------ devices: networks, roaming computers, virtual appliances

/// A network as registered (input of [`insert_network`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NewNetwork {
    pub name: String,
    pub ip_address: String,
    pub prefix_length: i64,
    pub is_dynamic: bool,
    pub is_verified: bool,
    pub status: String,
}

/// The Network record, exactly the spec's fields. `originId` is also the `networkId`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRecord {
    pub origin_id: i64,
    pub name: String,
    pub ip_address: String,
    pub prefix_length: i64,
    pub is_dynamic: bool,
    pub is_verified: bool,
    pub status: String,
    pub created_at: String,
}

/// A roaming computer as registered. `device_id` is lower-case hex; `last_sync` epoch seconds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewRoamingComputer {
    pub device_id: String,
    pub name: String,
    pub kind: String,
    pub status: String,
    pub last_sync_status: Option<String>,
    pub last_sync: Option<i64>,
    pub applied_bundle: Option<i64>,
    pub has_ip_blocking: bool,
    pub version: Option<String>,
    pub os_version: Option<String>,
    pub os_version_name: Option<String>,
}

/// The RoamingComputer record, exactly the spec's fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoamingComputerRecord {
    pub origin_id: i64,
    pub name: String,
    pub device_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    pub last_sync_status: Option<String>,
    pub last_sync: Option<String>,
    pub applied_bundle: Option<i64>,
    pub has_ip_blocking: bool,
    pub version: Option<String>,
    pub os_version: Option<String>,
    pub os_version_name: Option<String>,
}

/// Filters of the roaming-computer list. Times are epoch seconds; the comparisons are strict and
/// a computer that never synced matches neither time filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoamingFilter {
    /// Case-insensitive substring of the name.
    pub name: Option<String>,
    /// Exact status.
    pub status: Option<String>,
    /// `lastSync < before`.
    pub before: Option<i64>,
    /// `lastSync > after`.
    pub after: Option<i64>,
}

/// A virtual appliance's `state`: exactly the spec's members, all strings (null when unknown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApplianceState {
    pub connected_to_connector: Option<String>,
    pub has_local_domain_configured: Option<String>,
    pub query_failure_rate_acceptable: Option<String>,
    #[serde(rename = "receivedInternalDNSQueries")]
    pub received_internal_dns_queries: Option<String>,
    pub redundant_within_site: Option<String>,
    pub syncing: Option<String>,
}

/// A virtual appliance's `settings`: exactly the spec's members. Arrays are `[]` when empty,
/// other members null when unknown; `lastSyncTime` is already in the output time form.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApplianceSettings {
    #[serde(rename = "internalIPs")]
    pub internal_ips: Vec<String>,
    #[serde(rename = "externalIP")]
    pub external_ip: Option<String>,
    pub host_type: Option<String>,
    pub uptime: Option<i64>,
    pub is_dnscrypt_enabled: Option<bool>,
    pub version: Option<String>,
    pub upgrade_error: Option<String>,
    pub domains: Vec<String>,
    pub last_sync_time: Option<String>,
}

/// A virtual appliance as registered.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAppliance {
    pub name: String,
    pub site_id: i64,
    pub is_upgradable: bool,
    pub state: ApplianceState,
    pub health: String,
    pub kind: String,
    pub settings: ApplianceSettings,
}

/// The VirtualAppliance record, exactly the spec's fields. `originId` is also the
/// `virtualApplianceId`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplianceRecord {
    pub origin_id: i64,
    pub name: String,
    pub site_id: i64,
    pub is_upgradable: bool,
    pub state: ApplianceState,
    pub health: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub settings: ApplianceSettings,
    pub created_at: String,
    pub modified_at: String,
    pub state_updated_at: String,
}

// ------------------------------------------------------------------ sites

/// The refusal of a `siteId` that is not a site of the organization.
pub const SITE_NOT_OF_ORGANIZATION: &str = "siteId must be the id of a site of this organization";

/// The Site record, exactly the spec's fields in the spec's order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteRecord {
    pub origin_id: i64,
    pub name: String,
    pub site_id: i64,
    pub is_default: bool,
    #[serde(rename = "type")]
    pub kind: String,
    pub internal_network_count: i64,
    pub va_count: i64,
    pub modified_at: String,
    pub created_at: String,
}

// ------------------------------------------------------------------ users

/// The User record, exactly the spec's fields in the spec's order (never the password).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UserRecord {
    pub id: i64,
    pub firstname: String,
    pub lastname: String,
    pub email: String,
    pub role_id: i64,
    pub role: String,
    pub timezone: String,
    pub status: String,
    pub last_login_time: Option<String>,
    pub two_factor_enable: bool,
}

/// The input fields of a user, apart from the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserFields {
    pub firstname: String,
    pub lastname: String,
    pub email: String,
    pub role_id: i64,
    pub timezone: String,
}

// ------------------------------------------------------------------ internal networks

/// The InternalNetwork record, exactly the spec's fields in the spec's order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InternalNetworkRecord {
    pub origin_id: i64,
    pub name: String,
    pub ip_address: String,
    pub prefix_length: i64,
    pub site_name: String,
    pub site_id: i64,
    pub created_at: String,
    pub modified_at: String,
}

/// The input fields of an internal network (create and the full-replacement update).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalNetworkFields {
    pub name: String,
    pub ip_address: String,
    pub prefix_length: i64,
    pub site_id: i64,
}

// ------------------------------------------------------------------ events and the domain list

/// An event that passed validation, ready to store.
#[derive(Debug, Clone)]
pub struct PreparedEvent {
    /// Normalised dstDomain.
    pub domain: String,
    /// Whether the acceptance checks put the domain on the list.
    pub listed: bool,
}

/// One request's events in the form they are stored: the row of `event_batches` (its JSON
/// arrays are built here, off the writer thread) and the names to list.
#[derive(Debug, Clone)]
pub struct PreparedBatch {
    /// Each name the acceptance checks listed, once, in the order of its first event.
    pub(crate) to_list: Vec<String>,
    pub(crate) event_count: usize,
    /// JSON array of the events as sent.
    pub(crate) events_json: String,
    /// JSON array of each event's normalised dstDomain.
    pub(crate) domains_json: String,
    /// JSON array of 1 (listed) or 0 per event.
    pub(crate) listed_json: String,
}

/// Appends `s` to `out` as a JSON string. A normalised name (letters, digits, hyphens and dots)
/// needs no escapes and is copied as it is.
fn push_json_string(out: &mut String, s: &str) {
    if s.bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.')
    {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        // Strings always serialise.
        out.push_str(&serde_json::to_string(s).unwrap_or_default());
    }
}

impl PreparedBatch {
    /// `events_json` is the JSON array of the events as sent, one element per entry of `events`.
    pub fn new(events: Vec<PreparedEvent>, events_json: String) -> PreparedBatch {
        // Written straight from the names (a `serde_json::Value` in between cost as much as the
        // rest of the request's validation).
        let mut domains_json =
            String::with_capacity(events.iter().map(|e| e.domain.len() + 3).sum::<usize>() + 2);
        domains_json.push('[');
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                domains_json.push(',');
            }
            push_json_string(&mut domains_json, &e.domain);
        }
        domains_json.push(']');
        let mut listed_json = String::with_capacity(2 * events.len() + 1);
        listed_json.push('[');
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                listed_json.push(',');
            }
            listed_json.push(if e.listed { '1' } else { '0' });
        }
        listed_json.push(']');
        let event_count = events.len();
        // A batch that names a domain many times costs the writer one look-up for it.
        // A few events (a single event above all) are compared in place, nothing hashed; the
        // set allocates only when used.
        let few = events.len() <= 8;
        let mut seen = std::collections::HashSet::new();
        let mut to_list: Vec<String> = Vec::new();
        for e in events.into_iter().filter(|e| e.listed) {
            let first = if few {
                !to_list.contains(&e.domain)
            } else {
                seen.insert(e.domain.clone())
            };
            if first {
                to_list.push(e.domain);
            }
        }
        PreparedBatch {
            to_list,
            event_count,
            events_json,
            domains_json,
            listed_json,
        }
    }

    /// Number of events in the request.
    pub fn len(&self) -> usize {
        self.event_count
    }

    pub fn is_empty(&self) -> bool {
        self.event_count == 0
    }
}

/// One entry of the domain list as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainEntry {
    pub id: i64,
    pub name: String,
    pub last_seen_at: i64,
}

// ------------------------------------------------------------------ enforcement on the appliance

/// Where a reader of the domain list got to: the last entry it read, by its position in list
/// order (SQLite's `seq`, PostgreSQL's id) and its id (never given again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListCursor {
    pub position: i64,
    pub id: i64,
}

/// The prime of `entry_check`, below 2^31 so that the product of two residues fits in a signed
/// 64-bit integer (SQLite turns an overflowing product into a float).
const CHECK_P: i64 = 2_147_483_647;
/// What a list's check multiplies its second sum by (odd, so that no bit of it is lost).
const CHECK_MIX: i64 = 0x9E37_79B9_7F4A_7C15_u64 as i64;

/// An entry id's share of its list's check (`ListRead::check`), whose sum over the list
/// (wrapping) tells apart lists of the same length that a sum of ids does not: names committed
/// late behind a reader's cursor by another node while others whose ids add up to theirs are
/// removed. The id is scattered over the residues modulo a prime (`x`), and the check sums both
/// `x` and its square modulo the prime: no linear relation between ids (such as `a + d = b + c`)
/// carries over to the squares. The store computes the same sums in SQL (`residue_sums_sql`).
pub fn entry_check(id: i64) -> i64 {
    let (x, square) = entry_residues(id);
    list_check(x, square)
}

/// An entry id's two residues: `x` and its square modulo the prime. The store keeps their sums
/// per block of the list beside its paging counts (`residue_sum`, `square_sum`), so a list's
/// check is a sum over a few dozen blocks, not a scan of the list.
pub fn entry_residues(id: i64) -> (i64, i64) {
    let x = id.rem_euclid(CHECK_P) * 48_271 % CHECK_P;
    (x, x * x % CHECK_P)
}

/// A list's check from the sums of its entries' two residues.
pub fn list_check(x_sum: i64, square_sum: i64) -> i64 {
    x_sum.wrapping_add(square_sum.wrapping_mul(CHECK_MIX))
}

/// The SQL both engines compute `entry_residues` with, as a string literal (for `concat!`), over
/// rows whose id is the column `id`: the number of rows, the sum of `x`, and the sum of its
/// squares modulo the prime, named `n`, `x` and `square` (the columns `count`, `residue_sum` and
/// `square_sum` of the paging counts). Each sum is below 2^31 times the rows' number, so neither
/// overflows (SQLite's `sum` raises on overflow). Ids are positive, where both engines' `%`
/// agrees with Rust's.
macro_rules! residue_sums_sql {
    () => {
        "count(*) AS n, \
         coalesce(CAST(sum(id % 2147483647 * 48271 % 2147483647) AS BIGINT), 0) AS x, \
         coalesce(CAST(sum((id % 2147483647 * 48271 % 2147483647) \
             * (id % 2147483647 * 48271 % 2147483647) % 2147483647) AS BIGINT), 0) AS square"
    };
}
pub(crate) use residue_sums_sql;

/// An organization's domain list read after a cursor (`Store::block_list_since`), with what a
/// reader needs to tell whether the entries it already holds are still all the others.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListRead {
    /// `names` is the whole list: no cursor was given, or its entry is gone (removed, or its
    /// position given to another entry).
    pub whole: bool,
    /// The listed names after the cursor (all of them if `whole`), in list order, the allow list
    /// not applied.
    pub names: Vec<String>,
    /// The sum of their ids' checks (`entry_check`, wrapping).
    pub names_check: i64,
    /// The length of the whole list, and the sum of all its ids' checks: a reader holding the
    /// entries up to the cursor holds all the others if its own count and check plus `names`'
    /// make these.
    pub count: i64,
    pub check: i64,
    /// The list's last entry, if any.
    pub last: Option<ListCursor>,
    /// The allow list, sorted.
    pub allowed: Vec<String>,
    /// The allow-listed names under a listed one, sorted.
    pub exceptions: Vec<String>,
}

/// The verdict on one name for one organization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub name: String,
    pub blocked: bool,
    /// The domain-list entry that covers the name (itself or its nearest parent).
    pub listed_as: Option<String>,
    /// The allow-list entry that covers the name, which wins over the domain list.
    pub allowed_by: Option<String>,
}

// ------------------------------------------------------------------ background work

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgeStep {
    pub organization_id: i64,
    /// Stored requests deleted by this step.
    pub deleted: usize,
    /// The organization's last range was done: nothing of it is left.
    pub finished: bool,
}

/// A service provider as listed for operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceProviderInfo {
    pub id: i64,
    pub name: String,
    pub package_id: i64,
    pub seats_total: i64,
    pub customer_count: i64,
    pub created_at: String,
}

/// An MSP as listed for operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MspInfo {
    pub id: i64,
    pub name: String,
    pub customer_count: i64,
    pub created_at: String,
}

/// An organization as listed for operators, with its parent if it has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrganizationInfo {
    pub id: i64,
    pub name: String,
    pub service_provider_id: Option<i64>,
    pub msp_id: Option<i64>,
    pub seats: i64,
    pub created_at: String,
}

// ------------------------------------------------------------------ roles

/// The refusal of an unknown `roleId`.
pub const UNKNOWN_ROLE: &str =
    "roleId must be the id of a role (see GET /v1/organizations/{organizationId}/roles)";

/// A role as the management interface answers it (roles are built in and shared: their
/// `organizationId` is 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Role {
    pub role_id: i64,
    pub label: String,
    pub organization_id: i64,
}

// ------------------------------------------------------------------ ingest

/// A customer key in canonical form (lower-case hyphenated UUID), held inline: a request hands
/// it around several times, and a `String` would be copied for each.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CustomerKey([u8; uuid::fmt::Hyphenated::LENGTH]);

impl CustomerKey {
    /// The key in canonical form, if `raw` is a well-formed hyphenated UUID (any case).
    pub fn parse(raw: &str) -> Option<CustomerKey> {
        // Only the hyphenated 36-character form is a customer key.
        if raw.len() != uuid::fmt::Hyphenated::LENGTH {
            return None;
        }
        let u = uuid::Uuid::try_parse(raw).ok()?;
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        u.hyphenated().encode_lower(&mut text);
        Some(CustomerKey(text))
    }
}

impl std::ops::Deref for CustomerKey {
    type Target = str;

    fn deref(&self) -> &str {
        // Written by `encode_lower`: hex digits and hyphens.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::fmt::Debug for CustomerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SECURITY: a customer key is a credential; debug output never shows it.
        f.write_str("CustomerKey(..)")
    }
}

/// One POST /1.0/events request, validated and ready to store.
#[derive(Debug)]
pub struct Ingest {
    /// The request's customer key: resolved again inside the write, so that a key revoked
    /// meanwhile stores nothing.
    pub key: CustomerKey,
    /// The request's id (answered as the batch id).
    pub batch_id: uuid::Uuid,
    /// Receive time, epoch seconds (the listed names' `lastSeenAt`).
    pub now: i64,
    pub batch: PreparedBatch,
    /// Under `--cloud-limits`: the most new domains the request may add; a request that would
    /// add more stores nothing.
    pub new_domain_budget: Option<u64>,
}

/// How an ingest ended (besides storage faults, which are errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingested {
    /// Stored durably; `added` names were new to the list.
    Stored { added: u64 },
    /// The key is unknown or revoked: nothing was stored.
    UnknownKey,
    /// The request would have added `would_add` new names, more than its budget: nothing was
    /// stored.
    OverBudget { would_add: u64 },
}

// ------------------------------------------------------------------ the demo world

/// A credential whose secret is already hashed (hashing is slow and never runs in a write).
#[derive(Debug, Clone)]
pub struct NewCredential {
    pub api_key: String,
    pub secret_hash: String,
    pub label: Option<String>,
}

/// Which of an organization's two demo sites a resource lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoSite {
    Default,
    Second,
}

/// One organization of the demo world with everything in it.
#[derive(Debug, Clone)]
pub struct DemoOrganization {
    pub fields: OrgFields,
    /// The name of its second site.
    pub second_site: String,
    pub internal_networks: Vec<(String, String, i64, DemoSite)>,
    /// Users with their password hashes.
    pub users: Vec<(UserFields, String)>,
    /// Networks with their registration times.
    pub networks: Vec<(NewNetwork, i64)>,
    pub roaming_computers: Vec<NewRoamingComputer>,
    /// Appliances (their `site_id` is ignored: `DemoSite` says where) with their registration
    /// times.
    pub appliances: Vec<(NewAppliance, DemoSite, i64)>,
    pub credential: NewCredential,
}

/// The whole demo world: a service provider and an MSP with one customer organization each.
#[derive(Debug, Clone)]
pub struct DemoWorld {
    pub provider: NewServiceProvider,
    pub provider_credential: NewCredential,
    pub msp_name: String,
    pub msp_credential: NewCredential,
    /// The provider's customer.
    pub provider_customer: DemoOrganization,
    /// The MSP's customer.
    pub msp_customer: DemoOrganization,
}

/// What creating the demo world made.
#[derive(Debug, Clone)]
pub struct DemoIds {
    pub provider: i64,
    pub msp: i64,
    /// The provider's customer, then the MSP's.
    pub organizations: [CreatedOrganization; 2],
}

// ------------------------------------------------------------------ health

/// The state of the storage, for readiness checks and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageHealth {
    /// Whether the last write (or the writer's last probe) succeeded: false from a storage fault
    /// until a write succeeds again.
    pub writable: bool,
    /// The last storage fault: its kind's name and the engine's words.
    pub last_fault: Option<(String, String)>,
    /// Storage faults seen since start.
    pub faults: u64,
}
