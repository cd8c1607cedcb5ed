//! TLS for every connection the gateway makes or takes: rustls with the ring provider (no OpenSSL to
//! build against), certificates always verified.
//!
//! Trust follows OpenSSL's rules, so a private CA needs no code or config change: `SSL_CERT_FILE` replaces
//! the system's bundle file and `SSL_CERT_DIR` (colon-separated) its certificate directories; whichever is
//! unset keeps the system's. A per-upstream `ca_file` adds to that.

use rustls::crypto::CryptoProvider;
use rustls::{CertificateError, ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The one crypto provider, named explicitly so that no other crate's choice can change it.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())).clone()
}

/// The certificates trusted as roots: the system's (as `SSL_CERT_FILE` / `SSL_CERT_DIR` say), then
/// `extra_ca`'s. Unreadable system entries are skipped, as OpenSSL skips them; an unreadable `extra_ca`
/// or an empty result is an error, since no server could then be verified.
pub fn trusted_roots(extra_ca: Option<&Path>) -> Result<Vec<CertificateDer<'static>>, String> {
    // Read once per process: every https region and the admin CLI trust the same system roots.
    static SYSTEM: OnceLock<Result<Vec<CertificateDer<'static>>, String>> = OnceLock::new();
    let mut roots = SYSTEM.get_or_init(system_roots).clone()?;
    if let Some(path) = extra_ca {
        roots.extend(read_certificates(path)?);
    }
    if roots.is_empty() {
        return Err("no trusted root certificate was found; install the system's CA bundle \
                    (Debian: ca-certificates), or name one with SSL_CERT_FILE or `ca_file`"
            .into());
    }
    Ok(roots)
}

fn system_roots() -> Result<Vec<CertificateDer<'static>>, String> {
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let file = match set("SSL_CERT_FILE") {
        Some(path) => {
            let path = PathBuf::from(path);
            // Named on purpose: a typo must not silently fall back to the system's roots.
            if !path.is_file() {
                return Err(format!("SSL_CERT_FILE names {}, which is not a readable file", path.display()));
            }
            Some(path)
        }
        None => openssl_probe::probe().cert_file,
    };
    let dirs: Vec<PathBuf> = match set("SSL_CERT_DIR") {
        Some(dirs) => std::env::split_paths(&dirs).filter(|d| !d.as_os_str().is_empty()).collect(),
        None => openssl_probe::candidate_cert_dirs().map(Path::to_path_buf).collect(),
    };
    let mut roots = Vec::new();
    let sources = std::iter::once((file.as_deref(), None)).chain(dirs.iter().map(|d| (None, Some(d.as_path()))));
    for (file, dir) in sources {
        let loaded = rustls_native_certs::load_certs_from_paths(file, dir);
        for error in &loaded.errors {
            tracing::warn!(error = %error, "a trusted-certificate location could not be read");
        }
        roots.extend(loaded.certs);
    }
    Ok(roots)
}

/// Every certificate of a PEM file.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certificates)
}

/// A client configuration that verifies servers against [`trusted_roots`]. It speaks HTTP/1.1 only (ALPN),
/// so a TLS connection behaves as the plain ones do: one request at a time, pooled and kept alive.
pub fn client_config(extra_ca: Option<&Path>) -> Result<Arc<ClientConfig>, String> {
    let mut store = RootCertStore::empty();
    let (_, unusable) = store.add_parsable_certificates(trusted_roots(extra_ca)?);
    if unusable > 0 {
        tracing::debug!(unusable, "trusted certificates rustls cannot use were skipped");
    }
    if store.is_empty() {
        return Err("none of the trusted certificates is a usable root".into());
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A blocking HTTP agent for `url` (the admin CLI's, the trace exporter's, `schemas diff`'s): an `https` one
/// verifies the server against [`trusted_roots`] (and `extra_ca`, which a plain one ignores); every status is an answer, not an error;
/// a call takes at most `timeout` when one is given. A proxy comes from the environment, as curl takes it.
pub fn http_agent(url: &str, extra_ca: Option<&Path>, timeout: Option<Duration>) -> Result<ureq::Agent, String> {
    let mut config = ureq::Agent::config_builder().http_status_as_error(false).timeout_global(timeout);
    if url.starts_with("https://") {
        let roots = trusted_roots(extra_ca)?;
        let roots = roots.into_iter().map(|c| ureq::tls::Certificate::from_der(&c).to_owned()).collect();
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
            .unversioned_rustls_crypto_provider(provider())
            .build();
        config = config.tls_config(tls);
    }
    Ok(config.build().into())
}

/// A server configuration from a PEM certificate chain and its PEM private key.
pub fn server_config(cert_file: &Path, key_file: &Path) -> Result<ServerConfig, String> {
    let chain = read_certificates(cert_file)?;
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| format!("{}: {e}", key_file.display()))?;
    serving(chain, key).map_err(|e| format!("{} and {}: {e}", cert_file.display(), key_file.display()))
}

/// A server configuration presenting `chain` (the server's certificate first) with its `key`; HTTP/1.1.
pub fn serving(chain: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>) -> Result<ServerConfig, String> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Why a TLS handshake failed, if `error` (or an error it wraps) is one, in words that never name a host:
/// rustls's own text for a name mismatch quotes the names.
pub fn handshake_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(describe(tls));
        }
        // io::Error hides its payload from `source()`: look inside it too.
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(tls) = inner.downcast_ref::<rustls::Error>()
        {
            return Some(describe(tls));
        }
        current = error.source();
    }
    None
}

