//! `portcullis:plugin/event-subscriber` as an [`EventSubscriber`]: each event becomes a WIT
//! variant. The host delivers events on the subscriber's own thread, so a slow or failing
//! component costs only its own events: a trap, the fuel or the memory cap lose that one event
//! (counted and logged, the instance discarded), and the next event gets a fresh instance.

use std::path::Path;

use portcullis_plugin_api::credentials::CredentialId;
use portcullis_plugin_api::events::{Event, EventSubscriber};
use portcullis_plugin_api::principal::Principal;
use portcullis_plugin_api::sasl::TokenClaims;
use wasmtime::component::Component;

use crate::bindings::events::exports::portcullis::plugin::event_subscriber as wit;
use crate::bindings::events::portcullis::plugin::types;
use crate::bindings::events::{EventSubscriberPlugin, EventSubscriberPluginPre};
use crate::engine::WasmRuntime;
use crate::error::WasmError;
use crate::pool::{world_pre, Pool, Setup};

world_pre!(
    SubscriberPre,
    "event-subscriber-plugin",
    EventSubscriberPluginPre,
    EventSubscriberPlugin,
    crate::WasmKind::EventSubscriber,
    portcullis_plugin_event_subscriber
);

/// A component event subscriber.
pub(crate) struct WasmEventSubscriber {
    pool: Pool<SubscriberPre>,
}

impl WasmEventSubscriber {
    pub(crate) fn new(
        runtime: &WasmRuntime,
        path: &Path,
        component: &Component,
        setup: Setup,
    ) -> Result<Self, WasmError> {
        let pool = SubscriberPre::pool(runtime, path, component, setup)?;
        Ok(Self { pool })
    }
}

impl EventSubscriber for WasmEventSubscriber {
    fn on_event(&self, event: &Event) {
        // An event kind this interface does not know yet is not delivered (the WIT variant is
        // closed; a newer host adds it in a newer package version).
        let Some(event) = wit_event(event) else {
            return;
        };
        // A failure is counted and logged by the pool; the event is lost, nothing else.
        let _ = self.pool.call("handling an event", |bindings, store| {
            bindings
                .portcullis_plugin_event_subscriber()
                .call_on_event(store, &event)
        });
    }
}

fn principal(principal: &Principal) -> types::Principal {
    types::Principal {
        kind: principal.kind.clone(),
        name: principal.name.clone(),
    }
}

fn claims(claims: &TokenClaims) -> wit::TokenClaims {
    wit::TokenClaims {
        scopes: claims.scopes.clone(),
        groups: claims.groups.clone(),
        jti: claims.jti.clone(),
    }
}

fn session(
    who: &Principal,
    mechanism: &str,
    address: std::net::IpAddr,
    token_claims: Option<&TokenClaims>,
) -> wit::Session {
    wit::Session {
        principal: principal(who),
        mechanism: mechanism.to_owned(),
        client_address: address.to_string(),
        token_claims: token_claims.map(claims),
    }
}

fn credential_id(id: &CredentialId) -> Option<wit::CredentialId> {
    Some(match id {
        CredentialId::Scram { user, mechanism } => {
            wit::CredentialId::Scram((user.clone(), mechanism.mechanism_name().to_owned()))
        }
        CredentialId::Token { token_id } => wit::CredentialId::Token(token_id.clone()),
        CredentialId::Plugin { mechanism, key } => {
            wit::CredentialId::Plugin((mechanism.clone(), key.clone()))
        }
        _ => return None,
    })
}

fn wit_event(event: &Event) -> Option<wit::Event> {
    Some(match event {
        Event::SessionAuthenticated {
            principal: who,
            mechanism,
            client_address,
            token_claims,
        } => wit::Event::SessionAuthenticated(session(
            who,
            mechanism,
            *client_address,
            token_claims.as_ref(),
        )),
        Event::AuthenticationFailed {
            mechanism,
            client_address,
            reason,
        } => wit::Event::AuthenticationFailed(wit::AuthenticationFailure {
            mechanism: mechanism.clone(),
            client_address: client_address.to_string(),
            reason: reason.clone(),
        }),
        Event::SessionReauthenticated {
            principal: who,
            mechanism,
            client_address,
            token_claims,
        } => wit::Event::SessionReauthenticated(session(
            who,
            mechanism,
            *client_address,
            token_claims.as_ref(),
        )),
        Event::SessionExpired {
            principal: who,
            client_address,
        } => wit::Event::SessionExpired(wit::SessionExpiry {
            principal: principal(who),
            client_address: client_address.to_string(),
        }),
        Event::CredentialRefreshed {
            principal_name,
            expiry_ms,
        } => wit::Event::CredentialRefreshed(wit::CredentialRefresh {
            principal_name: principal_name.clone(),
            expiry_ms: *expiry_ms,
        }),
        Event::CredentialChanged { user, mechanism } => {
            wit::Event::CredentialChanged(wit::CredentialChange {
                user: user.clone(),
                mechanism: mechanism.clone(),
            })
        }
        Event::AclsChanged { created, deleted } => wit::Event::AclsChanged(wit::AclChange {
            created: u64::try_from(*created).unwrap_or(u64::MAX),
            deleted: u64::try_from(*deleted).unwrap_or(u64::MAX),
        }),
        Event::TokenCreated {
            token_id,
            owner,
            requester,
            expiry_ms,
        } => wit::Event::TokenCreated(wit::TokenCreation {
            token_id: token_id.clone(),
            owner: principal(owner),
            requester: principal(requester),
            expiry_ms: *expiry_ms,
        }),
        Event::TokenRenewed {
            token_id,
            expiry_ms,
        } => wit::Event::TokenRenewed(wit::TokenRenewal {
            token_id: token_id.clone(),
            expiry_ms: *expiry_ms,
        }),
        Event::TokenExpired {
            token_id,
            owner,
            removed,
        } => wit::Event::TokenExpired(wit::TokenExpiry {
            token_id: token_id.clone(),
            owner: principal(owner),
            removed: *removed,
        }),
        Event::CredentialRevoked { credential } => {
            wit::Event::CredentialRevoked(credential_id(credential)?)
        }
        _ => return None,
    })
}
