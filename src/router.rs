//! The router: (method, path) -> a typed endpoint, with no I/O. Paths under `/1.0/` belong to the
//! enforcement interface, paths under `/v1/` to the management interface, and Parasol's own
//! endpoints under `/parasol/v1/` (authenticated and scoped like the management interface's
//! organization paths) are answered in the management interface's shape; Parasol's own paths
//! at the top (`/healthz`, `/readyz`, `/metrics`, `/openapi.yaml`) answer errors in the
//! enforcement shape, and so does anything else, with a 404.
//!
//! Every route is one row of `ROUTES`: its method, its path template as the OpenAPI document
//! writes it, and how its endpoint is built from the template's parameters. Matching, the
//! `Allow` header of a 405, a route's kind (its row's position), the metrics' labels and the
//! list the OpenAPI agreement test compares with the document all come from that one table.
//! HEAD is answered wherever GET is, as GET (RFC 9110, section 9.1; the server sends no body).

use hyper::Method;
use percent_encoding::percent_encode_byte;

use crate::http::{cut, percent_decode};

/// Which interface a path belongs to (it picks the error body shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    Enforcement,
    Management,
}

/// What a routed request asks for: the typed endpoint its interface's handler matches on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Enf(EnfEndpoint),
    Mgmt(MgmtEndpoint),
    /// Parasol's own paths, outside both interfaces (no authentication).
    Own(OwnEndpoint),
    /// The console in the browser (`/console/...`): HTML pages behind a session.
    Console(ConsoleEndpoint),
}

/// The console's pages and forms (`/console/...`). Pages are GET; every change is a POST of a
/// form carrying the session's CSRF token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsoleEndpoint {
    /// `GET /console/`: the overview, or the sign-in form without a session.
    Overview,
    /// `GET /console/style.css`: the stylesheet, served by the binary.
    Style,
    /// `POST /console/signin`: an API key and secret.
    SignIn,
    /// `POST /console/signout`.
    SignOut,
    /// `GET /console/organizations/{id}`: its domain list (searched by name), allow list and
    /// the decision on one name.
    Organization(i64),
    /// `GET /console/organizations/{id}/journal`: its latest enforcement requests.
    Journal(i64),
    /// `POST /console/organizations/{id}/domains/delete`.
    DeleteDomain(i64),
    /// `POST /console/organizations/{id}/allowlist/add`.
    AllowAdd(i64),
    /// `POST /console/organizations/{id}/allowlist/remove`.
    AllowRemove(i64),
}

impl ConsoleEndpoint {
    /// A form (a POST that changes something), as opposed to a page.
    pub fn is_form(&self) -> bool {
        matches!(
            self,
            Self::SignIn
                | Self::SignOut
                | Self::DeleteDomain(_)
                | Self::AllowAdd(_)
                | Self::AllowRemove(_)
        )
    }
}

/// Parasol's own paths (decisions.md), for operators and integrators: health, readiness,
/// metrics and the OpenAPI document. Each has GET (and so HEAD) only.
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

/// A method a route is declared with. HEAD takes the GET routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
    Put,
    Delete,
}

impl Verb {
    /// The verb whose routes answer `method`: HEAD is answered as GET.
    fn of(method: &Method) -> Option<Verb> {
        Some(match *method {
            Method::GET | Method::HEAD => Verb::Get,
            Method::POST => Verb::Post,
            Method::PUT => Verb::Put,
            Method::DELETE => Verb::Delete,
            _ => return None,
        })
    }

    pub fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Delete => Method::DELETE,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Put => "PUT",
            Verb::Delete => "DELETE",
        }
    }

    /// Its bit in an `Allow` set (see `ALLOW`).
    fn bit(self) -> usize {
        match self {
            Verb::Get => 1,
            Verb::Post => 2,
            Verb::Put => 4,
            Verb::Delete => 8,
        }
    }
}

