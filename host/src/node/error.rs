//! Why a node could not be assembled ([`NodeError`]).

use std::path::PathBuf;

use portcullis::store::StoreError;
use portcullis::PluginKind;

use crate::plugin_config::PluginConfigError;

/// Why a node could not be assembled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The metadata store could not be opened or read.
    #[error("metadata store")]
    Store(#[source] StoreError),
    /// No metadata store of that name is built in.
    #[error("no metadata store named `{0}` is built into this binary")]
    UnknownStore(String),
    /// `[cluster]` could not be set up.
    #[error("cluster: {0}")]
    Cluster(String),
    /// A plugin refused its configuration or failed to start.
    #[error(transparent)]
    PluginConfig(#[from] PluginConfigError),
    /// The configuration names a plugin of a kind that nothing provides.
    #[error(
        "{key}: no {kind} plugin named `{name}`; available: {}{}",
        list(available),
        refused_note(refused)
    )]
    UnknownPlugin {
        /// The configuration key that names it.
        key: &'static str,
        /// The kind.
        kind: PluginKind,
        /// The name.
        name: String,
        /// The plugins of that kind that exist (built-in and loaded).
        available: Vec<String>,
        /// Plugin files that were refused (`file: reason`), which may be why.
        refused: Vec<String>,
    },
    /// A plugin name is provided both built in and by a file.
    #[error("{key}: the {kind} `{name}` is provided twice: built in and by plugin {}", file.display())]
    DuplicatePlugin {
        /// The configuration key that names it.
        key: &'static str,
        /// The kind.
        kind: PluginKind,
        /// The name.
        name: String,
        /// The plugin file.
        file: PathBuf,
    },
    /// A `[plugins.wasm.NAME]` table names no WASM component of the plugin directory.
    #[error(
        "plugins.wasm.{name}: no WASM component `{name}.wasm` in the plugin directory; \
         loaded components: {}{}",
        list(available),
        refused_note(refused)
    )]
    UnknownWasmTable {
        /// The table's name.
        name: String,
        /// The names of the loaded components.
        available: Vec<String>,
        /// Plugin files that were refused, which may be why.
        refused: Vec<String>,
    },
    /// A `[plugins.config.NAME]` table names no plugin.
    #[error(
        "plugins.config.{name}: no plugin named `{name}` (built-in or in the plugin directory); \
         known plugins: {}{}",
        list(available),
        refused_note(refused)
    )]
    UnknownConfigTable {
        /// The table's name.
        name: String,
        /// Every plugin name.
        available: Vec<String>,
        /// Plugin files that were refused, which may be why.
        refused: Vec<String>,
    },
    /// `listener.sasl_mechanisms` names a mechanism that nothing provides.
    #[error(
        "listener.sasl_mechanisms: unknown SASL mechanism `{name}`; available: {}{}",
        list(available),
        refused_note(refused)
    )]
    UnknownMechanism {
        /// The name.
        name: String,
        /// Every mechanism that is available (built-in and loaded).
        available: Vec<String>,
        /// Plugin files that were refused (`file: reason`), which may be why.
        refused: Vec<String>,
    },
    /// An enabled mechanism is provided both built in and by a plugin, or by two plugins.
    #[error("listener.sasl_mechanisms: SASL mechanism `{name}` is provided twice: by {first} and by {second}")]
    DuplicateMechanism {
        /// The name.
        name: String,
        /// One provider.
        first: String,
        /// The other.
        second: String,
    },
    /// The audit log cannot be opened.
    #[error("audit.file: {0}")]
    Audit(std::io::Error),
    /// A thread of the node (revocation, an event subscriber) cannot be started.
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        /// Which thread.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// OAUTHBEARER cannot start: a URL outside `allowed_urls`, a key set or provider
    /// configuration that cannot be fetched (the message names the key and the URL).
    #[error(transparent)]
    OAuthBearer(#[from] crate::oauth::OAuthError),
    /// `upstream.sasl_mechanism` names another mechanism than the `[upstream.login]` module's.
    #[error(
        "upstream.sasl_mechanism: `{configured}`, but the login module `{module}` logs in with \
         {mechanism}; remove the key or set it to {mechanism}"
    )]
    UpstreamMechanismMismatch {
        /// What the key says.
        configured: String,
        /// The login module.
        module: String,
        /// Its mechanism.
        mechanism: String,
    },
    /// `accept_token_without_extension` is on and SCRAM users have token-id-shaped names.
    #[error(
        "delegation_tokens.accept_token_without_extension: SCRAM user(s) {} have names shaped like \
         delegation token ids, which this setting reserves for tokens; delete them \
         (portcullis scram delete) or turn the setting off",
        .0.join(", ")
    )]
    TokenShapedUsers(Vec<String>),
    /// A reload chose a built-in authorizer the node did not start with (`node::reloaded`).
    #[error(
        "authorizer.plugin: the built-in authorizer `{name}` can only be chosen at start (it \
         replays the store's ACLs when it is built, which only the start does); restart the node \
         to use it"
    )]
    BuiltinAuthorizerAtStart {
        /// Its name.
        name: String,
    },
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

fn refused_note(refused: &[String]) -> String {
    if refused.is_empty() {
        String::new()
    } else {
        format!(" (refused plugin files: {})", refused.join("; "))
    }
}
