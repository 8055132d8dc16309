//! Live reconfiguration (issue 23): the configuration file read again while the node runs,
//! checked as at start-up, and applied as a whole or not at all.
//!
//! | module  | its one job                                                             |
//! |---------|-------------------------------------------------------------------------|
//! | `diff`  | which keys changed, and whether each can change live                    |
//! | `files` | the listener's TLS files, polled for a replacement                      |
//! | `plugins` | new and changed libraries of the plugin directory, loaded at a reload |
//! | `security` | the authorizer and principal builder, built again when chosen anew     |
//! | `run`   | the triggers: SIGHUP, the file poll (the admin endpoint calls [`Reloader::run`]) |
//!
//! A reload reads the file (and the process's `PORTCULLIS_*` overrides) with the same
//! [`crate::config::load`] as start-up, so every `check-config` rule applies and errors name the
//! key; a key that cannot change while the node runs refuses the reload and names the key; then
//! everything the new configuration needs is built (mechanisms, the authorizer and principal
//! builder when chosen anew, the TLS acceptor from the files read again, the super users) and only
//! then published, in one swap of the listener's snapshot
//! (`server::live`). Any error leaves the running configuration untouched. Every reload is
//! logged, counted (`portcullis.config.reloads` by `result`) and written to the audit log.

pub mod diff;
pub mod files;
pub mod plugins;
mod run;
mod security;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use portcullis_plugin_acl::super_users::{self, InvalidSuperUser};
use sha2::{Digest, Sha256};

use crate::cluster::Deciders;
use crate::config::{self, Config, ConfigError};
use crate::node::{Node, NodeError};
use crate::plugin_config::{PluginConfigError, PluginTables};
use crate::server::live::{ListenerHandle, LiveTlsError};
use crate::server::upstream::ActiveLogin;
use diff::{Change, Effect};
use files::Stamp;
use plugins::{PluginFiles, PluginRefusal};
pub use run::{spawn_file_poll, spawn_sighup};

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP.
    Signal,
    /// `POST /reload` on the admin endpoint (`portcullis reload`).
    Admin,
    /// A watched TLS file changed.
    Files,
}

impl Trigger {
    /// Its name in logs, the audit log and the command's output.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Signal => "signal",
            Trigger::Admin => "admin",
            Trigger::Files => "files",
        }
    }
}

