//! Principals and how an authenticated identity becomes one.

use std::fmt;
use std::net::IpAddr;

use crate::sasl::Authenticated;

/// A Kafka principal: `type:name`, e.g. `User:alice`.
///
/// Like Kafka's `KafkaPrincipal`, equality and hashing use the type and the name only; whether the
/// principal authenticated with a delegation token is carried separately.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    /// The principal type, `User` for every built-in mechanism.
    pub kind: String,
    /// The principal name.
    pub name: String,
}

/// The principal type every built-in mechanism produces.
pub const USER_TYPE: &str = "User";

/// The principal type of a session's groups (`Group:<name>`, one per group of a bearer token's
/// groups claim): ACLs may name them like any principal, and a session is authorized as its
/// user principal and each of its group principals (see
/// [`RequestContext::groups`](crate::authorizer::RequestContext::groups)).
pub const GROUP_TYPE: &str = "Group";

impl Principal {
    /// A `User:<name>` principal.
    pub fn user(name: impl Into<String>) -> Self {
        Self {
            kind: USER_TYPE.to_owned(),
            name: name.into(),
        }
    }

    /// A `Group:<name>` principal.
    pub fn group(name: impl Into<String>) -> Self {
        Self {
            kind: GROUP_TYPE.to_owned(),
            name: name.into(),
        }
    }

    /// `User:ANONYMOUS`, the principal of unauthenticated connections.
    pub fn anonymous() -> Self {
        Self::user("ANONYMOUS")
    }

    /// Parses `type:name`, splitting on the first `:` as Kafka does. Both parts must be non-empty.
    pub fn parse(text: &str) -> Result<Self, PrincipalParseError> {
        match text.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(Self {
                kind: kind.to_owned(),
                name: name.to_owned(),
            }),
            _ => Err(PrincipalParseError(text.to_owned())),
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.name)
    }
}

/// A principal string that is not of the form `type:name`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid principal '{0}': expected 'type:name'")]
pub struct PrincipalParseError(pub String);

/// What a TLS connection knows about its peer: the certificate chain the client presented (and
/// the listener verified against its CA), leaf first, and the leaf's subject.
///
/// Carried for every TLS listener (SASL_SSL today; SSL and the inter-node listener later), so a
/// [`PrincipalBuilder`] can map a client certificate, as Kafka's `ssl.principal.mapping.rules` do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsPeer {
    /// The DER certificates the client sent, leaf first; empty when it sent none.
    pub certificates: Vec<Vec<u8>>,
    /// The leaf certificate's subject as an RFC 2253 distinguished name (what Java's
    /// `X500Principal.getName()` returns, e.g. `CN=alice,OU=eng,O=example`): most specific
    /// attribute first, no spaces after the commas. `None` without a certificate.
    pub subject: Option<String>,
}

impl TlsPeer {
    /// A peer with this chain (leaf first) and the leaf's subject.
    pub fn new(certificates: Vec<Vec<u8>>, subject: Option<String>) -> Self {
        Self {
            certificates,
            subject,
        }
    }
}

/// What a [`PrincipalBuilder`] knows about the connection (Kafka's `AuthenticationContext`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AuthenticationContext<'a> {
    /// The completed SASL exchange, on a SASL listener; `None` on a listener that authenticates by
    /// TLS alone.
    pub sasl: Option<&'a Authenticated>,
    /// The SASL mechanism that completed (`None` with `sasl`).
    pub mechanism: Option<&'a str>,
    /// The TLS peer, on a TLS listener (with or without a client certificate); `None` on a
    /// plaintext one.
    pub tls: Option<&'a TlsPeer>,
    /// The client's address.
    pub client_address: IpAddr,
    /// The listener's name.
    pub listener: &'a str,
}

impl<'a> AuthenticationContext<'a> {
    /// A context for a completed SASL exchange.
    pub fn sasl(
        authenticated: &'a Authenticated,
        mechanism: &'a str,
        client_address: IpAddr,
        listener: &'a str,
    ) -> Self {
        Self {
            sasl: Some(authenticated),
            mechanism: Some(mechanism),
            tls: None,
            client_address,
            listener,
        }
    }

