//! The router: (method, path) -> a typed endpoint, with no I/O. Paths under `/1.0/` belong to the
//! enforcement interface, paths under `/v1/` to the management interface; anything else is a 404
//! in the enforcement error shape.

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

/// Endpoints of the management interface; ids as in the spec's paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MgmtEndpoint {
    GetServiceProvider { sp: i64 },
    CreateCustomer { sp: i64 },
    ListCustomers { sp: i64 },
    GetCustomer { sp: i64, customer: i64 },
    UpdateCustomer { sp: i64, customer: i64 },
    DeleteCustomer { sp: i64, customer: i64 },
    CreateMspCustomer { msp: i64 },
    ListMspCustomers { msp: i64 },
    GetMspCustomer { msp: i64, customer: i64 },
    UpdateMspCustomer { msp: i64, customer: i64 },
    DeleteMspCustomer { msp: i64, customer: i64 },
    ListNetworks { org: i64 },
    GetNetwork { org: i64, id: i64 },
    DeleteNetwork { org: i64, id: i64 },
    ListRoamingComputers { org: i64 },
    GetRoamingComputer { org: i64, device: String },
    UpdateRoamingComputer { org: i64, device: String },
    DeleteRoamingComputer { org: i64, device: String },
    CreateInternalNetwork { org: i64 },
    ListInternalNetworks { org: i64 },
    GetInternalNetwork { org: i64, id: i64 },
    UpdateInternalNetwork { org: i64, id: i64 },
    DeleteInternalNetwork { org: i64, id: i64 },
    ListVirtualAppliances { org: i64 },
    GetVirtualAppliance { org: i64, id: i64 },
    UpdateVirtualAppliance { org: i64, id: i64 },
    DeleteVirtualAppliance { org: i64, id: i64 },
    CreateSite { org: i64 },
    ListSites { org: i64 },
    GetSite { org: i64, id: i64 },
    UpdateSite { org: i64, id: i64 },
    DeleteSite { org: i64, id: i64 },
    CreateUser { org: i64 },
    ListUsers { org: i64 },
    GetUser { org: i64, id: i64 },
    DeleteUser { org: i64, id: i64 },
    ListRoles { org: i64 },
}

/// Why a request has no endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    NotFound(Interface),
    /// The path exists; these methods are allowed on it.
    MethodNotAllowed(Interface, &'static str),
}

