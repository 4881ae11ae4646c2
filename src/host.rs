//! The request's `Host` header: checked once per request by the server (a malformed one is a
//! 400 in the interface's own error shape), and the only host that absolute links (`meta.next`,
//! `meta.prev`) are built from.
//!
//! A valid Host is a DNS name (labels of letters, digits and hyphens, 1 to 63 characters, not
//! starting or ending with a hyphen, at most 253 characters, one trailing dot allowed), an IPv4
//! address in dotted decimal, or an IPv6 address in brackets, each optionally followed by `:`
//! and a port from 1 to 65535 (decimal digits only). A name whose last label is all digits must
//! be an IPv4 address (`10.1.2` is neither). Anything else is malformed: an empty value, a bad
//! or empty port, unbalanced brackets, characters outside a host name, a Host header sent twice.
//! A request without any Host header (HTTP/1.0) is not refused; its links use the listener's
//! own address.

use std::borrow::Cow;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use hyper::header::HOST;
use hyper::HeaderMap;

/// Why a Host header is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostError {
    /// The header is empty.
    Empty,
    /// More than one Host header.
    Repeated,
    /// A port that is empty, not decimal digits, or outside 1..65535.
    Port,
    /// `[` without `]` or the other way round, or text after `]` other than a port.
    Brackets,
    /// Not a DNS name, an IPv4 address or a bracketed IPv6 address.
    Name,
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HostError::Empty => "Invalid Host header: empty",
            HostError::Repeated => "Invalid Host header: sent more than once",
            HostError::Port => "Invalid Host header: the port must be a number from 1 to 65535",
            HostError::Brackets => "Invalid Host header: unbalanced brackets",
            HostError::Name => "Invalid Host header: not a host name or IP address",
        })
    }
}

/// The request's Host: `Ok(None)` when there is none, the value when it is valid.
pub fn request_host(headers: &HeaderMap) -> Result<Option<&str>, HostError> {
    let mut values = headers.get_all(HOST).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(HostError::Repeated);
    }
    parse(value.as_bytes()).map(Some)
}

/// Checks one Host value; gives it back as text when valid.
pub fn parse(value: &[u8]) -> Result<&str, HostError> {
    if value.is_empty() {
        return Err(HostError::Empty);
    }
    // Anything outside ASCII is outside a host name (and a HeaderValue may hold such bytes).
    let text = std::str::from_utf8(value).map_err(|_| HostError::Name)?;
    if !text.is_ascii() {
        return Err(HostError::Name);
    }
    let port = if let Some(rest) = text.strip_prefix('[') {
        let Some(end) = rest.find(']') else {
            return Err(HostError::Brackets);
        };
        let inside = &rest[..end];
        if inside.parse::<Ipv6Addr>().is_err() {
            return Err(if inside.contains(['[', ']']) {
                HostError::Brackets
            } else {
                HostError::Name
            });
        }
        match &rest[end + 1..] {
            "" => None,
            after => Some(after.strip_prefix(':').ok_or(HostError::Brackets)?),
        }
    } else {
        // One pass over the bytes for the brackets and colons (a Host is checked on every
        // request): a bracket anywhere is unbalanced here; a second colon is an IPv6 address
        // without its brackets, or garbage.
        let mut colons = 0usize;
        let mut first_colon = text.len();
        for (i, c) in text.bytes().enumerate() {
            match c {
                b'[' | b']' => return Err(HostError::Brackets),
                b':' => {
                    if colons == 0 {
                        first_colon = i;
                    }
                    colons += 1;
                }
                _ => {}
            }
        }
        let host = &text[..first_colon];
        if colons > 1 || !is_name_or_ipv4(host) {
            return Err(HostError::Name);
        }
        (colons == 1).then(|| &text[first_colon + 1..])
    };
    if let Some(port) = port {
        let ok = !port.is_empty()
            && port.len() <= 5
            && port.bytes().all(|c| c.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p != 0);
        if !ok {
            return Err(HostError::Port);
        }
    }
    Ok(text)
}

/// A DNS name or an IPv4 address (a name ending in an all-digit label must be the latter).
fn is_name_or_ipv4(host: &str) -> bool {
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    let mut last = "";
    for label in name.split('.') {
        let b = label.as_bytes();
        let ok = (1..=63).contains(&b.len())
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-';
        if !ok {
            return false;
        }
        last = label;
    }
    !last.bytes().all(|c| c.is_ascii_digit()) || host.parse::<Ipv4Addr>().is_ok()
}

