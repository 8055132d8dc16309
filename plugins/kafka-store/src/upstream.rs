//! How the store's clients log in upstream, as a reload may change it: the SASL and TLS settings
//! of the moment, and what a reload's new `[upstream]` means for the clients.
//!
//! Two kinds of change, each with its own generation that every client compares with the one it
//! was made with (or last took) at each turn of its thread:
//!
//! - **credentials**: only the user and/or password. librdkafka takes them in place
//!   ([`crate::credentials`]); no client is made again, no connection closed.
//! - **clients**: the mechanism, a TLS setting, or the content of a TLS file (a rotated
//!   certificate, key or CA at the same path). librdkafka reads these once, when it makes a
//!   client, so each client is made again with them: the tail at the offset it has reached, the
//!   status producer, and the election member — which, on the writer, means stepping down and
//!   standing again (the writer may move to another node; mutations wait for the next writer, as
//!   in any failover). The open connections of the old clients close with them.
//!
//! A change is checked before the reload changes anything ([`Upstream::check`]): NUL bytes, a
//! mechanism librdkafka cannot log in with, and a client made with the new settings (librdkafka
//! reads the TLS files then, so a missing file, a file that is not PEM or a key that does not
//! match its certificate refuses the reload). Turning the SASL login on or off changes the
//! protocol, which needs a restart.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use rdkafka::producer::BaseProducer;
use sha2::{Digest, Sha256};

use crate::connection::{KafkaConnection, SaslSettings, StoreContext, TlsSettings};
use crate::credentials::{CCredentials, CredentialsError};

/// What a client was made with, or has taken since.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Generation {
    /// In-place replacements of user and password.
    pub(crate) credentials: u64,
    /// Changes that need the clients made again.
    pub(crate) clients: u64,
}

/// The SASL and TLS settings the store's clients are made with now.
#[derive(Clone)]
struct Login {
    sasl: Option<SaslSettings>,
    tls: Option<TlsSettings>,
    /// The SHA-256 of the TLS files' contents when the settings were taken.
    tls_files: [u8; 32],
}

/// The store's upstream login of the moment (see the module documentation).
pub(crate) struct Upstream {
    credentials: AtomicU64,
    clients: AtomicU64,
    login: Mutex<Login>,
}

/// A reload's new `[upstream]` login for the store, checked by
/// [`KafkaMetadataStore::check_upstream`](crate::KafkaMetadataStore::check_upstream); apply it
/// with [`KafkaMetadataStore::apply_upstream`](crate::KafkaMetadataStore::apply_upstream).
#[derive(Debug)]
pub struct UpstreamChange {
    remake: bool,
    /// The user or password changed (also with a remake: a client that cannot be made again yet
    /// takes them in place meanwhile).
    credentials: bool,
    sasl: Option<SaslSettings>,
    tls: Option<TlsSettings>,
    tls_files: [u8; 32],
}

impl UpstreamChange {
    /// Whether the store's clients are made again (the mechanism, the TLS settings or the TLS
    /// files changed), rather than given a new user and password in place.
    pub fn remakes_clients(&self) -> bool {
        self.remake
    }
}

/// Why the store cannot take a reload's new `[upstream]` login. Nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// A NUL byte in the user or password.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// A mechanism librdkafka cannot log in with from a password.
    #[error("upstream.sasl_mechanism: {0}")]
    Mechanism(#[from] crate::connection::UnsupportedMechanism),
    /// The store's clients would start or stop logging in with SASL: their protocol is fixed.
    #[error("the metadata store's clients would start or stop logging in with SASL")]
    LoginOnOff,
    /// librdkafka refused a client made with the new settings (a TLS file it cannot read or use).
    #[error("upstream.tls: the metadata store's client library refuses the new settings: {0}")]
    Client(String),
}

impl Upstream {
    pub(crate) fn new(sasl: Option<SaslSettings>, tls: Option<TlsSettings>) -> Self {
        let tls_files = stamp(tls.as_ref());
        Self {
            credentials: AtomicU64::new(0),
            clients: AtomicU64::new(0),
            login: Mutex::new(Login {
                sasl,
                tls,
                tls_files,
            }),
        }
    }

