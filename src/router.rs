//! The router: (method, path) -> a typed endpoint, with no I/O. Paths under `/1.0/` belong to the
//! enforcement interface, paths under `/v1/` to the management interface, and Parasol's own
//! endpoints under `/parasol/v1/` (authenticated and scoped like the management interface's
//! organization paths) are answered in the management interface's shape; Parasol's own paths
//! at the top (`/healthz`, `/readyz`, `/metrics`, `/openapi.yaml`) answer errors in the
//! enforcement shape, and so does anything else, with a 404.

use hyper::Method;

use crate::http::{cut, percent_decode};

/// Which interface a path belongs to (it picks the error body shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    Enforcement,
    Management,
}

/// A routed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Enf(EnfEndpoint),
    Mgmt(MgmtEndpoint),
    /// Parasol's own paths, outside both interfaces (no authentication).
    Own(OwnEndpoint),
}

/// Parasol's own paths (decisions.md), for operators and integrators: health, readiness,
/// metrics and the OpenAPI document. Each has GET only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnEndpoint {
    /// `GET /healthz`: the process answers.
    Healthz,
    /// `GET /readyz`: the store takes writes.
    Readyz,
    /// `GET /metrics`: the Prometheus text format.
    Metrics,
    /// `GET /openapi.yaml`: the OpenAPI document of both interfaces.
    OpenApi,
}

/// Endpoints of the enforcement interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnfEndpoint {
    PostEvents,
    ListDomains,
    DeleteDomainById(i64),
    /// A non-numeric segment, percent-decoded (not yet normalised).
    DeleteDomainByName(String),
    /// `DELETE /1.0/domains?where[name]=...`
    DeleteDomainsWhere,
}

/// Endpoints of the management interface: the addressed tenant, then what of it. Every
/// handler matches its part exhaustively, so an endpoint the router knows and no handler serves
/// does not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MgmtEndpoint {
    /// `/v1/serviceproviders/{id}/...`
    Provider { sp: i64, ep: ProviderEndpoint },
    /// `/v1/msps/{id}/customers/...`
    Msp { msp: i64, ep: Items },
    /// `/v1/organizations/{id}/...`
    Org { org: i64, ep: OrgEndpoint },
    /// `/parasol/v1/organizations/{id}/...`: what Parasol adds for enforcement on the appliance.
    Parasol { org: i64, ep: ParasolEndpoint },
}

/// Parasol's own endpoints of an organization (decisions.md: outside both cloud interfaces'
/// paths, with the management credentials and scopes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParasolEndpoint {
    /// `GET .../decision?name=NAME`: is the name blocked for the organization, and why.
    Decision,
    /// `.../allowlist`: the allow list.
    AllowList(AllowListEndpoint),
}

/// The allow list's operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowListEndpoint {
    List,
    Add,
    /// `DELETE .../allowlist/{name}`, the name percent-decoded (not yet normalised).
    Remove(String),
}

/// What a service provider's path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderEndpoint {
    /// The provider's own record.
    Get,
    /// Its customers.
    Customers(Items),
}

/// The resources of an organization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrgEndpoint {
    Networks(ReadDelete),
    /// Roaming computers, addressed by their device id.
    RoamingComputers(ReadUpdateDelete<String>),
    InternalNetworks(Items),
    VirtualAppliances(ReadUpdateDelete<i64>),
    Sites(Items),
    Users(ReadCreateDelete),
    Roles,
}

/// A collection with every operation: list, create, and read, replace or delete one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Items {
    List,
    Create,
    Get(i64),
    Update(i64),
    Delete(i64),
}

/// A collection whose items are created elsewhere (by devices) and can be renamed or moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadUpdateDelete<Id> {
    List,
    Get(Id),
    Update(Id),
    Delete(Id),
}

/// A collection whose items are created elsewhere and only read or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadDelete {
    List,
    Get(i64),
    Delete(i64),
}

/// A collection whose items are created and deleted but never replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadCreateDelete {
    List,
    Create,
    Get(i64),
    Delete(i64),
}

/// Why a request has no endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    NotFound(Interface),
    /// The path exists; these methods are allowed on it.
    MethodNotAllowed(Interface, &'static str),
}

/// Most segments of a routed path (`/parasol/v1/organizations/{org}/allowlist/{name}`).
const MAX_SEGMENTS: usize = 6;

/// Routes a request by method and path (without the query).
pub fn route(method: &Method, path: &str) -> Result<Route, RouteError> {
    // One trailing slash is tolerated everywhere (`/1.0/events/` appears in the spec).
    let trimmed = path
        .strip_suffix('/')
        .filter(|p| !p.is_empty())
        .unwrap_or(path);
    let Some(rest) = trimmed.strip_prefix('/') else {
        return Err(RouteError::NotFound(Interface::Enforcement));
    };
    // The segments on the stack: no path of either interface has more than `MAX_SEGMENTS`.
    let mut buf = [""; MAX_SEGMENTS + 1];
    let mut n = 0;
    let mut rest = Some(rest);
    while let Some(r) = rest {
        if n == buf.len() {
            break;
        }
        (buf[n], rest) = cut(r, b'/');
        n += 1;
    }
    let segs = &buf[..n];
    match segs.split_first() {
        Some((&"1.0", tail)) => enforcement(method, tail).map(Route::Enf),
        Some((&"v1", tail)) => management(method, tail).map(Route::Mgmt),
        Some((&"parasol", ["v1", tail @ ..])) => parasol(method, tail).map(Route::Mgmt),
        Some((&"parasol", _)) => Err(RouteError::NotFound(Interface::Management)),
        Some((own, [])) => {
            let ep = match *own {
                "healthz" => OwnEndpoint::Healthz,
                "readyz" => OwnEndpoint::Readyz,
                "metrics" => OwnEndpoint::Metrics,
                "openapi.yaml" => OwnEndpoint::OpenApi,
                _ => return Err(RouteError::NotFound(Interface::Enforcement)),
            };
            pick(Interface::Enforcement, method, "GET", [(Method::GET, ep)]).map(Route::Own)
        }
        _ => Err(RouteError::NotFound(Interface::Enforcement)),
    }
}

