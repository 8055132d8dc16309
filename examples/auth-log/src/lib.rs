//! An event subscriber that appends every authentication outcome — success, failure,
//! re-authentication — to a file, one JSON object per line. It runs on a thread of its own: a slow
//! disk loses events (the host counts them), it never slows a login down.
//!
//! ```toml
//! [[events.subscribers]]
//! plugin = "auth-log"
//!
//! [plugins.config.auth-log]
//! path = "/var/log/portcullis/auth.jsonl"
//! ```
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use portcullis_plugin_api::events::{Event, EventSubscriber};
use portcullis_plugin_api::{Host, Plugin, PluginError};
use serde_json::json;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    path: PathBuf,
}

pub struct AuthLog {
    file: Mutex<File>,
    host: Host,
}

impl Plugin for AuthLog {
    const NAME: &'static str = "auth-log";
    type Config = Config;

    fn new(config: Config, host: &Host) -> Result<Self, PluginError> {
        let file = File::options().create(true).append(true).open(&config.path);
        let file =
            file.map_err(|e| PluginError::startup(format!("{}: {e}", config.path.display())));
        let (file, host) = (Mutex::new(file?), host.clone());
        Ok(Self { file, host })
    }
}

impl EventSubscriber for AuthLog {
    fn on_event(&self, event: &Event) {
        let (principal, mechanism, client, claims) = match event {
            Event::SessionAuthenticated {
                principal: p,
                mechanism: m,
                client_address: c,
                token_claims: t,
            }
            | Event::SessionReauthenticated {
                principal: p,
                mechanism: m,
                client_address: c,
                token_claims: t,
            } => (Some(p.to_string()), Some(m), c, t.as_ref()),
            Event::AuthenticationFailed {
                mechanism: m,
                client_address: c,
                ..
            } => (None, m.as_ref(), c, None),
            _ => return,
        };
        // A bearer token's groups and id (OAUTHBEARER), never the token.
        let (groups, jti) = (
            claims.map(|t| &t.groups),
            claims.and_then(|t| t.jti.as_ref()),
        );
        let line = json!({"event": event.kind(), "principal": principal, "mechanism": mechanism,
            "client": client.to_string(), "groups": groups, "jti": jti});
        let written = self.file.lock().map(|mut file| writeln!(file, "{line}"));
        if !matches!(written, Ok(Ok(()))) {
            self.host.warn("cannot append to the authentication log");
        }
    }
}

portcullis_plugin_api::export_plugins!(event_subscriber: AuthLog);
