//! Assembling a node from its configuration: the store, credentials, and one plugin of each kind
//! — SASL mechanisms, principal builder, authorizer, forwarding policy, upstream login module,
//! event subscribers — each chosen by name among the built-ins (registered with `inventory`) and
//! the plugins loaded from the plugin directory, the same way for both.
//!
//! [`Node::build`] does all of it for a running node. [`assemble`] is the part that needs no
//! store (and so takes no lock on the data directory): `check-config` and `plugins` use it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use portcullis::audit::{AuditPolicy, AuditingAuthorizer};
use portcullis::authorizer::Authorizer;
use portcullis::connection::NodeServices;
use portcullis::credentials::{CredentialView, InMemoryCredentials, NoTokens, TokenView};
use portcullis::events::{EventBus, EventSubscriber};
use portcullis::forwarding::{DenyApiKeys, ForwardingPolicy, ScreenedAuthorizer};
use portcullis::local::acls::AclApis;
use portcullis::local::delegation_tokens::DelegationTokenApis;
use portcullis::local::scram_credentials::ScramCredentialsApi;
use portcullis::local::LocalHandler;
use portcullis::login::LoginModule;
use portcullis::metrics::SecurityMetrics;
use portcullis::principal::PrincipalBuilder;
use portcullis::reauth::ReauthScheduler;
use portcullis::registry::{
    self, AuthorizerInput, AuthorizerSettings, CheckConfigFn, ForwardingSettings, LoginSettings,
    PluginInstance, StoreSettings,
};
use portcullis::sasl::SaslMechanism;
use portcullis::store::{MetadataStore, StoreError};
use portcullis::tokens::{TokenConfig, TokenManager};
use portcullis::{PluginError, PluginKind};
use portcullis_plugin_kafka_store::{
    KafkaConnection, KafkaMetadataStore, KafkaStoreSettings, SaslSettings, TlsSettings,
};
use portcullis_plugin_login::ResolvedLogin;

// The built-in plugins register themselves with `inventory`; naming each crate makes sure it is
// linked into the binary even where nothing else in the host uses it.
use portcullis_plugin_acl as _;
use portcullis_plugin_forwarding as _;
use portcullis_plugin_plain as _;
use portcullis_plugin_scram as _;
use portcullis_plugin_stores as _;

use crate::config::{Config, StoreKind};
use crate::plugin_config::{PluginConfigError, PluginTables};
use crate::plugin_loader::{load_plugin_dir, PluginLoadReport};
use crate::services::{spawn_subscriber, HostContext, PluginStats, SubscriberStats};
use crate::store_writer::StoreWriter;

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
    /// Portcullis' own login upstream, for SASL upstreams.
    pub upstream_login: Option<Arc<dyn LoginModule>>,
    /// What the plugin directory held: loaded plugins and refused files.
    pub plugins: PluginLoadReport,
    /// The services plugins got; plugin metrics and subscriber counts.
    pub context: HostContext,
    /// The event subscribers' counts.
    pub subscribers: Vec<SubscriberStats>,
    /// OAUTHBEARER's validator and what keeps it working (its key set's refresher, on the
    /// OAuth runtime), when `listener.sasl_mechanisms` enables it.
    pub oauth: Option<crate::oauth::OAuthBearer>,
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
                &self.upstream_login.as_ref().map(|l| l.mechanism()),
            )
            .finish_non_exhaustive()
    }
}

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