/// Chooses the endpoint for `method` among those a path allows.
fn pick<E>(
    iface: Interface,
    method: &Method,
    allow: &'static str,
    options: impl IntoIterator<Item = (Method, E)>,
) -> Result<E, RouteError> {
    options
        .into_iter()
        .find(|(m, _)| m == method)
        .map(|(_, e)| e)
        .ok_or(RouteError::MethodNotAllowed(iface, allow))
}

fn enforcement(method: &Method, segs: &[&str]) -> Result<EnfEndpoint, RouteError> {
    use EnfEndpoint::*;
    let e = Interface::Enforcement;
    match segs {
        ["events"] => pick(e, method, "POST", [(Method::POST, PostEvents)]),
        ["domains"] => pick(
            e,
            method,
            "GET, DELETE",
            [
                (Method::GET, ListDomains),
                (Method::DELETE, DeleteDomainsWhere),
            ],
        ),
        ["domains", seg] if !seg.is_empty() => {
            let target = if seg.bytes().all(|b| b.is_ascii_digit()) {
                // All digits: an id; one too large for i64 exists nowhere.
                DeleteDomainById(seg.parse().unwrap_or(-1))
            } else {
                // A segment that does not decode cannot be a listed name: keep it as sent.
                DeleteDomainByName(percent_decode(seg).unwrap_or_else(|| (*seg).to_string()))
            };
            pick(e, method, "DELETE", [(Method::DELETE, target)])
        }
        _ => Err(RouteError::NotFound(e)),
    }
}

fn management(method: &Method, segs: &[&str]) -> Result<MgmtEndpoint, RouteError> {
    use MgmtEndpoint::*;
    let m = Interface::Management;
    let nf = || RouteError::NotFound(m);
    let id = |s: &str| -> Result<i64, RouteError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(nf());
        }
        s.parse().map_err(|_| nf())
    };
    let items = |item: Option<&str>| -> Result<Items, RouteError> {
        Ok(match item {
            None => pick(
                m,
                method,
                GET_POST,
                [(Method::GET, Items::List), (Method::POST, Items::Create)],
            )?,
            Some(i) => {
                let i = id(i)?;
                pick(
                    m,
                    method,
                    ITEM_RW,
                    [
                        (Method::GET, Items::Get(i)),
                        (Method::PUT, Items::Update(i)),
                        (Method::DELETE, Items::Delete(i)),
                    ],
                )?
            }
        })
    };
    match segs {
        ["serviceproviders", sp] => {
            let sp = id(sp)?;
            let ep = pick(m, method, "GET", [(Method::GET, ProviderEndpoint::Get)])?;
            Ok(Provider { sp, ep })
        }
        ["serviceproviders", sp, "customers", rest @ ..] if rest.len() <= 1 => {
            let sp = id(sp)?;
            let ep = ProviderEndpoint::Customers(items(rest.first().copied())?);
            Ok(Provider { sp, ep })
        }
        ["msps", msp, "customers", rest @ ..] if rest.len() <= 1 => {
            let msp = id(msp)?;
            Ok(Msp {
                msp,
                ep: items(rest.first().copied())?,
            })
        }
        ["organizations", org, kind, rest @ ..] if rest.len() <= 1 => {
            let org = id(org)?;
            let item = rest.first().copied();
            let ep = organization(method, kind, item, id, items)?;
            Ok(Org { org, ep })
        }
        _ => Err(nf()),
    }
}

/// Parasol's own endpoints, under `/parasol/v1/`.
fn parasol(method: &Method, segs: &[&str]) -> Result<MgmtEndpoint, RouteError> {
    let m = Interface::Management;
    let nf = || RouteError::NotFound(m);
    let (org, rest) = match segs {
        ["organizations", org, rest @ ..]
            if !org.is_empty() && org.bytes().all(|b| b.is_ascii_digit()) =>
        {
            (org.parse::<i64>().map_err(|_| nf())?, rest)
        }
        _ => return Err(nf()),
    };
    let ep = match rest {
        ["decision"] => pick(m, method, "GET", [(Method::GET, ParasolEndpoint::Decision)])?,
        ["allowlist"] => ParasolEndpoint::AllowList(pick(
            m,
            method,
            GET_POST,
            [
                (Method::GET, AllowListEndpoint::List),
                (Method::POST, AllowListEndpoint::Add),
            ],
        )?),
        ["allowlist", name] if !name.is_empty() => {
            // A segment that does not decode is kept as sent: the handler refuses it as a name.
            let name = percent_decode(name).unwrap_or_else(|| (*name).to_string());
            ParasolEndpoint::AllowList(pick(
                m,
                method,
                "DELETE",
                [(Method::DELETE, AllowListEndpoint::Remove(name))],
            )?)
        }
        _ => return Err(nf()),
    };
    Ok(MgmtEndpoint::Parasol { org, ep })
}

