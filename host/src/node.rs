//! Assembling a node from its configuration: the store, credentials, mechanisms (built-in and
//! dynamic), the forwarding policy and the upstream login module.
//!
//! [`Node::build`] does all of it for a running node. [`assemble`] is the part that needs no
//! store (and so takes no lock on the data directory): `check-config` and `plugins` use it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use portcullis::audit::{AuditPolicy, AuditingAuthorizer};
use portcullis::authorizer::Authorizer;
use portcullis::credentials::{CredentialView, InMemoryCredentials, NoTokens, TokenView};
use portcullis::events::EventBus;
use portcullis::forwarding::ForwardingPolicy;
use portcullis::local::acls::AclApis;
use portcullis::local::delegation_tokens::DelegationTokenApis;
use portcullis::local::scram_credentials::ScramCredentialsApi;
use portcullis::local::LocalHandler;
use portcullis::login::LoginModule;
use portcullis::metrics::SecurityMetrics;
use portcullis::principal::{DefaultPrincipalBuilder, PrincipalBuilder};
use portcullis::reauth::ReauthScheduler;
use portcullis::registry::AuthorizerSettings;
use portcullis::registry::{self, ForwardingSettings, Services};
use portcullis::sasl::SaslMechanism;
use portcullis::store::MetadataStore;
use portcullis::store::StoreError;
use portcullis::tokens::{TokenConfig, TokenManager};
use portcullis_plugin_kafka_store::{
    KafkaConnection, KafkaMetadataStore, KafkaStoreSettings, SaslSettings, TlsSettings,
};
use portcullis_plugin_stores::FileMetadataStore;

// The built-in plugins register themselves with `inventory`; naming each crate makes sure it is
// linked into the binary even where nothing else in the host uses it.
use portcullis_plugin_acl as _;
use portcullis_plugin_forwarding as _;
use portcullis_plugin_plain as _;
use portcullis_plugin_scram as _;

use crate::config::{Config, PluginsConfig, SecurityProtocol, StoreKind};
use crate::plugin_loader::{config_to_text, load_plugin_dir, PluginLoadReport};
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
    /// The node's event bus.
    pub events: EventBus,
    /// The enabled mechanisms, in `listener.sasl_mechanisms` order.
    pub mechanisms: Vec<Arc<dyn SaslMechanism>>,
    /// Maps an authentication to a principal.
    pub principal_builder: Arc<dyn PrincipalBuilder>,
    /// Routes authenticated requests.
    pub policy: Arc<dyn ForwardingPolicy>,
    /// Portcullis' own login upstream, for `SASL_PLAINTEXT`.
    pub upstream_login: Option<Arc<dyn LoginModule>>,
    /// What the plugin directory held: loaded and refused files.
    pub plugins: PluginLoadReport,
    /// Every authenticated session (KIP-368 deadlines and revocation).
    pub sessions: ReauthScheduler,
    /// Authentication counters.
    pub metrics: Arc<SecurityMetrics>,
    /// The authorizer (wrapped by the audit log when one is configured).
    pub authorizer: Option<Arc<dyn Authorizer>>,
    /// The security APIs Portcullis serves itself.
    pub local_handlers: Vec<Arc<dyn LocalHandler>>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("config", &self.config)
            .field("store", &self.store)
            .field("credentials", &self.credentials)
            .field(
                "mechanisms",
                &self.mechanisms.iter().map(|m| m.name()).collect::<Vec<_>>(),
            )
            .field("policy", &self.policy.name())
            .field(
                "upstream_login",
                &self.upstream_login.as_ref().map(|l| l.mechanism()),
            )
            .finish_non_exhaustive()
    }
}

/// Where the node's metadata log is (`[store] kind`).
#[derive(Debug, Clone)]
pub enum NodeStore {
    /// The node's own file log.
    File(Arc<FileMetadataStore>),
    /// A compacted topic of the upstream cluster, shared with the other nodes of the cluster.
    Kafka(Arc<KafkaMetadataStore>),
}