    /// A context for a connection authenticated by TLS alone (an SSL listener).
    pub fn tls_only(tls: &'a TlsPeer, client_address: IpAddr, listener: &'a str) -> Self {
        Self {
            sasl: None,
            mechanism: None,
            tls: Some(tls),
            client_address,
            listener,
        }
    }

    /// Adds the TLS peer of the connection.
    pub fn with_tls(mut self, tls: Option<&'a TlsPeer>) -> Self {
        self.tls = tls;
        self
    }

    /// The client certificate's subject, when the connection has one.
    pub fn certificate_subject(&self) -> Option<&'a str> {
        self.tls.and_then(|tls| tls.subject.as_deref())
    }
}

/// Why no principal could be built: the (re-)authentication fails (the client sees Kafka's
/// generic SASL_AUTHENTICATION_FAILED message; the reason is logged).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrincipalError {
    /// No mapping rule applies to the name (Kafka: "No rules apply to ...").
    #[error("no rule maps {name:?} to a principal")]
    NoRuleApplies {
        /// The name that was mapped.
        name: String,
    },
    /// The context lacks what the builder needs (e.g. a client certificate).
    #[error("cannot build a principal: {reason}")]
    Unavailable {
        /// What is missing.
        reason: String,
    },
    /// The builder failed (a dynamic plugin that panicked or broke the ABI contract).
    #[error("the principal builder failed: {reason}")]
    Failed {
        /// Why.
        reason: String,
    },
}

/// Maps a completed authentication to a principal (Kafka's `KafkaPrincipalBuilder`).
pub trait PrincipalBuilder: Send + Sync {
    /// Builds the principal. Called once per (re-)authentication; the result is cached for the
    /// session. An error fails that authentication.
    fn build(&self, context: &AuthenticationContext<'_>) -> Result<Principal, PrincipalError>;
}

/// Kafka's default (`DefaultKafkaPrincipalBuilder` without mapping rules): `User:<authorization
/// id>` after SASL; `User:<certificate subject>` on a TLS-only listener; `User:ANONYMOUS` without
/// either.
#[derive(Debug, Default, Clone, Copy)]
pub struct DefaultPrincipalBuilder;

impl PrincipalBuilder for DefaultPrincipalBuilder {
    fn build(&self, context: &AuthenticationContext<'_>) -> Result<Principal, PrincipalError> {
        if let Some(sasl) = context.sasl {
            return Ok(Principal::user(sasl.authorization_id.clone()));
        }
        Ok(match context.certificate_subject() {
            Some(subject) => Principal::user(subject),
            None => Principal::anonymous(),
        })
    }
}

impl crate::Plugin for DefaultPrincipalBuilder {
    const NAME: &'static str = "default";
    type Config = crate::NoConfig;
    fn new(_config: crate::NoConfig, _host: &crate::Host) -> Result<Self, crate::PluginError> {
        Ok(DefaultPrincipalBuilder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_on_first_colon() {
        let p = Principal::parse("User:CN=a:b").unwrap();
        assert_eq!(p.kind, "User");
        assert_eq!(p.name, "CN=a:b");
        assert_eq!(p.to_string(), "User:CN=a:b");
    }

    #[test]
    fn the_default_builder_prefers_sasl_then_the_certificate() {
        let address = IpAddr::from([127, 0, 0, 1]);
        let done = Authenticated::new("alice");
        let peer = TlsPeer::new(vec![vec![1]], Some("CN=svc,O=example".into()));
        let sasl = AuthenticationContext::sasl(&done, "PLAIN", address, "l").with_tls(Some(&peer));
        assert_eq!(
            DefaultPrincipalBuilder.build(&sasl).unwrap(),
            Principal::user("alice")
        );
        let tls = AuthenticationContext::tls_only(&peer, address, "l");
        assert_eq!(
            DefaultPrincipalBuilder.build(&tls).unwrap(),
            Principal::user("CN=svc,O=example")
        );
        let nothing = TlsPeer::default();
        let anonymous = AuthenticationContext::tls_only(&nothing, address, "l");
        assert_eq!(
            DefaultPrincipalBuilder.build(&anonymous).unwrap(),
            Principal::anonymous()
        );
    }

    #[test]
    fn rejects_missing_colon_or_empty_parts() {
        for bad in ["alice", ":alice", "User:", ""] {
            assert!(Principal::parse(bad).is_err(), "{bad}");
        }
    }
}
