//! An event subscriber as a sandboxed component: every security event becomes one line of the
//! gateway's log (through the host's `log`, attributed to the plugin), e.g.
//! `event session-authenticated User:alice SCRAM-SHA-512 127.0.0.1`. It takes no configuration.
//!
//! ```toml
//! [[events.subscribers]]
//! plugin = "event-log"              # the file event-log.wasm
//! ```
use exports::portcullis::plugin::event_subscriber::{CredentialId, Event, Guest, Session};
use portcullis::plugin::host::{log, Level};
use portcullis::plugin::types::Principal;

wit_bindgen::generate!({ path: "../../../plugins/wasm/wit", world: "event-subscriber-plugin" });

fn principal(p: &Principal) -> String {
    format!("{}:{}", p.kind, p.name)
}

fn session(kind: &str, s: &Session) -> String {
    let scopes = s
        .token_claims
        .as_ref()
        .map(|c| format!(" scopes={}", c.scopes.join(" ")))
        .unwrap_or_default();
    format!(
        "event {kind} {} {} {}{scopes}",
        principal(&s.principal),
        s.mechanism,
        s.client_address
    )
}

fn line(event: &Event) -> String {
    match event {
        Event::SessionAuthenticated(s) => session("session-authenticated", s),
        Event::SessionReauthenticated(s) => session("session-reauthenticated", s),
        Event::AuthenticationFailed(f) => format!(
            "event authentication-failed {} {}: {}",
            f.mechanism.as_deref().unwrap_or("-"),
            f.client_address,
            f.reason
        ),
        Event::SessionExpired(e) => format!(
            "event session-expired {} {}",
            principal(&e.principal),
            e.client_address
        ),
        Event::CredentialRefreshed(r) => format!("event credential-refreshed {}", r.principal_name),
        Event::CredentialChanged(c) => {
            format!("event credential-changed {} {}", c.user, c.mechanism)
        }
        Event::AclsChanged(a) => format!(
            "event acls-changed created={} deleted={}",
            a.created, a.deleted
        ),
        Event::TokenCreated(t) => format!(
            "event token-created {} owner={} requester={}",
            t.token_id,
            principal(&t.owner),
            principal(&t.requester)
        ),
        Event::TokenRenewed(t) => format!("event token-renewed {}", t.token_id),
        Event::TokenExpired(t) => format!(
            "event token-expired {} owner={}",
            t.token_id,
            principal(&t.owner)
        ),
        Event::CredentialRevoked(id) => match id {
            CredentialId::Scram((user, mechanism)) => {
                format!("event credential-revoked scram {user} {mechanism}")
            }
            CredentialId::Token(token_id) => format!("event credential-revoked token {token_id}"),
            CredentialId::Plugin((mechanism, key)) => {
                format!("event credential-revoked plugin {mechanism} {key}")
            }
        },
    }
}

struct EventLog;

impl Guest for EventLog {
    fn init(config: String) -> Result<(), String> {
        if config.trim().is_empty() {
            Ok(())
        } else {
            Err("event-log takes no configuration".to_owned())
        }
    }

    fn on_event(event: Event) {
        log(Level::Info, &line(&event));
    }
}

export!(EventLog);
