//! What `check-config` and the start-up log say about `[oauthbearer]`: its warnings and its
//! one-line summary.

use url::Url;

use crate::config::{OAuthBearerConfig, ValidatorKind};

/// What deserves a warning at start-up and in `check-config`: the unsecured validator, plain
/// http to a host that is not loopback.
pub fn warnings(config: &OAuthBearerConfig) -> Vec<String> {
    let mut warnings = Vec::new();
    if config.validator == ValidatorKind::Unsecured {
        warnings.push(
            "oauthbearer.validator = \"unsecured\": tokens are not signed, so anyone can log in \
             as any user (Kafka's development validator, allowed by allow_unsecured = true); \
             never use it in production"
                .to_owned(),
        );
    }
    for (key, url) in [
        ("oauthbearer.jwks_url", &config.jwks_url),
        ("oauthbearer.discovery_url", &config.discovery_url),
        ("oauthbearer.introspection_url", &config.introspection_url),
    ] {
        let Some(url) = url.as_deref().and_then(|u| Url::parse(u).ok()) else {
            continue;
        };
        if url.scheme() == "http" && !is_loopback(&url) {
            warnings.push(format!(
                "{key} = {url}: plain http to a host that is not loopback; what it answers \
                 can be changed in transit (use https)"
            ));
        }
    }
    warnings
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// One line for `check-config`.
pub fn summary(config: &OAuthBearerConfig) -> String {
    let source = match config.validator {
        ValidatorKind::Jwks => match (&config.jwks_url, &config.discovery_url) {
            (Some(url), _) => format!(
                "key set {url}, refreshed every {} ms",
                config.jwks_refresh_ms
            ),
            (None, Some(discovery)) => format!(
                "key set from the jwks_uri of {discovery}, refreshed every {} ms",
                config.jwks_refresh_ms
            ),
            (None, None) => "no key set".to_owned(),
        },
        ValidatorKind::Introspection => match (&config.introspection_url, &config.discovery_url) {
            (Some(url), _) => format!("endpoint {url}"),
            (None, Some(discovery)) => {
                format!("endpoint from the introspection_endpoint of {discovery}")
            }
            (None, None) => "no endpoint".to_owned(),
        },
        ValidatorKind::Unsecured => "UNSIGNED tokens accepted (development only)".to_owned(),
    };
    let issuer = match (&config.expected_issuer, &config.discovery_url) {
        (Some(issuer), _) => issuer.clone(),
        (None, Some(_)) if config.validator != ValidatorKind::Unsecured => {
            "from discovery".to_owned()
        }
        _ => "not checked".to_owned(),
    };
    let audience = if config.expected_audience.is_empty() {
        "not checked".to_owned()
    } else {
        config.expected_audience.join(", ")
    };
    format!(
        "{} validator ({source}); issuer {issuer}; audience {audience}; allowed URLs: {}",
        config.validator.name(),
        if config.allowed_urls.is_empty() {
            "none".to_owned()
        } else {
            config.allowed_urls.join(", ")
        }
    )
}
