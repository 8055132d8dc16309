//! The node's security services on its store: the authorizer (audited when `[audit] file` is
//! set), the locally served security APIs, and the delegation-token manager.

use std::sync::Arc;

use portcullis::audit::{AuditPolicy, AuditSink, AuditingAuthorizer};
use portcullis::authorizer::Authorizer;
use portcullis::credentials::InMemoryCredentials;
use portcullis::events::EventBus;
use portcullis::forwarding::{ForwardingPolicy, ScreenedAuthorizer};
use portcullis::local::acls::AclApis;
use portcullis::local::delegation_tokens::DelegationTokenApis;
use portcullis::local::scram_credentials::ScramCredentialsApi;
use portcullis::local::LocalHandler;
use portcullis::registry::{
    self, AuthorizerInput, AuthorizerSettings, LiveAllowEveryone, LiveSuperUsers, PluginInstance,
};
use portcullis::store::MetadataStore;
use portcullis::tokens::{TokenConfig, TokenManager};
use portcullis::PluginKind;

use super::assemble::Assembly;
use super::choose::{choose, Choice};
use super::error::NodeError;
use crate::config::Config;
use crate::services::HostContext;

/// The configured authorizer, if any, built on the store (a built-in one replays its ACLs).
pub(super) fn build_authorizer(
    config: &Config,
    context: &HostContext,
    assembly: &Assembly,
    store: &Arc<dyn MetadataStore>,
    events: &EventBus,
    (super_users, allow_everyone): (&LiveSuperUsers, &LiveAllowEveryone),
) -> Result<Option<Arc<dyn Authorizer>>, NodeError> {
    let Some(settings) = &config.authorizer else {
        return Ok(None);
    };
    let name = settings.plugin.as_str();
    let tables = &assembly.tables;
    let authorizer_settings = AuthorizerSettings::new(
        settings.super_users.clone(),
        settings.allow_everyone_if_no_acl_found,
    )
    .with_events(events.clone())
    .with_live_super_users(super_users.clone())
    .with_live_allow_everyone(allow_everyone.clone());
    let built = choose(
        Choice {
            key: "authorizer.plugin",
            kind: PluginKind::Authorizer,
            name,
        },
        registry::authorizers().find(|f| f.name == name),
        registry::authorizers().map(|f| f.name),
        |factory| {
            let host = context.host_for(name);
            (factory.build)(&AuthorizerInput::new(
                tables.text(name),
                &host,
                &authorizer_settings,
                Arc::clone(store),
            ))
        },
        |instance| match instance {
            PluginInstance::Authorizer(a) => Some(Arc::clone(a)),
            _ => None,
        },
        &assembly.plugins,
        tables,
    )?;
    Ok(Some(built))
}

/// `authorizer` as connections use it: screened by `policy` when the policy refuses actions (its
/// refusals come before the authorizer's decisions, which allow everything when there is none),
/// wrapped by the audit log when one is configured, and instrumented (every check an `authorize`
/// span and counts, docs/observability.md). The same at start and at a reload.
pub(super) fn finish_authorizer(
    config: &Config,
    authorizer: Option<Arc<dyn Authorizer>>,
    policy: &Arc<dyn ForwardingPolicy>,
    audit: Option<&Arc<dyn AuditSink>>,
) -> Option<Arc<dyn Authorizer>> {
    let authorizer = if policy.screens_actions() {
        Some(
            Arc::new(ScreenedAuthorizer::new(Arc::clone(policy), authorizer))
                as Arc<dyn Authorizer>,
        )
    } else {
        authorizer
    };
    let authorizer = audited(config, authorizer, audit);
    authorizer.map(crate::telemetry::authorizer::Instrumented::wrap)
}

/// The audit log of `[audit] file`, when set.
pub(super) fn audit_sink(config: &Config) -> Result<Option<Arc<dyn AuditSink>>, NodeError> {
    let Some(path) = &config.audit.file else {
        return Ok(None);
    };
    let sink = crate::services::FileAuditSink::open(path).map_err(NodeError::Audit)?;
    Ok(Some(Arc::new(sink)))
}

/// `authorizer` wrapped by the audit log, when there is one.
fn audited(
    config: &Config,
    authorizer: Option<Arc<dyn Authorizer>>,
    sink: Option<&Arc<dyn AuditSink>>,
) -> Option<Arc<dyn Authorizer>> {
    let authorizer = authorizer?;
    let Some(sink) = sink else {
        return Some(authorizer);
    };
    let policy = AuditPolicy::new(config.audit.log_allowed, config.audit.log_denied);
    Some(Arc::new(AuditingAuthorizer::new(
        authorizer,
        Arc::clone(sink),
        policy,
    )))
}

/// The locally served security APIs: ACLs, SCRAM credentials and delegation tokens (served also
/// when tokens are disabled, answering DELEGATION_TOKEN_AUTH_DISABLED, as Kafka does).
pub(super) fn local_handlers(
    credentials: &Arc<InMemoryCredentials>,
    tokens: Option<Arc<TokenManager>>,
    authorizer: Option<Arc<dyn Authorizer>>,
    reserve_token_ids: bool,
) -> Vec<Arc<dyn LocalHandler>> {
    let admin = Arc::new(crate::services::StoreCredentialAdmin::new(Arc::clone(
        credentials,
    )));
    let mut handlers: Vec<Arc<dyn LocalHandler>> =
        AclApis::handlers(authorizer.clone()).into_iter().collect();
    handlers.extend(ScramCredentialsApi::handlers_reserving_token_ids(
        admin,
        authorizer.clone(),
        reserve_token_ids,
    ));
    handlers.extend(DelegationTokenApis::handlers_recording(
        tokens,
        authorizer,
        Some(crate::telemetry::metrics::OtelRecorder::shared()),
    ));
    handlers
}

/// The token manager for `[delegation_tokens]`, when a secret enables tokens.
pub(super) fn token_manager(config: &Config) -> Option<Arc<TokenManager>> {
    let settings = &config.delegation_tokens;
    if !settings.enabled() {
        return None;
    }
    let secret = settings.secret.clone()?;
    let token_config = TokenConfig::new(secret)
        .with_times(
            settings.max_lifetime_ms,
            settings.expiry_time_ms,
            settings.expiry_check_interval_ms,
        )
        .with_accept_token_without_extension(settings.accept_token_without_extension);
    Some(Arc::new(TokenManager::new(
        token_config,
        Arc::new(portcullis_plugin_scram::ScramTokenCrypto),
        crate::services::now_ms(),
    )))
}

/// With tokens accepted without the `tokenauth` extension, a SCRAM user whose name has the shape
/// of a token id would be ambiguous: the node refuses to start until it is removed.
pub(super) fn refuse_token_shaped_users(
    credentials: &InMemoryCredentials,
) -> Result<(), NodeError> {
    let mut shaped: Vec<String> = credentials
        .users()
        .into_iter()
        .map(|(user, _, _)| user)
        .filter(|user| portcullis::tokens::id::has_token_id_shape(user))
        .collect();
    shaped.sort();
    shaped.dedup();
    if shaped.is_empty() {
        return Ok(());
    }
    Err(NodeError::TokenShapedUsers(shaped))
}
