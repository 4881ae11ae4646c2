//! The router (`router::route`) on any method and path (input: a byte choosing the method,
//! then the path).
//!
//! Invariants: it never panics, and a routed path round-trips: the endpoint it gives, written
//! back as a path (ids in decimal, names percent-encoded byte by byte), routes with the same
//! method to the same endpoint.
#![no_main]

use hyper::Method;
use libfuzzer_sys::fuzz_target;
use parasol::router::{route, EnfEndpoint, MgmtEndpoint, Route};

/// Every byte as `%XX`: decodes back to the same text and never reads as an id or a separator.
fn enc(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

fn path_of(r: &Route) -> String {
    use EnfEndpoint::*;
    use MgmtEndpoint::*;
    match r {
        Route::Enf(e) => match e {
            PostEvents => "/1.0/events".into(),
            ListDomains | DeleteDomainsWhere => "/1.0/domains".into(),
            // An id too large for i64 is routed as -1.
            DeleteDomainById(-1) => format!("/1.0/domains/{}", "9".repeat(20)),
            DeleteDomainById(id) => format!("/1.0/domains/{id}"),
            DeleteDomainByName(name) => format!("/1.0/domains/{}", enc(name)),
        },
        Route::Mgmt(m) => match m {
            GetServiceProvider { sp } => format!("/v1/serviceproviders/{sp}"),
            CreateCustomer { sp } | ListCustomers { sp } => {
                format!("/v1/serviceproviders/{sp}/customers")
            }
            GetCustomer { sp, customer }
            | UpdateCustomer { sp, customer }
            | DeleteCustomer { sp, customer } => {
                format!("/v1/serviceproviders/{sp}/customers/{customer}")
            }
            CreateMspCustomer { msp } | ListMspCustomers { msp } => {
                format!("/v1/msps/{msp}/customers")
            }
            GetMspCustomer { msp, customer }
            | UpdateMspCustomer { msp, customer }
            | DeleteMspCustomer { msp, customer } => {
                format!("/v1/msps/{msp}/customers/{customer}")
            }
            ListNetworks { org } => format!("/v1/organizations/{org}/networks"),
            GetNetwork { org, id } | DeleteNetwork { org, id } => {
                format!("/v1/organizations/{org}/networks/{id}")
            }
            ListRoamingComputers { org } => format!("/v1/organizations/{org}/roamingcomputers"),
            GetRoamingComputer { org, device }
            | UpdateRoamingComputer { org, device }
            | DeleteRoamingComputer { org, device } => {
                format!("/v1/organizations/{org}/roamingcomputers/{}", enc(device))
            }
            CreateInternalNetwork { org } | ListInternalNetworks { org } => {
                format!("/v1/organizations/{org}/internalnetworks")
            }
            GetInternalNetwork { org, id }
            | UpdateInternalNetwork { org, id }
            | DeleteInternalNetwork { org, id } => {
                format!("/v1/organizations/{org}/internalnetworks/{id}")
            }
            ListVirtualAppliances { org } => format!("/v1/organizations/{org}/virtualappliances"),
            GetVirtualAppliance { org, id }
            | UpdateVirtualAppliance { org, id }
            | DeleteVirtualAppliance { org, id } => {
                format!("/v1/organizations/{org}/virtualappliances/{id}")
            }
            CreateSite { org } | ListSites { org } => format!("/v1/organizations/{org}/sites"),
            GetSite { org, id } | UpdateSite { org, id } | DeleteSite { org, id } => {
                format!("/v1/organizations/{org}/sites/{id}")
            }
            CreateUser { org } | ListUsers { org } => format!("/v1/organizations/{org}/users"),
            GetUser { org, id } | DeleteUser { org, id } => {
                format!("/v1/organizations/{org}/users/{id}")
            }
            ListRoles { org } => format!("/v1/organizations/{org}/roles"),
        },
    }
}

const METHODS: [Method; 6] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::HEAD,
];

fuzz_target!(|input: &[u8]| {
    // The first byte picks the method, the rest is the path.
    let Some((&m, path)) = input.split_first() else {
        return;
    };
    let Ok(path) = std::str::from_utf8(path) else {
        return;
    };
    let method = &METHODS[m as usize % METHODS.len()];
    if let Ok(r) = route(method, path) {
        let again = path_of(&r);
        assert_eq!(
            route(method, &again),
            Ok(r.clone()),
            "{path:?} routed to {r:?}, written back as {again:?}"
        );
    }
});