/// The scheme and authority that absolute links start with, without a trailing slash: the
/// request's Host when it is valid, else (no Host, or one that `parse` refuses) the listener's
/// address, `fallback`.
pub fn base_url(scheme: &str, headers: &HeaderMap, fallback: SocketAddr) -> String {
    let host: Cow<'_, str> = match request_host(headers) {
        Ok(Some(h)) => Cow::Borrowed(h),
        _ => Cow::Owned(fallback.to_string()),
    };
    format!("{scheme}://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;
    use proptest::prelude::*;

    #[test]
    fn valid_hosts() {
        for h in [
            "example.com",
            "Example.COM.",
            "parasol",
            "a-b.c-d.example:8443",
            "xn--bcher-kva.test:1",
            "127.0.0.1",
            "192.0.2.1:65535",
            "[::1]",
            "[::1]:8443",
            "[2001:db8::a:b]:443",
            "[::ffff:192.0.2.1]",
            "1x.example",
            &format!("{}.example", "a".repeat(63)),
        ] {
            assert_eq!(parse(h.as_bytes()), Ok(h), "{h}");
        }
    }

    #[test]
    fn malformed_hosts() {
        let long = format!("{}.example", "a.".repeat(125));
        for (h, why) in [
            ("", HostError::Empty),
            ("x:99999999999", HostError::Port),
            ("x:", HostError::Port),
            ("x:abc", HostError::Port),
            ("x:0", HostError::Port),
            ("x:65536", HostError::Port),
            ("x:+80", HostError::Port),
            ("x: 80", HostError::Port),
            ("[::1]:", HostError::Port),
            ("[::1]:x", HostError::Port),
            ("[::1", HostError::Brackets),
            ("::1]", HostError::Brackets),
            ("[::1]x", HostError::Brackets),
            ("[[::1]]", HostError::Brackets),
            ("x]", HostError::Brackets),
            // A bracket anywhere outranks the colons before it.
            ("x:80]", HostError::Brackets),
            ("a:b:[", HostError::Brackets),
            ("[example.com]", HostError::Name),
            ("[1.2.3.4]", HostError::Name),
            ("[fe80::1%25eth0]", HostError::Name),
            ("::1", HostError::Name),
            ("1:2:3", HostError::Name),
            ("a b", HostError::Name),
            ("a_b.example", HostError::Name),
            ("a/b", HostError::Name),
            ("user@example.com", HostError::Name),
            ("a..b", HostError::Name),
            (".a", HostError::Name),
            ("a..", HostError::Name),
            ("-a.example", HostError::Name),
            ("a-.example", HostError::Name),
            ("10.1.2", HostError::Name),
            ("256.1.1.1", HostError::Name),
            ("b\u{fc}cher.test", HostError::Name),
            (&format!("{}.example", "a".repeat(64)), HostError::Name),
            (&long, HostError::Name),
            (":80", HostError::Name),
        ] {
            assert_eq!(parse(h.as_bytes()), Err(why), "{h:?}");
        }
        assert_eq!(parse(b"a\xffb"), Err(HostError::Name));
    }

    #[test]
    fn header_presence() {
        let mut h = HeaderMap::new();
        assert_eq!(request_host(&h), Ok(None));
        h.insert(HOST, HeaderValue::from_static("a.example:1"));
        assert_eq!(request_host(&h), Ok(Some("a.example:1")));
        h.append(HOST, HeaderValue::from_static("a.example:1"));
        assert_eq!(request_host(&h), Err(HostError::Repeated));
    }

    #[test]
    fn links_use_only_a_valid_host() {
        let fallback: SocketAddr = "192.0.2.7:8443".parse().unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(base_url("https", &h, fallback), "https://192.0.2.7:8443");
        h.insert(HOST, HeaderValue::from_static("[::1]:9"));
        assert_eq!(base_url("https", &h, fallback), "https://[::1]:9");
        h.insert(HOST, HeaderValue::from_static("evil.example/x?"));
        assert_eq!(base_url("http", &h, fallback), "http://192.0.2.7:8443");
    }

    /// A link built on an accepted host parses as an absolute URL whose authority is that host.
    fn link_round_trips(host: &str) {
        let mut h = HeaderMap::new();
        let Ok(value) = HeaderValue::from_str(host) else {
            return;
        };
        h.insert(HOST, value);
        if request_host(&h).is_err() {
            return;
        }
        let url = format!(
            "{}/1.0/domains?customerKey=k&page=2&limit=200",
            base_url("https", &h, "127.0.0.1:1".parse().unwrap())
        );
        let uri: hyper::Uri = url.parse().unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(uri.scheme_str(), Some("https"));
        assert_eq!(uri.authority().map(|a| a.as_str()), Some(host), "{url}");
        assert_eq!(uri.path(), "/1.0/domains");
        assert_eq!(uri.query(), Some("customerKey=k&page=2&limit=200"));
    }

    proptest! {
        #[test]
        fn accepted_hosts_make_well_formed_links(
            host in "(\\[[0-9a-f:.]{0,12}\\]|[a-zA-Z0-9.:_\\-\\[\\]]{0,24})(:[0-9]{0,6})?"
        ) {
            link_round_trips(&host);
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse(&bytes);
        }
    }
}
