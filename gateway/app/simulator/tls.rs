//! The simulator's HTTPS: a private CA made at start and a server certificate it signs, so the gateway's
//! certificate checks run for real against it (trusted through `SSL_CERT_FILE` or `ca_file`, refused
//! without).

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls_pki_types::PrivateKeyDer;
use std::path::Path;

/// The names the server certificate is valid for: the simulator listens on loopback.
const NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];

/// A server configuration whose certificate the CA at `ca_file` signed. The CA is written there as PEM,
/// new on every start (its key never leaves memory).
pub fn generate(ca_file: &Path) -> Result<rustls::ServerConfig, String> {
    let failed = |e: rcgen::Error| format!("simulator certificate: {e}");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "mediagate simulator CA");
    let ca_key = KeyPair::generate().map_err(failed)?;
    let ca = ca_params.self_signed(&ca_key).map_err(failed)?;

    let mut leaf_params =
        CertificateParams::new(NAMES.iter().map(|n| n.to_string()).collect::<Vec<_>>()).map_err(failed)?;
    leaf_params.distinguished_name.push(DnType::CommonName, "mediagate simulator");
    let leaf_key = KeyPair::generate().map_err(failed)?;
    let leaf = leaf_params.signed_by(&leaf_key, &Issuer::from_params(&ca_params, &ca_key)).map_err(failed)?;

    if let Some(dir) = ca_file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(ca_file, ca.pem()).map_err(|e| format!("{}: {e}", ca_file.display()))?;
    let key = PrivateKeyDer::try_from(leaf_key.serialize_der()).map_err(|e| format!("simulator key: {e}"))?;
    crate::support::tls::serving(vec![leaf.der().clone(), ca.der().clone()], key)
        .map_err(|e| format!("simulator certificate: {e}"))
}