/// The parts of a node that need no store.
pub struct Assembly {
    /// The enabled mechanisms, in `listener.sasl_mechanisms` order.
    pub mechanisms: Vec<Arc<dyn SaslMechanism>>,
    /// Maps an authentication to a principal.
    pub principal_builder: Arc<dyn PrincipalBuilder>,
    /// Routes authenticated requests.
    pub policy: Arc<dyn ForwardingPolicy>,
    /// Portcullis' own login upstream, for SASL upstreams.
    pub upstream_login: Option<Arc<dyn LoginModule>>,
    /// The event subscribers, with their queue capacities (started by [`Node::build`]).
    pub subscribers: Vec<(String, Arc<dyn EventSubscriber>, usize)>,
    /// What the plugin directory held.
    pub plugins: PluginLoadReport,
    /// The configuration tables.
    pub tables: PluginTables,
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
        let authorizer = build_authorizer(&config, &context, &assembly, &store.shared(), &events)?;
        // A policy that refuses actions is enforced through the authorization map: its refusals
        // come before the authorizer's decisions (which allow everything when there is none).
        let authorizer = if assembly.policy.screens_actions() {
            Some(Arc::new(ScreenedAuthorizer::new(
                Arc::clone(&assembly.policy),
                authorizer,
            )) as Arc<dyn Authorizer>)
        } else {
            authorizer
        };
        let authorizer = audited(&config, authorizer)?;
        // Every check becomes an `authorize` span and counts (docs/observability.md).
        let authorizer = authorizer.map(crate::telemetry::authorizer::Instrumented::wrap);
        let local_handlers = local_handlers(
            &credentials,
            tokens.clone(),
            authorizer.clone(),
            config.delegation_tokens.accept_token_without_extension,
        );
        // Every view has replayed the log: what the store kept for the replay is not needed.
        store.shared().replay_done();
        let writer = StoreWriter::start(store.shared()).map_err(|source| NodeError::Thread {
            what: "store writer".to_owned(),
            source,
        })?;
        let cluster = match (&store, &config.cluster) {
            (NodeStore::Kafka(shared), Some(cluster_config)) => {
                let cluster = crate::cluster::Cluster::new(
                    cluster_config,
                    config.node.id,
                    Arc::clone(shared),
                    writer.clone(),
                    local_handlers.clone(),
                    authorizer.clone(),
                    Arc::clone(&assembly.principal_builder),
                )
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
            upstream_login: assembly.upstream_login,
            plugins: assembly.plugins,
            context,
            subscribers,
            oauth,
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

    /// The plugin metrics and subscriber counts.
    pub fn plugin_stats(&self) -> Arc<PluginStats> {
        Arc::clone(self.context.stats())
    }
}

/// Where the node's metadata log is (`[store] kind`).
#[derive(Clone)]
pub enum NodeStore {
    /// The node's own log: the built-in `file` store in the data directory.
    File(Arc<dyn MetadataStore>),
    /// A compacted topic of the upstream cluster, shared with the other nodes of the cluster.
    Kafka(Arc<KafkaMetadataStore>),
}

impl fmt::Debug for NodeStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeStore::File(store) => write!(f, "File({})", store.location()),
            NodeStore::Kafka(store) => write!(f, "Kafka({})", store.location()),
        }
    }
}

impl NodeStore {
    /// The store behind the `MetadataStore` trait.
    pub fn shared(&self) -> Arc<dyn MetadataStore> {
        match self {
            NodeStore::File(store) => Arc::clone(store),
            NodeStore::Kafka(store) => Arc::clone(store) as Arc<dyn MetadataStore>,
        }
    }

    /// Stops following a shared log and leaves the election at once (a successor need not wait
    /// for the session timeout); nothing to do for the file store.
    pub fn shutdown(&self) {
        if let NodeStore::Kafka(store) = self {
            store.shutdown();
        }
    }
}

/// Opens the configured store: the built-in `file` store in `node.data_dir`, or the cluster's
/// topic (replayed before this returns).
///
/// The kafka store is not chosen through the store registry: it is opened with the node's
/// `[upstream]` connection, `[store]` and `[cluster]` settings, which the registry's
/// `StoreSettings` (a data directory) do not carry.
///
/// # Errors
/// The store cannot be opened.
pub fn open_store(config: &Config) -> Result<NodeStore, NodeError> {
    match config.store.kind {
        StoreKind::File => {
            let name = registry::DEFAULT_STORE;
            let factory = registry::stores()
                .find(|f| f.name == name)
                .ok_or_else(|| NodeError::UnknownStore(name.to_owned()))?;
            let store = (factory.open)(&StoreSettings::new(&config.node.data_dir))
                .map_err(NodeError::Store)?;
            Ok(NodeStore::File(store))
        }
        StoreKind::Kafka => Ok(NodeStore::Kafka(Arc::new(
            KafkaMetadataStore::open(kafka_store_settings(config, true)?)
                .map_err(NodeError::Store)?,
        ))),
    }
}

