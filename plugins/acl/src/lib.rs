//! # portcullis-plugin-acl
//!
//! The built-in `acl` authorizer: Apache Kafka's StandardAuthorizer semantics
//! (kafka-security-semantics §6.2–§6.5), decided by an index instead of a scan.
//!
//! - [`AclAuthorizer`] implements [`Authorizer`] and
//!   [`AclAdmin`](portcullis::authorizer::AclAdmin) over the node's
//!   [`MetadataStore`]: ACLs are replayed at start, and each
//!   change is durable before it is visible.
//! - Registered with the host as `acl` ([`portcullis::registry::AuthorizerFactory`]).
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
use portcullis::registry::{AuthorizerFactory, AuthorizerSettings};
use portcullis::store::MetadataStore;

mod authorizer;
pub mod corpus;
mod host;
mod index;

pub use authorizer::{AclAuthorizer, AclAuthorizerConfig, AclAuthorizerError, AUDIT_TARGET};
pub use host::java_host_address;

fn build(
    settings: &AuthorizerSettings,
    store: Arc<dyn MetadataStore>,
) -> Result<Arc<dyn Authorizer>, String> {
    let config = AclAuthorizerConfig::new(
        settings.super_users.clone(),
        settings.allow_everyone_if_no_acl_found,
    );
    let mut authorizer = AclAuthorizer::open(&config, store).map_err(|e| e.to_string())?;
    if let Some(events) = &settings.events {
        authorizer = authorizer.with_events(events.clone());
    }
    Ok(Arc::new(authorizer))
}

inventory::submit! {
    AuthorizerFactory { name: "acl", build }
}
