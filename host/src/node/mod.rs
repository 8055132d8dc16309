//! Assembling a node from its configuration: the store, credentials, and one plugin of each kind
//! — SASL mechanisms, principal builder, authorizer, forwarding policy, upstream login module,
//! event subscribers — each chosen by name among the built-ins (registered with `inventory`) and
//! the plugins loaded from the plugin directory, the same way for both.
//!
//! [`Node::build`] does all of it for a running node. [`assemble`] is the part that needs no
//! store (and so takes no lock on the data directory): `check-config` and `plugins` use it.
//!
//! | module       | its one job                                                                 |
//! |--------------|-----------------------------------------------------------------------------|
//! | `assemble`   | the parts that need no store: plugins, mechanisms, policy, login, subscribers |
//! | `builtins`   | the built-in plugins; every `[plugins.config.NAME]` table checked           |
//! | `choose`     | one plugin chosen by name: built-in or loaded, never both                   |
//! | `error`      | why a node could not be assembled                                           |
//! | `mechanisms` | the enabled SASL mechanisms, each resolved to its provider                  |
//! | `oauth`      | OAUTHBEARER among the plugins                                               |
//! | `reloaded`   | the authorizer and principal builder a reload builds again                  |
//! | `security`   | the authorizer, the local security APIs and the token manager               |
//! | `store`      | the metadata store: the file log or the cluster's shared topic              |

mod assemble;
mod builtins;
mod choose;
mod error;
mod mechanisms;
mod oauth;
mod reloaded;
mod security;
mod store;

use std::fmt;
use std::sync::Arc;

use portcullis::audit::AuditSink;
use portcullis::authorizer::Authorizer;
use portcullis::connection::NodeServices;
use portcullis::credentials::{CredentialView, InMemoryCredentials, NoTokens, TokenView};
use portcullis::events::EventBus;
use portcullis::metrics::SecurityMetrics;
use portcullis::reauth::ReauthScheduler;
use portcullis::registry::{self, LiveAllowEveryone, LiveSuperUsers};
use portcullis::sasl::SaslMechanism;
use portcullis::tokens::TokenManager;

// The built-in plugins register themselves with `inventory`; naming each crate makes sure it is
// linked into the binary even where nothing else in the host uses it.
use portcullis_plugin_acl as _;
use portcullis_plugin_forwarding as _;
use portcullis_plugin_plain as _;
use portcullis_plugin_scram as _;
use portcullis_plugin_stores as _;

pub use assemble::{assemble, Assembly, Subscribers};
pub use builtins::{builtin_mechanism_names, builtins};
pub use error::NodeError;
pub use reloaded::ReloadedSecurity;
pub use store::{kafka_store_settings, open_store, store_sasl, store_tls, NodeStore};

use crate::config::Config;
use crate::plugin_loader::PluginLoadReport;
use crate::services::{
    replace_subscribers, spawn_subscriber, HostContext, PluginStats, RunningSubscriber,
    SubscriberStats,
};
use crate::store_writer::StoreWriter;
use assemble::assemble_with;
use oauth::oauth_enabled;
use security::{
    audit_sink, build_authorizer, finish_authorizer, local_handlers, refuse_token_shaped_users,
    token_manager,
};

