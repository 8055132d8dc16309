//! TLS on the client listener (SASL_SSL): a rustls server configuration built from
//! `[listener.tls]`, with the ring provider.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::ring;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::config::{ClientAuth, TlsConfig};

/// Why the TLS configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// A PEM file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
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
            let mut roots = RootCertStore::empty();
            for cert in read_certs(ca_file)? {
                roots
                    .add(cert)
                    .map_err(|e| TlsSetupError::Rustls(format!("{}: {e}", ca_file.display())))?;
            }
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
        .map_err(|e| TlsSetupError::Rustls(e.to_string()))
}

fn open(path: &Path) -> Result<BufReader<File>, TlsSetupError> {
    File::open(path)
        .map(BufReader::new)
        .map_err(|source| TlsSetupError::Read {
            path: path.to_owned(),
            source,
        })
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let certs = rustls_pemfile::certs(&mut open(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsSetupError::Read {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsSetupError::Empty {
            path: path.to_owned(),
            what: "certificate",
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    rustls_pemfile::private_key(&mut open(path)?)
        .map_err(|source| TlsSetupError::Read {
            path: path.to_owned(),
            source,
        })?
        .ok_or_else(|| TlsSetupError::Empty {
            path: path.to_owned(),
            what: "private key",
        })
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
        // A certificate that does not match the key.
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(files.path("other.key"), other.serialize_pem()).unwrap();
        config.key_file = files.path("other.key");
        assert!(matches!(
            server_config(&config),
            Err(TlsSetupError::Rustls(_))
        ));
    }
}
