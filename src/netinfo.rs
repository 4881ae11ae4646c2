//! The machine's own name and addresses, as the server needs them at start: which names its
//! self-signed certificate must carry, and which URL its ready line and the demo's `baseUrl`
//! give out when it listens on every address (`0.0.0.0` or `::`), an address no client can
//! connect to.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

/// The kernel's host name, when it has one that can stand in a URL and a certificate (a DNS
/// name: letters, digits, hyphens and dots; `localhost` is left out, being the same everywhere).
pub fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for writes of its full length, which is what is passed; on
    // success gethostname leaves a NUL-terminated name in it (truncated names are cut at the
    // buffer's end, which `split` below handles, and then refused as not a whole name).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let name = buf.split(|&b| b == 0).next()?;
    let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
    (is_dns_name(&name) && name != "localhost" && !name.ends_with(".localhost")).then_some(name)
}

/// True for a DNS name as certificates and URLs carry it.
fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            (1..=63).contains(&l.len())
                && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
        // An all-digit last label reads as an IPv4 address.
        && !name.rsplit('.').next().is_some_and(|l| l.bytes().all(|c| c.is_ascii_digit()))
}

/// The addresses of the machine's network interfaces (loopback included), from getifaddrs.
/// Link-local addresses are left out: a URL or a certificate cannot use them without the
/// interface they belong to. Empty if the interfaces cannot be read.
pub fn interface_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a pointer to a list it allocated into `list`, or fails and
    // writes nothing; the list is freed below with freeifaddrs, once.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        log::warn!(
            "cannot list the network interfaces: {}",
            std::io::Error::last_os_error()
        );
        return out;
    }
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is a non-null node of the list getifaddrs made, not yet freed.
        let entry = unsafe { &*at };
        if let Some(ip) = socket_ip(entry.ifa_addr) {
            if !is_link_local(ip) && !out.contains(&ip) {
                out.push(ip);
            }
        }
        at = entry.ifa_next;
    }
    // SAFETY: `list` came from a successful getifaddrs and is freed once; no reference into it
    // outlives this call (the addresses were copied out).
    unsafe { libc::freeifaddrs(list) };
    out
}

