//! OAUTHBEARER among the plugins: its name, whether the listener enables it, and why a
//! `[plugins.config.OAUTHBEARER]` table is refused (it is configured in `[oauthbearer]`).

use crate::config::Config;

/// OAUTHBEARER's name.
pub(super) const OAUTHBEARER: &str = crate::config::OAUTHBEARER;

/// OAUTHBEARER is configured in `[oauthbearer]`: a `[plugins.config.OAUTHBEARER]` table is a
/// mistake worth naming.
pub(super) fn oauth_table_check(text: &str) -> Result<(), portcullis_plugin_api::ConfigError> {
    if text.trim().is_empty() {
        Ok(())
    } else {
        Err(portcullis_plugin_api::ConfigError::new(
            "OAUTHBEARER is configured in the [oauthbearer] table, not in [plugins.config.OAUTHBEARER]",
            None,
        ))
    }
}

/// Whether `listener.sasl_mechanisms` enables OAUTHBEARER.
pub(super) fn oauth_enabled(config: &Config) -> bool {
    config
        .listener
        .sasl_mechanisms
        .iter()
        .any(|m| m == crate::config::OAUTHBEARER)
}