const GET_POST: &str = "GET, POST";
const ITEM_RW: &str = "GET, PUT, DELETE";
const ITEM_RD: &str = "GET, DELETE";

/// The endpoint of an organization's resource `kind`, and of one of its items if `item` is
/// given.
fn organization(
    method: &Method,
    kind: &str,
    item: Option<&str>,
    id: impl Fn(&str) -> Result<i64, RouteError>,
    items: impl Fn(Option<&str>) -> Result<Items, RouteError>,
) -> Result<OrgEndpoint, RouteError> {
    use OrgEndpoint::*;
    let m = Interface::Management;
    let nf = || RouteError::NotFound(m);
    Ok(match (kind, item) {
        ("networks", None) => Networks(pick(m, method, "GET", [(Method::GET, ReadDelete::List)])?),
        ("networks", Some(i)) => {
            let i = id(i)?;
            Networks(pick(
                m,
                method,
                ITEM_RD,
                [
                    (Method::GET, ReadDelete::Get(i)),
                    (Method::DELETE, ReadDelete::Delete(i)),
                ],
            )?)
        }
        ("roamingcomputers", None) => RoamingComputers(pick(
            m,
            method,
            "GET",
            [(Method::GET, ReadUpdateDelete::List)],
        )?),
        ("roamingcomputers", Some(dev)) => {
            let device = percent_decode(dev)
                .filter(|d| !d.is_empty())
                .ok_or_else(nf)?;
            RoamingComputers(read_update_delete(method, device)?)
        }
        ("virtualappliances", None) => VirtualAppliances(pick(
            m,
            method,
            "GET",
            [(Method::GET, ReadUpdateDelete::List)],
        )?),
        ("virtualappliances", Some(i)) => VirtualAppliances(read_update_delete(method, id(i)?)?),
        ("internalnetworks", item) => InternalNetworks(items(item)?),
        ("sites", item) => Sites(items(item)?),
        ("users", None) => Users(pick(
            m,
            method,
            GET_POST,
            [
                (Method::GET, ReadCreateDelete::List),
                (Method::POST, ReadCreateDelete::Create),
            ],
        )?),
        ("users", Some(i)) => {
            let i = id(i)?;
            Users(pick(
                m,
                method,
                ITEM_RD,
                [
                    (Method::GET, ReadCreateDelete::Get(i)),
                    (Method::DELETE, ReadCreateDelete::Delete(i)),
                ],
            )?)
        }
        ("roles", None) => pick(m, method, "GET", [(Method::GET, Roles)])?,
        _ => return Err(nf()),
    })
}

fn read_update_delete<Id: Clone>(
    method: &Method,
    item: Id,
) -> Result<ReadUpdateDelete<Id>, RouteError> {
    pick(
        Interface::Management,
        method,
        ITEM_RW,
        [
            (Method::GET, ReadUpdateDelete::Get(item.clone())),
            (Method::PUT, ReadUpdateDelete::Update(item.clone())),
            (Method::DELETE, ReadUpdateDelete::Delete(item)),
        ],
    )
}

impl Route {
    /// The route's path template, as the OpenAPI document writes it (metrics and the access log
    /// name requests by it).
    pub fn template(&self) -> &'static str {
        match self {
            Route::Enf(e) => match e {
                EnfEndpoint::PostEvents => "/1.0/events",
                EnfEndpoint::ListDomains | EnfEndpoint::DeleteDomainsWhere => "/1.0/domains",
                EnfEndpoint::DeleteDomainById(_) | EnfEndpoint::DeleteDomainByName(_) => {
                    "/1.0/domains/{domainIdOrName}"
                }
            },
            Route::Mgmt(m) => m.template(),
            Route::Own(o) => match o {
                OwnEndpoint::Healthz => "/healthz",
                OwnEndpoint::Readyz => "/readyz",
                OwnEndpoint::Metrics => "/metrics",
                OwnEndpoint::OpenApi => "/openapi.yaml",
            },
        }
    }
}

