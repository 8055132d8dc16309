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