/// The IP address in a socket address of the interface list, if it is IPv4 or IPv6.
fn socket_ip(addr: *const libc::sockaddr) -> Option<IpAddr> {
    if addr.is_null() {
        return None;
    }
    // SAFETY: a non-null `ifa_addr` points to a socket address whose `sa_family` says its real
    // type; it is read as `sockaddr_in`/`sockaddr_in6` only when the family says so, and those
    // are the layouts the kernel fills for AF_INET/AF_INET6.
    unsafe {
        match i32::from((*addr).sa_family) {
            libc::AF_INET => {
                let sin = &*addr.cast::<libc::sockaddr_in>();
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))))
            }
            libc::AF_INET6 => {
                let sin6 = &*addr.cast::<libc::sockaddr_in6>();
                Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// The addresses a listener on `listen` accepts connections on: `listen` itself, or for an
/// unspecified address every interface address of its family (of both families for `::`,
/// which Linux opens to IPv4 too).
pub fn served_addresses(listen: IpAddr, interfaces: &[IpAddr]) -> Vec<IpAddr> {
    match listen {
        IpAddr::V4(v4) if v4.is_unspecified() => {
            interfaces.iter().copied().filter(IpAddr::is_ipv4).collect()
        }
        IpAddr::V6(v6) if v6.is_unspecified() => interfaces.to_vec(),
        ip => vec![ip],
    }
}

/// True if `name` resolves to at least one address (through the system's resolver: the hosts
/// file, then DNS).
pub fn resolves(name: &str) -> bool {
    (name, 0)
        .to_socket_addrs()
        .is_ok_and(|mut a| a.next().is_some())
}

/// The host (and port) to put in the URL the server announces, for a listener bound to
/// `listen`.
///
/// A specific address is announced as it is. For `0.0.0.0` or `::`, which no client can connect
/// to, the machine's host name is announced when it resolves: it is what people and certificates
/// use for a machine, it stays right when an interface's address changes, and the self-signed
/// certificate names it. Otherwise the first non-loopback interface address the listener
/// serves is announced (other machines can reach it; IPv4 first, as every client has it), and
/// only when there is none, loopback.
pub fn advertised(listen: SocketAddr) -> String {
    if !listen.ip().is_unspecified() {
        return listen.to_string();
    }
    let name = host_name().filter(|n| resolves(n));
    choose(listen, name.as_deref(), &interface_addresses())
}

/// [`advertised`] with the host name (already known to resolve) and the interfaces given.
pub fn choose(listen: SocketAddr, resolving_name: Option<&str>, interfaces: &[IpAddr]) -> String {
    let port = listen.port();
    if !listen.ip().is_unspecified() {
        return listen.to_string();
    }
    if let Some(name) = resolving_name {
        return format!("{name}:{port}");
    }
    let served = served_addresses(listen.ip(), interfaces);
    let pick = served
        .iter()
        .filter(|ip| !ip.is_loopback())
        .min_by_key(|ip| ip.is_ipv6())
        .copied()
        .unwrap_or(match listen.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        });
    SocketAddr::new(pick, port).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn a_specific_address_is_announced_as_is() {
        for listen in ["127.0.0.1:8443", "198.51.100.7:1", "[::1]:8443"] {
            let l: SocketAddr = listen.parse().unwrap();
            assert_eq!(choose(l, Some("host"), &[]), listen);
            assert_eq!(advertised(l), listen);
        }
    }

    #[test]
    fn every_address_is_announced_by_name_else_by_an_interface() {
        let any4: SocketAddr = "0.0.0.0:8443".parse().unwrap();
        let any6: SocketAddr = "[::]:8443".parse().unwrap();
        let nics = ips(&["127.0.0.1", "::1", "2001:db8::5", "198.51.100.7"]);
        assert_eq!(choose(any4, Some("parasol.lab"), &nics), "parasol.lab:8443");
        assert_eq!(choose(any4, None, &nics), "198.51.100.7:8443");
        assert_eq!(choose(any6, None, &nics), "198.51.100.7:8443");
        assert_eq!(
            choose(any6, None, &ips(&["::1", "2001:db8::5"])),
            "[2001:db8::5]:8443"
        );
        // Only IPv6 beside loopback: a 0.0.0.0 listener does not serve it.
        assert_eq!(
            choose(any4, None, &ips(&["127.0.0.1", "2001:db8::5"])),
            "127.0.0.1:8443"
        );
        assert_eq!(choose(any6, None, &[]), "[::1]:8443");
        assert!(!advertised(any4).starts_with("0.0.0.0"));
    }

    #[test]
    fn served_addresses_follow_the_family() {
        let nics = ips(&["127.0.0.1", "::1", "198.51.100.7", "2001:db8::5"]);
        assert_eq!(
            served_addresses("0.0.0.0".parse().unwrap(), &nics),
            ips(&["127.0.0.1", "198.51.100.7"])
        );
        assert_eq!(served_addresses("::".parse().unwrap(), &nics), nics);
        assert_eq!(
            served_addresses("198.51.100.7".parse().unwrap(), &nics),
            ips(&["198.51.100.7"])
        );
    }

    #[test]
    fn interfaces_include_loopback_and_no_link_local() {
        let nics = interface_addresses();
        assert!(nics.contains(&"127.0.0.1".parse().unwrap()), "{nics:?}");
        assert!(nics.iter().all(|ip| !is_link_local(*ip)), "{nics:?}");
        assert!(is_link_local("fe80::1".parse().unwrap()));
        assert!(is_link_local("169.254.1.1".parse().unwrap()));
        assert!(!is_link_local("fec0::1".parse().unwrap()));
    }

    #[test]
    fn host_names() {
        for ok in ["vm", "parasol.lab", "a-1.example"] {
            assert!(is_dns_name(ok), "{ok}");
        }
        for bad in ["", "a_b", "-a", "a..b", "1.2.3.4", "host.123", "h\u{e9}"] {
            assert!(!is_dns_name(bad), "{bad}");
        }
        if let Some(n) = host_name() {
            assert!(is_dns_name(&n));
        }
    }
}