impl MgmtEndpoint {
    fn template(&self) -> &'static str {
        use MgmtEndpoint::*;
        const ORG: &str = "/v1/organizations/{organizationId}";
        match self {
            Provider {
                ep: ProviderEndpoint::Get,
                ..
            } => "/v1/serviceproviders/{serviceProviderId}",
            Provider {
                ep: ProviderEndpoint::Customers(i),
                ..
            } => match i {
                Items::List | Items::Create => "/v1/serviceproviders/{serviceProviderId}/customers",
                _ => "/v1/serviceproviders/{serviceProviderId}/customers/{customerId}",
            },
            Msp { ep, .. } => match ep {
                Items::List | Items::Create => "/v1/msps/{mspId}/customers",
                _ => "/v1/msps/{mspId}/customers/{customerId}",
            },
            Parasol { ep, .. } => match ep {
                ParasolEndpoint::Decision => "/parasol/v1/organizations/{organizationId}/decision",
                ParasolEndpoint::AllowList(AllowListEndpoint::List | AllowListEndpoint::Add) => {
                    "/parasol/v1/organizations/{organizationId}/allowlist"
                }
                ParasolEndpoint::AllowList(AllowListEndpoint::Remove(_)) => {
                    "/parasol/v1/organizations/{organizationId}/allowlist/{name}"
                }
            },
            Org { ep, .. } => {
                let (collection, item) = match ep {
                    OrgEndpoint::Networks(e) => (
                        "/v1/organizations/{organizationId}/networks",
                        !matches!(e, ReadDelete::List),
                    ),
                    OrgEndpoint::RoamingComputers(e) => (
                        "/v1/organizations/{organizationId}/roamingcomputers",
                        !matches!(e, ReadUpdateDelete::List),
                    ),
                    OrgEndpoint::InternalNetworks(e) => (
                        "/v1/organizations/{organizationId}/internalnetworks",
                        !matches!(e, Items::List | Items::Create),
                    ),
                    OrgEndpoint::VirtualAppliances(e) => (
                        "/v1/organizations/{organizationId}/virtualappliances",
                        !matches!(e, ReadUpdateDelete::List),
                    ),
                    OrgEndpoint::Sites(e) => (
                        "/v1/organizations/{organizationId}/sites",
                        !matches!(e, Items::List | Items::Create),
                    ),
                    OrgEndpoint::Users(e) => (
                        "/v1/organizations/{organizationId}/users",
                        !matches!(e, ReadCreateDelete::List | ReadCreateDelete::Create),
                    ),
                    OrgEndpoint::Roles => ("/v1/organizations/{organizationId}/roles", false),
                };
                debug_assert!(collection.starts_with(ORG));
                if !item {
                    return collection;
                }
                match ep {
                    OrgEndpoint::Networks(_) => {
                        "/v1/organizations/{organizationId}/networks/{networkId}"
                    }
                    OrgEndpoint::RoamingComputers(_) => {
                        "/v1/organizations/{organizationId}/roamingcomputers/{roamingComputerId}"
                    }
                    OrgEndpoint::InternalNetworks(_) => {
                        "/v1/organizations/{organizationId}/internalnetworks/{internalNetworkId}"
                    }
                    OrgEndpoint::VirtualAppliances(_) => {
                        "/v1/organizations/{organizationId}/virtualappliances/{virtualApplianceId}"
                    }
                    OrgEndpoint::Sites(_) => "/v1/organizations/{organizationId}/sites/{siteId}",
                    OrgEndpoint::Users(_) => "/v1/organizations/{organizationId}/users/{userId}",
                    OrgEndpoint::Roles => collection,
                }
            }
        }
    }
}

impl Route {
    /// The method the route answers.
    pub fn method(&self) -> Method {
        use EnfEndpoint::*;
        use MgmtEndpoint::*;
        match self {
            Route::Enf(PostEvents) => Method::POST,
            Route::Enf(ListDomains) => Method::GET,
            Route::Enf(DeleteDomainsWhere | DeleteDomainById(_) | DeleteDomainByName(_)) => {
                Method::DELETE
            }
            Route::Mgmt(Provider { ep, .. }) => match ep {
                ProviderEndpoint::Get => Method::GET,
                ProviderEndpoint::Customers(i) => i.method(),
            },
            Route::Mgmt(Msp { ep, .. }) => ep.method(),
            Route::Mgmt(Org { ep, .. }) => match ep {
                OrgEndpoint::Networks(ReadDelete::List | ReadDelete::Get(_)) => Method::GET,
                OrgEndpoint::Networks(ReadDelete::Delete(_)) => Method::DELETE,
                OrgEndpoint::RoamingComputers(e) => e.method(),
                OrgEndpoint::VirtualAppliances(e) => e.method(),
                OrgEndpoint::InternalNetworks(i) | OrgEndpoint::Sites(i) => i.method(),
                OrgEndpoint::Users(ReadCreateDelete::List | ReadCreateDelete::Get(_)) => {
                    Method::GET
                }
                OrgEndpoint::Users(ReadCreateDelete::Create) => Method::POST,
                OrgEndpoint::Users(ReadCreateDelete::Delete(_)) => Method::DELETE,
                OrgEndpoint::Roles => Method::GET,
            },
            Route::Mgmt(Parasol { ep, .. }) => match ep {
                ParasolEndpoint::Decision | ParasolEndpoint::AllowList(AllowListEndpoint::List) => {
                    Method::GET
                }
                ParasolEndpoint::AllowList(AllowListEndpoint::Add) => Method::POST,
                ParasolEndpoint::AllowList(AllowListEndpoint::Remove(_)) => Method::DELETE,
            },
            Route::Own(_) => Method::GET,
        }
    }

