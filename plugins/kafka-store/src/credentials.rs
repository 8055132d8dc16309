//! Live upstream credentials for the store's clients. A reload that changes `[upstream]`'s
//! username or password hands them to every client the store holds; librdkafka uses them from
//! that client's next authentication on (a reconnection, or a KIP-368 re-authentication when the
//! upstream listener sets `connections.max.reauth.ms`) and closes no connection. Clients made
//! later are configured with them.
//!
//! librdkafka fixes a client's mechanism and TLS files when the client is made (a change of those
//! makes the clients again, see [`crate::upstream`]); only the user and password can change in
//! place, with `rd_kafka_sasl_set_credentials`. The `rdkafka` crate does not wrap that call, so
//! this module makes it itself: the one `unsafe` code of this crate.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::time::{Duration, Instant};

use rdkafka::bindings;
use rdkafka::client::{Client, ClientContext};

use crate::upstream::{Generation, Upstream};

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

/// How long a thread whose client could not be made again keeps the one it has before it tries
/// again (a TLS file replaced between the reload's check and the thread's turn, say).
const REMAKE_RETRY: Duration = Duration::from_secs(5);

/// What one client has taken of [`Upstream`].
pub(crate) struct Follower {
    seen: Generation,
    /// A failed remake: not before then again.
    retry_at: Option<Instant>,
}

impl Follower {
    /// A client configured with the settings of `generation`.
    pub(crate) fn at(generation: Generation) -> Self {
        Self {
            seen: generation,
            retry_at: None,
        }
    }

    /// Whether a reload changed what this client can only be made with (the mechanism, TLS):
    /// the caller makes it again. Cheap: one atomic load (and a clock read after a failure).
    pub(crate) fn must_remake(&self, upstream: &Upstream) -> bool {
        upstream.generation().clients != self.seen.clients
            && self.retry_at.is_none_or(|at| Instant::now() >= at)
    }

    /// The client could not be made again: the thread keeps the one it has (which goes on taking
    /// new credentials in place) and tries again after [`REMAKE_RETRY`].
    pub(crate) fn remake_failed(&mut self) {
        self.retry_at = Some(Instant::now() + REMAKE_RETRY);
    }

    /// Gives `client` the current user and password if they changed since it last took them.
    /// Cheap when nothing changed (one atomic load): the store's threads call it every turn.
    pub(crate) fn follow<C: ClientContext>(
        &mut self,
        upstream: &Upstream,
        client: &Client<C>,
        which: &str,
    ) {
        if upstream.generation().credentials == self.seen.credentials {
            return;
        }
        let (generation, sasl, _) = upstream.current();
        // Only the credentials are taken here: a client that must be made again keeps lagging
        // in `clients` until its thread makes it.
        self.seen.credentials = generation.credentials;
        let Some(sasl) = sasl else { return };
        // Checked when the reload took them (`KafkaMetadataStore::check_upstream`).
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
    use crate::connection::{KafkaConnection, SaslSettings};

    fn sasl(password: &str) -> SaslSettings {
        SaslSettings {
            mechanism: "SCRAM-SHA-512".into(),
            username: "svc-a".into(),
            password: password.into(),
        }
    }

    #[test]
    fn a_nul_byte_is_refused_naming_the_field_not_its_value() {
        let e = CCredentials::new("svc", "s3cr\0et").err().expect("refused");
        assert_eq!(e, CredentialsError::Nul { what: "password" });
        assert!(!e.to_string().contains("s3cr"), "{e}");
        assert!(CCredentials::new("s\0vc", "x").is_err());
    }

    #[test]
    fn a_client_takes_new_credentials_once_and_a_remake_is_left_to_its_thread() {
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
        let connection = KafkaConnection {
            bootstrap_servers: vec!["127.0.0.1:9".into()],
            security_protocol: "SASL_PLAINTEXT".into(),
            sasl: None,
            tls: None,
        };
        let upstream = Upstream::new(Some(sasl("old")), None);
        let mut follower = Follower::at(upstream.generation());
        let change = upstream.check(&connection, Some(sasl("new")), None);
        upstream.apply(change.expect("checked").expect("changed"));
        assert!(!follower.must_remake(&upstream));
        follower.follow(&upstream, consumer.client(), "test");
        assert_eq!(follower.seen, upstream.generation());
        let c = CCredentials::new("svc-c", "newer").expect("no NUL");
        assert_eq!(set_on_client(consumer.client(), &c), Ok(()));
        let mut other = sasl("new");
        other.mechanism = "PLAIN".into();
        let change = upstream.check(&connection, Some(other), None);
        upstream.apply(change.expect("checked").expect("changed"));
        follower.follow(&upstream, consumer.client(), "test");
        assert!(follower.must_remake(&upstream));
    }
}
