//! # portcullis-plugin-acl
//!
//! The built-in `acl` authorizer: Apache Kafka's StandardAuthorizer semantics
//! (kafka-security-semantics §6.2–§6.5), decided by an index instead of a scan.
//!
//! - [`AclAuthorizer`] implements [`Authorizer`] and
//!   [`AclAdmin`](portcullis::authorizer::AclAdmin) over the node's
//!   [`MetadataStore`](portcullis::store::MetadataStore): ACLs are replayed at start, and each
//!   change is durable before it is visible.
//! - Registered with the host as `acl` ([`portcullis::registry::AuthorizerFactory`]).
//! - [`over_abi`]: the same authorizer as a plugin of the C ABI, for the tests and the benchmark
//!   that compare it across the ABI with the linked one.
//! - [`corpus`]: the ACL corpus format shared with the JMH harness that benchmarks Kafka's own
//!   StandardAuthorizer (see `docs/benchmarks.md`, section "Authorizer").
//!
//! Differences from Kafka that a client cannot observe as a different decision are listed on
//! [`AclAuthorizer`]; where Kafka throws (a non-LITERAL action, ANY arguments to
//! `authorize_by_resource_type`), this authorizer denies.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::Arc;

use portcullis::authorizer::Authorizer;
use portcullis::plugin_api::{parse_config, NoConfig};
use portcullis::registry::{check_config, AuthorizerFactory, AuthorizerInput};
use portcullis::PluginError;

mod authorizer;
pub mod corpus;
mod host;
mod index;
pub mod over_abi;
pub mod super_users;

pub use authorizer::{AclAuthorizer, AclAuthorizerConfig, AclAuthorizerError, AUDIT_TARGET};
pub use host::java_host_address;

/// Builds the `acl` authorizer on the node's store. Its own table, `[plugins.config.acl]`, takes no
/// keys: the settings are `[authorizer]`'s (Kafka's `super.users`, `allow.everyone.if.no.acl.found`).
fn build(input: &AuthorizerInput<'_>) -> Result<Arc<dyn Authorizer>, PluginError> {
    parse_config::<NoConfig>(input.config)?;
    let settings = input.settings;
    let config = AclAuthorizerConfig::new(
        settings.super_users.clone(),
        settings.allow_everyone_if_no_acl_found,
    );
    let mut authorizer =
        AclAuthorizer::open(&config, Arc::clone(&input.store)).map_err(PluginError::startup)?;
    if let Some(events) = &settings.events {
        authorizer = authorizer.with_events(events.clone());
    }
    if let Some(live) = &settings.live_super_users {
        authorizer = authorizer.with_live_super_users(live.clone());
    }
    if let Some(live) = &settings.live_allow_everyone {
        authorizer = authorizer.with_live_allow_everyone(live.clone());
    }
    Ok(Arc::new(authorizer))
}

inventory::submit! {
    AuthorizerFactory {
        name: "acl",
        build,
        check_config: check_config::<NoConfig>,
    }
}
