//! A forwarding policy that refuses produce requests to topics matching a pattern, and routes
//! everything else as the built-in `passthrough` does. A refused topic is answered as Kafka
//! answers a denied one (TOPIC_AUTHORIZATION_FAILED for its partitions); other topics of the same
//! request go through.
//!
//! ```toml
//! [forwarding]
//! policy = "topic-guard"
//!
//! [plugins.config.topic-guard]
//! refuse_produce_to = "^audit\\..*"
//! # upstream_identity = "delegated"  # the client's own upstream token; needs [forwarding.delegated]
//! ```
use portcullis_plugin_api::acl::{AclOperation, ResourceType};
use portcullis_plugin_api::api_keys::PRODUCE;
use portcullis_plugin_api::authorizer::{Action, RequestContext};
use portcullis_plugin_api::forwarding::{ForwardingPolicy, RequestInfo, Route, UpstreamIdentity};
use portcullis_plugin_api::{Host, Plugin, PluginError};
use regex::Regex;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    refuse_produce_to: String,
    /// `"service"` (default) or `"delegated"`.
    #[serde(default)]
    upstream_identity: Identity,
}

#[derive(serde::Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum Identity {
    #[default]
    Service,
    Delegated,
}

pub struct TopicGuard {
    pattern: Regex,
    identity: Identity,
    host: Host,
}

impl Plugin for TopicGuard {
    const NAME: &'static str = "topic-guard";
    type Config = Config;

    fn new(config: Config, host: &Host) -> Result<Self, PluginError> {
        let pattern = Regex::new(&config.refuse_produce_to)
            .map_err(|e| PluginError::invalid_value("refuse_produce_to", e.to_string()))?;
        Ok(Self {
            pattern,
            identity: config.upstream_identity,
            host: host.clone(),
        })
    }
}

impl ForwardingPolicy for TopicGuard {
    fn name(&self) -> &str {
        "topic-guard"
    }

    fn route(&self, request: &RequestInfo<'_>) -> Route {
        match (Route::standard(request.api_key), self.identity) {
            (Route::Upstream { .. }, Identity::Delegated) => Route::Upstream {
                identity: UpstreamIdentity::Delegated,
            },
            (route, _) => route,
        }
    }

    fn screens_actions(&self) -> bool {
        true
    }

    fn admits(&self, context: &RequestContext<'_>, action: &Action<'_>) -> bool {
        let refused = context.api_key == PRODUCE
            && action.operation == AclOperation::Write
            && action.resource.resource_type == ResourceType::Topic
            && self.pattern.is_match(&action.resource.name);
        if refused {
            // A span of the plugin's own under the host's authorization span, and a log line on
            // it: an operator sees in the trace which policy refused and why.
            let _span = self.host.span("topic-guard.refuse");
            self.host.info(format_args!(
                "produce to {} refused: the topic matches {}",
                action.resource.name, self.pattern
            ));
            self.host.counter("refused_produce", 1);
        }
        !refused
    }
}

portcullis_plugin_api::export_plugins!(forwarding_policy: TopicGuard);