/// The `Allow` header of each set of verbs (bits as in `Verb::bit`), in the order RFC 9110
/// lists the methods; GET brings HEAD.
const ALLOW: [&str; 16] = [
    "",
    "GET, HEAD",
    "POST",
    "GET, HEAD, POST",
    "PUT",
    "GET, HEAD, PUT",
    "POST, PUT",
    "GET, HEAD, POST, PUT",
    "DELETE",
    "GET, HEAD, DELETE",
    "POST, DELETE",
    "GET, HEAD, POST, DELETE",
    "PUT, DELETE",
    "GET, HEAD, PUT, DELETE",
    "POST, PUT, DELETE",
    "GET, HEAD, POST, PUT, DELETE",
];

/// A path parameter, read from its segment by the kind its template names (see `read_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param {
    /// A decimal id; -1 for `{domainIdOrName}` digits too large for an i64 (an id that exists
    /// nowhere).
    Id(i64),
    /// A name, percent-decoded.
    Name(String),
}

/// Most parameters of a template (`/v1/msps/{mspId}/customers/{customerId}`).
const MAX_PARAMS: usize = 2;

/// A route's parameters, in the order of its template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params([Option<Param>; MAX_PARAMS]);

impl Params {
    /// Parameter `i` as an id. Each row reads its parameters by the kinds its template names
    /// (the table's tests check every row); -1, an id that exists nowhere, otherwise.
    fn id(&self, i: usize) -> i64 {
        match self.0.get(i) {
            Some(Some(Param::Id(n))) => *n,
            _ => -1,
        }
    }

    /// Parameter `i` as a name (see `id`).
    fn name(&self, i: usize) -> String {
        match self.0.get(i) {
            Some(Some(Param::Name(s))) => s.clone(),
            _ => String::new(),
        }
    }
}

/// Reads the segment `seg` of a path as the parameter `placeholder` of a template; `None` if it
/// cannot be one (the path then matches no route: 404).
fn read_param(placeholder: &str, seg: &str) -> Option<Param> {
    if seg.is_empty() {
        return None;
    }
    let digits = seg.bytes().all(|b| b.is_ascii_digit());
    // A segment that does not decode cannot be a listed name: it is kept as sent, for the
    // handler to refuse.
    let name = || Param::Name(percent_decode(seg).unwrap_or_else(|| seg.to_string()));
    match placeholder {
        // All digits: an id; one too large for i64 exists nowhere.
        "{domainIdOrName}" if digits => Some(Param::Id(seg.parse().unwrap_or(-1))),
        "{domainIdOrName}" | "{name}" => Some(name()),
        "{roamingComputerId}" => percent_decode(seg)
            .filter(|d| !d.is_empty())
            .map(Param::Name),
        _ if digits => seg.parse().ok().map(Param::Id),
        _ => None,
    }
}

/// One route: a method, a path template, and how the endpoint is built from the parameters.
pub struct Row {
    pub verb: Verb,
    /// The path template as the OpenAPI document writes it; `{...}` segments are parameters.
    pub template: &'static str,
    build: fn(&Params) -> Endpoint,
}

impl Row {
    /// The interface the route belongs to, as metrics and the access log name it.
    pub fn interface_name(&self) -> &'static str {
        if self.template.starts_with("/1.0/") {
            "enforcement"
        } else if self.template.starts_with("/v1/") || self.template.starts_with("/parasol/v1/") {
            "management"
        } else if self.is_console() {
            "console"
        } else {
            "parasol"
        }
    }

    /// A page or form of the console: HTML, not part of either interface's document.
    pub fn is_console(&self) -> bool {
        self.template.starts_with("/console")
    }
}

const fn row(verb: Verb, template: &'static str, build: fn(&Params) -> Endpoint) -> Row {
    Row {
        verb,
        template,
        build,
    }
}

fn provider(p: &Params, ep: ProviderEndpoint) -> Endpoint {
    Endpoint::Mgmt(MgmtEndpoint::Provider { sp: p.id(0), ep })
}

fn msp(p: &Params, ep: Items) -> Endpoint {
    Endpoint::Mgmt(MgmtEndpoint::Msp { msp: p.id(0), ep })
}

fn org(p: &Params, ep: OrgEndpoint) -> Endpoint {
    Endpoint::Mgmt(MgmtEndpoint::Org { org: p.id(0), ep })
}