/// Most segments of a routed path (`/v1/organizations/{org}/internalnetworks/{id}`).
const MAX_SEGMENTS: usize = 5;

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
    const GET_POST: &str = "GET, POST";
    const ITEM_RW: &str = "GET, PUT, DELETE";
    const ITEM_RD: &str = "GET, DELETE";
    match segs {
        ["serviceproviders", sp] => {
            let sp = id(sp)?;
            pick(m, method, "GET", [(Method::GET, GetServiceProvider { sp })])
        }
        ["serviceproviders", sp, "customers"] => {
            let sp = id(sp)?;
            pick(
                m,
                method,
                GET_POST,
                [
                    (Method::GET, ListCustomers { sp }),
                    (Method::POST, CreateCustomer { sp }),
                ],
            )
        }
        ["serviceproviders", sp, "customers", c] => {
            let (sp, customer) = (id(sp)?, id(c)?);
            pick(
                m,
                method,
                ITEM_RW,
                [
                    (Method::GET, GetCustomer { sp, customer }),
                    (Method::PUT, UpdateCustomer { sp, customer }),
                    (Method::DELETE, DeleteCustomer { sp, customer }),
                ],
            )
        }
        ["msps", msp, "customers"] => {
            let msp = id(msp)?;
            pick(
                m,
                method,
                GET_POST,
                [
                    (Method::GET, ListMspCustomers { msp }),
                    (Method::POST, CreateMspCustomer { msp }),
                ],
            )
        }
        ["msps", msp, "customers", c] => {
            let (msp, customer) = (id(msp)?, id(c)?);
            pick(
                m,
                method,
                ITEM_RW,
                [
                    (Method::GET, GetMspCustomer { msp, customer }),
                    (Method::PUT, UpdateMspCustomer { msp, customer }),
                    (Method::DELETE, DeleteMspCustomer { msp, customer }),
                ],
            )
        }
        ["organizations", org, kind] => {
            let org = id(org)?;
            match *kind {
                "networks" => pick(m, method, "GET", [(Method::GET, ListNetworks { org })]),
                "roamingcomputers" => pick(
                    m,
                    method,
                    "GET",
                    [(Method::GET, ListRoamingComputers { org })],
                ),
                "internalnetworks" => pick(
                    m,
                    method,
                    GET_POST,
                    [
                        (Method::GET, ListInternalNetworks { org }),
                        (Method::POST, CreateInternalNetwork { org }),
                    ],
                ),
                "virtualappliances" => pick(
                    m,
                    method,
                    "GET",
                    [(Method::GET, ListVirtualAppliances { org })],
                ),
                "sites" => pick(
                    m,
                    method,
                    GET_POST,
                    [
                        (Method::GET, ListSites { org }),
                        (Method::POST, CreateSite { org }),
                    ],
                ),
                "users" => pick(
                    m,
                    method,
                    GET_POST,
                    [
                        (Method::GET, ListUsers { org }),
                        (Method::POST, CreateUser { org }),
                    ],
                ),
                "roles" => pick(m, method, "GET", [(Method::GET, ListRoles { org })]),
                _ => Err(nf()),
            }
        }
        ["organizations", org, "roamingcomputers", dev] => {
            let org = id(org)?;
            let device = percent_decode(dev)
                .filter(|d| !d.is_empty())
                .ok_or_else(nf)?;
            pick(
                m,
                method,
                ITEM_RW,
                [
                    (
                        Method::GET,
                        GetRoamingComputer {
                            org,
                            device: device.clone(),
                        },
                    ),
                    (
                        Method::PUT,
                        UpdateRoamingComputer {
                            org,
                            device: device.clone(),
                        },
                    ),
                    (Method::DELETE, DeleteRoamingComputer { org, device }),
                ],
            )
        }
        ["organizations", org, kind, item] => {
            let (org, id) = (id(org)?, id(item)?);
            match *kind {
                "networks" => pick(
                    m,
                    method,
                    ITEM_RD,
                    [
                        (Method::GET, GetNetwork { org, id }),
                        (Method::DELETE, DeleteNetwork { org, id }),
                    ],
                ),
                "internalnetworks" => pick(
                    m,
                    method,
                    ITEM_RW,
                    [
                        (Method::GET, GetInternalNetwork { org, id }),
                        (Method::PUT, UpdateInternalNetwork { org, id }),
                        (Method::DELETE, DeleteInternalNetwork { org, id }),
                    ],
                ),
                "virtualappliances" => pick(
                    m,
                    method,
                    ITEM_RW,
                    [
                        (Method::GET, GetVirtualAppliance { org, id }),
                        (Method::PUT, UpdateVirtualAppliance { org, id }),
                        (Method::DELETE, DeleteVirtualAppliance { org, id }),
                    ],
                ),
                "sites" => pick(
                    m,
                    method,
                    ITEM_RW,
                    [
                        (Method::GET, GetSite { org, id }),
                        (Method::PUT, UpdateSite { org, id }),
                        (Method::DELETE, DeleteSite { org, id }),
                    ],
                ),
                "users" => pick(
                    m,
                    method,
                    ITEM_RD,
                    [
                        (Method::GET, GetUser { org, id }),
                        (Method::DELETE, DeleteUser { org, id }),
                    ],
                ),
                _ => Err(nf()),
            }
        }
        _ => Err(nf()),
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
    fn management_routes_cover_the_37_endpoints() {
        use MgmtEndpoint::*;
        let cases: Vec<(Method, &str, MgmtEndpoint)> = vec![
            (
                Method::GET,
                "/v1/serviceproviders/1",
                GetServiceProvider { sp: 1 },
            ),
            (
                Method::POST,
                "/v1/serviceproviders/1/customers",
                CreateCustomer { sp: 1 },
            ),
            (
                Method::GET,
                "/v1/serviceproviders/1/customers",
                ListCustomers { sp: 1 },
            ),
            (
                Method::GET,
                "/v1/serviceproviders/1/customers/2",
                GetCustomer { sp: 1, customer: 2 },
            ),
            (
                Method::PUT,
                "/v1/serviceproviders/1/customers/2",
                UpdateCustomer { sp: 1, customer: 2 },
            ),
            (
                Method::DELETE,
                "/v1/serviceproviders/1/customers/2",
                DeleteCustomer { sp: 1, customer: 2 },
            ),
            (
                Method::POST,
                "/v1/msps/3/customers",
                CreateMspCustomer { msp: 3 },
            ),
            (
                Method::GET,
                "/v1/msps/3/customers",
                ListMspCustomers { msp: 3 },
            ),
            (
                Method::GET,
                "/v1/msps/3/customers/4",
                GetMspCustomer {
                    msp: 3,
                    customer: 4,
                },
            ),
            (
                Method::PUT,
                "/v1/msps/3/customers/4",
                UpdateMspCustomer {
                    msp: 3,
                    customer: 4,
                },
            ),
            (
                Method::DELETE,
                "/v1/msps/3/customers/4",
                DeleteMspCustomer {
                    msp: 3,
                    customer: 4,
                },
            ),
            (
                Method::GET,
                "/v1/organizations/5/networks",
                ListNetworks { org: 5 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/networks/6",
                GetNetwork { org: 5, id: 6 },
            ),
            (
                Method::DELETE,
                "/v1/organizations/5/networks/6",
                DeleteNetwork { org: 5, id: 6 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/roamingcomputers",
                ListRoamingComputers { org: 5 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/roamingcomputers/ab12",
                GetRoamingComputer {
                    org: 5,
                    device: "ab12".into(),
                },
            ),
            (
                Method::PUT,
                "/v1/organizations/5/roamingcomputers/ab12",
                UpdateRoamingComputer {
                    org: 5,
                    device: "ab12".into(),
                },
            ),
            (
                Method::DELETE,
                "/v1/organizations/5/roamingcomputers/ab12",
                DeleteRoamingComputer {
                    org: 5,
                    device: "ab12".into(),
                },
            ),
            (
                Method::POST,
                "/v1/organizations/5/internalnetworks",
                CreateInternalNetwork { org: 5 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/internalnetworks",
                ListInternalNetworks { org: 5 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/internalnetworks/7",
                GetInternalNetwork { org: 5, id: 7 },
            ),
            (
                Method::PUT,
                "/v1/organizations/5/internalnetworks/7",
                UpdateInternalNetwork { org: 5, id: 7 },
            ),
            (
                Method::DELETE,
                "/v1/organizations/5/internalnetworks/7",
                DeleteInternalNetwork { org: 5, id: 7 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/virtualappliances",
                ListVirtualAppliances { org: 5 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/virtualappliances/8",
                GetVirtualAppliance { org: 5, id: 8 },
            ),
            (
                Method::PUT,
                "/v1/organizations/5/virtualappliances/8",
                UpdateVirtualAppliance { org: 5, id: 8 },
            ),
            (
                Method::DELETE,
                "/v1/organizations/5/virtualappliances/8",
                DeleteVirtualAppliance { org: 5, id: 8 },
            ),
            (
                Method::POST,
                "/v1/organizations/5/sites",
                CreateSite { org: 5 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/sites",
                ListSites { org: 5 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/sites/9",
                GetSite { org: 5, id: 9 },
            ),
            (
                Method::PUT,
                "/v1/organizations/5/sites/9",
                UpdateSite { org: 5, id: 9 },
            ),
            (
                Method::DELETE,
                "/v1/organizations/5/sites/9",
                DeleteSite { org: 5, id: 9 },
            ),
            (
                Method::POST,
                "/v1/organizations/5/users",
                CreateUser { org: 5 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/users",
                ListUsers { org: 5 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/users/10",
                GetUser { org: 5, id: 10 },
            ),
            (
                Method::DELETE,
                "/v1/organizations/5/users/10",
                DeleteUser { org: 5, id: 10 },
            ),
            (
                Method::GET,
                "/v1/organizations/5/roles",
                ListRoles { org: 5 },
            ),
        ];
        assert_eq!(cases.len(), 37);
        for (m, p, e) in cases {
            assert_eq!(route(&m, p), Ok(Route::Mgmt(e)), "{m} {p}");
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
