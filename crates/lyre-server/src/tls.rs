//! TLS for the secure ports (`http.securePort`, `operationsApi.network.securePort`):
//! the certificate and key from Harper's `tls` keys, or a self-signed pair made at
//! first start under `<root>/keys/`; and, with `http.mtls`, client certificates
//! checked against `tls.certificateAuthority`, their common name logging the client
//! in as that user.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{Config, MtlsConfig};

/// The self-signed certificate's file under `<root>/keys/`.
pub const GENERATED_CERTIFICATE: &str = "certificate.pem";
/// Its private key's file.
pub const GENERATED_KEY: &str = "privateKey.pem";

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A file holds no usable certificate or key.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The certificate, key or authority were refused.
    #[error("TLS configuration: {0}")]
    Rustls(String),
    /// One of `tls.certificate` and `tls.privateKey` is set without the other.
    #[error("tls.{set} is set but tls.{missing} is not: set both, or neither for a self-signed pair")]
    Incomplete {
        /// The key that is set.
        set: &'static str,
        /// The key that is missing.
        missing: &'static str,
    },
}

/// The user name a verified client certificate carries (its subject's common name),
/// attached to every request of its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate(pub String);

/// Marks every request that arrived over TLS (a session cookie set on it is `Secure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverTls;

/// Whom a verified client certificate logs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateLogin {
    /// Nobody: no certificates are asked for, or they only admit the client.
    Nobody,
    /// The user its subject's common name names.
    CommonName,
    /// This user, whatever the certificate.
    User(String),
}

impl CertificateLogin {
    /// The user a connection with `certificate` is logged in as.
    pub fn user(&self, certificate: Option<&CertificateDer<'_>>) -> Option<ClientCertificate> {
        let certificate = certificate?;
        match self {
            CertificateLogin::Nobody => None,
            CertificateLogin::CommonName => common_name(certificate).map(ClientCertificate),
            CertificateLogin::User(name) => Some(ClientCertificate(name.clone())),
        }
    }
}

/// What the secure ports need: the TLS acceptor and whom certificates log in.
#[derive(Clone)]
pub struct Secure {
    /// Handshakes.
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// Whom a client certificate logs in.
    pub login: Arc<CertificateLogin>,
}

/// The secure ports' set-up, or `None` when no secure port is configured.
pub fn acceptor(config: &Config) -> Result<Option<Secure>, TlsError> {
    if config.http.secure_port.is_none()
        && config.operations_api.network.secure_port.is_none()
        && config.mqtt.network.secure_port.is_none()
    {
        return Ok(None);
    }
    let (certificate, key) = match (&config.tls.certificate, &config.tls.private_key) {
        (Some(certificate), Some(key)) => (certificate.clone(), key.clone()),
        (Some(_), None) => return Err(TlsError::Incomplete { set: "certificate", missing: "privateKey" }),
        (None, Some(_)) => return Err(TlsError::Incomplete { set: "privateKey", missing: "certificate" }),
        (None, None) => self_signed(&config.root().join("keys"))?,
    };
    let chain = CertificateDer::pem_file_iter(&certificate)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Pem { path: certificate.clone(), reason: e.to_string() })?;
    if chain.is_empty() {
        return Err(TlsError::Pem { path: certificate, reason: "no certificate in the file".into() });
    }
    let key =
        PrivateKeyDer::from_pem_file(&key).map_err(|e| TlsError::Pem { path: key.clone(), reason: e.to_string() })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let (asked, required, login) = match &config.http.mtls {
        MtlsConfig::Enabled(false) => (false, false, CertificateLogin::Nobody),
        MtlsConfig::Enabled(true) => (true, false, CertificateLogin::CommonName),
        MtlsConfig::Options(options) => {
            let login = match options.user.as_deref() {
                None => CertificateLogin::Nobody,
                Some("CN") => CertificateLogin::CommonName,
                Some(name) => CertificateLogin::User(name.to_string()),
            };
            (true, options.required, login)
        }
    };
    let builder = if asked {
        let Some(authority) = &config.tls.certificate_authority else {
            return Err(TlsError::Rustls("http.mtls needs tls.certificateAuthority".into()));
        };
        let mut roots = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_file_iter(authority)
            .map_err(|e| TlsError::Pem { path: authority.clone(), reason: e.to_string() })?
        {
            let certificate =
                certificate.map_err(|e| TlsError::Pem { path: authority.clone(), reason: e.to_string() })?;
            roots.add(certificate).map_err(|e| TlsError::Rustls(e.to_string()))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        // Unless certificates are required, a client without one may log in otherwise.
        let verifier = if required { verifier } else { verifier.allow_unauthenticated() };
        let verifier = verifier.build().map_err(|e| TlsError::Rustls(e.to_string()))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut server = builder.with_single_cert(chain, key).map_err(|e| TlsError::Rustls(e.to_string()))?;
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(Secure { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)), login: Arc::new(login) }))
}

/// The self-signed pair under `keys_dir`, made on first use (for `localhost` and the
/// loopback addresses).
fn self_signed(keys_dir: &Path) -> Result<(PathBuf, PathBuf), TlsError> {
    let (certificate, key) = (keys_dir.join(GENERATED_CERTIFICATE), keys_dir.join(GENERATED_KEY));
    if certificate.exists() && key.exists() {
        return Ok((certificate, key));
    }
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    let made = rcgen::generate_simple_self_signed(names).map_err(|e| TlsError::Rustls(e.to_string()))?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TlsError::Io { path, source }
    };
    // Each written whole or not at all: a crash between them leaves no certificate,
    // and the next start makes the pair again.
    crate::tokens::write_private(keys_dir, &key, made.signing_key.serialize_pem().as_bytes()).map_err(io(&key))?;
    crate::tokens::write_private(keys_dir, &certificate, made.cert.pem().as_bytes()).map_err(io(&certificate))?;
    tracing::info!(certificate = %certificate.display(), "made a self-signed certificate for the secure ports");
    Ok((certificate, key))
}

/// The common name of a client certificate's subject.
fn common_name(certificate: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    let name = parsed.subject().iter_common_name().next()?.as_str().ok()?;
    Some(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_without_its_key_is_refused_naming_the_missing_key() {
        let mut config = Config::default();
        config.http.secure_port = Some(9443);
        config.tls.certificate = Some(PathBuf::from("/nowhere/cert.pem"));
        let err = acceptor(&config).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("tls.privateKey is not"), "{err}");
        config.tls.certificate = None;
        config.tls.private_key = Some(PathBuf::from("/nowhere/key.pem"));
        let err = acceptor(&config).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("tls.certificate is not"), "{err}");
    }
}