fn parasol(p: &Params, ep: ParasolEndpoint) -> Endpoint {
    Endpoint::Mgmt(MgmtEndpoint::Parasol { org: p.id(0), ep })
}

/// Every route the server answers. Rows of one template are adjacent; a route's kind is its
/// position here (metrics keep their per-route counters in an array indexed by it).
#[rustfmt::skip]
pub static ROUTES: &[Row] = {
    use Verb::*;
    use Endpoint::{Console, Enf, Own};
    use EnfEndpoint::*;
    use OrgEndpoint::*;
    use ProviderEndpoint::Customers;
    use ParasolEndpoint::AllowList;
    const SP: &str = "/v1/serviceproviders/{serviceProviderId}";
    &[
        row(Post, "/1.0/events", |_| Enf(PostEvents)),
        row(Get, "/1.0/domains", |_| Enf(ListDomains)),
        row(Delete, "/1.0/domains", |_| Enf(DeleteDomainsWhere)),
        row(Delete, "/1.0/domains/{domainIdOrName}", |p| match &p.0[0] {
            Some(Param::Name(n)) => Enf(DeleteDomainByName(n.clone())),
            _ => Enf(DeleteDomainById(p.id(0))),
        }),

        row(Get, SP, |p| provider(p, ProviderEndpoint::Get)),
        row(Get, "/v1/serviceproviders/{serviceProviderId}/customers", |p| provider(p, Customers(Items::List))),
        row(Post, "/v1/serviceproviders/{serviceProviderId}/customers", |p| provider(p, Customers(Items::Create))),
        row(Get, "/v1/serviceproviders/{serviceProviderId}/customers/{customerId}", |p| provider(p, Customers(Items::Get(p.id(1))))),
        row(Put, "/v1/serviceproviders/{serviceProviderId}/customers/{customerId}", |p| provider(p, Customers(Items::Update(p.id(1))))),
        row(Delete, "/v1/serviceproviders/{serviceProviderId}/customers/{customerId}", |p| provider(p, Customers(Items::Delete(p.id(1))))),

        row(Get, "/v1/msps/{mspId}/customers", |p| msp(p, Items::List)),
        row(Post, "/v1/msps/{mspId}/customers", |p| msp(p, Items::Create)),
        row(Get, "/v1/msps/{mspId}/customers/{customerId}", |p| msp(p, Items::Get(p.id(1)))),
        row(Put, "/v1/msps/{mspId}/customers/{customerId}", |p| msp(p, Items::Update(p.id(1)))),
        row(Delete, "/v1/msps/{mspId}/customers/{customerId}", |p| msp(p, Items::Delete(p.id(1)))),

        row(Get, "/v1/organizations/{organizationId}/networks", |p| org(p, Networks(ReadDelete::List))),
        row(Get, "/v1/organizations/{organizationId}/networks/{networkId}", |p| org(p, Networks(ReadDelete::Get(p.id(1))))),
        row(Delete, "/v1/organizations/{organizationId}/networks/{networkId}", |p| org(p, Networks(ReadDelete::Delete(p.id(1))))),

        row(Get, "/v1/organizations/{organizationId}/roamingcomputers", |p| org(p, RoamingComputers(ReadUpdateDelete::List))),
        row(Get, "/v1/organizations/{organizationId}/roamingcomputers/{roamingComputerId}", |p| org(p, RoamingComputers(ReadUpdateDelete::Get(p.name(1))))),
        row(Put, "/v1/organizations/{organizationId}/roamingcomputers/{roamingComputerId}", |p| org(p, RoamingComputers(ReadUpdateDelete::Update(p.name(1))))),
        row(Delete, "/v1/organizations/{organizationId}/roamingcomputers/{roamingComputerId}", |p| org(p, RoamingComputers(ReadUpdateDelete::Delete(p.name(1))))),

        row(Get, "/v1/organizations/{organizationId}/internalnetworks", |p| org(p, InternalNetworks(Items::List))),
        row(Post, "/v1/organizations/{organizationId}/internalnetworks", |p| org(p, InternalNetworks(Items::Create))),
        row(Get, "/v1/organizations/{organizationId}/internalnetworks/{internalNetworkId}", |p| org(p, InternalNetworks(Items::Get(p.id(1))))),
        row(Put, "/v1/organizations/{organizationId}/internalnetworks/{internalNetworkId}", |p| org(p, InternalNetworks(Items::Update(p.id(1))))),
        row(Delete, "/v1/organizations/{organizationId}/internalnetworks/{internalNetworkId}", |p| org(p, InternalNetworks(Items::Delete(p.id(1))))),

        row(Get, "/v1/organizations/{organizationId}/virtualappliances", |p| org(p, VirtualAppliances(ReadUpdateDelete::List))),
        row(Get, "/v1/organizations/{organizationId}/virtualappliances/{virtualApplianceId}", |p| org(p, VirtualAppliances(ReadUpdateDelete::Get(p.id(1))))),
        row(Put, "/v1/organizations/{organizationId}/virtualappliances/{virtualApplianceId}", |p| org(p, VirtualAppliances(ReadUpdateDelete::Update(p.id(1))))),
        row(Delete, "/v1/organizations/{organizationId}/virtualappliances/{virtualApplianceId}", |p| org(p, VirtualAppliances(ReadUpdateDelete::Delete(p.id(1))))),

        row(Get, "/v1/organizations/{organizationId}/sites", |p| org(p, Sites(Items::List))),
        row(Post, "/v1/organizations/{organizationId}/sites", |p| org(p, Sites(Items::Create))),
        row(Get, "/v1/organizations/{organizationId}/sites/{siteId}", |p| org(p, Sites(Items::Get(p.id(1))))),
        row(Put, "/v1/organizations/{organizationId}/sites/{siteId}", |p| org(p, Sites(Items::Update(p.id(1))))),
        row(Delete, "/v1/organizations/{organizationId}/sites/{siteId}", |p| org(p, Sites(Items::Delete(p.id(1))))),

        row(Get, "/v1/organizations/{organizationId}/users", |p| org(p, Users(ReadCreateDelete::List))),
        row(Post, "/v1/organizations/{organizationId}/users", |p| org(p, Users(ReadCreateDelete::Create))),
        row(Get, "/v1/organizations/{organizationId}/users/{userId}", |p| org(p, Users(ReadCreateDelete::Get(p.id(1))))),
        row(Delete, "/v1/organizations/{organizationId}/users/{userId}", |p| org(p, Users(ReadCreateDelete::Delete(p.id(1))))),

        row(Get, "/v1/organizations/{organizationId}/roles", |p| org(p, Roles)),

        row(Get, "/parasol/v1/organizations/{organizationId}/decision", |p| parasol(p, ParasolEndpoint::Decision)),
        row(Get, "/parasol/v1/organizations/{organizationId}/allowlist", |p| parasol(p, AllowList(AllowListEndpoint::List))),
        row(Post, "/parasol/v1/organizations/{organizationId}/allowlist", |p| parasol(p, AllowList(AllowListEndpoint::Add))),
        row(Delete, "/parasol/v1/organizations/{organizationId}/allowlist/{name}", |p| parasol(p, AllowList(AllowListEndpoint::Remove(p.name(1))))),

        row(Get, "/healthz", |_| Own(OwnEndpoint::Healthz)),
        row(Get, "/readyz", |_| Own(OwnEndpoint::Readyz)),
        row(Get, "/metrics", |_| Own(OwnEndpoint::Metrics)),
        row(Get, "/openapi.yaml", |_| Own(OwnEndpoint::OpenApi)),

        row(Get, "/console", |_| Console(ConsoleEndpoint::Overview)),
        row(Get, "/console/style.css", |_| Console(ConsoleEndpoint::Style)),
        row(Post, "/console/signin", |_| Console(ConsoleEndpoint::SignIn)),
        row(Post, "/console/signout", |_| Console(ConsoleEndpoint::SignOut)),
        row(Get, "/console/organizations/{organizationId}", |p| Console(ConsoleEndpoint::Organization(p.id(0)))),
        row(Get, "/console/organizations/{organizationId}/journal", |p| Console(ConsoleEndpoint::Journal(p.id(0)))),
        row(Post, "/console/organizations/{organizationId}/domains/delete", |p| Console(ConsoleEndpoint::DeleteDomain(p.id(0)))),
        row(Post, "/console/organizations/{organizationId}/allowlist/add", |p| Console(ConsoleEndpoint::AllowAdd(p.id(0)))),
        row(Post, "/console/organizations/{organizationId}/allowlist/remove", |p| Console(ConsoleEndpoint::AllowRemove(p.id(0)))),
    ]
};

