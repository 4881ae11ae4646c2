//! TLS: rustls with the ring provider, TLS 1.2 and 1.3 only, ALPN `http/1.1`, forward-secret
//! AEAD suites only.
//!
//! Without configured PEM files, a self-signed certificate is kept in the data directory. It is
//! made the way a client expects a server certificate to look: valid for at most 825 days (the
//! longest some clients accept), from a few minutes before it was made (for clients whose clock
//! is a little behind), subject `CN=<host name>, O=Parasol`, for server authentication, naming
//! the host name, `localhost`, 127.0.0.1, ::1 and every address the server listens on (every
//! interface address for `0.0.0.0` or `::`). On each start it is checked and made anew, with a
//! log line saying why, when it expires within 30 days, when it no longer names what a new one
//! would (the host was renamed, an address changed, the server listens elsewhere), or when it
//! does not load. Certificates given with `--tls-cert`/`--tls-key` are only ever read.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::ServerConfig;

/// Longest validity of a self-signed certificate, clock slack included.
pub const VALIDITY: Duration = Duration::from_secs(825 * 24 * 3600);
/// How far before its making a self-signed certificate's validity starts.
pub const CLOCK_SLACK: Duration = Duration::from_secs(5 * 60);
/// A self-signed certificate that expires sooner than this is made anew on start.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Paths of the self-signed certificate and key inside the data directory.
pub fn self_signed_paths(data_dir: &Path) -> (PathBuf, PathBuf) {
    let dir = data_dir.join("tls");
    (dir.join("cert.pem"), dir.join("key.pem"))
}

/// The names a self-signed certificate carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertNames {
    /// DNS names, the host name first when there is one.
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
}

impl CertNames {
    /// The names for a server listening on `listen`: the host name, `localhost`, the loopback
    /// addresses, and every address the listener serves.
    pub fn for_listener(listen: SocketAddr) -> CertNames {
        let served = crate::netinfo::served_addresses(
            listen.ip(),
            &if listen.ip().is_unspecified() {
                crate::netinfo::interface_addresses()
            } else {
                Vec::new()
            },
        );
        CertNames::new(crate::netinfo::host_name(), &served)
    }

    /// The names for host name `host` and the served addresses `served`.
    pub fn new(host: Option<String>, served: &[IpAddr]) -> CertNames {
        let mut dns: Vec<String> = host.into_iter().collect();
        dns.push("localhost".into());
        let mut ips = vec![
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        ];
        for ip in served {
            if !ip.is_unspecified() && !ips.contains(ip) {
                ips.push(*ip);
            }
        }
        CertNames { dns, ips }
    }

    /// The subject's common name: the host name (its first label if it is longer than a common
    /// name may be), else `localhost`.
    fn common_name(&self) -> &str {
        let name = self.dns.first().map_or("localhost", String::as_str);
        if name.len() <= 64 {
            name
        } else {
            name.split('.').next().unwrap_or("localhost")
        }
    }
}