impl NodeStore {
    /// The store behind the `MetadataStore` trait.
    pub fn shared(&self) -> Arc<dyn MetadataStore> {
        match self {
            NodeStore::File(store) => Arc::clone(store) as Arc<dyn MetadataStore>,
            NodeStore::Kafka(store) => Arc::clone(store) as Arc<dyn MetadataStore>,
        }
    }

    fn release_startup_cache(&self) {
        match self {
            NodeStore::File(store) => store.release_startup_cache(),
            NodeStore::Kafka(store) => store.release_startup_cache(),
        }
    }

    fn start_writer(&self) -> Result<StoreWriter, NodeError> {
        let started = match self {
            NodeStore::File(store) => StoreWriter::start(Arc::clone(store)),
            NodeStore::Kafka(store) => {
                StoreWriter::start_shared(Arc::clone(store) as Arc<dyn MetadataStore>)
            }
        };
        started.map_err(|e| {
            NodeError::Store(StoreError::Unavailable(format!(
                "cannot start the store writer: {e}"
            )))
        })
    }

    /// Stops following a shared log and leaves the election at once (a successor need not wait
    /// for the session timeout); nothing to do for the file store.
    pub fn shutdown(&self) {
        if let NodeStore::Kafka(store) = self {
            store.shutdown();
        }
    }
}

/// Opens the configured store: the file log in `node.data_dir`, or the cluster's topic (replayed
/// before this returns).
///
/// # Errors
/// The store cannot be opened.
pub fn open_store(config: &Config) -> Result<NodeStore, NodeError> {
    match config.store.kind {
        StoreKind::File => Ok(NodeStore::File(Arc::new(
            FileMetadataStore::open(&config.node.data_dir).map_err(NodeError::Store)?,
        ))),
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

/// Why a node could not be assembled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The metadata store could not be opened or read.
    #[error("metadata store")]
    Store(#[source] StoreError),
    /// A `[plugins.config.NAME]` table could not be turned back into TOML text.
    #[error("plugins.config.{name}: {message}")]
    PluginConfig {
        /// The plugin name.
        name: String,
        /// What went wrong.
        message: String,
    },
    /// `listener.sasl_mechanisms` names a mechanism that nothing provides.
    #[error(
        "listener.sasl_mechanisms: unknown SASL mechanism `{name}`; available: {}{}",
        available.join(", "),
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
    /// `forwarding.policy` names no built-in policy.
    #[error("forwarding.policy: unknown forwarding policy `{name}`; available: {}", available.join(", "))]
    UnknownPolicy {
        /// The name.
        name: String,
        /// The built-in policies.
        available: Vec<String>,
    },
    /// `[cluster]` could not be set up.
    #[error("cluster: {0}")]
    Cluster(String),
    /// The upstream login module could not be built.
    #[error("upstream login: {0}")]
    UpstreamLogin(String),
    /// The authorizer could not be built.
    #[error("authorizer: {0}")]
    Authorizer(String),
    /// The audit log cannot be opened.
    #[error("audit.file: {0}")]
    Audit(std::io::Error),
    /// `accept_token_without_extension` is on and SCRAM users have token-id-shaped names.
    #[error(
        "delegation_tokens.accept_token_without_extension: SCRAM user(s) {} have names shaped like \
         delegation token ids, which this setting reserves for tokens; delete them \
         (portcullis scram delete) or turn the setting off",
        .0.join(", ")
    )]
    TokenShapedUsers(Vec<String>),
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
    /// Portcullis' own login upstream, for `SASL_PLAINTEXT`.
    pub upstream_login: Option<Arc<dyn LoginModule>>,
    /// What the plugin directory held.
    pub plugins: PluginLoadReport,
}

