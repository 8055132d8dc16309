//! An authorizer that gives each principal the topics named after it and nothing else among
//! topics: `User:alice` may use `alice.orders`, not `bob.orders` (Kafka answers the latter with
//! TOPIC_AUTHORIZATION_FAILED). Groups, transactional ids and the cluster are allowed.
//!
//! ```toml
//! [authorizer]
//! plugin = "prefix-authorizer"
//!
//! [plugins.config.prefix-authorizer]
//! separator = "."          # the default
//! ```
use portcullis_plugin_api::acl::{AclOperation, ResourceType};
use portcullis_plugin_api::authorizer::{
    Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};
use portcullis_plugin_api::{Host, Plugin, PluginError};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    separator: Option<String>,
}

pub struct PrefixAuthorizer {
    separator: String,
}

impl Plugin for PrefixAuthorizer {
    const NAME: &'static str = "prefix-authorizer";
    type Config = Config;

    fn new(config: Config, _host: &Host) -> Result<Self, PluginError> {
        let separator = config.separator.unwrap_or_else(|| ".".to_owned());
        if separator.is_empty() {
            return Err(PluginError::invalid_value("separator", "must not be empty"));
        }
        Ok(Self { separator })
    }
}

impl PrefixAuthorizer {
    fn decide(&self, context: &RequestContext<'_>, action: &Action<'_>) -> Authorization {
        let resource = &action.resource;
        let own = resource
            .name
            .strip_prefix(context.principal.name.as_str())
            .is_some_and(|rest| rest.starts_with(&self.separator));
        if resource.resource_type != ResourceType::Topic || own {
            Authorization::allowed(DecidingRule::DefaultAllow)
        } else {
            Authorization::denied(DecidingRule::DefaultDeny)
        }
    }
}

impl Authorizer for PrefixAuthorizer {
    fn authorize(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
    ) -> Vec<Authorization> {
        actions.iter().map(|a| self.decide(context, a)).collect()
    }

    /// Any principal may have topics of its own.
    fn authorize_by_resource_type(
        &self,
        _: &RequestContext<'_>,
        _: AclOperation,
        _: ResourceType,
    ) -> Decision {
        Decision::Allowed
    }
}

portcullis_plugin_api::export_plugins!(authorizer: PrefixAuthorizer);