    /// The route written back as a path that routes to it again: ids in decimal, names
    /// percent-encoded byte by byte (so that a name never reads as an id or a separator), and an
    /// id the router read as too large (-1) as such an id.
    pub fn path(&self) -> String {
        fn enc(s: &str) -> String {
            s.bytes().map(|b| format!("%{b:02X}")).collect()
        }
        fn items(base: String, i: &Items) -> String {
            match i {
                Items::List | Items::Create => base,
                Items::Get(id) | Items::Update(id) | Items::Delete(id) => format!("{base}/{id}"),
            }
        }
        fn read_update_delete<Id>(
            base: String,
            r: &ReadUpdateDelete<Id>,
            id: impl Fn(&Id) -> String,
        ) -> String {
            match r {
                ReadUpdateDelete::List => base,
                ReadUpdateDelete::Get(i)
                | ReadUpdateDelete::Update(i)
                | ReadUpdateDelete::Delete(i) => {
                    format!("{base}/{}", id(i))
                }
            }
        }
        match self {
            Route::Enf(e) => match e {
                EnfEndpoint::PostEvents => "/1.0/events".into(),
                EnfEndpoint::ListDomains | EnfEndpoint::DeleteDomainsWhere => "/1.0/domains".into(),
                EnfEndpoint::DeleteDomainById(-1) => format!("/1.0/domains/{}", "9".repeat(20)),
                EnfEndpoint::DeleteDomainById(id) => format!("/1.0/domains/{id}"),
                EnfEndpoint::DeleteDomainByName(name) => format!("/1.0/domains/{}", enc(name)),
            },
            Route::Mgmt(MgmtEndpoint::Provider { sp, ep }) => match ep {
                ProviderEndpoint::Get => format!("/v1/serviceproviders/{sp}"),
                ProviderEndpoint::Customers(i) => {
                    items(format!("/v1/serviceproviders/{sp}/customers"), i)
                }
            },
            Route::Mgmt(MgmtEndpoint::Msp { msp, ep }) => {
                items(format!("/v1/msps/{msp}/customers"), ep)
            }
            Route::Mgmt(MgmtEndpoint::Org { org, ep }) => {
                let base = format!("/v1/organizations/{org}");
                match ep {
                    OrgEndpoint::Networks(r) => match r {
                        ReadDelete::List => format!("{base}/networks"),
                        ReadDelete::Get(id) | ReadDelete::Delete(id) => {
                            format!("{base}/networks/{id}")
                        }
                    },
                    OrgEndpoint::RoamingComputers(r) => {
                        read_update_delete(format!("{base}/roamingcomputers"), r, |d| enc(d))
                    }
                    OrgEndpoint::InternalNetworks(i) => {
                        items(format!("{base}/internalnetworks"), i)
                    }
                    OrgEndpoint::VirtualAppliances(r) => {
                        read_update_delete(format!("{base}/virtualappliances"), r, |id| {
                            id.to_string()
                        })
                    }
                    OrgEndpoint::Sites(i) => items(format!("{base}/sites"), i),
                    OrgEndpoint::Users(r) => match r {
                        ReadCreateDelete::List | ReadCreateDelete::Create => {
                            format!("{base}/users")
                        }
                        ReadCreateDelete::Get(id) | ReadCreateDelete::Delete(id) => {
                            format!("{base}/users/{id}")
                        }
                    },
                    OrgEndpoint::Roles => format!("{base}/roles"),
                }
            }
            Route::Mgmt(MgmtEndpoint::Parasol { org, ep }) => {
                let base = format!("/parasol/v1/organizations/{org}");
                match ep {
                    ParasolEndpoint::Decision => format!("{base}/decision"),
                    ParasolEndpoint::AllowList(
                        AllowListEndpoint::List | AllowListEndpoint::Add,
                    ) => {
                        format!("{base}/allowlist")
                    }
                    ParasolEndpoint::AllowList(AllowListEndpoint::Remove(name)) => {
                        format!("{base}/allowlist/{}", enc(name))
                    }
                }
            }
            Route::Own(o) => match o {
                OwnEndpoint::Healthz => "/healthz",
                OwnEndpoint::Readyz => "/readyz",
                OwnEndpoint::Metrics => "/metrics",
                OwnEndpoint::OpenApi => "/openapi.yaml",
            }
            .into(),
        }
    }

    /// A number for each kind of route (each leaf of the endpoint types), from 0 to
    /// `ROUTE_KINDS - 1`. The match is exhaustive, so a new kind of endpoint does not compile
    /// until it has a number here, and a test then wants it in `Route::every`. The metrics keep
    /// their per-route counters in an array indexed by it.
    pub fn kind(&self) -> usize {
        use EnfEndpoint::*;
        use MgmtEndpoint::*;
        use OrgEndpoint::*;
        match self {
            Route::Enf(PostEvents) => 0,
            Route::Enf(ListDomains) => 1,
            Route::Enf(DeleteDomainsWhere) => 2,
            Route::Enf(DeleteDomainById(_)) => 3,
            Route::Enf(DeleteDomainByName(_)) => 4,
            Route::Mgmt(Provider { ep, .. }) => match ep {
                ProviderEndpoint::Get => 5,
                ProviderEndpoint::Customers(i) => 6 + i.kind(),
            },
            Route::Mgmt(Msp { ep, .. }) => 11 + ep.kind(),
            Route::Mgmt(Org { ep, .. }) => match ep {
                Networks(ReadDelete::List) => 16,
                Networks(ReadDelete::Get(_)) => 17,
                Networks(ReadDelete::Delete(_)) => 18,
                RoamingComputers(e) => 19 + e.kind(),
                InternalNetworks(i) => 23 + i.kind(),
                VirtualAppliances(e) => 28 + e.kind(),
                Sites(i) => 32 + i.kind(),
                Users(ReadCreateDelete::List) => 37,
                Users(ReadCreateDelete::Create) => 38,
                Users(ReadCreateDelete::Get(_)) => 39,
                Users(ReadCreateDelete::Delete(_)) => 40,
                Roles => 41,
            },
            Route::Mgmt(Parasol { ep, .. }) => match ep {
                ParasolEndpoint::Decision => 42,
                ParasolEndpoint::AllowList(AllowListEndpoint::List) => 43,
                ParasolEndpoint::AllowList(AllowListEndpoint::Add) => 44,
                ParasolEndpoint::AllowList(AllowListEndpoint::Remove(_)) => 45,
            },
            Route::Own(o) => match o {
                OwnEndpoint::Healthz => 46,
                OwnEndpoint::Readyz => 47,
                OwnEndpoint::Metrics => 48,
                OwnEndpoint::OpenApi => 49,
            },
        }
    }

