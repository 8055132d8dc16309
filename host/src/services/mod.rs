//! The host's implementations of the framework's service traits: the SCRAM credential admin
//! over the metadata store, the audit log file, plugin metrics, and the services every
//! plugin gets ([`HostContext`]: logging, credential and token views, time, metrics), with the
//! threads that run event subscribers and the login module's credential refresh.
//!
//! | module               | its one job                                                      |
//! |----------------------|------------------------------------------------------------------|
//! | `credential_admin`   | KIP-554 credential changes turned into metadata records          |
//! | `audit`              | the audit log file, written from a thread of its own             |
//! | `background`         | the upstream credential refresh and the delegation-token sweep   |
//! | `plugin`             | the services every plugin gets ([`HostContext`])                 |
//! | `stats`              | plugin metrics and event subscriber counts                       |
//! | `subscribers`        | the threads that deliver events to each subscriber               |

mod audit;
mod background;
mod credential_admin;
mod plugin;
mod stats;
mod subscribers;

pub use audit::FileAuditSink;
pub use background::{spawn_credential_refresh, spawn_token_sweep};
pub use credential_admin::StoreCredentialAdmin;
pub use plugin::HostContext;
pub use stats::{PluginStats, SubscriberStats};
pub use subscribers::{replace_subscribers, spawn_subscriber, RunningSubscriber};

pub use crate::clock::now_ms;

#[cfg(test)]
mod tests;