    fn login(&self) -> std::sync::MutexGuard<'_, Login> {
        self.login.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The settings of the moment, with their generation.
    pub(crate) fn current(&self) -> (Generation, Option<SaslSettings>, Option<TlsSettings>) {
        let login = self.login();
        (self.generation(), login.sasl.clone(), login.tls.clone())
    }

    /// Cheap (two atomic loads): the store's threads compare it at every turn.
    pub(crate) fn generation(&self) -> Generation {
        Generation {
            credentials: self.credentials.load(Ordering::Acquire),
            clients: self.clients.load(Ordering::Acquire),
        }
    }

    /// What `sasl` and `tls` (a reload's) would change, checked; `None` when nothing.
    /// `connection` gives the rest of a client's settings (bootstrap servers, protocol).
    pub(crate) fn check(
        &self,
        connection: &KafkaConnection,
        sasl: Option<SaslSettings>,
        tls: Option<TlsSettings>,
    ) -> Result<Option<UpstreamChange>, UpstreamError> {
        let tls_files = stamp(tls.as_ref());
        let login = self.login().clone();
        let remake = match (&login.sasl, &sasl) {
            (None, None) => false,
            (Some(old), Some(new)) => old.mechanism != new.mechanism,
            _ => return Err(UpstreamError::LoginOnOff),
        } || !same_tls(login.tls.as_ref(), tls.as_ref())
            || login.tls_files != tls_files;
        let credentials = match (&login.sasl, &sasl) {
            (Some(old), Some(new)) => old.username != new.username || old.password != new.password,
            _ => false,
        };
        if !remake && !credentials {
            return Ok(None);
        }
        if let Some(new) = &sasl {
            CCredentials::new(&new.username, &new.password)?;
        }
        let candidate = KafkaConnection {
            bootstrap_servers: connection.bootstrap_servers.clone(),
            security_protocol: connection.security_protocol.clone(),
            sasl: sasl.clone(),
            tls: tls.clone(),
        };
        candidate.validate()?;
        if remake {
            try_client(&candidate)?;
        }
        Ok(Some(UpstreamChange {
            remake,
            credentials,
            sasl,
            tls,
            tls_files,
        }))
    }

    /// Takes `change` (checked): the clients follow at their next turn.
    pub(crate) fn apply(&self, change: UpstreamChange) {
        let mut login = self.login();
        login.sasl = change.sasl;
        login.tls = change.tls;
        login.tls_files = change.tls_files;
        if change.remake {
            self.clients.fetch_add(1, Ordering::AcqRel);
        }
        if change.credentials {
            self.credentials.fetch_add(1, Ordering::AcqRel);
        }
    }
}

fn same_tls(a: Option<&TlsSettings>, b: Option<&TlsSettings>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.ca_file == b.ca_file
                && a.cert_file == b.cert_file
                && a.key_file == b.key_file
                && a.verify_server_name == b.verify_server_name
        }
        _ => false,
    }
}

/// The SHA-256 of the TLS files' contents, each with its length first (a file that cannot be read
/// counts as a distinct, empty one: its coming back is a change too).
fn stamp(tls: Option<&TlsSettings>) -> [u8; 32] {
    let mut hash = Sha256::new();
    if let Some(tls) = tls {
        for file in [&tls.ca_file, &tls.cert_file, &tls.key_file] {
            match file.as_deref().map(read) {
                None => hash.update([0]),
                Some(None) => hash.update([1]),
                Some(Some(bytes)) => {
                    hash.update([2]);
                    hash.update((bytes.len() as u64).to_be_bytes());
                    hash.update(&bytes);
                }
            }
        }
    }
    hash.finalize().into()
}