/// Everything a running node needs, built once at start.
pub struct Node {
    /// The validated configuration.
    pub config: Config,
    /// The metadata store: the embedded file log (holds the data directory's lock) or the
    /// cluster's shared topic.
    pub store: NodeStore,
    /// The node's part in its cluster, when its store is shared.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// Appends to the store off the request path, group-committed.
    pub writer: StoreWriter,
    /// The delegation-token manager, when tokens are enabled.
    pub tokens: Option<Arc<TokenManager>>,
    /// Every user's SCRAM credentials, kept up to date from the store.
    pub credentials: Arc<InMemoryCredentials>,
    /// The services every listener and connection shares (mechanisms, principal builder,
    /// forwarding policy, authorizer, local security APIs, sessions, counters, event bus): held
    /// here once, and the same `Arc` goes into each listener's `ConnectionConfig`. Its
    /// authorizer is the one upstream-bound requests are checked with: the configured one,
    /// screened by the forwarding policy when it refuses actions, wrapped by the audit log when
    /// one is configured; `None` without one, or when the upstream decides
    /// (`[forwarding.delegated] authorizer = "upstream"`; the local APIs still use it).
    pub services: Arc<NodeServices>,
    /// Portcullis' own login upstream, for SASL upstreams (a reload may store another module).
    pub upstream_login: Option<Arc<crate::server::upstream::LoginSlot>>,
    /// What the plugin directory held: loaded plugins and refused files.
    pub plugins: PluginLoadReport,
    /// The services plugins got; plugin metrics and subscriber counts.
    pub context: HostContext,
    /// The event subscribers the node runs; a reload replaces them.
    subscribers: std::sync::Mutex<Vec<RunningSubscriber>>,
    /// OAUTHBEARER's validator and what keeps it working (its key set's refresher, on the
    /// OAuth runtime), when `listener.sasl_mechanisms` enables it.
    pub oauth: Option<crate::oauth::OAuthBearer>,
    /// `[authorizer] super_users` as the built-in authorizer reads them; a reload replaces them.
    pub super_users: LiveSuperUsers,
    /// `[authorizer] allow_everyone_if_no_acl_found` as the built-in authorizer reads it; a
    /// reload changes it.
    pub allow_everyone: LiveAllowEveryone,
    /// The audit log (`[audit] file`): authorization decisions and configuration reloads.
    pub audit: Option<Arc<dyn AuditSink>>,
    /// The built-in authorizer the node started with, by name, as built (before screening and
    /// audit): what a reload choosing it again uses.
    start_authorizer: Option<(String, Arc<dyn Authorizer>)>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("config", &self.config)
            .field("store", &self.store.shared().location())
            .field("credentials", &self.credentials)
            .field("services", &self.services)
            .field(
                "upstream_login",
                &self
                    .upstream_login
                    .as_ref()
                    .map(|l| l.load().module.mechanism().to_owned()),
            )
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Opens the store (locking the data directory), loads the credentials, and assembles the
    /// plugins.
    ///
    /// # Errors
    /// [`NodeError`]; a locked or corrupt store refuses the start.
    pub fn build(config: Config) -> Result<Node, NodeError> {
        let store = open_store(&config)?;
        let credentials = Arc::new(InMemoryCredentials::new());
        let events = EventBus::new();
        let tokens = token_manager(&config);
        // The node's state is what it has applied from the log: replayed now, then followed, so
        // every write (through the store writer, or offline before the start) reaches the views
        // the same way.
        crate::views::follow(
            store.shared().as_ref(),
            Arc::clone(&credentials),
            tokens.clone(),
            events.clone(),
        )
        .map_err(NodeError::Store)?;
        if config.delegation_tokens.accept_token_without_extension {
            refuse_token_shaped_users(&credentials)?;
        }

        let token_view: Arc<dyn TokenView> = match &tokens {
            Some(manager) => Arc::clone(manager) as Arc<dyn TokenView>,
            None => Arc::new(NoTokens),
        };
        let context = HostContext::new(
            Arc::clone(&credentials) as Arc<dyn CredentialView>,
            token_view,
        );
        // OAUTHBEARER's start-up I/O (discovery, the first key set): a validator that cannot
        // verify tokens refuses the start.
        let oauth = match &config.oauthbearer {
            Some(section) if oauth_enabled(&config) => {
                Some(crate::oauth::OAuthBearer::start(section)?)
            }
            _ => None,
        };
        let assembly = assemble_with(&config, &context, oauth.as_ref())?;
        let super_users = LiveSuperUsers::new(
            config
                .authorizer
                .as_ref()
                .map(|a| a.super_users.clone())
                .unwrap_or_default(),
        );
        let allow_everyone = LiveAllowEveryone::new(
            config
                .authorizer
                .as_ref()
                .is_some_and(|a| a.allow_everyone_if_no_acl_found),
        );
        let authorizer = build_authorizer(
            &config,
            &context,
            &assembly,
            &store.shared(),
            &events,
            (&super_users, &allow_everyone),
        )?;
        // The built-in authorizer (with its ACLs, replayed from the store now) is kept: a reload
        // that chooses a plugin and then this one again gets it back (`node::reloaded`).
        let start_authorizer = match (&config.authorizer, &authorizer) {
            (Some(settings), Some(built))
                if registry::authorizers().any(|f| f.name == settings.plugin) =>
            {
                Some((settings.plugin.clone(), Arc::clone(built)))
            }
            _ => None,
        };
        let audit = audit_sink(&config)?;
        let authorizer = finish_authorizer(&config, authorizer, &assembly.policy, audit.as_ref());
        let local_handlers = local_handlers(
            &credentials,
            tokens.clone(),
            authorizer.clone(),
            config.delegation_tokens.accept_token_without_extension,
        );
        // A node of a cluster follows the forwarded requests its writer applied (subscribed
        // before the replay's records are let go).
        let idempotence = match (&store, &config.cluster) {
            (NodeStore::Kafka(shared), Some(_)) => Some(
                crate::cluster::idempotence::Idempotence::follow(
                    shared.as_ref(),
                    config.node.id,
                    tokens.clone(),
                )
                .map_err(NodeError::Store)?,
            ),
            _ => None,
        };
        // Every view has replayed the log: what the store kept for the replay is not needed.
        store.shared().replay_done();
        let writer = StoreWriter::start(store.shared()).map_err(|source| NodeError::Thread {
            what: "store writer".to_owned(),
            source,
        })?;
        let cluster = match (&store, &config.cluster, idempotence) {
            (NodeStore::Kafka(shared), Some(cluster_config), Some(idempotence)) => {
                let parts = crate::cluster::Parts {
                    store: Arc::clone(shared),
                    writer: writer.appends().clone(),
                    deciders: crate::cluster::Deciders {
                        handlers: local_handlers.clone(),
                        authorizer: authorizer.clone(),
                        principal_builder: Arc::clone(&assembly.principal_builder),
                    },
                    idempotence,
                };
                let cluster = crate::cluster::Cluster::new(cluster_config, config.node.id, parts)
                    .map_err(|e| NodeError::Cluster(e.to_string()))?;
                let cluster = Arc::new(cluster);
                writer.attach_cluster(Arc::clone(&cluster));
                Some(cluster)
            }
            _ => None,
        };

        // A credential removed or changed closes the sessions that used it, at once.
        let sessions = ReauthScheduler::new();
        let subscription = events.subscribe(4_096);
        let revoker = sessions.clone();
        std::thread::Builder::new()
            .name("portcullis-revocation".into())
            .spawn(move || {
                while let Some(event) = subscription.recv() {
                    let revoked = revoker.handle_event(&event);
                    if revoked > 0 {
                        tracing::info!(
                            revoked,
                            ?event,
                            "credential changed; closing the sessions that used it"
                        );
                    }
                }
            })
            .map_err(|source| NodeError::Thread {
                what: "revocation".to_owned(),
                source,
            })?;

        let mut subscribers = Vec::new();
        for (name, subscriber, capacity) in &assembly.subscribers {
            let counts = spawn_subscriber(
                name,
                Arc::clone(subscriber),
                &events,
                *capacity,
                context.stats(),
            )
            .map_err(|source| NodeError::Thread {
                what: format!("event subscriber {name}"),
                source,
            })?;
            subscribers.push(counts);
        }
        let subscribers = std::sync::Mutex::new(subscribers);

        crate::telemetry::metrics::record_node(&sessions, context.stats(), &assembly.plugins);
        let metrics = Arc::new(SecurityMetrics::with_recorder(
            crate::telemetry::metrics::OtelRecorder::shared(),
        ));
        // When the upstream decides, upstream-bound requests are allowed here (and the advertised
        // versions are not restricted to what the authorization map reads).
        let forwarded_authorizer = authorizer.filter(|_| !config.forwarding.upstream_authorizes());
        let services = NodeServices::new(
            assembly.mechanisms,
            assembly.principal_builder,
            assembly.policy,
            events,
        )
        .with_sessions(sessions, metrics)
        .with_local_handlers(local_handlers)
        .with_authorizer(forwarded_authorizer);
        Ok(Node {
            config,
            store,
            cluster,
            writer,
            tokens,
            credentials,
            services: Arc::new(services),
            upstream_login: assembly
                .upstream_login
                .map(crate::server::upstream::login_slot),
            plugins: assembly.plugins,
            context,
            subscribers,
            oauth,
            super_users,
            allow_everyone,
            audit,
            start_authorizer,
        })
    }

