//! `[authorizer]` and `[audit]`.

use super::*;

/// `[authorizer]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizerConfig {
    /// The authorizer plugin (`acl`).
    #[serde(default = "default_authorizer")]
    pub plugin: String,
    /// Principals (`type:name`) allowed everything (Kafka `super.users`).
    #[serde(default)]
    pub super_users: Vec<String>,
    /// Allow an action on a resource that has no ACL at all (Kafka `allow.everyone.if.no.acl.found`).
    #[serde(default)]
    pub allow_everyone_if_no_acl_found: bool,
}

/// `[audit]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Where to append one JSON object per authorization decision; absent disables the log.
    pub file: Option<PathBuf>,
    /// Write allowed decisions.
    #[serde(default)]
    pub log_allowed: bool,
    /// Write denied decisions.
    #[serde(default = "default_true")]
    pub log_denied: bool,
}

fn default_authorizer() -> String {
    "acl".to_owned()
}

impl AuthorizerConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for user in &self.super_users {
            if portcullis::principal::Principal::parse(user).is_err() {
                return Err(invalid(
                    "authorizer.super_users",
                    format!("`{user}` is not a principal of the form type:name"),
                ));
            }
        }
        Ok(())
    }
}
