//! The self-signed certificate, through the real server: what it names and how long it lasts,
//! that clients verify it on every address the server listens on, that one made for another
//! address or about to expire is replaced on start (saying why), that its key file stays
//! private, and that certificate files given with `--tls-cert`/`--tls-key` are never touched.
//!
//! The test of a server listening on every address runs in a network namespace of its own
//! (made with unshare and iproute2, as root), whose one non-loopback interface holds
//! 198.51.100.7: connections to it never leave the machine.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// The address of the private network's interface.
const PRIVATE_IP: &str = "198.51.100.7";

// ---- A small DER reader: enough of X.509 to read a certificate's validity and subject. ----

/// Splits one DER element off `b`: its tag, its contents and what follows it.
fn tlv(b: &[u8]) -> (u8, &[u8], &[u8]) {
    let tag = b[0];
    let (len, head) = if b[1] < 0x80 {
        (b[1] as usize, 2)
    } else {
        let n = (b[1] & 0x7f) as usize;
        let len = b[2..2 + n]
            .iter()
            .fold(0usize, |acc, &x| acc << 8 | x as usize);
        (len, 2 + n)
    };
    (tag, &b[head..head + len], &b[head + len..])
}

/// A UTCTime or GeneralizedTime as seconds since the epoch.
fn der_time(tag: u8, v: &[u8]) -> i64 {
    let s = std::str::from_utf8(v).unwrap();
    let full = match tag {
        0x17 => {
            let yy: i64 = s[..2].parse().unwrap();
            format!("{}{s}", if yy < 50 { "20" } else { "19" })
        }
        0x18 => s.to_string(),
        t => panic!("not a time: tag {t:#x}"),
    };
    let f = |a: usize, b: usize| &full[a..b];
    let rfc = format!(
        "{}-{}-{}T{}:{}:{}Z",
        f(0, 4),
        f(4, 6),
        f(6, 8),
        f(8, 10),
        f(10, 12),
        f(12, 14)
    );
    parasol::timefmt::parse_rfc3339(&rfc).unwrap()
}

/// What the tests read of a certificate.
struct CertInfo {
    not_before: i64,
    not_after: i64,
    /// (attribute OID bytes, value) of the subject.
    subject: Vec<(Vec<u8>, String)>,
}

fn read_cert(der: &[u8]) -> CertInfo {
    let (_, cert, _) = tlv(der);
    let (_, tbs, _) = tlv(cert);
    let mut rest = tbs;
    // [0] version, then the serial number and the signature algorithm.
    if rest[0] == 0xa0 {
        rest = tlv(rest).2;
    }
    rest = tlv(rest).2;
    rest = tlv(rest).2;
    let (_, _issuer, after) = tlv(rest);
    let (_, validity, after) = tlv(after);
    let (t1, v1, more) = tlv(validity);
    let (t2, v2, _) = tlv(more);
    let (_, subject, _) = tlv(after);
    let mut attrs = Vec::new();
    let mut sets = subject;
    while !sets.is_empty() {
        let (_, set, next) = tlv(sets);
        let (_, pair, _) = tlv(set);
        let (_, oid, value) = tlv(pair);
        let (_, text, _) = tlv(value);
        attrs.push((oid.to_vec(), String::from_utf8(text.to_vec()).unwrap()));
        sets = next;
    }
    CertInfo {
        not_before: der_time(t1, v1),
        not_after: der_time(t2, v2),
        subject: attrs,
    }
}

const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];

fn first_cert(path: &Path) -> CertificateDer<'static> {
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The kernel's host name, as the server reads it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_ascii_lowercase()
}