impl Node {
    /// Opens the store (locking the data directory), loads the credentials, and assembles the
    /// mechanisms, policy and upstream login.
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
        let services = Services::new(
            Arc::clone(&credentials) as Arc<dyn CredentialView>,
            token_view,
            events.clone(),
        );
        let assembly = assemble(&config, &services)?;
        let authorizer = build_authorizer(&config, &store, &events)?;
        let local_handlers = local_handlers(
            &credentials,
            tokens.clone(),
            authorizer.clone(),
            config.delegation_tokens.accept_token_without_extension,
        );
        // Every view has replayed the log: the records kept from opening it are not needed.
        store.release_startup_cache();
        let writer = store.start_writer()?;
        let cluster = match (&store, &config.cluster) {
            (NodeStore::Kafka(shared), Some(cluster_config)) => {
                let cluster = crate::cluster::Cluster::new(
                    cluster_config,
                    config.node.id,
                    Arc::clone(shared),
                    writer.clone(),
                    local_handlers.clone(),
                    authorizer.clone(),
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
        let spawned = std::thread::Builder::new()
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
            });
        if let Err(e) = spawned {
            return Err(NodeError::Authorizer(format!(
                "cannot start the revocation thread: {e}"
            )));
        }

        Ok(Node {
            config,
            store,
            cluster,
            writer,
            tokens,
            credentials,
            events,
            mechanisms: assembly.mechanisms,
            principal_builder: assembly.principal_builder,
            policy: assembly.policy,
            upstream_login: assembly.upstream_login,
            plugins: assembly.plugins,
            sessions,
            metrics: Arc::new(SecurityMetrics::default()),
            authorizer,
            local_handlers,
        })
    }
}

