//! Live upstream credentials for the store's clients. A reload that changes `[upstream]`'s
//! username or password hands them to every client the store holds; librdkafka uses them from
//! that client's next authentication on (a reconnection, or a KIP-368 re-authentication when the
//! upstream listener sets `connections.max.reauth.ms`) and closes no connection. Clients made
//! later are configured with them.
//!
//! librdkafka fixes a client's mechanism and TLS files when the client is made; only the user and
//! password can change in place, with `rd_kafka_sasl_set_credentials`. The `rdkafka` crate does
//! not wrap that call, so this module makes it itself: the one `unsafe` code of this crate.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use rdkafka::bindings;
use rdkafka::client::{Client, ClientContext};

use crate::connection::SaslSettings;

/// Upstream credentials librdkafka cannot take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// A C string cannot hold a NUL byte.
    #[error("the upstream {what} contains a NUL byte, which the kafka store's client library cannot take")]
    Nul {
        /// `username` or `password`.
        what: &'static str,
    },
}

/// A user and password as librdkafka takes them; never shown.
pub(crate) struct CCredentials {
    username: CString,
    password: CString,
}

impl CCredentials {
    pub(crate) fn new(username: &str, password: &str) -> Result<Self, CredentialsError> {
        let c = |value: &str, what| CString::new(value).map_err(|_| CredentialsError::Nul { what });
        Ok(Self {
            username: c(username, "username")?,
            password: c(password, "password")?,
        })
    }
}

/// The store's current SASL settings, and how often they were replaced (each client remembers
/// the generation it has, and takes the current settings when it lags).
pub(crate) struct Credentials {
    generation: AtomicU64,
    sasl: Mutex<Option<SaslSettings>>,
}

impl Credentials {
    pub(crate) fn new(sasl: Option<SaslSettings>) -> Self {
        Self {
            generation: AtomicU64::new(0),
            sasl: Mutex::new(sasl),
        }
    }

    /// The settings of the moment, with their generation.
    pub(crate) fn current(&self) -> (u64, Option<SaslSettings>) {
        let sasl = self.sasl.lock().unwrap_or_else(PoisonError::into_inner);
        (self.generation.load(Ordering::Acquire), sasl.clone())
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Replaces user and password (the mechanism stays); `false` when the store does not log in
    /// with SASL, so there is nothing to replace.
    pub(crate) fn replace(&self, username: &str, password: &str) -> bool {
        let mut sasl = self.sasl.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(current) = sasl.as_mut() else {
            return false;
        };
        current.username = username.to_owned();
        current.password = password.to_owned();
        self.generation.fetch_add(1, Ordering::AcqRel);
        true
    }
}

/// What one client has taken of [`Credentials`].
pub(crate) struct Follower {
    seen: u64,
}

impl Follower {
    /// A client configured with the settings of `generation`.
    pub(crate) fn at(generation: u64) -> Self {
        Self { seen: generation }
    }

    /// Gives `client` the current user and password if they changed since it last took them.
    /// Cheap when nothing changed (one atomic load): the store's threads call it every turn.
    pub(crate) fn follow<C: ClientContext>(
        &mut self,
        credentials: &Credentials,
        client: &Client<C>,
        which: &str,
    ) {
        if credentials.generation() == self.seen {
            return;
        }
        let (generation, sasl) = credentials.current();
        self.seen = generation;
        let Some(sasl) = sasl else { return };
        // Checked when the reload took them (`KafkaMetadataStore::check_sasl_credentials`).
        let Ok(c) = CCredentials::new(&sasl.username, &sasl.password) else {
            return;
        };
        match set_on_client(client, &c) {
            Ok(()) => tracing::info!(
                client = %which,
                username = %sasl.username,
                "the metadata store's client logs in upstream with the reloaded credentials from its next authentication"
            ),
            Err(error) => tracing::error!(
                client = %which,
                %error,
                "the metadata store's client could not take the reloaded upstream credentials; it keeps the ones it has"
            ),
        }
    }
}

/// `rd_kafka_sasl_set_credentials` on `client`: librdkafka copies both strings (under the
/// client's SASL lock, which its PLAIN and SCRAM code read them under), wakes the client's
/// broker threads, and uses them for the client's next authentication. It returns an error
/// object only for a NULL argument, which a `CString` never is.
fn set_on_client<C: ClientContext>(client: &Client<C>, c: &CCredentials) -> Result<(), String> {
    // SAFETY: `native_ptr` is the live handle of `client`, borrowed for this call; the strings
    // are NUL-terminated and outlive the call, which copies them.
    let error = unsafe {
        bindings::rd_kafka_sasl_set_credentials(
            client.native_ptr(),
            c.username.as_ptr(),
            c.password.as_ptr(),
        )
    };
    if error.is_null() {
        return Ok(());
    }
    // SAFETY: `error` is a non-null error object that this function owns: its string is read
    // (copied) before the object is destroyed, once.
    unsafe {
        let message = CStr::from_ptr(bindings::rd_kafka_error_string(error))
            .to_string_lossy()
            .into_owned();
        bindings::rd_kafka_error_destroy(error);
        Err(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sasl() -> SaslSettings {
        SaslSettings {
            mechanism: "SCRAM-SHA-512".into(),
            username: "svc-a".into(),
            password: "old".into(),
        }
    }

    #[test]
    fn a_replacement_keeps_the_mechanism_and_moves_the_generation() {
        let credentials = Credentials::new(Some(sasl()));
        assert!(credentials.replace("svc-b", "new"));
        let (generation, now) = credentials.current();
        let now = now.expect("still SASL");
        assert_eq!(generation, 1);
        assert_eq!(
            (
                now.mechanism.as_str(),
                now.username.as_str(),
                now.password.as_str()
            ),
            ("SCRAM-SHA-512", "svc-b", "new")
        );
    }

    #[test]
    fn without_sasl_there_is_nothing_to_replace() {
        let credentials = Credentials::new(None);
        assert!(!credentials.replace("svc-b", "new"));
        let (generation, sasl) = credentials.current();
        assert_eq!(generation, 0);
        assert!(sasl.is_none());
    }

    #[test]
    fn a_nul_byte_is_refused_naming_the_field_not_its_value() {
        let e = CCredentials::new("svc", "s3cr\0et").err().expect("refused");
        assert_eq!(e, CredentialsError::Nul { what: "password" });
        assert!(!e.to_string().contains("s3cr"), "{e}");
        assert!(CCredentials::new("s\0vc", "x").is_err());
    }

    #[test]
    fn a_client_takes_the_new_credentials_once() {
        use rdkafka::config::ClientConfig;
        use rdkafka::consumer::{BaseConsumer, Consumer};
        // A client that never connects (nothing listens on port 9): librdkafka takes the call
        // on its handle all the same.
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:9")
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "SCRAM-SHA-512")
            .set("sasl.username", "svc-a")
            .set("sasl.password", "old")
            .set("log_level", "0")
            .create()
            .expect("client");
        let credentials = Credentials::new(Some(sasl()));
        let mut follower = Follower::at(credentials.generation());
        credentials.replace("svc-b", "new");
        follower.follow(&credentials, consumer.client(), "test");
        assert_eq!(follower.seen, 1);
        let c = CCredentials::new("svc-c", "newer").expect("no NUL");
        assert_eq!(set_on_client(consumer.client(), &c), Ok(()));
    }
}