/// How many kinds of route there are: the rows of `ROUTES`.
pub const ROUTE_KINDS: usize = ROUTES.len();

/// Every route the server answers: its method and path template, as the OpenAPI document lists
/// them (HEAD, answered wherever GET is, is not listed; nor are the console's pages, which are
/// for a browser, not an interface).
pub fn routes() -> Vec<(Method, &'static str)> {
    ROUTES
        .iter()
        .filter(|r| !r.is_console())
        .map(|r| (r.verb.method(), r.template))
        .collect()
}

/// A routed request: its row in `ROUTES`, its parameters, and the endpoint they make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    kind: usize,
    params: Params,
    pub endpoint: Endpoint,
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

/// A row's template cut into its segments once, so that routing a request compares segment
/// counts and literal segments rather than splitting every template of the table again (the
/// table is scanned in order; cutting each template per request cost tens of thousands of
/// instructions for a path near its end).
struct Compiled {
    len: usize,
    segs: [&'static str; MAX_SEGMENTS],
}

/// `ROUTES`' templates, cut (see `Compiled`), in the same order.
fn compiled() -> &'static [Compiled] {
    static COMPILED: std::sync::OnceLock<Vec<Compiled>> = std::sync::OnceLock::new();
    COMPILED.get_or_init(|| {
        ROUTES
            .iter()
            .map(|row| {
                let mut segs = [""; MAX_SEGMENTS];
                let mut len = 0;
                for (slot, seg) in segs.iter_mut().zip(row.template.split('/').skip(1)) {
                    *slot = seg;
                    len += 1;
                }
                Compiled { len, segs }
            })
            .collect()
    })
}

