//! TLS with rustls (ring provider), both ways:
//!
//! - the client listener (SASL_SSL): a server configuration from `[listener.tls]`;
//! - the upstream (`SSL` / `SASL_SSL`): a client configuration from `[upstream.tls]`, trusting a
//!   CA file or the system's roots, optionally presenting a client certificate, and verifying
//!   that each broker's certificate names the host Portcullis connects to.
//!
//! PEM files are read with `rustls-pki-types`' [`PemObject`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::ring;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig,
    SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::{ClientAuth, TlsConfig, UpstreamTlsConfig};

/// Why the TLS configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// A PEM file could not be read or parsed.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A PEM file holds nothing usable.
    #[error("{path} contains no {what}")]
    Empty {
        /// The file.
        path: PathBuf,
        /// What was expected.
        what: &'static str,
    },
    /// `client_auth` asks for certificates but no CA is configured.
    #[error("listener.tls.client_auth = {0:?} needs listener.tls.ca_file")]
    MissingCa(ClientAuth),
    /// No trusted root could be loaded from the system.
    #[error("no trusted root certificate found on this system ({0}); set upstream.tls.ca_file")]
    NoSystemRoots(String),
    /// The private key is not the key of the certificate (a rotation that replaced one file and
    /// not the other, or the wrong pair).
    #[error("listener.tls.key_file {}: not the private key of the certificate in listener.tls.cert_file {}", key.display(), cert.display())]
    KeyMismatch {
        /// `cert_file`.
        cert: PathBuf,
        /// `key_file`.
        key: PathBuf,
    },
    /// rustls refused the configuration.
    #[error("invalid TLS configuration: {0}")]
    Rustls(String),
}

/// Builds the acceptor for `[listener.tls]`.
pub fn acceptor(config: &TlsConfig) -> Result<TlsAcceptor, TlsSetupError> {
    Ok(TlsAcceptor::from(Arc::new(server_config(config)?)))
}

/// Builds the rustls server configuration for `[listener.tls]`.
pub fn server_config(config: &TlsConfig) -> Result<ServerConfig, TlsSetupError> {
    let provider = Arc::new(ring::default_provider());
    let certs = read_certs(&config.cert_file)?;
    let key = read_key(&config.key_file)?;
    let verifier = match (config.client_auth, &config.ca_file) {
        (ClientAuth::None, _) => WebPkiClientVerifier::no_client_auth(),
        (mode, None) => return Err(TlsSetupError::MissingCa(mode)),
        (mode, Some(ca_file)) => {
            let roots = roots_from_file(ca_file)?;
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let builder = if mode == ClientAuth::Requested {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder
                .build()
                .map_err(|e| TlsSetupError::Rustls(e.to_string()))?
        }
    };
    ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError::Rustls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => TlsSetupError::KeyMismatch {
                cert: config.cert_file.clone(),
                key: config.key_file.clone(),
            },
            e => TlsSetupError::Rustls(e.to_string()),
        })
}

/// Builds the connector for the upstream brokers (`[upstream.tls]`).
pub fn connector(config: &UpstreamTlsConfig) -> Result<TlsConnector, TlsSetupError> {
    Ok(TlsConnector::from(Arc::new(client_config(config)?)))
}

/// Builds the rustls client configuration for the upstream brokers.
pub fn client_config(config: &UpstreamTlsConfig) -> Result<ClientConfig, TlsSetupError> {
    let provider = Arc::new(ring::default_provider());
    let roots = match &config.ca_file {
        Some(ca_file) => roots_from_file(ca_file)?,
        None => system_roots()?,
    };
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsSetupError::Rustls(e.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = if config.verify_server_name {
        webpki
    } else {
        Arc::new(AnyServerName(webpki))
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError::Rustls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (&config.cert_file, &config.key_file) {
        (Some(cert_file), Some(key_file)) => builder
            .with_client_auth_cert(read_certs(cert_file)?, read_key(key_file)?)
            .map_err(|e| TlsSetupError::Rustls(e.to_string())),
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// An address whose host is neither a DNS name nor an IP address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{host}` is no TLS server name: {reason}")]
pub struct InvalidServerName {
    /// The host part of the address.
    pub host: String,
    /// What rustls said of it.
    pub reason: String,
}

/// The name a broker's certificate must carry when Portcullis connects to `address`
/// (`host:port`, `[v6]:port`): its host, as a DNS name or an IP address.
pub fn server_name(address: &str) -> Result<ServerName<'static>, InvalidServerName> {
    let host = match address.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => address,
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(host.to_owned()).map_err(|e| InvalidServerName {
        host: host.to_owned(),
        reason: e.to_string(),
    })
}

/// Chain verification without the name check (`verify_server_name = false`, for tests): a
/// certificate for another host is accepted, one from an untrusted CA is not.
#[derive(Debug)]
struct AnyServerName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyServerName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn roots_from_file(ca_file: &Path) -> Result<RootCertStore, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(ca_file)? {
        roots
            .add(cert)
            .map_err(|e| TlsSetupError::Rustls(format!("{}: {e}", ca_file.display())))?;
    }
    Ok(roots)
}

/// The system's trusted roots (`rustls-native-certs`: the OS store, or `SSL_CERT_FILE` /
/// `SSL_CERT_DIR`). Unreadable entries are skipped; none at all is an error.
fn system_roots() -> Result<RootCertStore, TlsSetupError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(|| "the store is empty".to_owned(), ToString::to_string);
        return Err(TlsSetupError::NoSystemRoots(why));
    }
    Ok(roots)
}