    /// Stops what the node runs in the background besides the listener: the OAUTHBEARER key
    /// set's refresher and the OAuth runtime. (The store, writer and event threads stop as the
    /// node is dropped.)
    pub fn shutdown_background(&self) {
        if let Some(oauth) = &self.oauth {
            oauth.shutdown();
        }
    }

    /// The mechanisms `config.listener.sasl_mechanisms` enables, in its order, for a reloaded
    /// configuration: the instances in `current` are kept (their state, such as a plugin's, goes
    /// on), the others are built as at start, among the built-ins, the plugins reloads loaded
    /// (`reloaded`, newest first) and the plugins loaded at start. The mechanisms of
    /// `reloaded[0]` (libraries loaded by this reload: new files, new content of a file, or a new
    /// table) are taken from it even when `current` has one of that name, and the built-in
    /// mechanisms named in `rebuilt` (their table changed, or `[oauthbearer]`) are built anew;
    /// `oauth` is OAUTHBEARER as a reload started it (the node's own when `None`). OAUTHBEARER can
    /// only be enabled by a reload when the node started with it.
    ///
    /// # Errors
    /// [`NodeError`] as at start: an unknown name (with what is available), a plugin's
    /// configuration refused, OAUTHBEARER without its validator.
    pub fn mechanisms_for(
        &self,
        config: &Config,
        current: &[Arc<dyn SaslMechanism>],
        reloaded: &[&PluginLoadReport],
        rebuilt: &[String],
        oauth: Option<Arc<dyn SaslMechanism>>,
    ) -> Result<Vec<Arc<dyn SaslMechanism>>, NodeError> {
        let oauth = oauth.or_else(|| {
            self.oauth
                .as_ref()
                .map(crate::oauth::OAuthBearer::mechanism)
        });
        let tables = crate::plugin_config::PluginTables::new(&config.plugins)?;
        let mut renewed = reloaded
            .first()
            .map(|r| r.mechanism_names())
            .unwrap_or_default();
        renewed.extend(rebuilt.iter().cloned());
        let mut out = Vec::with_capacity(config.listener.sasl_mechanisms.len());
        for name in &config.listener.sasl_mechanisms {
            let kept = current.iter().find(|m| m.name() == name.as_str());
            if let (Some(kept), false) = (kept, renewed.contains(name)) {
                out.push(Arc::clone(kept));
                continue;
            }
            let report = reloaded
                .iter()
                .copied()
                .find(|r| r.mechanism_names().contains(name))
                .unwrap_or(&self.plugins);
            out.extend(mechanisms::resolve_mechanisms(
                std::slice::from_ref(name),
                &self.context,
                report,
                &tables,
                oauth.clone(),
            )?);
        }
        Ok(out)
    }