/// The parameters of `segs` if they match the template cut into `c`.
fn matches(c: &Compiled, segs: &[&str]) -> Option<Params> {
    if c.len != segs.len() {
        return None;
    }
    // Literal segments first: most rows fail there, before any parameter is read.
    for (t, seg) in c.segs.iter().zip(segs) {
        if !t.starts_with('{') && t != seg {
            return None;
        }
    }
    let mut params = Params::default();
    let mut n = 0;
    for (t, seg) in c.segs.iter().zip(segs) {
        if t.starts_with('{') {
            *params.0.get_mut(n)? = Some(read_param(t, seg)?);
            n += 1;
        }
    }
    Some(params)
}

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
    let iface = match segs.first() {
        Some(&("v1" | "parasol")) => Interface::Management,
        _ => Interface::Enforcement,
    };
    let verb = Verb::of(method);
    let mut allow = 0;
    // The template the path matched, and its parameters (a path matches one template at most,
    // and the rows of a template are adjacent).
    let mut hit: Option<(&str, Params)> = None;
    // The template of the row before, when it did not match: its other rows are skipped.
    let mut missed: Option<&str> = None;
    for ((kind, row), c) in ROUTES.iter().enumerate().zip(compiled()) {
        match &hit {
            Some((t, _)) if *t != row.template => break,
            Some(_) => {}
            None if missed == Some(row.template) => continue,
            None => match matches(c, segs) {
                Some(p) => hit = Some((row.template, p)),
                None => {
                    missed = Some(row.template);
                    continue;
                }
            },
        }
        if verb == Some(row.verb) {
            let params = hit.map(|(_, p)| p).unwrap_or_default();
            return Ok(Route {
                kind,
                endpoint: (row.build)(&params),
                params,
            });
        }
        allow |= row.verb.bit();
    }
    Err(match ALLOW.get(allow) {
        Some(a) if allow != 0 => RouteError::MethodNotAllowed(iface, a),
        _ => RouteError::NotFound(iface),
    })
}