/// The kafka store's settings from `[store]`, `[cluster]` and `[upstream]`.
///
/// # Errors
/// [`NodeError::Store`] when `[store]` is not a kafka store with a cluster id.
pub fn kafka_store_settings(config: &Config, elect: bool) -> Result<KafkaStoreSettings, NodeError> {
    let cluster_id = config
        .store
        .cluster_id
        .clone()
        .filter(|_| config.store.kind == StoreKind::Kafka)
        .ok_or_else(|| {
            NodeError::Store(StoreError::Unsupported(
                "this needs [store] kind = \"kafka\" with a cluster_id".to_owned(),
            ))
        })?;
    let upstream = &config.upstream;
    let sasl = match (
        &upstream.sasl_mechanism,
        &upstream.username,
        &upstream.password,
    ) {
        (Some(mechanism), Some(username), Some(password))
            if upstream.security_protocol.uses_sasl() =>
        {
            Some(SaslSettings {
                mechanism: mechanism.clone(),
                username: username.clone(),
                password: password.expose().to_owned(),
            })
        }
        _ => None,
    };
    let tls = upstream.security_protocol.uses_tls().then(|| {
        let t = upstream.tls.clone().unwrap_or_default();
        TlsSettings {
            ca_file: t.ca_file,
            cert_file: t.cert_file,
            key_file: t.key_file,
            verify_server_name: t.verify_server_name,
        }
    });
    let connection = KafkaConnection {
        bootstrap_servers: upstream.bootstrap_servers.clone(),
        security_protocol: upstream.security_protocol.name().to_owned(),
        sasl,
        tls,
    };
    let advertised = config
        .cluster
        .as_ref()
        .map(|c| c.advertised().to_owned())
        .unwrap_or_default();
    let mut settings = KafkaStoreSettings::new(
        connection,
        config.store.topic.clone(),
        cluster_id,
        config.node.id,
        advertised,
    );
    settings.session_timeout = std::time::Duration::from_millis(config.store.session_timeout_ms);
    settings.elect = elect;
    Ok(settings)
}

