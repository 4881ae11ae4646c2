//! TLS: rustls with the ring provider, TLS 1.2 and 1.3 only, ALPN `http/1.1`. Without configured
//! PEM files a self-signed certificate is made in the data directory on first start and reused.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

/// Paths of the self-signed certificate and key inside the data directory.
pub fn self_signed_paths(data_dir: &Path) -> (PathBuf, PathBuf) {
    let dir = data_dir.join("tls");
    (dir.join("cert.pem"), dir.join("key.pem"))
}

/// Makes the self-signed certificate if it does not exist yet; returns its paths.
pub fn ensure_self_signed(data_dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let (cert_path, key_path) = self_signed_paths(data_dir);
    if cert_path.exists() && key_path.exists() {
        return Ok((cert_path, key_path));
    }
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if let Ok(h) = std::fs::read_to_string("/etc/hostname") {
        let h = h.trim();
        if !h.is_empty() && h != "localhost" {
            names.push(h.to_string());
        }
    }
    let ck = rcgen::generate_simple_self_signed(names)
        .map_err(|e| format!("cannot make a self-signed certificate: {e}"))?;
    let dir = cert_path.parent().unwrap_or(data_dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // SECURITY: the private key is written with mode 0600 from the start.
    write_private(&key_path, ck.key_pair.serialize_pem().as_bytes())?;
    std::fs::write(&cert_path, ck.cert.pem())
        .map_err(|e| format!("{}: {e}", cert_path.display()))?;
    log::info!("made a self-signed certificate: {}", cert_path.display());
    Ok((cert_path, key_path))
}

/// Writes a file readable only by its owner.
pub fn write_private(path: &Path, data: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(data)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.sync_all().map_err(|e| format!("{}: {e}", path.display()))
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