fn describe(error: &rustls::Error) -> String {
    let certificate = match error {
        rustls::Error::InvalidCertificate(certificate) => certificate,
        rustls::Error::AlertReceived(alert) => return format!("the server sent the alert {alert:?}"),
        rustls::Error::NoCertificatesPresented => return "the server presented no certificate".into(),
        other => return format!("TLS failed: {other}"),
    };
    let reason = match certificate {
        CertificateError::UnknownIssuer => "certificate refused: unknown issuer",
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => "certificate refused: expired",
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "certificate refused: not valid yet"
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            "certificate refused: it does not name the host (name mismatch)"
        }
        CertificateError::Revoked => "certificate refused: revoked",
        CertificateError::BadSignature | CertificateError::UnsupportedSignatureAlgorithmContext { .. } => {
            "certificate refused: bad or unsupported signature"
        }
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "certificate refused: not issued for server authentication"
        }
        CertificateError::BadEncoding => "certificate refused: malformed",
        _ => "certificate refused",
    };
    reason.into()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, IsCa, KeyPair};

    struct Ca {
        params: CertificateParams,
        key: KeyPair,
        der: CertificateDer<'static>,
    }

    fn ca(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let der = params.self_signed(&key).unwrap().der().clone();
        Ca { params, key, der }
    }

    /// A server certificate for `names` signed by `ca`, valid from `not_before` to `not_after` (years).
    fn leaf(ca: &Ca, names: &[&str], years: (i32, i32)) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.not_before = rcgen::date_time_ymd(years.0, 1, 1);
        params.not_after = rcgen::date_time_ymd(years.1, 1, 1);
        let key = KeyPair::generate().unwrap();
        let issuer = rcgen::Issuer::from_params(&ca.params, &ca.key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.der().clone(), PrivateKeyDer::try_from(key.serialize_der()).unwrap())
    }

    /// Runs a handshake in memory to `host` against a server presenting `leaf`; the client's error.
    fn handshake(trusted: &Ca, leaf: (CertificateDer<'static>, PrivateKeyDer<'static>), host: &str) -> Option<String> {
        let mut roots = RootCertStore::empty();
        roots.add(trusted.der.clone()).unwrap();
        let client_config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server_config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.0], leaf.1)
            .unwrap();
        let name = rustls_pki_types::ServerName::try_from(host.to_string()).unwrap();
        let mut client = rustls::ClientConnection::new(Arc::new(client_config), name).unwrap();
        let mut server = rustls::ServerConnection::new(Arc::new(server_config)).unwrap();
        for _ in 0..10 {
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            server.read_tls(&mut wire.as_slice()).unwrap();
            server.process_new_packets().unwrap();
            let mut wire = Vec::new();
            server.write_tls(&mut wire).unwrap();
            client.read_tls(&mut wire.as_slice()).unwrap();
            if let Err(e) = client.process_new_packets() {
                let io = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
                return handshake_failure(&io);
            }
            if !client.is_handshaking() {
                return None;
            }
        }
        panic!("the handshake neither finished nor failed");
    }

    #[test]
    fn a_refused_certificate_is_described_by_its_reason_and_never_by_its_host() {
        let trusted = ca("trusted CA");
        let now = 2026;
        assert_eq!(handshake(&trusted, leaf(&trusted, &["upstream.test"], (now - 1, now + 5)), "upstream.test"), None);

        let stranger = ca("stranger CA");
        let refused = |leaf, host| handshake(&trusted, leaf, host).unwrap();
        let unknown = refused(leaf(&stranger, &["upstream.test"], (now - 1, now + 5)), "upstream.test");
        assert_eq!(unknown, "certificate refused: unknown issuer");
        let expired = refused(leaf(&trusted, &["upstream.test"], (2000, 2001)), "upstream.test");
        assert_eq!(expired, "certificate refused: expired");
        let mismatch = refused(leaf(&trusted, &["other.test"], (now - 1, now + 5)), "upstream.test");
        assert!(mismatch.contains("name mismatch"), "{mismatch}");
        for reason in [unknown, expired, mismatch] {
            assert!(!reason.contains("upstream.test") && !reason.contains("other.test"), "{reason}");
        }
    }

    #[test]
    fn an_error_that_is_not_tls_has_no_handshake_reason() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(handshake_failure(&refused), None);
    }
}