/// Why a reload was refused. The running configuration is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The file does not load (syntax, unknown key, invalid value, missing file).
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// Keys that only a restart can change.
    #[error("{} changed; {} while the node runs: needs a restart", keys.join(", "), if keys.len() == 1 { "it cannot change" } else { "they cannot change" })]
    NeedsRestart {
        /// The keys, dotted.
        keys: Vec<String>,
    },
    /// The enabled mechanisms cannot be built.
    #[error("listener.sasl_mechanisms: {0}")]
    Mechanisms(NodeError),
    /// The listener's TLS configuration cannot be built from its files.
    #[error(transparent)]
    Tls(#[from] LiveTlsError),
    /// A `[plugins.config.*]` table cannot be read.
    #[error(transparent)]
    PluginTables(#[from] PluginConfigError),
    /// A new or changed library of the plugin directory, or a plugin of it, was refused.
    #[error(transparent)]
    Plugins(#[from] PluginRefusal),
    /// OAUTHBEARER's validator cannot be started with the new `[oauthbearer]` (the key and URL
    /// named).
    #[error(transparent)]
    OAuth(#[from] crate::oauth::OAuthError),
    /// The forwarding policy cannot be built (the key or table named).
    #[error(transparent)]
    Policy(NodeError),
    /// On a node without `[authorizer]`, the new policy screens requests and the old one did not,
    /// or the other way round: whether requests are authorized at all decides which API versions
    /// are advertised (only those the authorization map reads), and clients negotiated them on
    /// their open connections.
    #[error("forwarding.policy: the new policy {} requests and the node has no [authorizer], so the API versions advertised would change: needs a restart", if *.screens { "screens" } else { "no longer screens" })]
    Screening {
        /// Whether the new policy screens requests.
        screens: bool,
    },
    /// The event subscribers could not be built or started.
    #[error("events.subscribers: {0}")]
    Subscribers(NodeError),
    /// A super user is not `type:name`.
    #[error("authorizer.super_users: {0}")]
    SuperUsers(#[from] InvalidSuperUser),
    /// The authorizer or principal builder chosen cannot be built (the key or table named).
    #[error(transparent)]
    Security(NodeError),
    /// The upstream login module cannot be built (the key or table named).
    #[error(transparent)]
    Login(NodeError),
    /// The kafka store's clients cannot take the new upstream settings (the key named).
    #[error(transparent)]
    StoreUpstream(portcullis_plugin_kafka_store::UpstreamError),
}

/// What a reload did.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The keys applied, and `listener.tls files` when the files' contents changed.
    pub changed: Vec<String>,
    /// The fingerprint of the configuration now running.
    pub fingerprint: String,
}

/// The outcome of one reload, as the admin endpoint and the command report it.
#[derive(Debug)]
pub struct Outcome {
    /// What asked for it.
    pub trigger: Trigger,
    /// What changed, or why nothing did.
    pub result: Result<Applied, Refusal>,
    /// The fingerprint of the configuration running after it.
    pub fingerprint: String,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.result {
            Ok(applied) if applied.changed.is_empty() => write!(
                f,
                "reload applied (trigger: {}): nothing changed; fingerprint {}",
                self.trigger.name(),
                self.fingerprint
            ),
            Ok(applied) => write!(
                f,
                "reload applied (trigger: {}): changed {}; fingerprint {}",
                self.trigger.name(),
                applied.changed.join(", "),
                self.fingerprint
            ),
            Err(refusal) => write!(
                f,
                "reload refused (trigger: {}): {refusal}; the running configuration is unchanged (fingerprint {})",
                self.trigger.name(),
                self.fingerprint
            ),
        }
    }
}

/// The configuration running now.
struct Running {
    config: Config,
    fingerprint: String,
    /// The TLS files as they were when applied.
    files: Vec<Stamp>,
    /// The plugin directory's libraries as applied, and the plugins reloads loaded.
    plugins: PluginFiles,
    /// OAUTHBEARER as the last reload that changed `[oauthbearer]` started it (the node's own
    /// until then).
    oauth: Option<crate::oauth::OAuthBearer>,
}

/// Reloads a running node's configuration file. One reload at a time.
pub struct Reloader {
    node: Arc<Node>,
    listener: ListenerHandle,
    /// Where a reloaded upstream login's credential refresh runs (`None` outside a runtime:
    /// unit tests).
    runtime: Option<tokio::runtime::Handle>,
    path: PathBuf,
    running: Mutex<Running>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Reloader {
    /// A reloader for `node`, whose listener is `listener`, reading the file the node was
    /// started from.
    pub fn new(node: Arc<Node>, listener: ListenerHandle) -> Self {
        let config = node.config.clone();
        let path = config
            .plugins
            .source
            .as_ref()
            .map(|s| s.path.clone())
            .unwrap_or_default();
        let files = files::stamps(&files::tls_files(&config));
        let fingerprint = fingerprint(&config, &files);
        publish_fingerprint(&node, &fingerprint);
        let plugins = PluginFiles::at_start(&config);
        Self {
            node,
            listener,
            runtime: tokio::runtime::Handle::try_current().ok(),
            path,
            running: Mutex::new(Running {
                config,
                fingerprint,
                files,
                plugins,
                oauth: None,
            }),
        }
    }

    /// The file the node reloads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The fingerprint of the running configuration (see `fingerprint`): the same on two nodes
    /// that run the same shared configuration and certificates.
    pub fn fingerprint(&self) -> String {
        self.lock().fingerprint.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The TLS files the running configuration names, with their stamps when applied.
    pub(crate) fn watched(&self) -> Vec<Stamp> {
        self.lock().files.clone()
    }

    /// Reloads, then logs, counts and audits the outcome. Blocking (it reads files): call it
    /// off the async workers.
    pub fn run(&self, trigger: Trigger) -> Outcome {
        let mut running = self.lock();
        let result = self.reload(&mut running, trigger);
        let outcome = Outcome {
            trigger,
            result,
            fingerprint: running.fingerprint.clone(),
        };
        drop(running);
        self.report(&outcome);
        outcome
    }

    fn reload(&self, running: &mut Running, trigger: Trigger) -> Result<Applied, Refusal> {
        let new = config::load(&self.path)?;
        let acl = |c: &Config| c.authorizer.as_ref().is_some_and(|a| a.plugin == "acl");
        let context = diff::Context {
            acl: acl(&running.config) && acl(&new),
            oauth: self.node.oauth.is_some(),
        };
        let renewable = security::RENEWABLE;
        // New and changed plugin libraries are loaded (running their init) before anything is
        // decided: their configuration tables may change with them, and a plugin that refuses to
        // start refuses the reload. What they load stays mapped even when the reload is refused.
        let tables = PluginTables::new(&new.plugins)?;
        let all_retabled = changed_tables(&running.config, &new);
        // Only plugins the new configuration uses get a new instance for a new table: the table
        // of a plugin nothing uses (maybe removed together with its use) changes nothing.
        let used = used_plugins(&new);
        let (retabled, unused_retabled): (Vec<String>, Vec<String>) = all_retabled
            .into_iter()
            .partition(|name| used.contains(name));
        // The certificate poll leaves the plugin directory alone: a library dropped there (maybe
        // a broken one) must not hold up a certificate rotation; SIGHUP and `portcullis reload`
        // look at it.
        let scan = if trigger == Trigger::Files {
            running.plugins.unchanged()
        } else {
            running.plugins.scan(
                &new,
                &tables,
                &self.node.context,
                &self.node.plugins,
                &retabled,
                renewable,
            )?
        };
        let mut changes = diff::changes(&table_of(&running.config), &table_of(&new), context);
        // Tables are live for the plugins this reload created of the kinds it renews (mechanisms
        // for new logins; the authorizer, principal builder and policy, see `security`; event
        // subscribers; the upstream login module, see `login` below), for the plugins no library
        // provided before (nothing uses them yet), and for the built-in mechanisms, event
        // subscribers and login module in use (rebuilt below). Any other table change of a plugin
        // in use needs a restart: it keeps the instance it was created with.
        let builtin_mechanisms: Vec<String> = portcullis::registry::mechanisms()
            .map(|f| f.name.to_owned())
            .filter(|name| retabled.contains(name))
            .collect();
        // Built-in event subscribers are built again (with the new table) when the subscribers
        // are replaced, which a change of their table does.
        let builtin_subscribers: Vec<String> = portcullis::registry::event_subscribers()
            .map(|f| f.name.to_owned())
            .filter(|name| retabled.contains(name))
            .collect();
        // So is the built-in login module in use (see `login` below).
        let login_name = login_module_name(&new);
        let builtin_login: Vec<String> = portcullis::registry::login_modules()
            .map(|f| f.name.to_owned())
            .filter(|name| *name == login_name && retabled.contains(name))
            .collect();
        let mut renewed = scan.report.mechanism_names();
        renewed.extend(
            (scan.report.loaded.iter())
                .filter(|p| renewable.contains(&p.kind))
                .map(|p| p.name.clone()),
        );
        let provided_before = |name: &str| {
            (self.node.plugins.loaded.iter())
                .chain(&running.plugins.reloaded().loaded)
                .any(|p| p.name == name)
        };
        let live_tables: Vec<&str> = scan
            .names()
            .filter(|name| renewed.iter().any(|m| m == name) || !provided_before(name))
            .chain(builtin_mechanisms.iter().map(String::as_str))
            .chain(builtin_subscribers.iter().map(String::as_str))
            .chain(builtin_login.iter().map(String::as_str))
            .chain(unused_retabled.iter().map(String::as_str))
            .collect();
        diff::plugin_tables_live(&mut changes, &live_tables);
        // Another policy is live unless it starts or stops the `delegated` machinery (each
        // principal's upstream token, set up at start): `policy = "delegated"` without a
        // `[forwarding.delegated]` table brings that table's defaults.
        let delegated = |c: &Config| c.forwarding.delegated_settings().is_some();
        if delegated(&running.config) != delegated(&new) {
            diff::needs_restart(&mut changes, "forwarding.policy");
        }
        // `delegated` names its service principal after the login's credential at start.
        let login_table = format!("plugins.config.{login_name}");
        let is_login_key = |key: &str| {
            diff::UPSTREAM_LOGIN.iter().any(|k| diff::is_under(key, k))
                || diff::is_under(key, &login_table)
        };
        if delegated(&running.config) || delegated(&new) {
            for change in changes.iter_mut().filter(|c| is_login_key(&c.key)) {
                change.effect = Effect::Restart;
            }
        }
        let restart: Vec<String> = changes
            .iter()
            .filter(|c| c.effect == Effect::Restart)
            .map(|c| c.key.clone())
            .collect();
        if !restart.is_empty() {
            return Err(Refusal::NeedsRestart { keys: restart });
        }
        // With the kafka store, its own clients take a changed upstream login and TLS too
        // (applied once nothing can fail any more, below).
        let store_upstream = store_upstream(&self.node, &new, &changes)?;
        // A changed [oauthbearer] starts a new validator (discovery, the first key set, its
        // refresher) before anything is swapped: one that cannot start refuses the reload.
        let oauth = match &new.oauthbearer {
            Some(section) if changes.iter().any(|c| c.key.starts_with("oauthbearer.")) => {
                Some(crate::oauth::OAuthBearer::start(section)?)
            }
            _ => None,
        };
        let mut rebuilt = builtin_mechanisms;
        let oauth_mechanism = match oauth.as_ref().or(running.oauth.as_ref()) {
            Some(o) => {
                if oauth.is_some() {
                    rebuilt.push(crate::config::OAUTHBEARER.to_owned());
                }
                Some(o.mechanism())
            }
            None => None,
        };
        let current = self.listener.services();
        let mechanisms = self
            .node
            .mechanisms_for(
                &new,
                &current.mechanisms,
                &[&scan.report, running.plugins.reloaded()],
                &rebuilt,
                oauth_mechanism,
            )
            .map_err(Refusal::Mechanisms)?;
        let acl_settings = match &new.authorizer {
            Some(settings) if acl(&new) => Some((
                super_users::normalise(&settings.super_users)?,
                settings.allow_everyone_if_no_acl_found,
            )),
            _ => None,
        };
        // The event subscribers are replaced when their list changed, a built-in one's table
        // changed, or this reload loaded a new instance of one (new library content or table).
        let subscribers_renewed = changes.iter().any(|c| c.key == "events.subscribers")
            || !builtin_subscribers.is_empty()
            || new.events.subscribers.iter().any(|s| {
                scan.report
                    .find(portcullis::PluginKind::EventSubscriber, &s.plugin)
                    .is_some()
            });
        let subscribers = if subscribers_renewed {
            let reloaded = [&scan.report, running.plugins.reloaded()];
            Some(
                self.node
                    .subscribers_for(&new, &reloaded)
                    .map_err(Refusal::Subscribers)?,
            )
        } else {
            None
        };
        // The upstream login, built again when its keys or its table changed or this reload
        // loaded a new instance of its plugin: new upstream connections log in with it.
        let login_renewed = changes.iter().any(|c| is_login_key(&c.key))
            || scan
                .report
                .find(portcullis::PluginKind::LoginModule, &login_name)
                .is_some();
        if login_renewed && (delegated(&running.config) || delegated(&new)) {
            // Changed keys were refused above; this is a new instance of the login plugin (its
            // library or a table of that library changed), which `delegated` cannot take either.
            return Err(Refusal::NeedsRestart {
                keys: vec![format!(
                    "upstream.login.plugin (a new instance of `{login_name}`, with the delegated policy)"
                )],
            });
        }
        let login = if login_renewed {
            let reloaded = [&scan.report, running.plugins.reloaded()];
            let module = (self.node)
                .login_for(&new, &reloaded)
                .map_err(Refusal::Login)?;
            // The same instance (a key around it changed, not the module): nothing to swap, and
            // no second refresh of it.
            let current = self.node.upstream_login.as_ref().map(|s| s.load_full());
            module.filter(|m| !current.is_some_and(|c| Arc::ptr_eq(&c.module, m)))
        } else {
            None
        };
        let files = files::stamps(&files::tls_files(&new));
        let mut services = current.with_enabled_mechanisms(mechanisms);
        let reloaded = [&scan.report, running.plugins.reloaded()];
        let mut deciders = (self.node.cluster.as_ref()).map(|c| Deciders::clone(&c.deciders()));
        security::renew(
            &self.node,
            &new,
            &changes,
            &scan.report,
            &reloaded,
            &mut services,
            deciders.as_mut(),
        )?;
        let services = Arc::new(services);
        // The last step that can fail builds the TLS acceptor (reading the files) and then
        // publishes the whole snapshot; the cluster part's deciders and the built-in
        // authorizer's settings follow (they cannot fail any more).
        self.listener.apply(&new, services)?;
        if let (Some(cluster), Some(deciders)) = (&self.node.cluster, deciders) {
            cluster.renew(deciders);
        }
        let store_remade = (store_upstream.as_ref()).is_some_and(|c| c.remakes_clients());
        if let (Some(change), crate::node::NodeStore::Kafka(store)) =
            (store_upstream, &self.node.store)
        {
            // Checked above: nothing here can refuse it any more.
            store.apply_upstream(change);
        }
        if let (Some(slot), Some(module)) = (&self.node.upstream_login, login) {
            let active = Arc::new(ActiveLogin { module });
            slot.store(Arc::clone(&active));
            if let Some(runtime) = &self.runtime {
                crate::services::spawn_credential_refresh(
                    &active,
                    self.node.services.events.clone(),
                    runtime,
                );
            }
        }
        if let Some(subscribers) = subscribers {
            // Only a thread that cannot be started fails here; the old subscribers run on then,
            // and the log says so (the rest of the reload is applied).
            if let Err(error) = self.node.run_subscribers(subscribers) {
                tracing::error!(%error, "the reloaded event subscribers could not be started; the previous ones keep running");
            }
        }
        if let Some((super_users, allow_everyone)) = acl_settings {
            self.node.super_users.store(super_users);
            self.node.allow_everyone.set(allow_everyone);
        }
        crate::telemetry::set_trace_sample_ratio(new.telemetry.trace_sample_ratio);
        let mut changed: Vec<String> = changes.into_iter().map(|c: Change| c.key).collect();
        if files != running.files && !changed.iter().any(|k| k.starts_with("listener.tls.")) {
            changed.push("listener.tls files (content)".to_owned());
        }
        if store_remade && !changed.iter().any(|k| diff::is_under(k, "upstream")) {
            // Only the content of the upstream TLS files changed.
            changed.push(
                "upstream.tls files (content; the metadata store's clients made again)".to_owned(),
            );
        }
        changed.extend(
            scan.files
                .iter()
                .map(|f| format!("plugins.dir file {} (loaded)", f.display())),
        );
        running.plugins.commit(scan);
        if let Some(oauth) = oauth {
            // The validator that was serving stops refreshing (its key set URL may be gone);
            // sessions it accepted go on, their re-authentications use the new one.
            match running.oauth.replace(oauth) {
                Some(previous) => previous.shutdown(),
                None => self.node.shutdown_background(),
            }
        }
        running.fingerprint = fingerprint(&new, &files);
        publish_fingerprint(&self.node, &running.fingerprint);
        running.config = new;
        running.files = files;
        Ok(Applied {
            changed,
            fingerprint: running.fingerprint.clone(),
        })
    }

    fn report(&self, outcome: &Outcome) {
        let result = if outcome.result.is_ok() {
            "applied"
        } else {
            "refused"
        };
        crate::telemetry::metrics::config_reload(result);
        match &outcome.result {
            Ok(_) => tracing::info!(
                trigger = outcome.trigger.name(),
                fingerprint = %outcome.fingerprint,
                file = %self.path.display(),
                "{outcome}"
            ),
            Err(_) => tracing::warn!(
                trigger = outcome.trigger.name(),
                fingerprint = %outcome.fingerprint,
                file = %self.path.display(),
                "{outcome}"
            ),
        }
        if let Some(audit) = &self.node.audit {
            audit.write_line(audit_line(outcome, result));
        }
    }
}

/// The plugin names whose `[plugins.config.NAME]` table differs between `old` and `new`.
/// The plugin names `config` chooses, of every kind.
fn used_plugins(config: &Config) -> Vec<String> {
    let mut used = config.listener.sasl_mechanisms.clone();
    used.extend(config.authorizer.iter().map(|a| a.plugin.clone()));
    used.push(config.principal.plugin.clone());
    used.push(config.forwarding.policy.clone());
    used.extend(config.upstream.login.iter().map(|l| l.plugin.clone()));
    used.extend(config.events.subscribers.iter().map(|s| s.plugin.clone()));
    used
}

fn changed_tables(old: &Config, new: &Config) -> Vec<String> {
    let (a, b) = (&old.plugins.config, &new.plugins.config);
    a.keys()
        .chain(b.keys())
        .filter(|name| a.get(*name) != b.get(*name))
        .cloned()
        .collect()
}

/// What this reload changes for the kafka store's own clients, checked (`None`: no kafka store,
/// or nothing changes for them): `[upstream]`'s user and password, taken in place, or its
/// mechanism, `[upstream.tls]` or the content of its TLS files, for which the clients are made
/// again (see `portcullis_plugin_kafka_store::KafkaMetadataStore::check_upstream`).
///
/// # Errors
/// [`Refusal::NeedsRestart`] when the change turns the store's SASL login on or off (its
/// clients' protocol is fixed when they are made); [`Refusal::StoreUpstream`] when librdkafka
/// cannot take the new settings.
fn store_upstream(
    node: &Node,
    new: &Config,
    changes: &[Change],
) -> Result<Option<portcullis_plugin_kafka_store::UpstreamChange>, Refusal> {
    use crate::node::{store_sasl, store_tls, NodeStore};
    use portcullis_plugin_kafka_store::UpstreamError;
    let NodeStore::Kafka(store) = &node.store else {
        return Ok(None);
    };
    match store.check_upstream(store_sasl(new), store_tls(new)) {
        Ok(change) => Ok(change),
        Err(UpstreamError::LoginOnOff) => {
            let mut keys: Vec<String> = (changes.iter())
                .filter(|c| diff::is_under(&c.key, "upstream"))
                .map(|c| c.key.clone())
                .collect();
            if keys.is_empty() {
                keys.push("upstream.sasl_mechanism".to_owned());
            }
            Err(Refusal::NeedsRestart { keys })
        }
        Err(error) => Err(Refusal::StoreUpstream(error)),
    }
}

/// The upstream login module `config` chooses by name (the built-in password login without
/// `[upstream.login]`).
fn login_module_name(config: &Config) -> String {
    config
        .upstream
        .login
        .as_ref()
        .map_or(portcullis_plugin_login::PASSWORD_LOGIN, |l| {
            l.plugin.as_str()
        })
        .to_owned()
}

/// A node of a cluster reports the fingerprint with its status (`portcullis cluster status`).
fn publish_fingerprint(node: &Node, fingerprint: &str) {
    if let crate::node::NodeStore::Kafka(store) = &node.store {
        store.set_config_fingerprint(fingerprint.to_owned());
    }
}

/// The audit log's record of a reload: one JSON object, like the authorization decisions.
fn audit_line(outcome: &Outcome, result: &str) -> String {
    let (changed, reason) = match &outcome.result {
        Ok(applied) => (applied.changed.clone(), None),
        Err(refusal) => (Vec::new(), Some(refusal.to_string())),
    };
    serde_json::json!({
        "event": "config_reload",
        "time_ms": crate::clock::now_ms(),
        "trigger": outcome.trigger.name(),
        "result": result,
        "changed": changed,
        "reason": reason,
        "fingerprint": outcome.fingerprint,
    })
    .to_string()
}

/// The file's text as a table (it was parsed already when loaded; an empty table otherwise).
fn table_of(config: &Config) -> toml::Table {
    config
        .plugins
        .source
        .as_ref()
        .and_then(|s| toml::from_str(&s.text).ok())
        .unwrap_or_default()
}

/// Keys that differ from node to node of one cluster by design (identity, addresses, its own
/// files): left out of the fingerprint, so that nodes running the same shared configuration show
/// the same one.
const PER_NODE: &[&str] = &[
    "node",
    "listener.address",
    "listener.advertised_host",
    "listener.broker_port_base",
    "cluster.listener",
    "cluster.advertised_address",
    "cluster.cert_file",
    "cluster.key_file",
    "telemetry.prometheus_address",
];

/// The first 16 hex digits of a SHA-256 of every key and value of the file but the per-node
/// ones, and of the contents of the listener's TLS files (not their paths).
fn fingerprint(config: &Config, files: &[Stamp]) -> String {
    let table = table_of(config);
    let mut hash = Sha256::new();
    for (key, value) in diff::flat(&table) {
        let per_node = PER_NODE
            .iter()
            .any(|p| key == *p || key.starts_with(&format!("{p}.")));
        if !per_node {
            hash.update(format!("{key}={value}\n").as_bytes());
        }
    }
    for (_, digest) in files {
        hash.update(digest.unwrap_or_default());
    }
    hash.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_keys_and_says_nothing_changed() {
        let outcome = Outcome {
            trigger: Trigger::Admin,
            result: Err(Refusal::NeedsRestart {
                keys: vec!["listener.address".into(), "node.id".into()],
            }),
            fingerprint: "0123456789abcdef".into(),
        };
        let text = outcome.to_string();
        assert!(text.starts_with("reload refused (trigger: admin): listener.address, node.id changed; they cannot change while the node runs: needs a restart"), "{text}");
        assert!(
            text.contains("unchanged (fingerprint 0123456789abcdef)"),
            "{text}"
        );
        let line: serde_json::Value =
            serde_json::from_str(&audit_line(&outcome, "refused")).unwrap();
        assert_eq!(line["event"], "config_reload");
        assert_eq!(line["result"], "refused");
        assert!(line["reason"].as_str().unwrap().contains("node.id"));
    }

    #[test]
    fn the_fingerprint_leaves_out_what_differs_per_node() {
        let with = |text: &str| {
            let mut config: Config = toml::from_str(text).unwrap();
            config.plugins.source = Some(crate::config::ConfigSource {
                path: "p.toml".into(),
                text: text.to_owned(),
            });
            fingerprint(&config, &[])
        };
        let node = |id: u32, port: u16, users: &str| {
            format!("[node]\nid = {id}\ndata_dir = \"d{id}\"\n[listener]\naddress = \"127.0.0.1:{port}\"\nadvertised_host = \"h\"\nbroker_port_base = 9100\nsasl_mechanisms = [\"PLAIN\"]\n[upstream]\nbootstrap_servers = [\"k:9092\"]\n[authorizer]\nsuper_users = [{users}]\n")
        };
        let one = with(&node(1, 9092, "\"User:a\""));
        assert_eq!(one.len(), 16);
        assert_eq!(one, with(&node(2, 9093, "\"User:a\"")));
        assert_ne!(one, with(&node(1, 9092, "\"User:b\"")));
    }

    #[test]
    fn an_applied_reload_lists_what_changed() {
        let outcome = Outcome {
            trigger: Trigger::Files,
            result: Ok(Applied {
                changed: vec!["listener.tls files (content)".into()],
                fingerprint: "f".into(),
            }),
            fingerprint: "f".into(),
        };
        assert_eq!(
            outcome.to_string(),
            "reload applied (trigger: files): changed listener.tls files (content); fingerprint f"
        );
    }
}