fn read(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

/// Makes (and drops) a client with `connection`'s settings, without a broker to connect to:
/// librdkafka reads and checks the TLS files when it makes a client.
fn try_client(connection: &KafkaConnection) -> Result<(), UpstreamError> {
    connection
        .client_config("portcullis-store-settings-check")
        .set("bootstrap.servers", "")
        .create_with_context::<_, BaseProducer<StoreContext>>(StoreContext)
        .map(drop)
        .map_err(|e| UpstreamError::Client(crate::connection::client_error_text(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sasl(mechanism: &str, username: &str, password: &str) -> SaslSettings {
        SaslSettings {
            mechanism: mechanism.into(),
            username: username.into(),
            password: password.into(),
        }
    }

    fn connection(protocol: &str) -> KafkaConnection {
        KafkaConnection {
            bootstrap_servers: vec!["127.0.0.1:9".into()],
            security_protocol: protocol.into(),
            sasl: None,
            tls: None,
        }
    }

    #[test]
    fn the_same_login_changes_nothing() {
        let upstream = Upstream::new(Some(sasl("SCRAM-SHA-512", "svc", "pw")), None);
        let change = upstream
            .check(
                &connection("SASL_PLAINTEXT"),
                Some(sasl("SCRAM-SHA-512", "svc", "pw")),
                None,
            )
            .expect("checked");
        assert!(change.is_none());
    }

    #[test]
    fn a_new_password_is_taken_in_place_and_a_new_mechanism_remakes_the_clients() {
        let upstream = Upstream::new(Some(sasl("SCRAM-SHA-512", "svc", "pw")), None);
        let c = connection("SASL_PLAINTEXT");
        let password = upstream
            .check(&c, Some(sasl("SCRAM-SHA-512", "svc", "new")), None)
            .expect("checked")
            .expect("a change");
        assert!(!password.remakes_clients());
        upstream.apply(password);
        assert_eq!(
            upstream.generation(),
            Generation {
                credentials: 1,
                clients: 0
            }
        );
        let mechanism = upstream
            .check(&c, Some(sasl("SCRAM-SHA-256", "svc", "new")), None)
            .expect("checked")
            .expect("a change");
        assert!(mechanism.remakes_clients());
        upstream.apply(mechanism);
        let (generation, now, _) = upstream.current();
        assert_eq!(generation.clients, 1);
        assert_eq!(now.expect("SASL").mechanism, "SCRAM-SHA-256");
    }

    #[test]
    fn refusals_name_the_cause_and_never_the_password() {
        let upstream = Upstream::new(Some(sasl("SCRAM-SHA-512", "svc", "pw")), None);
        let c = connection("SASL_PLAINTEXT");
        let gssapi = upstream
            .check(&c, Some(sasl("GSSAPI", "svc", "s3cret")), None)
            .expect_err("refused");
        assert!(gssapi.to_string().contains("GSSAPI"), "{gssapi}");
        let nul = upstream
            .check(&c, Some(sasl("SCRAM-SHA-512", "svc", "s3c\0ret")), None)
            .expect_err("refused");
        assert!(!nul.to_string().contains("s3c"), "{nul}");
        assert!(matches!(
            upstream.check(&c, None, None),
            Err(UpstreamError::LoginOnOff)
        ));
        assert_eq!(upstream.generation(), Generation::default());
    }

    #[test]
    fn a_tls_file_rotated_in_place_remakes_the_clients_and_an_unusable_one_is_refused() {
        let dir =
            std::env::temp_dir().join(format!("portcullis-store-upstream-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "not a certificate").expect("write");
        let tls = TlsSettings {
            ca_file: Some(ca.clone()),
            ..TlsSettings::default()
        };
        let upstream = Upstream::new(None, Some(tls.clone()));
        let c = connection("SSL");
        assert!(upstream
            .check(&c, None, Some(tls.clone()))
            .expect("checked")
            .is_none());
        std::fs::write(&ca, "still not a certificate").expect("write");
        let refused = upstream
            .check(&c, None, Some(tls))
            .expect_err("librdkafka cannot read it");
        assert!(
            matches!(&refused, UpstreamError::Client(m) if m.contains("ssl.ca.location")),
            "{refused}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