/// The configured authorizer, if any, built on the store (a built-in one replays its ACLs).
fn build_authorizer(
    config: &Config,
    context: &HostContext,
    assembly: &Assembly,
    store: &Arc<dyn MetadataStore>,
    events: &EventBus,
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
    .with_events(events.clone());
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

/// `authorizer` wrapped by the audit log when `[audit] file` is set.
fn audited(
    config: &Config,
    authorizer: Option<Arc<dyn Authorizer>>,
) -> Result<Option<Arc<dyn Authorizer>>, NodeError> {
    let Some(authorizer) = authorizer else {
        return Ok(None);
    };
    let Some(path) = &config.audit.file else {
        return Ok(Some(authorizer));
    };
    let sink = crate::services::FileAuditSink::open(path).map_err(NodeError::Audit)?;
    let policy = AuditPolicy::new(config.audit.log_allowed, config.audit.log_denied);
    Ok(Some(Arc::new(AuditingAuthorizer::new(
        authorizer,
        Arc::new(sink),
        policy,
    ))))
}

/// The locally served security APIs: ACLs, SCRAM credentials and delegation tokens (served also
/// when tokens are disabled, answering DELEGATION_TOKEN_AUTH_DISABLED, as Kafka does).
fn local_handlers(
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
fn token_manager(config: &Config) -> Option<Arc<TokenManager>> {
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
fn refuse_token_shaped_users(credentials: &InMemoryCredentials) -> Result<(), NodeError> {
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

/// Loads the plugin directory and builds the mechanisms, principal builder, policy, upstream
/// login and event subscribers for `config` with the services of `context`; checks every
/// `[plugins.config.NAME]` table and that the configured authorizer exists.
///
/// # Errors
/// [`NodeError`] for an unknown or doubly provided plugin or mechanism, a plugin that refused its
/// configuration, or a configuration table that names no plugin.
pub fn assemble(config: &Config, context: &HostContext) -> Result<Assembly, NodeError> {
    // No I/O here: OAUTHBEARER is built with a validator that fetches nothing.
    let offline = match &config.oauthbearer {
        Some(section) if oauth_enabled(config) => {
            Some(crate::oauth::OAuthBearer::offline(section)?)
        }
        _ => None,
    };
    assemble_with(config, context, offline.as_ref())
}

/// Whether `listener.sasl_mechanisms` enables OAUTHBEARER.
fn oauth_enabled(config: &Config) -> bool {
    config
        .listener
        .sasl_mechanisms
        .iter()
        .any(|m| m == crate::config::OAUTHBEARER)
}

/// [`assemble`] with OAUTHBEARER already built (started, by [`Node::build`]).
fn assemble_with(
    config: &Config,
    context: &HostContext,
    oauth: Option<&crate::oauth::OAuthBearer>,
) -> Result<Assembly, NodeError> {
    let tables = PluginTables::new(&config.plugins)?;
    let plugins = match &config.plugins.dir {
        Some(dir) => load_plugin_dir(dir, &tables, context),
        None => PluginLoadReport::default(),
    };
    check_tables(&tables, &plugins)?;
    let mechanisms = resolve_mechanisms(
        &config.listener.sasl_mechanisms,
        context,
        &plugins,
        &tables,
        oauth.map(crate::oauth::OAuthBearer::mechanism),
    )?;
    let principal_builder = build_principal_builder(config, context, &plugins, &tables)?;
    let policy = build_policy(config, context, &plugins, &tables)?;
    let upstream_login = upstream_login(config, context, &plugins, &tables)?;
    let subscribers = build_subscribers(config, context, &plugins, &tables)?;
    if let Some(settings) = &config.authorizer {
        check_authorizer(&settings.plugin, &plugins, &tables)?;
    }
    Ok(Assembly {
        mechanisms,
        principal_builder,
        policy,
        upstream_login,
        subscribers,
        plugins,
        tables,
    })
}

/// What a configuration key chooses.
#[derive(Clone, Copy)]
struct Choice<'a> {
    key: &'static str,
    kind: PluginKind,
    name: &'a str,
}

/// Chooses the plugin `choice` names: a built-in one (built with `build`) or a loaded one (its
/// instance, through `instance`), never both.
fn choose<T: ?Sized, F>(
    choice: Choice<'_>,
    builtin: Option<&'static F>,
    builtin_names: impl Iterator<Item = &'static str>,
    build: impl FnOnce(&'static F) -> Result<Arc<T>, PluginError>,
    instance: impl Fn(&PluginInstance) -> Option<Arc<T>>,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<Arc<T>, NodeError> {
    let loaded = plugins.find(choice.kind, choice.name);
    match (builtin, loaded) {
        (Some(_), Some(plugin)) => Err(NodeError::DuplicatePlugin {
            key: choice.key,
            kind: choice.kind,
            name: choice.name.to_owned(),
            file: plugin.path.clone(),
        }),
        (Some(factory), None) => {
            build(factory).map_err(|e| NodeError::PluginConfig(tables.locate(choice.name, &e)))
        }
        (None, Some(plugin)) => match &plugin.instance {
            Ok(built) => instance(built).ok_or_else(|| unknown(choice, builtin_names, plugins)),
            Err(error) => Err(NodeError::PluginConfig(error.clone())),
        },
        (None, None) => Err(unknown(choice, builtin_names, plugins)),
    }
}

fn refused_files(plugins: &PluginLoadReport) -> Vec<String> {
    plugins
        .refused
        .iter()
        .map(|r| format!("{}: {}", r.path.display(), r.reason))
        .collect()
}

fn unknown(
    choice: Choice<'_>,
    builtin_names: impl Iterator<Item = &'static str>,
    plugins: &PluginLoadReport,
) -> NodeError {
    let mut available: Vec<String> = builtin_names
        .map(str::to_owned)
        .chain(
            plugins
                .loaded
                .iter()
                .filter(|p| p.kind == choice.kind)
                .map(|p| p.name.clone()),
        )
        .collect();
    available.sort_unstable();
    available.dedup();
    NodeError::UnknownPlugin {
        key: choice.key,
        kind: choice.kind,
        name: choice.name.to_owned(),
        available,
        refused: refused_files(plugins),
    }
}

/// Every built-in plugin: its kind, name and configuration check.
pub fn builtins() -> Vec<(PluginKind, &'static str, CheckConfigFn)> {
    let mut all: Vec<(PluginKind, &'static str, CheckConfigFn)> = Vec::new();
    all.extend(registry::mechanisms().map(|f| (PluginKind::SaslMechanism, f.name, f.check_config)));
    // OAUTHBEARER is built by the host from `[oauthbearer]` (its validator needs host I/O), not
    // from a registered factory.
    if !all.iter().any(|(_, name, _)| *name == OAUTHBEARER) {
        all.push((PluginKind::SaslMechanism, OAUTHBEARER, oauth_table_check));
    }
    all.extend(registry::authorizers().map(|f| (PluginKind::Authorizer, f.name, f.check_config)));
    all.extend(
        registry::principal_builders()
            .map(|f| (PluginKind::PrincipalBuilder, f.name, f.check_config)),
    );
    all.extend(
        registry::login_modules().map(|f| (PluginKind::LoginModule, f.name, f.check_config)),
    );
    all.extend(
        registry::policies().map(|f| (PluginKind::ForwardingPolicy, f.name, f.check_config)),
    );
    all.extend(
        registry::event_subscribers()
            .map(|f| (PluginKind::EventSubscriber, f.name, f.check_config)),
    );
    all.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    all
}

/// Every `[plugins.config.NAME]` table must belong to a plugin and fit it: a typo in a table name
/// or a key is refused at start-up, even for a plugin that is not in use.
fn check_tables(tables: &PluginTables, plugins: &PluginLoadReport) -> Result<(), NodeError> {
    let builtins = builtins();
    for name in tables.names() {
        let mut known = false;
        for plugin in plugins.loaded.iter().filter(|p| p.name == name) {
            known = true;
            if let Err(error) = &plugin.instance {
                return Err(NodeError::PluginConfig(error.clone()));
            }
        }
        for (_, _, check) in builtins.iter().filter(|(_, n, _)| *n == name) {
            known = true;
            check(tables.text(name)).map_err(|e| {
                NodeError::PluginConfig(tables.locate(name, &PluginError::Config(e)))
            })?;
        }
        if !known {
            let mut available: Vec<String> = builtins
                .iter()
                .map(|(_, n, _)| (*n).to_owned())
                .chain(plugins.loaded.iter().map(|p| p.name.clone()))
                .collect();
            available.sort_unstable();
            available.dedup();
            return Err(NodeError::UnknownConfigTable {
                name: name.to_owned(),
                available,
                refused: refused_files(plugins),
            });
        }
    }
    Ok(())
}

/// OAUTHBEARER's name.
const OAUTHBEARER: &str = crate::config::OAUTHBEARER;

/// OAUTHBEARER is configured in `[oauthbearer]`: a `[plugins.config.OAUTHBEARER]` table is a
/// mistake worth naming.
fn oauth_table_check(text: &str) -> Result<(), portcullis_plugin_api::ConfigError> {
    if text.trim().is_empty() {
        Ok(())
    } else {
        Err(portcullis_plugin_api::ConfigError::new(
            "OAUTHBEARER is configured in the [oauthbearer] table, not in [plugins.config.OAUTHBEARER]",
            None,
        ))
    }
}

/// Resolves each enabled name to a built-in mechanism or a loaded plugin's mechanism;
/// OAUTHBEARER is `oauth`, the one the host built.
fn resolve_mechanisms(
    enabled: &[String],
    context: &HostContext,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
    oauth: Option<Arc<dyn SaslMechanism>>,
) -> Result<Vec<Arc<dyn SaslMechanism>>, NodeError> {
    let loaded: Vec<(&Path, Arc<dyn SaslMechanism>)> = plugins
        .loaded
        .iter()
        .filter_map(|p| match &p.instance {
            Ok(PluginInstance::SaslMechanism(m)) => Some((p.path.as_path(), Arc::clone(m))),
            _ => None,
        })
        .collect();
    enabled
        .iter()
        .map(|name| {
            let mut providers = loaded.iter().filter(|(_, m)| m.name() == name);
            if name == OAUTHBEARER {
                return match (providers.next(), &oauth) {
                    (Some((path, _)), _) => {
                        Err(duplicate(name, "the built-in mechanism".to_owned(), path))
                    }
                    (None, Some(mechanism)) => Ok(Arc::clone(mechanism)),
                    // Config::validate refuses OAUTHBEARER without [oauthbearer].
                    (None, None) => Err(NodeError::OAuthBearer(crate::oauth::OAuthError::Config {
                        key: "listener.sasl_mechanisms".to_owned(),
                        reason: "OAUTHBEARER needs an [oauthbearer] table".to_owned(),
                    })),
                };
            }
            let builtin = registry::mechanisms().find(|f| f.name == name);
            match (builtin, providers.next()) {
                (Some(_), Some((path, _))) => {
                    Err(duplicate(name, "the built-in mechanism".to_owned(), path))
                }
                (None, Some((path, mechanism))) => match providers.next() {
                    Some((other, _)) => {
                        Err(duplicate(name, format!("plugin {}", path.display()), other))
                    }
                    None => Ok(Arc::clone(mechanism)),
                },
                (Some(factory), None) => {
                    (factory.build)(tables.text(name), &context.host_for(name))
                        .map_err(|e| NodeError::PluginConfig(tables.locate(name, &e)))
                }
                (None, None) => Err(unknown_mechanism(name, &loaded, plugins)),
            }
        })
        .collect()
}

fn duplicate(name: &str, first: String, second: &Path) -> NodeError {
    NodeError::DuplicateMechanism {
        name: name.to_owned(),
        first,
        second: format!("plugin {}", second.display()),
    }
}

fn unknown_mechanism(
    name: &str,
    loaded: &[(&Path, Arc<dyn SaslMechanism>)],
    plugins: &PluginLoadReport,
) -> NodeError {
    let mut available: Vec<String> = builtin_mechanism_names()
        .into_iter()
        .map(str::to_owned)
        .chain(loaded.iter().map(|(_, m)| m.name().to_owned()))
        .collect();
    available.sort_unstable();
    available.dedup();
    NodeError::UnknownMechanism {
        name: name.to_owned(),
        available,
        refused: plugins
            .refused
            .iter()
            .map(|r| format!("{}: {}", r.path.display(), r.reason))
            .chain(
                plugins
                    .loaded
                    .iter()
                    .filter(|p| p.kind == PluginKind::SaslMechanism)
                    .filter_map(|p| p.instance.as_ref().err())
                    .map(ToString::to_string),
            )
            .collect(),
    }
}

/// The names of the built-in mechanisms, sorted.
pub fn builtin_mechanism_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = registry::mechanisms().map(|f| f.name).collect();
    names.push(OAUTHBEARER);
    names.sort_unstable();
    names.dedup();
    names
}

fn build_principal_builder(
    config: &Config,
    context: &HostContext,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<Arc<dyn PrincipalBuilder>, NodeError> {
    let name = config.principal.plugin.as_str();
    choose(
        Choice {
            key: "principal.plugin",
            kind: PluginKind::PrincipalBuilder,
            name,
        },
        registry::principal_builders().find(|f| f.name == name),
        registry::principal_builders().map(|f| f.name),
        |factory| (factory.build)(tables.text(name), &context.host_for(name)),
        |instance| match instance {
            PluginInstance::PrincipalBuilder(p) => Some(Arc::clone(p)),
            _ => None,
        },
        plugins,
        tables,
    )
}

fn build_policy(
    config: &Config,
    context: &HostContext,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<Arc<dyn ForwardingPolicy>, NodeError> {
    let name = config.forwarding.policy.as_str();
    let deny = &config.forwarding.deny_api_keys;
    let builtin = registry::policies().find(|f| f.name == name);
    let policy = choose(
        Choice {
            key: "forwarding.policy",
            kind: PluginKind::ForwardingPolicy,
            name,
        },
        builtin,
        registry::policies().map(|f| f.name),
        |factory| {
            // `delegated` is configured in `[forwarding.delegated]`, not a `[plugins.*]` table.
            let delegated_text;
            let text = if factory.name == "delegated" {
                delegated_text = crate::delegated_config::DelegatedConfig(
                    config
                        .forwarding
                        .delegated_settings()
                        .cloned()
                        .unwrap_or_default(),
                )
                .policy_text();
                delegated_text.as_str()
            } else {
                tables.text(name)
            };
            (factory.build)(
                text,
                &context.host_for(name),
                &ForwardingSettings::new(deny.clone()),
            )
        },
        |instance| match instance {
            PluginInstance::ForwardingPolicy(p) => Some(Arc::clone(p)),
            _ => None,
        },
        plugins,
        tables,
    )?;
    // A built-in policy applies `deny_api_keys` itself; in front of a plugin, the host does.
    if builtin.is_none() && !deny.is_empty() {
        return Ok(Arc::new(DenyApiKeys::new(deny.clone(), policy)));
    }
    Ok(policy)
}

/// The login module for SASL upstreams (`None` for a PLAINTEXT upstream), wrapped so that a
/// module handing over a password gets the host's built-in client for its mechanism.
fn upstream_login(
    config: &Config,
    context: &HostContext,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<Option<Arc<dyn LoginModule>>, NodeError> {
    let upstream = &config.upstream;
    if !upstream.security_protocol.uses_sasl() {
        return Ok(None);
    }
    let name = upstream
        .login
        .as_ref()
        .map_or(portcullis_plugin_login::PASSWORD_LOGIN, |l| {
            l.plugin.as_str()
        });
    let settings = LoginSettings::new(
        upstream.sasl_mechanism.clone(),
        upstream.username.clone(),
        upstream.password.clone(),
    );
    let module = choose(
        Choice {
            key: "upstream.login.plugin",
            kind: PluginKind::LoginModule,
            name,
        },
        registry::login_modules().find(|f| f.name == name),
        registry::login_modules().map(|f| f.name),
        |factory| (factory.build)(tables.text(name), &context.host_for(name), &settings),
        |instance| match instance {
            PluginInstance::LoginModule(l) => Some(Arc::clone(l)),
            _ => None,
        },
        plugins,
        tables,
    )?;
    // With its own login module, `sasl_mechanism` is optional; when given, it must agree.
    if let Some(configured) = upstream.sasl_mechanism.as_deref() {
        if name != portcullis_plugin_login::PASSWORD_LOGIN && configured != module.mechanism() {
            return Err(NodeError::UpstreamMechanismMismatch {
                configured: configured.to_owned(),
                module: name.to_owned(),
                mechanism: module.mechanism().to_owned(),
            });
        }
    }
    Ok(Some(Arc::new(ResolvedLogin::new(module))))
}

type Subscribers = Vec<(String, Arc<dyn EventSubscriber>, usize)>;

fn build_subscribers(
    config: &Config,
    context: &HostContext,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<Subscribers, NodeError> {
    config
        .events
        .subscribers
        .iter()
        .map(|subscriber| {
            let name = subscriber.plugin.as_str();
            let built = choose(
                Choice {
                    key: "events.subscribers.plugin",
                    kind: PluginKind::EventSubscriber,
                    name,
                },
                registry::event_subscribers().find(|f| f.name == name),
                registry::event_subscribers().map(|f| f.name),
                |factory| (factory.build)(tables.text(name), &context.host_for(name)),
                |instance| match instance {
                    PluginInstance::EventSubscriber(s) => Some(Arc::clone(s)),
                    _ => None,
                },
                plugins,
                tables,
            )?;
            Ok((name.to_owned(), built, subscriber.queue_capacity))
        })
        .collect()
}

/// Without a store, an authorizer is not built; this checks that the configured one exists and,
/// for a loaded plugin, that it started.
fn check_authorizer(
    name: &str,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<(), NodeError> {
    let choice = Choice {
        key: "authorizer.plugin",
        kind: PluginKind::Authorizer,
        name,
    };
    let builtin = registry::authorizers().find(|f| f.name == name);
    match (builtin, plugins.find(PluginKind::Authorizer, name)) {
        (Some(_), Some(plugin)) => Err(NodeError::DuplicatePlugin {
            key: choice.key,
            kind: choice.kind,
            name: name.to_owned(),
            file: plugin.path.clone(),
        }),
        (Some(factory), None) => (factory.check_config)(tables.text(name))
            .map_err(|e| NodeError::PluginConfig(tables.locate(name, &PluginError::Config(e)))),
        (None, Some(plugin)) => match &plugin.instance {
            Ok(_) => Ok(()),
            Err(error) => Err(NodeError::PluginConfig(error.clone())),
        },
        (None, None) => Err(unknown(
            choice,
            registry::authorizers().map(|f| f.name),
            plugins,
        )),
    }
}