fn read_error(path: &Path, e: &rustls_pki_types::pem::Error) -> TlsSetupError {
    TlsSetupError::Read {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| read_error(path, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read_error(path, &e))?;
    if certs.is_empty() {
        return Err(TlsSetupError::Empty {
            path: path.to_owned(),
            what: "certificate",
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    match PrivateKeyDer::from_pem_file(path) {
        Ok(key) => Ok(key),
        Err(rustls_pki_types::pem::Error::NoItemsFound) => Err(TlsSetupError::Empty {
            path: path.to_owned(),
            what: "private key",
        }),
        Err(e) => Err(read_error(path, &e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn new() -> Self {
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
                .unwrap()
                .self_signed(&key)
                .unwrap();
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
            std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
            std::fs::write(dir.path().join("empty.pem"), "").unwrap();
            Self { dir }
        }

        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        fn config(&self, client_auth: ClientAuth, ca: Option<&str>) -> TlsConfig {
            TlsConfig {
                cert_file: self.path("cert.pem"),
                key_file: self.path("key.pem"),
                client_auth,
                ca_file: ca.map(|name| self.path(name)),
            }
        }
    }

    fn upstream(files: &Files, ca: Option<&str>) -> UpstreamTlsConfig {
        UpstreamTlsConfig {
            ca_file: ca.map(|name| files.path(name)),
            ..UpstreamTlsConfig::default()
        }
    }

    #[test]
    fn upstream_client_configurations() {
        let files = Files::new();
        assert!(client_config(&upstream(&files, Some("cert.pem"))).is_ok());
        let mut with_cert = upstream(&files, Some("cert.pem"));
        with_cert.cert_file = Some(files.path("cert.pem"));
        with_cert.key_file = Some(files.path("key.pem"));
        assert!(client_config(&with_cert).is_ok());
        with_cert.verify_server_name = false;
        assert!(client_config(&with_cert).is_ok());
        let e = client_config(&upstream(&files, Some("empty.pem"))).unwrap_err();
        assert!(matches!(e, TlsSetupError::Empty { .. }), "{e}");
        let e = client_config(&upstream(&files, Some("missing.pem"))).unwrap_err();
        assert!(e.to_string().contains("missing.pem"), "{e}");
    }

    #[test]
    fn server_names_come_from_the_address_host() {
        assert_eq!(
            server_name("kafka-1.example.com:9093").unwrap(),
            ServerName::try_from("kafka-1.example.com").unwrap()
        );
        assert_eq!(
            server_name("127.0.0.1:9093").unwrap(),
            ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())
        );
        assert_eq!(
            server_name("[::1]:9093").unwrap(),
            ServerName::IpAddress(std::net::Ipv6Addr::LOCALHOST.into())
        );
        assert!(server_name("bad host:9093").is_err());
    }

    #[test]
    fn builds_for_every_client_auth_mode() {
        let files = Files::new();
        assert!(server_config(&files.config(ClientAuth::None, None)).is_ok());
        assert!(server_config(&files.config(ClientAuth::Requested, Some("cert.pem"))).is_ok());
        assert!(server_config(&files.config(ClientAuth::Required, Some("cert.pem"))).is_ok());
    }

    #[test]
    fn refuses_missing_ca_empty_files_and_unreadable_paths() {
        let files = Files::new();
        let e = server_config(&files.config(ClientAuth::Required, None)).unwrap_err();
        assert!(
            matches!(e, TlsSetupError::MissingCa(ClientAuth::Required)),
            "{e}"
        );
        let e = server_config(&files.config(ClientAuth::Requested, Some("empty.pem"))).unwrap_err();
        assert!(
            matches!(
                e,
                TlsSetupError::Empty {
                    what: "certificate",
                    ..
                }
            ),
            "{e}"
        );
        let mut config = files.config(ClientAuth::None, None);
        config.key_file = files.path("empty.pem");
        let e = server_config(&config).unwrap_err();
        assert!(
            matches!(
                e,
                TlsSetupError::Empty {
                    what: "private key",
                    ..
                }
            ),
            "{e}"
        );
        config.key_file = files.path("missing.pem");
        let e = server_config(&config).unwrap_err();
        assert!(e.to_string().contains("missing.pem"), "{e}");
        // A certificate that does not match the key: named as such (a half-done rotation).
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(files.path("other.key"), other.serialize_pem()).unwrap();
        config.key_file = files.path("other.key");
        let e = server_config(&config).unwrap_err();
        assert!(matches!(e, TlsSetupError::KeyMismatch { .. }), "{e:?}");
        assert!(e.to_string().contains("listener.tls.key_file"), "{e}");
    }
}