/// The configured authorizer, replayed from the store, wrapped by the audit log if one is set.
fn build_authorizer(
    config: &Config,
    store: &NodeStore,
    events: &EventBus,
) -> Result<Option<Arc<dyn Authorizer>>, NodeError> {
    let Some(settings) = &config.authorizer else {
        return Ok(None);
    };
    let factory = registry::authorizers()
        .find(|f| f.name == settings.plugin)
        .ok_or_else(|| {
            let mut available: Vec<&str> = registry::authorizers().map(|f| f.name).collect();
            available.sort_unstable();
            NodeError::Authorizer(format!(
                "unknown authorizer plugin `{}`; available: {}",
                settings.plugin,
                available.join(", ")
            ))
        })?;
    let built = (factory.build)(
        &AuthorizerSettings::new(
            settings.super_users.clone(),
            settings.allow_everyone_if_no_acl_found,
        )
        .with_events(events.clone()),
        store.shared(),
    )
    .map_err(NodeError::Authorizer)?;
    let Some(path) = &config.audit.file else {
        return Ok(Some(built));
    };
    let sink = crate::services::FileAuditSink::open(path).map_err(NodeError::Audit)?;
    let policy = AuditPolicy::new(config.audit.log_allowed, config.audit.log_denied);
    Ok(Some(Arc::new(AuditingAuthorizer::new(
        built,
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
    handlers.extend(DelegationTokenApis::handlers(tokens, authorizer));
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

/// Builds the mechanisms, policy and upstream login for `config` with `services`, loading the
/// plugin directory.
///
/// # Errors
/// [`NodeError`] for an unknown or doubly provided mechanism, an unknown policy, or an upstream
/// login that cannot be built.
pub fn assemble(config: &Config, services: &Services) -> Result<Assembly, NodeError> {
    let plugins = load_plugins(&config.plugins)?;
    let mechanisms = resolve_mechanisms(&config.listener.sasl_mechanisms, services, &plugins)?;
    let policy = build_policy(&config.forwarding.policy, &config.forwarding.deny_api_keys)?;
    let upstream_login = upstream_login(config)?;
    Ok(Assembly {
        mechanisms,
        principal_builder: Arc::new(DefaultPrincipalBuilder),
        policy,
        upstream_login,
        plugins,
    })
}

/// Loads every plugin in `[plugins] dir` (nothing when it is not set).
///
/// # Errors
/// [`NodeError::PluginConfig`] if a plugin's configuration table cannot be written as TOML.
pub fn load_plugins(config: &PluginsConfig) -> Result<PluginLoadReport, NodeError> {
    let Some(dir) = &config.dir else {
        return Ok(PluginLoadReport::default());
    };
    let configs = plugin_configs(config)?;
    Ok(load_plugin_dir(dir, &configs))
}

/// Each `[plugins.config.NAME]` table as the TOML text handed to plugin NAME.
///
/// # Errors
/// [`NodeError::PluginConfig`] if a table cannot be serialized.
pub fn plugin_configs(config: &PluginsConfig) -> Result<BTreeMap<String, String>, NodeError> {
    config
        .config
        .iter()
        .map(|(name, table)| {
            config_to_text(table)
                .map(|text| (name.clone(), text))
                .map_err(|e| NodeError::PluginConfig {
                    name: name.clone(),
                    message: e.to_string(),
                })
        })
        .collect()
}

/// The names of the built-in mechanisms, sorted.
pub fn builtin_mechanism_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = registry::mechanisms().map(|f| f.name).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The names of the built-in forwarding policies, sorted.
pub fn builtin_policy_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = registry::policies().map(|f| f.name).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Resolves each enabled name to a built-in mechanism or a loaded plugin.
fn resolve_mechanisms(
    enabled: &[String],
    services: &Services,
    plugins: &PluginLoadReport,
) -> Result<Vec<Arc<dyn SaslMechanism>>, NodeError> {
    enabled
        .iter()
        .map(|name| {
            let mut builtins = registry::mechanisms().filter(|f| f.name == name);
            let mut loaded = plugins.loaded.iter().filter(|p| p.mechanism.name() == name);
            let builtin = builtins.next();
            let plugin = loaded.next();
            match (builtin, plugin) {
                (Some(_), Some(p)) => Err(duplicate(
                    name,
                    "the built-in mechanism".to_owned(),
                    &p.path,
                )),
                (None, Some(p)) => match loaded.next() {
                    Some(other) => Err(duplicate(
                        name,
                        format!("plugin {}", p.path.display()),
                        &other.path,
                    )),
                    None => Ok(Arc::clone(&p.mechanism)),
                },
                (Some(factory), None) => Ok((factory.build)(services)),
                (None, None) => Err(unknown_mechanism(name, plugins)),
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

fn unknown_mechanism(name: &str, plugins: &PluginLoadReport) -> NodeError {
    let mut available: Vec<String> = builtin_mechanism_names()
        .into_iter()
        .map(str::to_owned)
        .chain(plugins.loaded.iter().map(|p| p.mechanism.name().to_owned()))
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
            .collect(),
    }
}

fn build_policy(name: &str, deny_api_keys: &[i16]) -> Result<Arc<dyn ForwardingPolicy>, NodeError> {
    let factory = registry::policies()
        .find(|f| f.name == name)
        .ok_or_else(|| NodeError::UnknownPolicy {
            name: name.to_owned(),
            available: builtin_policy_names()
                .into_iter()
                .map(str::to_owned)
                .collect(),
        })?;
    Ok((factory.build)(&ForwardingSettings::new(
        deny_api_keys.to_vec(),
    )))
}

/// The login module for `SASL_PLAINTEXT` / `SASL_SSL` upstreams; `None` for `PLAINTEXT` / `SSL`.
fn upstream_login(config: &Config) -> Result<Option<Arc<dyn LoginModule>>, NodeError> {
    let upstream = &config.upstream;
    match upstream.security_protocol {
        SecurityProtocol::Plaintext | SecurityProtocol::Ssl => Ok(None),
        SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => {
            // `Config::validate` has checked these; a config built by hand may not have been.
            let (Some(mechanism), Some(username), Some(password)) = (
                upstream.sasl_mechanism.as_deref(),
                upstream.username.as_deref(),
                upstream.password.as_ref(),
            ) else {
                return Err(NodeError::UpstreamLogin(
                    "SASL upstreams need upstream.sasl_mechanism, username and password".to_owned(),
                ));
            };
            portcullis_plugin_login::login_module(mechanism, username, password.clone())
                .map(Some)
                .map_err(|e| NodeError::UpstreamLogin(e.to_string()))
        }
    }
}