    /// The interface a route belongs to, as metrics and the access log name it.
    pub fn interface_name(&self) -> &'static str {
        match self {
            Route::Enf(_) => "enforcement",
            Route::Mgmt(_) => "management",
            Route::Own(_) => "parasol",
        }
    }

    /// One route of every kind, with sample parameters (for tests and the route list).
    pub fn every() -> Vec<Route> {
        use EnfEndpoint::*;
        use MgmtEndpoint::*;
        let items = [
            Items::List,
            Items::Create,
            Items::Get(7),
            Items::Update(7),
            Items::Delete(7),
        ];
        let rud = |id| {
            [
                ReadUpdateDelete::List,
                ReadUpdateDelete::Get(id),
                ReadUpdateDelete::Update(id),
                ReadUpdateDelete::Delete(id),
            ]
        };
        let device = "0a0b0c0d".to_string();
        let mut out = vec![
            Route::Enf(PostEvents),
            Route::Enf(ListDomains),
            Route::Enf(DeleteDomainsWhere),
            Route::Enf(DeleteDomainById(7)),
            Route::Enf(DeleteDomainByName("www.example.com".into())),
            Route::Mgmt(Provider {
                sp: 7,
                ep: ProviderEndpoint::Get,
            }),
        ];
        let org = |ep| Route::Mgmt(Org { org: 7, ep });
        for i in &items {
            out.push(Route::Mgmt(Provider {
                sp: 7,
                ep: ProviderEndpoint::Customers(i.clone()),
            }));
            out.push(Route::Mgmt(Msp {
                msp: 7,
                ep: i.clone(),
            }));
            out.push(org(OrgEndpoint::InternalNetworks(i.clone())));
            out.push(org(OrgEndpoint::Sites(i.clone())));
        }
        for e in [ReadDelete::List, ReadDelete::Get(7), ReadDelete::Delete(7)] {
            out.push(org(OrgEndpoint::Networks(e)));
        }
        for e in [
            ReadUpdateDelete::List,
            ReadUpdateDelete::Get(device.clone()),
            ReadUpdateDelete::Update(device.clone()),
            ReadUpdateDelete::Delete(device),
        ] {
            out.push(org(OrgEndpoint::RoamingComputers(e)));
        }
        for e in rud(7) {
            out.push(org(OrgEndpoint::VirtualAppliances(e)));
        }
        for e in [
            ReadCreateDelete::List,
            ReadCreateDelete::Create,
            ReadCreateDelete::Get(7),
            ReadCreateDelete::Delete(7),
        ] {
            out.push(org(OrgEndpoint::Users(e)));
        }
        out.push(org(OrgEndpoint::Roles));
        for ep in [
            ParasolEndpoint::Decision,
            ParasolEndpoint::AllowList(AllowListEndpoint::List),
            ParasolEndpoint::AllowList(AllowListEndpoint::Add),
            ParasolEndpoint::AllowList(AllowListEndpoint::Remove("www.example.com".into())),
        ] {
            out.push(Route::Mgmt(Parasol { org: 7, ep }));
        }
        for o in [
            OwnEndpoint::Healthz,
            OwnEndpoint::Readyz,
            OwnEndpoint::Metrics,
            OwnEndpoint::OpenApi,
        ] {
            out.push(Route::Own(o));
        }
        out.sort_by_key(Route::kind);
        out
    }
}

/// How many kinds of route there are (see `Route::kind`).
pub const ROUTE_KINDS: usize = 50;