    /// The running event subscribers' counts.
    pub fn subscriber_stats(&self) -> Vec<SubscriberStats> {
        self.running_subscribers()
            .iter()
            .map(|s| s.stats.clone())
            .collect()
    }

    fn running_subscribers(&self) -> std::sync::MutexGuard<'_, Vec<RunningSubscriber>> {
        self.subscribers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Checks and builds the event subscribers `config` names, as at start (`reloaded`: the
    /// reloads' plugins, newest first, ahead of those the node started with; a built-in one is
    /// built with its table from `config`). Nothing runs yet: [`Node::run_subscribers`] starts
    /// them.
    ///
    /// # Errors
    /// [`NodeError`] as at start: an unknown name, a plugin's configuration refused.
    pub fn subscribers_for(
        &self,
        config: &Config,
        reloaded: &[&PluginLoadReport],
    ) -> Result<assemble::Subscribers, NodeError> {
        let tables = crate::plugin_config::PluginTables::new(&config.plugins)?;
        let mut reports = reloaded.to_vec();
        reports.push(&self.plugins);
        assemble::build_subscribers_from(config, &self.context, &reports, &tables)
    }

    /// Replaces the running event subscribers with `new` in one step on the event bus (no event
    /// lost or delivered twice); the old threads deliver what was queued for them, then end.
    ///
    /// # Errors
    /// A thread cannot be started; the old subscribers keep running then.
    pub fn run_subscribers(&self, new: assemble::Subscribers) -> Result<(), NodeError> {
        let mut running = self.running_subscribers();
        let started =
            replace_subscribers(&self.services.events, &running, new, self.context.stats())
                .map_err(|source| NodeError::Thread {
                    what: "event subscribers".to_owned(),
                    source,
                })?;
        *running = started;
        Ok(())
    }

    /// The plugin metrics and subscriber counts.
    pub fn plugin_stats(&self) -> Arc<PluginStats> {
        Arc::clone(self.context.stats())
    }
}
