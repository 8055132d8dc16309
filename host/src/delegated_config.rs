//! `[forwarding.delegated]`: the settings of the `delegated` forwarding policy, kept out of
//! `config.rs` (the struct itself is the policy's, in `portcullis-plugin-forwarding`).

use serde::Deserialize;

pub use portcullis_plugin_forwarding::delegated::{AuthorizerMode, DelegatedSettings};

use crate::config::ConfigError;

/// `[forwarding.delegated]`, read whatever the policy: the `delegated` policy's settings, and for
/// any other policy the opt-in that lets a plugin policy route requests as the client.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct DelegatedConfig(pub DelegatedSettings);

impl DelegatedConfig {
    /// Checks the values; errors name the full key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.0.validate().map_err(|invalid| ConfigError::Invalid {
            key: format!("forwarding.delegated.{}", invalid.key),
            message: invalid.message,
        })
    }

    /// The settings as the policy's configuration text (TOML), for its factory.
    pub fn policy_text(&self) -> String {
        toml::to_string(&self.0).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::ForwardingConfig;

    #[test]
    fn the_table_is_read_and_checked() {
        let text = r#"policy = "delegated"
[delegated]
token_lifetime_ms = 60000
idle_expire_ms = 1000
service_fallback = ["User:svc-*"]
authorizer = "upstream"
"#;
        let config: ForwardingConfig = toml::from_str(text).unwrap();
        let d = config.delegated_settings().unwrap();
        assert_eq!(d.token_lifetime_ms, 60_000);
        assert_eq!(d.authorizer, super::AuthorizerMode::Upstream);
        assert!(config.validate().is_ok());
        let bad: ForwardingConfig =
            toml::from_str(&text.replace("token_lifetime_ms = 60000", "token_lifetime_ms = 0"))
                .unwrap();
        assert!(matches!(
            bad.validate(),
            Err(crate::config::ConfigError::Invalid { key, .. }) if key == "forwarding.delegated.token_lifetime_ms"
        ));
        assert!(toml::from_str::<ForwardingConfig>(
            "[delegated]
lifetime = 1\n"
        )
        .is_err());
    }

    #[test]
    fn another_policy_gets_delegated_settings_only_with_the_table() {
        let plain: ForwardingConfig = toml::from_str("policy = \"topic-guard\"\n").unwrap();
        assert!(plain.delegated_settings().is_none());
        let builtin: ForwardingConfig = toml::from_str("policy = \"delegated\"\n").unwrap();
        assert_eq!(
            builtin.delegated_settings(),
            Some(&super::DelegatedSettings::default())
        );
        let opted_in: ForwardingConfig =
            toml::from_str("policy = \"topic-guard\"\n[delegated]\nidle_expire_ms = 5\n").unwrap();
        assert_eq!(opted_in.delegated_settings().unwrap().idle_expire_ms, 5);
        assert!(opted_in.validate().is_ok());
        // The upstream alone may not authorize what a plugin policy could send as the service.
        let upstream_only: ForwardingConfig =
            toml::from_str("policy = \"topic-guard\"\n[delegated]\nauthorizer = \"upstream\"\n")
                .unwrap();
        assert!(matches!(
            upstream_only.validate(),
            Err(crate::config::ConfigError::Invalid { key, .. }) if key == "forwarding.delegated.authorizer"
        ));
    }
}