impl Route {
    fn row(&self) -> &'static Row {
        &ROUTES[self.kind]
    }

    /// The route's kind: its position in `ROUTES`, from 0 to `ROUTE_KINDS - 1`.
    pub fn kind(&self) -> usize {
        self.kind
    }

    /// The route's path template, as the OpenAPI document writes it (metrics and the access log
    /// name requests by it).
    pub fn template(&self) -> &'static str {
        self.row().template
    }

    /// The method the route is declared with (GET for a HEAD request).
    pub fn method(&self) -> Method {
        self.row().verb.method()
    }

    /// The interface whose shape the route's errors take.
    pub fn interface(&self) -> Interface {
        match self.endpoint {
            Endpoint::Mgmt(_) => Interface::Management,
            Endpoint::Enf(_) | Endpoint::Own(_) | Endpoint::Console(_) => Interface::Enforcement,
        }
    }

    /// The interface a route belongs to, as metrics and the access log name it.
    pub fn interface_name(&self) -> &'static str {
        self.row().interface_name()
    }

    /// The route written back as a path that routes to it again: its template with ids in
    /// decimal, names percent-encoded byte by byte (so that a name never reads as an id or a
    /// separator), and an id the router read as too large (-1) as such an id.
    pub fn path(&self) -> String {
        let mut params = self.params.0.iter().flatten();
        self.template()
            .split('/')
            .map(|seg| {
                if !seg.starts_with('{') {
                    return seg.to_string();
                }
                match params.next() {
                    Some(Param::Id(-1)) => "9".repeat(20),
                    Some(Param::Id(id)) => id.to_string(),
                    Some(Param::Name(s)) => s.bytes().map(percent_encode_byte).collect(),
                    None => String::new(),
                }
            })
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// A concrete path for a template, with sample parameters: names as themselves, the ids of the
/// first and second parameters 7 and 8.
#[cfg(test)]
pub(crate) fn sample_path(template: &str) -> String {
    let mut ids = ["7", "8"].into_iter();
    template
        .split('/')
        .map(|seg| match seg {
            "{roamingComputerId}" => "0a0b0c0d",
            "{name}" => "www.example.com",
            s if s.starts_with('{') => ids.next().unwrap_or("9"),
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// One route of every kind, in kind order, with sample parameters.
#[cfg(test)]
pub(crate) fn every() -> Vec<Route> {
    ROUTES
        .iter()
        .map(|r| route(&r.verb.method(), &sample_path(r.template)).unwrap())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(m: Method, p: &str) -> Result<Endpoint, RouteError> {
        route(&m, p).map(|r| r.endpoint)
    }

    #[test]
    fn console_routes() {
        use ConsoleEndpoint::*;
        let c = |m, p| {
            r(m, p).map(|e| match e {
                Endpoint::Console(c) => c,
                other => panic!("{other:?}"),
            })
        };
        assert_eq!(c(Method::GET, "/console/"), Ok(Overview));
        assert_eq!(c(Method::GET, "/console"), Ok(Overview));
        assert_eq!(c(Method::HEAD, "/console/style.css"), Ok(Style));
        assert_eq!(c(Method::POST, "/console/signin"), Ok(SignIn));
        assert_eq!(c(Method::POST, "/console/signout"), Ok(SignOut));
        assert_eq!(
            c(Method::GET, "/console/organizations/12"),
            Ok(Organization(12))
        );
        assert_eq!(
            c(Method::GET, "/console/organizations/12/journal"),
            Ok(Journal(12))
        );
        assert_eq!(
            c(Method::POST, "/console/organizations/12/domains/delete"),
            Ok(DeleteDomain(12))
        );
        assert_eq!(
            c(Method::POST, "/console/organizations/12/allowlist/add"),
            Ok(AllowAdd(12))
        );
        assert_eq!(
            c(Method::POST, "/console/organizations/12/allowlist/remove"),
            Ok(AllowRemove(12))
        );
        assert_eq!(
            r(Method::GET, "/console/signin"),
            Err(RouteError::MethodNotAllowed(Interface::Enforcement, "POST"))
        );
        assert_eq!(
            r(Method::GET, "/console/organizations/x"),
            Err(RouteError::NotFound(Interface::Enforcement))
        );
        // The console is no part of the interfaces' document.
        assert!(routes().iter().all(|(_, t)| !t.starts_with("/console")));
    }

    #[test]
    fn enforcement_routes() {
        assert_eq!(
            r(Method::POST, "/1.0/events"),
            Ok(Endpoint::Enf(EnfEndpoint::PostEvents))
        );
        assert_eq!(
            r(Method::POST, "/1.0/events/"),
            Ok(Endpoint::Enf(EnfEndpoint::PostEvents))
        );
        assert_eq!(
            r(Method::GET, "/1.0/domains"),
            Ok(Endpoint::Enf(EnfEndpoint::ListDomains))
        );
        assert_eq!(
            r(Method::DELETE, "/1.0/domains"),
            Ok(Endpoint::Enf(EnfEndpoint::DeleteDomainsWhere))
        );
        assert_eq!(
            r(Method::DELETE, "/1.0/domains/42"),
            Ok(Endpoint::Enf(EnfEndpoint::DeleteDomainById(42)))
        );
        assert_eq!(
            r(Method::DELETE, "/1.0/domains/www.example.com"),
            Ok(Endpoint::Enf(EnfEndpoint::DeleteDomainByName(
                "www.example.com".into()
            )))
        );
        assert_eq!(
            r(Method::DELETE, "/1.0/domains/b%C3%BCcher.test"),
            Ok(Endpoint::Enf(EnfEndpoint::DeleteDomainByName(
                "bücher.test".into()
            )))
        );
        assert_eq!(
            r(Method::DELETE, "/1.0/domains/99999999999999999999999"),
            Ok(Endpoint::Enf(EnfEndpoint::DeleteDomainById(-1)))
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
            Err(RouteError::MethodNotAllowed(e, "GET, HEAD, DELETE"))
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
            assert_eq!(r(Method::GET, p), Ok(Endpoint::Own(ep)), "{p}");
            assert_eq!(
                r(Method::POST, p),
                Err(RouteError::MethodNotAllowed(
                    Interface::Enforcement,
                    "GET, HEAD"
                ))
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
            assert_eq!(r(m.clone(), p), Ok(Endpoint::Mgmt(e)), "{m} {p}");
        }
    }

    /// Every row of the table routes: its sample path, under its method, comes back as that
    /// row (its kind), and so does the route written back as a path; HEAD takes the GET rows.
    #[test]
    fn every_row_routes_to_itself() {
        let every = every();
        assert_eq!(every.len(), ROUTE_KINDS);
        for (kind, r) in every.iter().enumerate() {
            assert_eq!(r.kind(), kind, "{r:?}");
            let row = &ROUTES[kind];
            assert_eq!(
                (r.method(), r.template()),
                (row.verb.method(), row.template)
            );
            assert_eq!(route(&r.method(), &r.path()).as_ref(), Ok(r), "{r:?}");
            if row.verb == Verb::Get {
                assert_eq!(route(&Method::HEAD, &r.path()).as_ref(), Ok(r), "{r:?}");
            }
            // The endpoint holds each parameter, read by its kind into its place: no id read
            // from a name (-1), no name from an id (""), no parameter left out or swapped.
            let built = format!("{:?}", r.endpoint);
            assert!(!built.contains("-1") && !built.contains("\"\""), "{built}");
            let sample = sample_path(row.template);
            for (t, s) in row.template.split('/').zip(sample.split('/')) {
                if t.starts_with('{') {
                    assert!(built.contains(s), "{s} not in {built}");
                }
            }
            if sample.split('/').any(|seg| seg == "8") {
                assert!(built.find('7') < built.find('8'), "{built}");
            }
            // The interface named by the template is the one of the endpoint the row builds.
            let named = match &r.endpoint {
                Endpoint::Enf(_) => "enforcement",
                Endpoint::Mgmt(_) => "management",
                Endpoint::Own(_) => "parasol",
                Endpoint::Console(_) => "console",
            };
            assert_eq!(r.interface_name(), named, "{r:?}");
        }
    }

    /// A path matches one template at most, and the rows of one template are adjacent (the
    /// router stops at the first row after the matched template's).
    #[test]
    fn templates_are_distinct_and_their_rows_adjacent() {
        let mut seen: Vec<&str> = Vec::new();
        for row in ROUTES {
            if seen.last() != Some(&row.template) {
                assert!(!seen.contains(&row.template), "{} is split", row.template);
                seen.push(row.template);
            }
        }
        for t in &seen {
            let segs: Vec<String> = sample_path(t)
                .split('/')
                .skip(1)
                .map(String::from)
                .collect();
            let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
            let matching: Vec<_> = ROUTES
                .iter()
                .zip(compiled())
                .filter(|(_, c)| matches(c, &segs).is_some())
                .map(|(row, _)| row.template)
                .collect();
            assert!(!matching.is_empty(), "{t} matches no row");
            assert!(
                matching.iter().all(|u| u == t),
                "{t} also matches {matching:?}"
            );
        }
        // Every template fits the segments routing reads (a longer one would be cut short).
        for (row, c) in ROUTES.iter().zip(compiled()) {
            assert_eq!(
                c.len,
                row.template.split('/').skip(1).count(),
                "{}",
                row.template
            );
        }
        let methods: std::collections::BTreeSet<_> = ROUTES
            .iter()
            .map(|r| (r.verb.as_str(), r.template))
            .collect();
        assert_eq!(methods.len(), ROUTE_KINDS, "a (method, template) twice");
    }

    /// Each `Allow` text lists the methods of its bits.
    #[test]
    fn allow_texts_name_their_bits() {
        for (bits, text) in ALLOW.iter().enumerate() {
            let mut want = Vec::new();
            for v in [Verb::Get, Verb::Post, Verb::Put, Verb::Delete] {
                if bits & v.bit() != 0 {
                    want.push(v.as_str());
                    if v == Verb::Get {
                        want.push("HEAD");
                    }
                }
            }
            assert_eq!(*text, want.join(", "));
        }
    }

    #[test]
    fn head_is_answered_wherever_get_is_and_nowhere_else() {
        assert_eq!(
            r(Method::HEAD, "/1.0/domains"),
            Ok(Endpoint::Enf(EnfEndpoint::ListDomains))
        );
        assert_eq!(
            r(Method::HEAD, "/healthz"),
            Ok(Endpoint::Own(OwnEndpoint::Healthz))
        );
        assert_eq!(
            r(Method::HEAD, "/1.0/events"),
            Err(RouteError::MethodNotAllowed(Interface::Enforcement, "POST"))
        );
        assert_eq!(
            r(
                Method::HEAD,
                "/parasol/v1/organizations/3/allowlist/x.example"
            ),
            Err(RouteError::MethodNotAllowed(
                Interface::Management,
                "DELETE"
            ))
        );
        assert_eq!(
            r(Method::OPTIONS, "/1.0/domains"),
            Err(RouteError::MethodNotAllowed(
                Interface::Enforcement,
                "GET, HEAD, DELETE"
            ))
        );
    }

    #[test]
    fn parasol_routes_are_management_routes_of_an_organization() {
        use AllowListEndpoint::*;
        let p = |org, ep| Ok(Endpoint::Mgmt(MgmtEndpoint::Parasol { org, ep }));
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
            Err(RouteError::MethodNotAllowed(m, "GET, HEAD"))
        );
        assert_eq!(
            r(Method::PUT, "/parasol/v1/organizations/3/allowlist"),
            Err(RouteError::MethodNotAllowed(m, "GET, HEAD, POST"))
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
            Err(RouteError::MethodNotAllowed(m, "GET, HEAD"))
        );
        assert_eq!(
            r(Method::PUT, "/v1/organizations/1/users/2"),
            Err(RouteError::MethodNotAllowed(m, "GET, HEAD, DELETE"))
        );
        assert_eq!(
            r(Method::POST, "/v1/organizations/1/roles"),
            Err(RouteError::MethodNotAllowed(m, "GET, HEAD"))
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