/// Every route the server answers: its method and path template, as the OpenAPI document lists
/// them (routes that differ only in how they read a parameter share a template).
pub fn routes() -> Vec<(Method, &'static str)> {
    let mut out: Vec<(Method, &'static str)> = Route::every()
        .iter()
        .map(|r| (r.method(), r.template()))
        .collect();
    out.dedup();
    out
}

impl Items {
    fn method(&self) -> Method {
        match self {
            Items::List | Items::Get(_) => Method::GET,
            Items::Create => Method::POST,
            Items::Update(_) => Method::PUT,
            Items::Delete(_) => Method::DELETE,
        }
    }

    fn kind(&self) -> usize {
        match self {
            Items::List => 0,
            Items::Create => 1,
            Items::Get(_) => 2,
            Items::Update(_) => 3,
            Items::Delete(_) => 4,
        }
    }
}

impl<Id> ReadUpdateDelete<Id> {
    fn method(&self) -> Method {
        match self {
            ReadUpdateDelete::List | ReadUpdateDelete::Get(_) => Method::GET,
            ReadUpdateDelete::Update(_) => Method::PUT,
            ReadUpdateDelete::Delete(_) => Method::DELETE,
        }
    }

    fn kind(&self) -> usize {
        match self {
            ReadUpdateDelete::List => 0,
            ReadUpdateDelete::Get(_) => 1,
            ReadUpdateDelete::Update(_) => 2,
            ReadUpdateDelete::Delete(_) => 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(m: Method, p: &str) -> Result<Route, RouteError> {
        route(&m, p)
    }

    #[test]
    fn enforcement_routes() {
        assert_eq!(
            r(Method::POST, "/1.0/events"),
            Ok(Route::Enf(EnfEndpoint::PostEvents))
        );
        assert_eq!(
            r(Method::POST, "/1.0/events/"),
            Ok(Route::Enf(EnfEndpoint::PostEvents))
        );
        assert_eq!(
            r(Method::GET, "/1.0/domains"),
            Ok(Route::Enf(EnfEndpoint::ListDomains))
        );
        assert_eq!(
            r(Method::DELETE, "/1.0/domains"),
            Ok(Route::Enf(EnfEndpoint::DeleteDomainsWhere))
        );
        assert_eq!(
            r(Method::DELETE, "/1.0/domains/42"),
            Ok(Route::Enf(EnfEndpoint::DeleteDomainById(42)))
        );
        assert_eq!(
            r(Method::DELETE, "/1.0/domains/www.example.com"),
            Ok(Route::Enf(EnfEndpoint::DeleteDomainByName(
                "www.example.com".into()
            )))
        );
        assert_eq!(
            r(Method::DELETE, "/1.0/domains/b%C3%BCcher.test"),
            Ok(Route::Enf(EnfEndpoint::DeleteDomainByName(
                "bücher.test".into()
            )))
        );
        assert_eq!(
            r(Method::DELETE, "/1.0/domains/99999999999999999999999"),
            Ok(Route::Enf(EnfEndpoint::DeleteDomainById(-1)))
        );
    }

    #[test]
    fn enforcement_errors() {
        let e = Interface::Enforcement;
        assert_eq!(
            r(Method::GET, "/1.0/events"),
            Err(RouteError::MethodNotAllowed(e, "POST"))
        );
        assert_eq!(
            r(Method::PUT, "/1.0/domains"),
            Err(RouteError::MethodNotAllowed(e, "GET, DELETE"))
        );
        assert_eq!(
            r(Method::GET, "/1.0/domains/5"),
            Err(RouteError::MethodNotAllowed(e, "DELETE"))
        );
        for p in [
            "/",
            "",
            "/1.0",
            "/1.0/",
            "/1.0/nope",
            "/2.0/events",
            "/v2/x",
            "/1.0/domains/1/2",
            "/1.0/domains/a/b/c/d/e/f/g",
            "/favicon.ico",
            "//1.0/events",
        ] {
            assert_eq!(r(Method::GET, p), Err(RouteError::NotFound(e)), "{p}");
        }
    }

    #[test]
    fn parasols_own_paths_take_get_and_answer_errors_in_the_enforcement_shape() {
        for (p, ep) in [
            ("/healthz", OwnEndpoint::Healthz),
            ("/readyz/", OwnEndpoint::Readyz),
            ("/metrics", OwnEndpoint::Metrics),
            ("/openapi.yaml", OwnEndpoint::OpenApi),
        ] {
            assert_eq!(r(Method::GET, p), Ok(Route::Own(ep)), "{p}");
            assert_eq!(
                r(Method::POST, p),
                Err(RouteError::MethodNotAllowed(Interface::Enforcement, "GET"))
            );
        }
        for p in ["/healthz/x", "/openapi.json", "/1.0/healthz", "/v1/metrics"] {
            assert!(r(Method::GET, p).is_err(), "{p}");
        }
    }

    #[test]
    fn management_routes_are_nested_by_tenant() {
        use MgmtEndpoint::*;
        let cases: Vec<(Method, &str, MgmtEndpoint)> = vec![
            (
                Method::GET,
                "/v1/serviceproviders/1",
                Provider {
                    sp: 1,
                    ep: ProviderEndpoint::Get,
                },
            ),
            (
                Method::PUT,
                "/v1/serviceproviders/1/customers/2",
                Provider {
                    sp: 1,
                    ep: ProviderEndpoint::Customers(Items::Update(2)),
                },
            ),
            (
                Method::POST,
                "/v1/msps/3/customers",
                Msp {
                    msp: 3,
                    ep: Items::Create,
                },
            ),
            (
                Method::DELETE,
                "/v1/organizations/5/networks/6",
                Org {
                    org: 5,
                    ep: OrgEndpoint::Networks(ReadDelete::Delete(6)),
                },
            ),
            (
                Method::PUT,
                "/v1/organizations/5/roamingcomputers/ab%31%32",
                Org {
                    org: 5,
                    ep: OrgEndpoint::RoamingComputers(ReadUpdateDelete::Update("ab12".into())),
                },
            ),
            (
                Method::GET,
                "/v1/organizations/5/virtualappliances/8",
                Org {
                    org: 5,
                    ep: OrgEndpoint::VirtualAppliances(ReadUpdateDelete::Get(8)),
                },
            ),
            (
                Method::POST,
                "/v1/organizations/5/users",
                Org {
                    org: 5,
                    ep: OrgEndpoint::Users(ReadCreateDelete::Create),
                },
            ),
            (
                Method::GET,
                "/v1/organizations/5/roles",
                Org {
                    org: 5,
                    ep: OrgEndpoint::Roles,
                },
            ),
        ];
        for (m, p, e) in cases {
            assert_eq!(route(&m, p), Ok(Route::Mgmt(e)), "{m} {p}");
        }
    }

    /// A concrete path for a route: its template with the route's own sample parameters.
    fn path_of(r: &Route) -> String {
        match r {
            Route::Enf(EnfEndpoint::DeleteDomainByName(name)) => format!("/1.0/domains/{name}"),
            r => r
                .template()
                .split('/')
                .map(|seg| match seg {
                    "{roamingComputerId}" => "0a0b0c0d",
                    "{name}" => "www.example.com",
                    s if s.starts_with('{') => "7",
                    s => s,
                })
                .collect::<Vec<_>>()
                .join("/"),
        }
    }

    /// `Route::every` holds one route of every kind (`Route::kind` is exhaustive, so a new kind
    /// needs a number, and this wants it in the list), and each comes back from the router as
    /// itself, under its own method and template.
    #[test]
    fn every_kind_of_route_is_listed_and_round_trips() {
        let every = Route::every();
        let kinds: Vec<usize> = every.iter().map(Route::kind).collect();
        assert_eq!(kinds, (0..ROUTE_KINDS).collect::<Vec<_>>());
        for r in &every {
            assert_eq!(route(&r.method(), &path_of(r)).as_ref(), Ok(r), "{r:?}");
            assert_eq!(route(&r.method(), &r.path()).as_ref(), Ok(r), "{r:?}");
        }
        assert_eq!(routes().len(), 49, "one template for two kinds of delete");
    }

    #[test]
    fn parasol_routes_are_management_routes_of_an_organization() {
        use AllowListEndpoint::*;
        let p = |org, ep| Ok(Route::Mgmt(MgmtEndpoint::Parasol { org, ep }));
        assert_eq!(
            r(Method::GET, "/parasol/v1/organizations/3/decision"),
            p(3, ParasolEndpoint::Decision)
        );
        assert_eq!(
            r(Method::POST, "/parasol/v1/organizations/3/allowlist/"),
            p(3, ParasolEndpoint::AllowList(Add))
        );
        assert_eq!(
            r(
                Method::DELETE,
                "/parasol/v1/organizations/3/allowlist/b%C3%BCcher.test"
            ),
            p(3, ParasolEndpoint::AllowList(Remove("bücher.test".into())))
        );
        let m = Interface::Management;
        assert_eq!(
            r(Method::POST, "/parasol/v1/organizations/3/decision"),
            Err(RouteError::MethodNotAllowed(m, "GET"))
        );
        assert_eq!(
            r(Method::PUT, "/parasol/v1/organizations/3/allowlist"),
            Err(RouteError::MethodNotAllowed(m, "GET, POST"))
        );
        assert_eq!(
            r(
                Method::GET,
                "/parasol/v1/organizations/3/allowlist/x.example"
            ),
            Err(RouteError::MethodNotAllowed(m, "DELETE"))
        );
        for path in [
            "/parasol",
            "/parasol/v2/organizations/3/decision",
            "/parasol/v1/organizations/x/decision",
            "/parasol/v1/organizations/-3/decision",
            "/parasol/v1/organizations/3",
            "/parasol/v1/organizations/3/decision/x",
            "/parasol/v1/organizations/3/allowlist/a/b",
            "/parasol/v1/organizations/3/allowlist//",
            "/parasol/v1/organizations/99999999999999999999/decision",
        ] {
            assert_eq!(r(Method::GET, path), Err(RouteError::NotFound(m)), "{path}");
        }
    }

    #[test]
    fn management_errors() {
        let m = Interface::Management;
        assert_eq!(
            r(Method::POST, "/v1/serviceproviders/1"),
            Err(RouteError::MethodNotAllowed(m, "GET"))
        );
        assert_eq!(
            r(Method::PUT, "/v1/organizations/1/users/2"),
            Err(RouteError::MethodNotAllowed(m, "GET, DELETE"))
        );
        assert_eq!(
            r(Method::POST, "/v1/organizations/1/roles"),
            Err(RouteError::MethodNotAllowed(m, "GET"))
        );
        for p in [
            "/v1",
            "/v1/",
            "/v1/serviceproviders",
            "/v1/serviceproviders/x",
            "/v1/organizations/1/roles/1",
            "/v1/organizations/-1/sites",
            "/v1/organizations/1/sites/1.5",
            "/v1/organizations/1/things",
            // Longer than any route, by one segment and by many.
            "/v1/organizations/1/sites/2/x",
            "/v1/organizations/1/sites/2/x/y/z/w",
            "/v1/organizations/1/sites/2//",
        ] {
            assert_eq!(r(Method::GET, p), Err(RouteError::NotFound(m)), "{p}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(path in "\\PC{0,64}", seg in "[/a-z0-9.%]{0,40}") {
            let _ = route(&Method::GET, &path);
            let _ = route(&Method::DELETE, &format!("/1.0/domains/{seg}"));
            let _ = route(&Method::PUT, &format!("/v1/organizations/{seg}"));
        }
    }
}
