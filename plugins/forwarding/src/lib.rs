//! Built-in forwarding policies.
//!
//! `passthrough` (the default): the security APIs (SASL, ApiVersions, ACLs, delegation tokens, SCRAM
//! credentials, Envelope) are served by Portcullis itself; everything else goes upstream as the
//! service identity; API keys listed in `deny_api_keys` are refused (`Route::Reject` with
//! POLICY_VIOLATION, which the connection answers with Kafka's denial response for that API).
#![deny(missing_docs)]

pub mod delegated;

use std::sync::Arc;

use portcullis::errors::ErrorCode;
use portcullis::forwarding::{ForwardingPolicy, RequestInfo, Route};
use portcullis::plugin_api::{parse_config, NoConfig};
use portcullis::registry::{check_config, ForwardingSettings, PolicyFactory};
use portcullis::{Host, PluginError};

/// Security APIs local, everything else upstream, minus a deny list.
#[derive(Debug, Clone, Default)]
pub struct Passthrough {
    deny_api_keys: Vec<i16>,
}

impl Passthrough {
    /// Creates the policy.
    pub fn new(settings: &ForwardingSettings) -> Self {
        Self {
            deny_api_keys: settings.deny_api_keys.clone(),
        }
    }
}

impl ForwardingPolicy for Passthrough {
    fn name(&self) -> &str {
        "passthrough"
    }

    fn route(&self, request: &RequestInfo<'_>) -> Route {
        if self.deny_api_keys.contains(&request.api_key) {
            Route::Reject(ErrorCode::POLICY_VIOLATION)
        } else {
            Route::standard(request.api_key)
        }
    }
}

fn build(
    config: &str,
    _host: &Host,
    settings: &ForwardingSettings,
) -> Result<Arc<dyn ForwardingPolicy>, PluginError> {
    parse_config::<NoConfig>(config)?;
    Ok(Arc::new(Passthrough::new(settings)))
}

inventory::submit! {
    PolicyFactory {
        name: "passthrough",
        build,
        check_config: check_config::<NoConfig>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis::forwarding::UpstreamIdentity;
    use portcullis::principal::Principal;

    #[test]
    fn routes_security_apis_locally_and_the_rest_upstream() {
        let policy = Passthrough::new(&ForwardingSettings::new(vec![20]));
        let p = Principal::user("alice");
        assert_eq!(policy.route(&RequestInfo::new(17, 1, &p)), Route::Local);
        assert_eq!(policy.route(&RequestInfo::new(30, 3, &p)), Route::Local);
        assert_eq!(
            policy.route(&RequestInfo::new(0, 9, &p)),
            Route::Upstream {
                identity: UpstreamIdentity::Service
            }
        );
        assert_eq!(
            policy.route(&RequestInfo::new(20, 6, &p)),
            Route::Reject(ErrorCode::POLICY_VIOLATION)
        );
    }
}