/// Makes the self-signed certificate unless a usable one is there; returns its paths.
pub fn ensure_self_signed(
    data_dir: &Path,
    names: &CertNames,
) -> Result<(PathBuf, PathBuf), String> {
    let (cert_path, key_path) = self_signed_paths(data_dir);
    let now = SystemTime::now();
    if cert_path.exists() || key_path.exists() {
        match replacement_reason(&cert_path, &key_path, names, now) {
            None => {
                // SECURITY: a key file whose mode was loosened (by hand, a restore, an older
                // Parasol) is made readable by its owner only again.
                keep_private(&key_path)?;
                return Ok((cert_path, key_path));
            }
            Some(why) => log::warn!(
                "making a new self-signed certificate: the one in {} {why}",
                cert_path.display()
            ),
        }
    }
    let (cert_pem, key_pem) = generate(names, now)?;
    let dir = cert_path.parent().unwrap_or(data_dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Written beside and renamed into place, the key first: a start interrupted halfway leaves
    // a pair that does not load, which the next start replaces.
    let key_new = dir.join("key.pem.new");
    let cert_new = dir.join("cert.pem.new");
    // SECURITY: the private key is never readable by others, not even while it is written.
    write_private(&key_new, key_pem.as_bytes())?;
    write_file(&cert_new, cert_pem.as_bytes())?;
    rename(&key_new, &key_path)?;
    rename(&cert_new, &cert_path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    log::info!(
        "made a self-signed certificate for {}: {}",
        names_text(names),
        cert_path.display()
    );
    Ok((cert_path, key_path))
}

fn names_text(names: &CertNames) -> String {
    let ips = names.ips.iter().map(ToString::to_string);
    names
        .dns
        .iter()
        .cloned()
        .chain(ips)
        .collect::<Vec<_>>()
        .join(", ")
}

fn rename(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::rename(from, to).map_err(|e| format!("{}: {e}", to.display()))
}

/// Why the self-signed certificate at `cert` (with its key at `key`) must be replaced at `now`,
/// or `None` if it serves: it loads, names everything in `names`, is valid now and 30 days on,
/// and does not outlast the validity a new one gets.
pub fn replacement_reason(
    cert: &Path,
    key: &Path,
    names: &CertNames,
    now: SystemTime,
) -> Option<String> {
    if let Err(e) = server_config(cert, key) {
        return Some(format!("does not load ({e})"));
    }
    let der = match CertificateDer::pem_file_iter(cert).map(|mut i| i.next()) {
        Ok(Some(Ok(der))) => der,
        _ => return Some("holds no certificate".into()),
    };
    let ee = match webpki::EndEntityCert::try_from(&der) {
        Ok(ee) => ee,
        Err(e) => return Some(format!("cannot be read ({e})")),
    };
    for dns in &names.dns {
        let Ok(name) = ServerName::try_from(dns.as_str()) else {
            continue;
        };
        if ee.verify_is_valid_for_subject_name(&name).is_err() {
            return Some(format!("does not name {dns}"));
        }
    }
    for ip in &names.ips {
        if ee
            .verify_is_valid_for_subject_name(&ServerName::IpAddress((*ip).into()))
            .is_err()
        {
            return Some(format!("does not name {ip}"));
        }
    }
    let anchor = match webpki::anchor_from_trusted_cert(&der) {
        Ok(a) => [a],
        Err(e) => return Some(format!("cannot be read ({e})")),
    };
    let valid_at = |t: SystemTime| {
        let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        ee.verify_for_usage(
            ALGORITHMS,
            &anchor,
            &[],
            UnixTime::since_unix_epoch(since),
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map(drop)
    };
    let date = |t: UnixTime| crate::timefmt::rfc3339(t.as_secs().try_into().unwrap_or(i64::MAX));
    match valid_at(now) {
        Ok(()) => {}
        Err(webpki::Error::CertExpired { not_after, .. }) => {
            return Some(format!("expired on {}", date(not_after)))
        }
        Err(webpki::Error::CertNotValidYet { not_before, .. }) => {
            return Some(format!("is not valid before {}", date(not_before)))
        }
        Err(e) => return Some(format!("cannot be verified ({e})")),
    }
    if let Err(e) = valid_at(now + RENEW_BEFORE) {
        return Some(match e {
            webpki::Error::CertExpired { not_after, .. } => {
                format!("expires on {}, within 30 days", date(not_after))
            }
            e => format!("cannot be verified ({e})"),
        });
    }
    if valid_at(now + VALIDITY + Duration::from_secs(24 * 3600)).is_ok() {
        return Some("is valid for longer than the 825 days clients accept".into());
    }
    None
}

/// Signature algorithms a self-signed certificate is checked with (what `generate` and the
/// earlier Parasol versions signed with, and the other common ones).
static ALGORITHMS: &[&dyn rustls::pki_types::SignatureVerificationAlgorithm] = &[
    webpki::ring::ECDSA_P256_SHA256,
    webpki::ring::ECDSA_P384_SHA384,
    webpki::ring::ED25519,
    webpki::ring::RSA_PKCS1_2048_8192_SHA256,
    webpki::ring::RSA_PKCS1_2048_8192_SHA384,
    webpki::ring::RSA_PKCS1_2048_8192_SHA512,
];

/// A new self-signed certificate (ECDSA P-256) for `names`, valid from `now - CLOCK_SLACK` for
/// `VALIDITY`; returns the certificate and key as PEM.
pub fn generate(names: &CertNames, now: SystemTime) -> Result<(String, String), String> {
    use rcgen::{
        CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose, SanType, SerialNumber,
    };
    use ring::rand::SecureRandom;
    let fail = |e: &dyn std::fmt::Display| format!("cannot make a self-signed certificate: {e}");
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, names.common_name());
    dn.push(DnType::OrganizationName, "Parasol");
    params.distinguished_name = dn;
    for dns in &names.dns {
        let name = dns.clone().try_into().map_err(|e| fail(&e))?;
        params.subject_alt_names.push(SanType::DnsName(name));
    }
    for ip in &names.ips {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    let start = time::OffsetDateTime::from(now) - CLOCK_SLACK;
    params.not_before = start;
    params.not_after = start + VALIDITY;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    // A random serial of 16 bytes (positive: the top bit clear), as CAs are required to use.
    let mut serial = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut serial)
        .map_err(|_| fail(&"the system's random number generator failed"))?;
    serial[0] &= 0x7f;
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    let key = KeyPair::generate().map_err(|e| fail(&e))?;
    let cert = params.self_signed(&key).map_err(|e| fail(&e))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Writes a file readable only by its owner: mode 0600, set on the open file before anything
/// is written, so that a file that already existed with a looser mode is tightened too and the
/// new contents are never readable by others.
pub fn write_private(path: &Path, data: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    // The mode given to open applies only to a file it creates; fchmod covers an existing one.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(err)?;
    f.write_all(data).map_err(err)?;
    f.sync_all().map_err(err)
}

/// Writes a file others may read (a certificate).
fn write_file(path: &Path, data: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut f = std::fs::File::create(path).map_err(err)?;
    f.write_all(data).map_err(err)?;
    f.sync_all().map_err(err)
}

/// Takes read and write access away from group and others on an existing file (fchmod to 0600
/// when any of those bits is set).
pub fn keep_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let f = std::fs::File::open(path).map_err(err)?;
    let mode = f.metadata().map_err(err)?.permissions().mode();
    if mode & 0o077 != 0 {
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(err)?;
        log::warn!(
            "{} was readable by others (mode {:o}); it is 0600 now",
            path.display(),
            mode & 0o7777
        );
    }
    Ok(())
}

/// Builds the rustls server configuration from PEM files.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("{}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate found", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("TLS certificate: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn write_private_tightens_an_existing_file() {
        let dir = crate::testdir::TempDir::new("tls");
        let p = dir.join("secret");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&p, b"new").unwrap();
        assert_eq!(mode(&p), 0o600);
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let fresh = dir.join("fresh");
        write_private(&fresh, b"x").unwrap();
        assert_eq!(mode(&fresh), 0o600);
    }

    #[test]
    fn keep_private_only_tightens() {
        let dir = crate::testdir::TempDir::new("tls");
        let p = dir.join("key");
        std::fs::write(&p, "k").unwrap();
        for (before, after) in [
            (0o644, 0o600),
            (0o640, 0o600),
            (0o600, 0o600),
            (0o400, 0o400),
        ] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(before)).unwrap();
            keep_private(&p).unwrap();
            assert_eq!(mode(&p), after, "{before:o}");
        }
    }

    fn names() -> CertNames {
        CertNames::new(
            Some("parasol.lab".into()),
            &["198.51.100.7".parse().unwrap()],
        )
    }

    fn write_pair(dir: &Path, names: &CertNames, made: SystemTime) {
        let (cert, key) = generate(names, made).unwrap();
        std::fs::create_dir_all(dir.join("tls")).unwrap();
        let (c, k) = self_signed_paths(dir);
        std::fs::write(c, cert).unwrap();
        write_private(&k, key.as_bytes()).unwrap();
    }

    #[test]
    fn a_fresh_certificate_serves_and_names_everything() {
        let dir = crate::testdir::TempDir::new("tls");
        let now = SystemTime::now();
        write_pair(&dir, &names(), now);
        let (c, k) = self_signed_paths(&dir);
        assert_eq!(replacement_reason(&c, &k, &names(), now), None);
        // Still fine a little before it runs out of its last 30 days.
        let later = now + VALIDITY - RENEW_BEFORE - Duration::from_secs(3600);
        assert_eq!(replacement_reason(&c, &k, &names(), later), None);
    }

    #[test]
    fn reasons_to_replace() {
        let dir = crate::testdir::TempDir::new("tls");
        let now = SystemTime::now();
        write_pair(&dir, &names(), now);
        let (c, k) = self_signed_paths(&dir);
        let why = |names: &CertNames, at: SystemTime| replacement_reason(&c, &k, names, at);
        let moved = CertNames::new(
            Some("parasol.lab".into()),
            &["203.0.113.9".parse().unwrap()],
        );
        assert_eq!(why(&moved, now).unwrap(), "does not name 203.0.113.9");
        let renamed = CertNames::new(Some("other.lab".into()), &[]);
        assert_eq!(why(&renamed, now).unwrap(), "does not name other.lab");
        let soon = now + VALIDITY - RENEW_BEFORE + Duration::from_secs(3600);
        assert!(why(&names(), soon).unwrap().contains("within 30 days"));
        let after = now + VALIDITY;
        assert!(why(&names(), after).unwrap().starts_with("expired on "));
        let before = now - Duration::from_secs(3600);
        assert!(why(&names(), before)
            .unwrap()
            .starts_with("is not valid before "));
        // Made with a validity far longer than a new one gets (as by earlier versions).
        let old = rcgen::generate_simple_self_signed(vec![
            "parasol.lab".into(),
            "localhost".into(),
            "127.0.0.1".into(),
            "::1".into(),
            "198.51.100.7".into(),
        ])
        .unwrap();
        std::fs::write(&c, old.cert.pem()).unwrap();
        write_private(&k, old.key_pair.serialize_pem().as_bytes()).unwrap();
        assert_eq!(
            why(&names(), now).unwrap(),
            "is valid for longer than the 825 days clients accept"
        );
        // A key that is not the certificate's, or none.
        write_pair(&dir, &names(), now);
        let (_, other_key) = generate(&names(), now).unwrap();
        write_private(&k, other_key.as_bytes()).unwrap();
        assert!(why(&names(), now).unwrap().starts_with("does not load"));
        std::fs::remove_file(&k).unwrap();
        assert!(why(&names(), now).unwrap().starts_with("does not load"));
        std::fs::write(&k, "").unwrap();
        std::fs::write(&c, "not pem").unwrap();
        assert!(why(&names(), now).unwrap().starts_with("does not load"));
    }

    #[test]
    fn ensure_replaces_and_reuses() {
        let dir = crate::testdir::TempDir::new("tls");
        let (c, k) = ensure_self_signed(&dir, &names()).unwrap();
        assert_eq!(mode(&k), 0o600);
        let first = std::fs::read(&c).unwrap();
        // Reused as it is, the key's mode tightened.
        std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o644)).unwrap();
        ensure_self_signed(&dir, &names()).unwrap();
        assert_eq!(std::fs::read(&c).unwrap(), first);
        assert_eq!(mode(&k), 0o600);
        // Replaced for a listener elsewhere.
        let moved = CertNames::new(None, &["203.0.113.9".parse().unwrap()]);
        ensure_self_signed(&dir, &moved).unwrap();
        assert_ne!(std::fs::read(&c).unwrap(), first);
        assert_eq!(replacement_reason(&c, &k, &moved, SystemTime::now()), None);
        assert!(!dir.join("tls/key.pem.new").exists());
    }

    #[test]
    fn common_names() {
        assert_eq!(names().common_name(), "parasol.lab");
        assert_eq!(CertNames::new(None, &[]).common_name(), "localhost");
        let long = format!("{}.{}", "a".repeat(40), "b".repeat(40));
        assert_eq!(
            CertNames::new(Some(long), &[]).common_name(),
            "a".repeat(40)
        );
        let n = CertNames::new(None, &["0.0.0.0".parse().unwrap(), "::1".parse().unwrap()]);
        assert_eq!(n.ips.len(), 2, "{n:?}");
    }
}
