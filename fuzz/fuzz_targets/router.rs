//! The router (`router::route`) on any method and path (input: a byte choosing the method,
//! then the path).
//!
//! Invariants: it never panics, and a routed path round-trips: the endpoint it gives, written
//! back as a path (`Route::path`: ids in decimal, names percent-encoded byte by byte), routes
//! with the same method to the same endpoint.
#![no_main]

use hyper::Method;
use libfuzzer_sys::fuzz_target;
use parasol::router::route;

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
        let again = r.path();
        assert_eq!(
            route(method, &again),
            Ok(r.clone()),
            "{path:?} routed to {r:?}, written back as {again:?}"
        );
    }
});
