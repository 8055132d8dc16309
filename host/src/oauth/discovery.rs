//! OpenID Connect discovery (`discovery_url`, `…/.well-known/openid-configuration`): fetched once
//! at start when it has something to fill — `jwks_url` (from `jwks_uri`), `introspection_url`
//! (from `introspection_endpoint`) and `expected_issuer` (from `issuer`) — for the keys the
//! configuration leaves out. What it fills is checked against `allowed_urls` like a configured
//! URL: a provider's document cannot send Portcullis anywhere the operator has not allowed, and
//! never to a `file:` URL.

use serde_json::Value;
use url::Url;

use super::allow::{AllowList, UrlRefused};
use super::http::{HttpClient, HttpError};
use super::retry::{Backoff, Exhausted};

/// The provider's metadata Portcullis reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderMetadata {
    /// `issuer`.
    pub issuer: Option<String>,
    /// `jwks_uri`.
    pub jwks_uri: Option<String>,
    /// `introspection_endpoint`.
    pub introspection_endpoint: Option<String>,
}

/// Why discovery failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// The document could not be fetched.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// It is not a JSON object.
    #[error("the answer is not a JSON object (an OpenID provider configuration)")]
    NotJson,
    /// A member has the wrong type.
    #[error("`{0}` is not a string")]
    NotAString(&'static str),
}

impl ProviderMetadata {
    /// Reads the members Portcullis uses from a discovery document.
    ///
    /// # Errors
    /// [`DiscoveryError`] for something that is not a JSON object or a member of the wrong type.
    pub fn parse(body: &[u8]) -> Result<Self, DiscoveryError> {
        let value: Value = serde_json::from_slice(body).map_err(|_| DiscoveryError::NotJson)?;
        let object = value.as_object().ok_or(DiscoveryError::NotJson)?;
        let member = |name: &'static str| match object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(DiscoveryError::NotAString(name)),
        };
        Ok(Self {
            issuer: member("issuer")?,
            jwks_uri: member("jwks_uri")?,
            introspection_endpoint: member("introspection_endpoint")?,
        })
    }
}

/// Fetches and reads the document at `url`, retried like a key set.
///
/// # Errors
/// The last attempt's error.
pub async fn discover(
    http: &HttpClient,
    url: &Url,
    backoff: Backoff,
) -> Result<ProviderMetadata, Exhausted<DiscoveryError>> {
    backoff
        .retry(|| async {
            let body = http.get(url).await?;
            ProviderMetadata::parse(&body)
        })
        .await
}

/// Why a URL the provider's document gave cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveredUrlRefused {
    /// Refused as a configured URL would be (`allowed_urls`, scheme, credentials).
    #[error(transparent)]
    Refused(#[from] UrlRefused),
    /// A `file:` URL: a remote document never names a local file.
    #[error("`{0}`: a discovered URL must be http(s), never file:")]
    File(String),
}

/// A URL the document gave, checked as a configured one would be, and never `file:`.
///
/// # Errors
/// Why it cannot be used (the caller names the key).
pub fn check_discovered(allow: &AllowList, url: &str) -> Result<Url, DiscoveredUrlRefused> {
    let parsed = allow.check(url)?;
    if parsed.scheme() == "file" {
        return Err(DiscoveredUrlRefused::File(url.to_owned()));
    }
    Ok(parsed)
}

/// The issuer a discovery URL implies (OpenID Connect Discovery §4: the document lives at the
/// issuer + `/.well-known/openid-configuration`), to warn when the document says otherwise.
pub fn implied_issuer(discovery_url: &Url) -> Option<String> {
    discovery_url
        .as_str()
        .strip_suffix("/.well-known/openid-configuration")
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_members_it_uses() {
        let doc = br#"{"issuer":"https://idp.example/realms/kafka",
            "jwks_uri":"https://idp.example/realms/kafka/certs",
            "introspection_endpoint":"https://idp.example/realms/kafka/introspect",
            "token_endpoint":"https://idp.example/realms/kafka/token",
            "scopes_supported":["openid"]}"#;
        let m = ProviderMetadata::parse(doc).unwrap();
        assert_eq!(
            m.issuer.as_deref(),
            Some("https://idp.example/realms/kafka")
        );
        assert_eq!(
            m.jwks_uri.as_deref(),
            Some("https://idp.example/realms/kafka/certs")
        );
        assert_eq!(
            m.introspection_endpoint.as_deref(),
            Some("https://idp.example/realms/kafka/introspect")
        );
        assert_eq!(
            ProviderMetadata::parse(b"{}").unwrap(),
            ProviderMetadata::default()
        );
        assert_eq!(
            ProviderMetadata::parse(b"[1]"),
            Err(DiscoveryError::NotJson)
        );
        assert_eq!(
            ProviderMetadata::parse(b"<html>"),
            Err(DiscoveryError::NotJson)
        );
        assert_eq!(
            ProviderMetadata::parse(br#"{"jwks_uri":7}"#),
            Err(DiscoveryError::NotAString("jwks_uri"))
        );
    }

    #[test]
    fn discovered_urls_follow_the_allow_list_and_are_never_files() {
        let allow =
            AllowList::new(&["https://idp.example/".to_owned(), "file:/etc/".to_owned()]).unwrap();
        assert!(check_discovered(&allow, "https://idp.example/certs").is_ok());
        assert!(check_discovered(&allow, "https://evil.example/certs").is_err());
        assert!(check_discovered(&allow, "file:/etc/jwks.json").is_err());
    }

    #[test]
    fn the_issuer_a_discovery_url_implies() {
        let url = Url::parse("https://idp.example/realms/kafka/.well-known/openid-configuration")
            .unwrap();
        assert_eq!(
            implied_issuer(&url).as_deref(),
            Some("https://idp.example/realms/kafka")
        );
        assert_eq!(
            implied_issuer(&Url::parse("https://idp.example/meta").unwrap()),
            None
        );
    }
}