/// A GET over TLS to `addr`, verifying the certificate at `cert` for `name`; the status.
async fn status_via(addr: SocketAddr, name: ServerName<'static>, cert: &Path) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(first_cert(cert)).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::time::timeout(WAIT, tokio::net::TcpStream::connect(addr))
        .await
        .expect("connect in time")
        .expect("connect");
    let mut tls = tokio::time::timeout(
        WAIT,
        tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name.clone(), tcp),
    )
    .await
    .expect("handshake in time")
    .unwrap_or_else(|e| panic!("the certificate verifies for {name:?} at {addr}: {e}"));
    tls.write_all(b"GET /1.0/domains HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, tls.read_to_end(&mut out))
        .await
        .expect("answer in time")
        .ok();
    let text = String::from_utf8_lossy(&out);
    text.split(' ').nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_self_signed_certificate_is_realistic() {
    let s = TestServer::start().await;
    let cert = s.dir.path().join("tls/cert.pem");
    let info = read_cert(&first_cert(&cert));
    let now = now();
    assert!(
        info.not_after - info.not_before <= 825 * 86_400,
        "valid for {} days",
        (info.not_after - info.not_before) / 86_400
    );
    assert!(info.not_after - now > 800 * 86_400);
    assert!(info.not_before <= now && info.not_before >= now - 3600);
    let attr = |oid: &[u8]| {
        info.subject
            .iter()
            .find(|(o, _)| o == oid)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(attr(OID_O).as_deref(), Some("Parasol"));
    let host = host_name();
    assert_eq!(attr(OID_CN).as_deref(), Some(host.as_str()));
    // Verified by name and by each loopback address (the server listens on 127.0.0.1).
    let addr = s.client.addr;
    for name in [host.as_str(), "localhost"] {
        let name = ServerName::try_from(name.to_string()).unwrap();
        assert_eq!(status_via(addr, name, &cert).await, 403);
    }
    let ip = ServerName::IpAddress(addr.ip().into());
    assert_eq!(status_via(addr, ip, &cert).await, 403);
    let key = s.dir.path().join("tls/key.pem");
    assert_eq!(mode(&key), 0o600);
}

/// Moves the calling thread (and the processes and threads it starts) into a new network
/// namespace with loopback and a veth pair, one end holding `PRIVATE_IP`.
fn enter_private_network() {
    // SAFETY: unshare with CLONE_NEWNET changes only the calling thread's network namespace.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "unshare(CLONE_NEWNET): {} (this test runs as root)",
        std::io::Error::last_os_error()
    );
    let cidr = format!("{PRIVATE_IP}/24");
    for args in [
        &["link", "set", "lo", "up"][..],
        &["link", "add", "pv0", "type", "veth", "peer", "name", "pv1"],
        &["addr", "add", &cidr, "dev", "pv0"],
        &["link", "set", "pv0", "up"],
        &["link", "set", "pv1", "up"],
    ] {
        let status = std::process::Command::new("ip")
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "ip {args:?}");
    }
}

/// Listening on 0.0.0.0: the ready line and the demo's baseUrl name a usable address, and the
/// certificate verifies on loopback and on the machine's other address.
#[test]
fn every_address_is_named_when_listening_on_all_of_them() {
    std::thread::spawn(|| {
        enter_private_network();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let dir = TempDir::new();
            let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_parasol"));
            command
                .args(["serve", "--demo", "--listen", "0.0.0.0:0", "--data-dir"])
                .arg(dir.path());
            let s = ChildServer::spawn_command(command, dir.path());
            let hostport = s.url.strip_prefix("https://").unwrap();
            assert!(!hostport.starts_with("0.0.0.0"), "{}", s.url);
            let (host, port) = hostport.rsplit_once(':').unwrap();
            let port: u16 = port.parse().unwrap();
            // The host name when it resolves (as here), else the interface's address.
            let name = host_name();
            assert!(host == name || host == PRIVATE_IP, "{}", s.url);
            let creds: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(dir.path().join("demo-credentials.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(creds["baseUrl"], s.url.as_str());

            let cert = dir.path().join("tls/cert.pem");
            for ip in ["127.0.0.1", PRIVATE_IP] {
                let ip: IpAddr = ip.parse().unwrap();
                let client = Client::new(SocketAddr::new(ip, port), Some(&cert));
                let r = client.get("/1.0/domains").await;
                assert_eq!(r.status, 403, "{ip}");
                assert_eq!(r.json()["code"], "InvalidCredentials");
            }
            // And by the name in the URL, at the address it resolves to.
            if let Ok(name) = ServerName::try_from(host.to_string()) {
                assert_eq!(status_via(s.client.addr, name, &cert).await, 403);
            }
            assert!(s.stop().success());
        });
    })
    .join()
    .expect("the test's thread");
}

