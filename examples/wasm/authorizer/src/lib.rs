//! The prefix authorizer of `examples/prefix-authorizer`, as a sandboxed component: each
//! principal owns the topics named `<principal name><separator>…` and nothing else among topics;
//! groups, transactional ids and the cluster are allowed.
//!
//! ```toml
//! [authorizer]
//! plugin = "prefix-authorizer"      # the file prefix-authorizer.wasm
//!
//! [plugins.config.prefix-authorizer]
//! separator = "."                   # the default
//! ```
use std::sync::OnceLock;

use exports::portcullis::plugin::authorizer::{Action, Decision, Guest};
use portcullis::plugin::request::RequestContext;
use portcullis::plugin::types::{AclOperation, Principal, ResourceType};

wit_bindgen::generate!({ path: "../../../plugins/wasm/wit", world: "authorizer-plugin" });

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    separator: Option<String>,
}

/// Set by `init`, once per instance (the host calls it before anything else).
static SEPARATOR: OnceLock<String> = OnceLock::new();

struct PrefixAuthorizer;

impl Guest for PrefixAuthorizer {
    fn init(config: String) -> Result<(), String> {
        let config: Config = toml::from_str(&config).map_err(|e| e.to_string())?;
        let separator = config.separator.unwrap_or_else(|| ".".to_owned());
        if separator.is_empty() {
            return Err("separator: must not be empty".to_owned());
        }
        SEPARATOR
            .set(separator)
            .map_err(|_| "initialised twice".to_owned())
    }

    /// Only the principal matters here; the rest of the request (`context`) is there to ask,
    /// each question a call to the host.
    fn authorize(
        principal: Principal,
        _context: &RequestContext,
        actions: Vec<Action>,
    ) -> Vec<Decision> {
        // Without `init` every topic is denied (fail closed).
        let separator = SEPARATOR.get();
        let name = principal.name.as_str();
        actions
            .iter()
            .map(|action| {
                let own = separator.is_some_and(|sep| {
                    action
                        .resource_name
                        .strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(sep.as_str()))
                });
                if action.resource_type != ResourceType::Topic || own {
                    Decision::Allowed
                } else {
                    Decision::Denied
                }
            })
            .collect()
    }

    /// Any principal may have topics of its own.
    fn authorize_by_resource_type(
        _principal: Principal,
        _context: &RequestContext,
        _operation: AclOperation,
        _resource_type: ResourceType,
    ) -> Decision {
        Decision::Allowed
    }
}

export!(PrefixAuthorizer);
