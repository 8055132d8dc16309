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

impl Principal {
    /// A `User:<name>` principal.
    pub fn user(name: impl Into<String>) -> Self {
        Self {
            kind: USER_TYPE.to_owned(),
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

/// What a [`PrincipalBuilder`] knows about the connection.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AuthenticationContext<'a> {
    /// The completed SASL exchange.
    pub authenticated: &'a Authenticated,
    /// The client's address.
    pub client_address: IpAddr,
    /// The listener's name.
    pub listener: &'a str,
    /// Whether the connection runs over TLS.
    pub tls: bool,
}

impl<'a> AuthenticationContext<'a> {
    /// Creates a context.
    pub fn new(
        authenticated: &'a Authenticated,
        client_address: IpAddr,
        listener: &'a str,
        tls: bool,
    ) -> Self {
        Self {
            authenticated,
            client_address,
            listener,
            tls,
        }
    }
}

/// Maps a completed authentication to a principal (Kafka's `KafkaPrincipalBuilder`).
pub trait PrincipalBuilder: Send + Sync {
    /// Builds the principal. Called once per (re-)authentication; the result is cached for the session.
    fn build(&self, context: &AuthenticationContext<'_>) -> Principal;
}

/// Kafka's default: `User:<authorization id>`.
#[derive(Debug, Default, Clone, Copy)]
pub struct DefaultPrincipalBuilder;

impl PrincipalBuilder for DefaultPrincipalBuilder {
    fn build(&self, context: &AuthenticationContext<'_>) -> Principal {
        Principal::user(context.authenticated.authorization_id.clone())
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
    fn rejects_missing_colon_or_empty_parts() {
        for bad in ["alice", ":alice", "User:", ""] {
            assert!(Principal::parse(bad).is_err(), "{bad}");
        }
    }
}