/// Writes a certificate and key made by rcgen (not by the server) for `names`, valid from
/// `from` to `until` (epoch seconds); the key with `key_mode`.
fn write_foreign_pair(
    cert: &Path,
    key: &Path,
    names: &[&str],
    from: i64,
    until: i64,
    key_mode: u32,
) {
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    params.not_before = time::OffsetDateTime::from_unix_timestamp(from).unwrap();
    params.not_after = time::OffsetDateTime::from_unix_timestamp(until).unwrap();
    let pair = rcgen::KeyPair::generate().unwrap();
    let c = params.self_signed(&pair).unwrap();
    std::fs::create_dir_all(cert.parent().unwrap()).unwrap();
    std::fs::write(cert, c.pem()).unwrap();
    std::fs::write(key, pair.serialize_pem()).unwrap();
    std::fs::set_permissions(key, std::fs::Permissions::from_mode(key_mode)).unwrap();
}

#[test]
fn a_certificate_for_another_address_or_about_to_expire_is_replaced_on_start() {
    let now = now();
    fn all(extra: &str) -> Vec<&str> {
        vec!["localhost", "127.0.0.1", "::1", extra]
    }
    let host = host_name();
    let cases = [
        (all("203.0.113.9"), now + 400 * 86_400, "does not name"),
        (vec!["203.0.113.9"], now + 400 * 86_400, "does not name"),
        (all(&host), now + 10 * 86_400, "within 30 days"),
        (all(&host), now - 86_400, "expired on"),
    ];
    for (names, until, why) in cases {
        let dir = TempDir::new();
        let (cert, key) = (
            dir.path().join("tls/cert.pem"),
            dir.path().join("tls/key.pem"),
        );
        write_foreign_pair(&cert, &key, &names, now - 400 * 86_400, until, 0o644);
        let old = std::fs::read(&cert).unwrap();
        let s = ChildServer::spawn(dir.path(), &[]);
        s.wait_for_log("making a new self-signed certificate");
        s.wait_for_log(why);
        assert_ne!(std::fs::read(&cert).unwrap(), old, "{names:?}");
        assert_eq!(mode(&key), 0o600);
        let info = read_cert(&first_cert(&cert));
        assert!(info.not_after - info.not_before <= 825 * 86_400);
        // The ChildServer's client trusts the certificate on disk now: it verifies.
        let rt = tokio::runtime::Runtime::new().unwrap();
        let r = rt.block_on(s.client.get("/1.0/domains"));
        assert_eq!(r.status, 403, "{why}");
        assert!(s.stop().success());
    }
}

#[test]
fn a_good_certificate_is_kept_and_its_key_kept_private() {
    let dir = TempDir::new();
    let s = ChildServer::spawn(dir.path(), &[]);
    assert!(s.stop().success());
    let (cert, key) = (
        dir.path().join("tls/cert.pem"),
        dir.path().join("tls/key.pem"),
    );
    let first = (std::fs::read(&cert).unwrap(), std::fs::read(&key).unwrap());
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let s = ChildServer::spawn(dir.path(), &[]);
    s.wait_for_log("it is 0600 now");
    assert_eq!(
        (std::fs::read(&cert).unwrap(), std::fs::read(&key).unwrap()),
        first
    );
    assert_eq!(mode(&key), 0o600);
    assert!(!s
        .stderr_lines
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("making a new self-signed certificate")));
    assert!(s.stop().success());
}

#[tokio::test]
async fn configured_certificate_files_are_never_touched() {
    let files = TempDir::new();
    let (cert, key) = (files.path().join("c.pem"), files.path().join("k.pem"));
    // Expiring within days, naming no host name, its key readable by others: a self-signed one
    // like it would be replaced, and its key tightened.
    let now = now();
    write_foreign_pair(
        &cert,
        &key,
        &["127.0.0.1"],
        now - 86_400,
        now + 5 * 86_400,
        0o644,
    );
    let state = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (
            std::fs::read(p).unwrap(),
            m.permissions().mode(),
            m.modified().unwrap(),
        )
    };
    let (c0, k0) = (state(&cert), state(&key));
    let (c, k) = (cert.clone(), key.clone());
    let s = TestServer::start_with(move |config| {
        config.tls = parasol::config::TlsSource::Files { cert: c, key: k }
    })
    .await;
    // The client trusts only the configured certificate.
    assert_eq!(s.get("/1.0/domains").await.status, 403);
    let dir = s.stop().await;
    assert!(state(&cert) == c0 && state(&key) == k0);
    assert!(!dir.path().join("tls").exists());
}
