//! The `portcullis` command line: `serve`, `check-config`, `plugins`, and the offline SCRAM
//! credential tools (`scram add|list|delete`, like `kafka-storage format --add-scram`).
//!
//! Exit codes: 0 success, 1 error (printed as `error: ...` with its causes), 2 usage.

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use clap::{Args, Parser, Subcommand};
use portcullis::credentials::{CredentialView, InMemoryCredentials, ScramMechanism};
use portcullis::store::{MetadataRecord, MetadataStore, StoreError};
use portcullis_plugin_stores::{credentials_from, load_credentials, FileMetadataStore};

use crate::config::{self, Config};
use crate::node::{self, Assembly, Node};
use crate::plugin_config::PluginTables;
use crate::plugin_loader::PluginLoadReport;
use crate::services::HostContext;

/// The longest password `scram add` reads from stdin.
const MAX_PASSWORD_BYTES: u64 = 64 * 1024;

/// Portcullis: a security gateway for Kafka-compatible clusters.
#[derive(Debug, Parser)]
#[command(name = "portcullis", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the node: open the store, load plugins, listen and forward.
    Serve(ConfigArg),
    /// Load and validate the configuration and build its mechanisms and policy, without
    /// listening or locking the data directory.
    CheckConfig(ConfigArg),
    /// List every plugin: the built-in ones and, with a configuration, what its plugin directory
    /// holds (kind, version, file, whether its configuration validated, refused files).
    Plugins(OptionalConfigArg),
    /// Manage SCRAM credentials in the metadata store offline (the node must be stopped).
    #[command(subcommand)]
    Scram(ScramCommand),
    /// Inspect or recover the metadata store.
    #[command(subcommand)]
    Store(StoreCommand),
    /// A cluster of nodes sharing one store (`[store] kind = "kafka"`).
    #[command(subcommand)]
    Cluster(ClusterCommand),
}

/// `portcullis cluster ...`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Shows the cluster's nodes (as they report themselves every second), the writer, and each
    /// node's applied offset and lag behind the log's end.
    Status(ConfigArg),
}

/// `portcullis store ...`.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Reads the store without locking or writing it and says what it holds, or why a node would
    /// refuse to start on it.
    Check(ConfigArg),
    /// Keeps the intact start of a damaged or shortened log, saves the rest aside and marks the kept
    /// part acknowledged (acknowledged changes after the damage are lost; the node must be stopped).
    Recover(StoreRecover),
}

/// `portcullis store recover`.
#[derive(Debug, Args)]
pub struct StoreRecover {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub config: ConfigArg,
    /// Confirms that losing the acknowledged changes after the damage is accepted.
    #[arg(long, required = true)]
    pub accept_loss: bool,
}

/// `--config FILE`.
#[derive(Debug, Args)]
pub struct ConfigArg {
    /// The configuration file (TOML); `PORTCULLIS_*` environment variables override its keys.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: PathBuf,
}

/// An optional `--config FILE`.
#[derive(Debug, Args)]
pub struct OptionalConfigArg {
    /// The configuration file; without it only the built-in plugins are listed.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `portcullis scram ...`.
#[derive(Debug, Subcommand)]
pub enum ScramCommand {
    /// Add (or replace) a user's SCRAM credential; the password is read from stdin.
    Add(ScramAdd),
    /// List users, mechanisms and iteration counts (never secrets).
    List(ConfigArg),
    /// Delete a user's SCRAM credential.
    Delete(ScramDelete),
}

/// `portcullis scram add`.
#[derive(Debug, Args)]
pub struct ScramAdd {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub config: ConfigArg,
    /// The user name.
    #[arg(long, value_name = "NAME")]
    pub user: String,
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, value_parser = parse_mechanism)]
    pub mechanism: ScramMechanism,
    /// The PBKDF2 iteration count.
    #[arg(long, default_value_t = ScramMechanism::MIN_ITERATIONS,
          value_parser = clap::value_parser!(u32).range(
              i64::from(ScramMechanism::MIN_ITERATIONS)..=i64::from(ScramMechanism::MAX_ITERATIONS)))]
    pub iterations: u32,
    /// Read the password from the first line of stdin (the only way: a password in argv would
    /// be visible to every user of the machine).
    #[arg(long, required = true)]
    pub password_stdin: bool,
}

/// `portcullis scram delete`.
#[derive(Debug, Args)]
pub struct ScramDelete {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub config: ConfigArg,
    /// The user name.
    #[arg(long, value_name = "NAME")]
    pub user: String,
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, value_parser = parse_mechanism)]
    pub mechanism: ScramMechanism,
}

/// A `--mechanism` that is not a SCRAM mechanism (clap prints it as the usage error).
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not SCRAM-SHA-256 or SCRAM-SHA-512")]
struct NotScram(String);

fn parse_mechanism(name: &str) -> Result<ScramMechanism, NotScram> {
    ScramMechanism::from_mechanism_name(name).ok_or_else(|| NotScram(name.to_owned()))
}

/// Runs a parsed command line.
///
/// # Errors
/// Whatever the command failed with; the caller prints it and exits with 1.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Serve(args) => serve(&args.config),
        Command::CheckConfig(args) => check_config(&args.config, &mut out),
        Command::Plugins(args) => plugins(args.config.as_deref(), &mut out),
        Command::Scram(ScramCommand::Add(args)) => {
            let password = read_password(io::stdin().lock())?;
            scram_add(&args, &password, &mut out)
        }
        Command::Scram(ScramCommand::List(args)) => scram_list(&args.config, &mut out),
        Command::Scram(ScramCommand::Delete(args)) => scram_delete(&args, &mut out),
        Command::Store(StoreCommand::Check(args)) => store_check(&args.config, &mut out),
        Command::Cluster(ClusterCommand::Status(args)) => cluster_status(&args.config, &mut out),
        Command::Store(StoreCommand::Recover(args)) => store_recover(&args.config.config, &mut out),
    }
}

/// `store check`: what the store holds, read-only.
fn store_check(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(path)?;
    file_store_only(&config, "store check")?;
    let dir = &config.node.data_dir;
    let log = FileMetadataStore::read_only(dir).with_context(|| {
        format!(
            "a node would refuse to start on {}; see docs/configuration.md, \"Recovering the metadata store\"",
            dir.display()
        )
    })?;
    let records: Vec<&MetadataRecord> = log.records.iter().map(|r| &r.record).collect();
    let mut live = std::collections::HashMap::new();
    for r in &records {
        if r.is_tombstone() {
            live.remove(&r.key());
        } else {
            live.insert(r.key(), *r);
        }
    }
    let (mut credentials, mut acls, mut tokens) = (0, 0, 0);
    for record in live.values() {
        match record {
            MetadataRecord::ScramCredential { .. } => credentials += 1,
            MetadataRecord::Acl { .. } => acls += 1,
            MetadataRecord::DelegationToken(_) => tokens += 1,
            _ => {}
        }
    }
    writeln!(out, "metadata store {}: OK", dir.display())?;
    writeln!(
        out,
        "  records:     {} ({} live: {credentials} SCRAM credentials, {acls} ACLs, {tokens} delegation tokens)",
        records.len(),
        live.len()
    )?;
    if log.ignored_bytes > 0 {
        writeln!(
            out,
            "  unacknowledged bytes at the end: {} (a write in progress, or one a crash interrupted; a node cuts them off)",
            log.ignored_bytes
        )?;
    }
    Ok(())
}

/// `store recover --accept-loss`.
fn store_recover(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(path)?;
    file_store_only(&config, "store recover")?;
    let dir = &config.node.data_dir;
    let report = FileMetadataStore::recover_accepting_loss(dir).map_err(|e| match e {
        StoreError::Locked(_) => anyhow::Error::new(e).context("stop the node first"),
        other => anyhow::Error::new(other).context("cannot recover the metadata store"),
    })?;
    writeln!(
        out,
        "kept {} records ({} bytes); dropped {} bytes{}",
        report.records_kept,
        report.log_len,
        report.bytes_dropped,
        report
            .saved_to
            .as_ref()
            .map(|p| format!(", saved to {}", p.display()))
            .unwrap_or_default()
    )?;
    if let Some(committed) = report.committed_before {
        if committed > report.log_len {
            writeln!(
                out,
                "{} acknowledged bytes were lost: re-apply the SCRAM, ACL and token changes made after the damage",
                committed - report.log_len
            )?;
        }
    }
    Ok(())
}

fn load_config(path: &Path) -> anyhow::Result<Config> {
    Ok(config::load(path)?)
}

/// `serve`: logs to stderr (`RUST_LOG`, default `info`), builds the node and runs the server on
/// a multi-threaded runtime until it stops.
fn serve(path: &Path) -> anyhow::Result<()> {
    let config = match load_config(path) {
        Ok(config) => config,
        Err(e) => {
            init_tracing();
            return Err(e);
        }
    };
    // Before the runtime: the OTLP exporters own their threads and blocking HTTP clients.
    let telemetry = crate::telemetry::init(&config.telemetry)?;
    let node = Node::build(config).context("cannot start the node")?;
    crate::telemetry::admin::set_store_replayed();
    warn_refused(&node.plugins);
    tracing::info!(
        node = node.config.node.id,
        address = %node.config.listener.address,
        mechanisms = ?node.services.mechanisms.iter().map(|m| m.name().to_owned()).collect::<Vec<_>>(),
        policy = node.services.policy.name(),
        credentials = node.credentials.users().len(),
        "node assembled"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let node = Arc::new(node);
    let admin = node.config.telemetry.prometheus_address.clone();
    let served = runtime.block_on(async {
        if let Some(address) = admin {
            crate::telemetry::admin::serve(&address, telemetry.prometheus.clone()).await?;
        }
        // A node of a cluster also serves its peers' forwarded mutations.
        let inter_node = match (&node.cluster, &node.config.cluster) {
            (Some(cluster), Some(config)) => {
                Some(crate::cluster::listener::spawn(Arc::clone(cluster), config).await?)
            }
            _ => None,
        };
        let served = crate::server::run(Arc::clone(&node)).await;
        if let Some(listener) = inter_node {
            listener.abort();
        }
        served
    });
    // Leave the election now, so another node takes over without waiting for the session
    // timeout.
    node.store.shutdown();
    node.shutdown_background();
    drop(runtime);
    telemetry.shutdown();
    served
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Fails only if a subscriber is already installed, which then keeps logging.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .try_init();
}

/// `check-config`: everything `serve` checks before it opens the store and the listeners.
fn check_config(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(path)?;
    let assembly = node::assemble(&config, &HostContext::offline())?;
    warn_refused(&assembly.plugins);
    if let Some(section) = &config.oauthbearer {
        for warning in crate::oauth::warnings(section) {
            eprintln!("warning: {warning}");
        }
    }
    writeln!(out, "configuration OK: {}", path.display())?;
    write_summary(&config, &assembly, out)?;
    Ok(())
}

fn warn_refused(report: &PluginLoadReport) {
    for refused in &report.refused {
        eprintln!("warning: {refused}");
    }
    for plugin in &report.loaded {
        if let Err(error) = &plugin.instance {
            eprintln!(
                "warning: plugin {} ({}) from {} is not usable: {error}",
                plugin.name,
                plugin.kind,
                plugin.path.display()
            );
        }
    }
}

fn write_summary(config: &Config, assembly: &Assembly, out: &mut dyn Write) -> io::Result<()> {
    let listener = &config.listener;
    let upstream = &config.upstream;
    writeln!(
        out,
        "  node:        id {}, data_dir {}",
        config.node.id,
        config.node.data_dir.display()
    )?;
    writeln!(
        out,
        "  listener:    {} on {} ({}), advertised as {}, broker N at port {} + N",
        listener.name,
        listener.address,
        if listener.tls.is_some() {
            "SASL_SSL"
        } else {
            "SASL_PLAINTEXT"
        },
        listener.advertised_host,
        listener.broker_port_base
    )?;
    let mechanisms: Vec<&str> = assembly.mechanisms.iter().map(|m| m.name()).collect();
    writeln!(out, "  mechanisms:  {}", mechanisms.join(", "))?;
    if let Some(section) = &config.oauthbearer {
        writeln!(out, "  oauthbearer: {}", crate::oauth::summary(section))?;
    }
    let protocol = upstream.security_protocol.name();
    let login = match &assembly.upstream_login {
        Some(login) if upstream.security_protocol.uses_sasl() => format!(
            "{protocol}, {} as {} (login module {})",
            login.mechanism(),
            login.credential().principal_name,
            upstream
                .login
                .as_ref()
                .map_or(portcullis_plugin_login::PASSWORD_LOGIN, |l| l
                    .plugin
                    .as_str())
        ),
        _ => protocol.to_owned(),
    };
    writeln!(
        out,
        "  upstream:    {} ({login})",
        upstream.bootstrap_servers.join(", ")
    )?;
    let denied = if config.forwarding.deny_api_keys.is_empty() {
        "none".to_owned()
    } else {
        let keys: Vec<String> = config
            .forwarding
            .deny_api_keys
            .iter()
            .map(i16::to_string)
            .collect();
        keys.join(", ")
    };
    writeln!(
        out,
        "  forwarding:  {} (denied API keys: {denied})",
        assembly.policy.name()
    )?;
    let tokens = &config.delegation_tokens;
    if tokens.enabled() {
        writeln!(
            out,
            "  tokens:      enabled (max lifetime {} ms, expiry {} ms, sweep every {} ms{})",
            tokens.max_lifetime_ms,
            tokens.expiry_time_ms,
            tokens.expiry_check_interval_ms,
            if tokens.accept_token_without_extension {
                ", accepted without the tokenauth extension"
            } else {
                ""
            }
        )?;
    } else {
        writeln!(
            out,
            "  tokens:      disabled (no [delegation_tokens] secret; the token APIs answer DELEGATION_TOKEN_AUTH_DISABLED)"
        )?;
    }
    writeln!(
        out,
        "  principal:   {} (principal builder)",
        config.principal.plugin
    )?;
    if let Some(authorizer) = &config.authorizer {
        writeln!(out, "  authorizer:  {}", authorizer.plugin)?;
    }
    for subscriber in &config.events.subscribers {
        writeln!(
            out,
            "  events:      {} (queue of {})",
            subscriber.plugin, subscriber.queue_capacity
        )?;
    }
    match &config.plugins.dir {
        None => writeln!(out, "  plugins:     no plugin directory")?,
        Some(dir) => writeln!(
            out,
            "  plugins:     {}: {} loaded, {} refused",
            dir.display(),
            assembly.plugins.loaded.len(),
            assembly.plugins.refused.len()
        )?,
    }
    Ok(())
}

/// `plugins`: every built-in plugin, and with a configuration, every plugin of its plugin
/// directory: name, kind, version, file, and whether its configuration validated.
fn plugins(path: Option<&Path>, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = path.map(load_config).transpose()?;
    let tables = match &config {
        Some(config) => PluginTables::new(&config.plugins)?,
        None => PluginTables::default(),
    };
    writeln!(
        out,
        "built-in plugins (portcullis {}):",
        portcullis::FRAMEWORK_VERSION
    )?;
    for (kind, name, check) in node::builtins() {
        let status = if !tables.has(name) {
            "config: none".to_owned()
        } else {
            match check(tables.text(name)) {
                Ok(()) => "config: valid".to_owned(),
                Err(e) => format!(
                    "config: INVALID: {}",
                    tables.locate(name, &portcullis::PluginError::Config(e))
                ),
            }
        };
        writeln!(out, "  {name:<24} {:<18} built in  {status}", kind.label())?;
    }
    let Some(config) = config else { return Ok(()) };
    let Some(dir) = &config.plugins.dir else {
        writeln!(out, "plugin directory: not configured")?;
        return Ok(());
    };
    let report = crate::plugin_loader::load_plugin_dir(dir, &tables, &HostContext::offline());
    writeln!(out, "plugin directory {}:", dir.display())?;
    if report.loaded.is_empty() {
        writeln!(out, "  no plugins loaded")?;
    }
    for plugin in &report.loaded {
        let status = match &plugin.instance {
            Ok(instance) => {
                let detail = match instance {
                    portcullis::registry::PluginInstance::SaslMechanism(m) => {
                        format!(", mechanism {}", m.name())
                    }
                    portcullis::registry::PluginInstance::ForwardingPolicy(p) => {
                        format!(", policy {}", p.name())
                    }
                    _ => String::new(),
                };
                let table = if tables.has(&plugin.name) {
                    "valid"
                } else {
                    "valid (no table)"
                };
                format!("config: {table}{detail}")
            }
            Err(error) => format!("config: INVALID: {error}"),
        };
        writeln!(
            out,
            "  {:<24} {:<18} plugin API {}  {}  {status}",
            plugin.name,
            plugin.kind.label(),
            plugin.api_version,
            plugin.path.display()
        )?;
        for warning in &plugin.warnings {
            writeln!(out, "    warning: {warning}")?;
        }
    }
    if !report.refused.is_empty() {
        writeln!(out, "refused plugin files:")?;
        for refused in &report.refused {
            writeln!(out, "  {}: {}", refused.path.display(), refused.reason)?;
        }
    }
    Ok(())
}

/// Reads the password: the first line of `input`, without its line ending.
fn read_password(input: impl BufRead) -> anyhow::Result<String> {
    let mut line = String::new();
    let read = input
        .take(MAX_PASSWORD_BYTES)
        .read_line(&mut line)
        .context("cannot read the password from stdin")?;
    if read == 0 {
        bail!("no password on stdin (--password-stdin reads one line)");
    }
    let password = line
        .strip_suffix('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or(&line);
    if password.is_empty() {
        bail!("the password is empty");
    }
    Ok(password.to_owned())
}

/// Opens the store for an offline change, explaining a lock held by a running node.
fn open_store(config: &Config) -> anyhow::Result<FileMetadataStore> {
    let dir = &config.node.data_dir;
    FileMetadataStore::open(dir).map_err(|e| match e {
        StoreError::Locked(_) => anyhow::Error::new(e).context(format!(
            "cannot change credentials in {} while a node is running on it: stop the node first",
            dir.display()
        )),
        other => anyhow::Error::new(other).context("cannot open the metadata store"),
    })
}

fn check_user(user: &str) -> anyhow::Result<()> {
    if user.is_empty() {
        bail!("the user name is empty");
    }
    if user.chars().any(char::is_control) {
        bail!("the user name contains control characters");
    }
    Ok(())
}

/// `scram add`: derives the credential and appends it to the store (durable when this returns).
fn scram_add(args: &ScramAdd, password: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    check_user(&args.user)?;
    let config = load_config(&args.config.config)?;
    if config.delegation_tokens.accept_token_without_extension
        && portcullis::tokens::id::has_token_id_shape(&args.user)
    {
        bail!(
            "the user name '{}' has the shape of a delegation token id, which \
             delegation_tokens.accept_token_without_extension reserves for tokens",
            args.user
        );
    }
    let salt = portcullis_plugin_scram::random_salt();
    let credential = portcullis_plugin_scram::derive_credential(
        args.mechanism,
        password,
        &salt,
        args.iterations,
    );
    let record = MetadataRecord::ScramCredential {
        user: args.user.clone(),
        mechanism: args.mechanism,
        credential,
    };
    if config.store.kind == config::StoreKind::Kafka {
        // The cluster's topic, written as its writer would (which fences a running writer: it
        // is elected again at once). Meant for setting a cluster up before its nodes start;
        // on a running cluster, AlterUserScramCredentials (kafka-configs) is the way.
        let settings = node::kafka_store_settings(&config, false)?;
        portcullis_plugin_kafka_store::write_offline(&settings, &[record])
            .context("cannot write the credential to the cluster's topic")?;
    } else {
        let store = open_store(&config)?;
        store
            .append(&[record])
            .context("cannot write the credential")?;
    }
    writeln!(
        out,
        "added {} credential for user '{}'",
        args.mechanism, args.user
    )?;
    Ok(())
}

/// `scram list`: one line per (user, mechanism), sorted. Reads the store without locking or
/// writing it, so it also works while a node runs.
fn scram_list(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(path)?;
    file_store_only(&config, "scram list")?;
    let log = FileMetadataStore::read_only(&config.node.data_dir)
        .context("cannot read the metadata store")?;
    let creds = InMemoryCredentials::new();
    creds.replace_all(credentials_from(log.records.iter().map(|r| &r.record)));
    let mut users = creds.users();
    if users.is_empty() {
        writeln!(out, "no SCRAM credentials")?;
        return Ok(());
    }
    users.sort();
    let width = users
        .iter()
        .map(|(u, _, _)| u.len())
        .max()
        .unwrap_or(0)
        .max(4);
    writeln!(out, "{:<width$}  {:<13}  ITERATIONS", "USER", "MECHANISM")?;
    for (user, mechanism, iterations) in users {
        writeln!(
            out,
            "{user:<width$}  {:<13}  {iterations}",
            mechanism.mechanism_name()
        )?;
    }
    Ok(())
}

/// `scram delete`: appends a removal; an absent credential is an error.
fn scram_delete(args: &ScramDelete, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(&args.config.config)?;
    file_store_only(&config, "scram delete")?;
    let store = open_store(&config)?;
    let creds = InMemoryCredentials::new();
    load_credentials(&store, &creds).context("cannot read the metadata store")?;
    if creds.scram(&args.user, args.mechanism).is_none() {
        bail!("user '{}' has no {} credential", args.user, args.mechanism);
    }
    store
        .append(&[MetadataRecord::RemoveScramCredential {
            user: args.user.clone(),
            mechanism: args.mechanism,
        }])
        .context("cannot write the removal")?;
    writeln!(
        out,
        "deleted {} credential for user '{}'",
        args.mechanism, args.user
    )?;
    Ok(())
}

/// `cluster status`: the nodes' latest reports (status topic) and the log's end offset.
fn cluster_status(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(path)?;
    let settings = node::kafka_store_settings(&config, false)?;
    let topics = portcullis_plugin_kafka_store::Topics::for_log(&settings.topic);
    let status = portcullis_plugin_kafka_store::read_cluster_status(
        &settings.connection,
        &topics,
        std::time::Duration::from_secs(10),
    )
    .map_err(|e| anyhow::anyhow!(e))
    .context("cannot read the cluster's status")?;
    let now = crate::services::now_ms();
    // A node that has not reported for this long is shown as gone (it reports every second).
    const STALE_MS: i64 = 10_000;
    let writer = status
        .nodes
        .values()
        .filter(|n| n.role == "writer" && now - n.reported_at_ms <= STALE_MS)
        .max_by_key(|n| n.term);
    writeln!(
        out,
        "cluster {} (topic {}): log end offset {}, writer: {}",
        settings.cluster_id,
        topics.metadata,
        status.log_end,
        writer.map_or("none".to_owned(), |w| format!(
            "node {} at {} (term {})",
            w.node_id,
            w.address,
            w.term.unwrap_or_default()
        ))
    )?;
    writeln!(
        out,
        "{:<6}  {:<24}  {:<10}  {:>10}  {:>8}  LAST REPORT",
        "NODE", "ADDRESS", "ROLE", "APPLIED", "LAG"
    )?;
    for node in status.nodes.values() {
        let age = now - node.reported_at_ms;
        let role = if age > STALE_MS {
            "gone"
        } else {
            node.role.as_str()
        };
        writeln!(
            out,
            "{:<6}  {:<24}  {:<10}  {:>10}  {:>8}  {:.1}s ago",
            node.node_id,
            node.address,
            role,
            node.applied,
            status.log_end.saturating_sub(node.applied),
            age as f64 / 1000.0
        )?;
    }
    Ok(())
}

/// The offline tools that read or change the node's own file log; with a shared store they would
/// act on a directory the node does not use.
fn file_store_only(config: &Config, command: &str) -> anyhow::Result<()> {
    if config.store.kind == config::StoreKind::Kafka {
        bail!(
            "`portcullis {command}` works on the file store; this node's store is the cluster's \
             topic (use kafka-configs / kafka-acls against any node, or `portcullis cluster status`)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_the_first_line_without_its_ending() {
        assert_eq!(read_password(&b"s3cret\n"[..]).unwrap(), "s3cret");
        assert_eq!(read_password(&b"s3cret\r\nmore\n"[..]).unwrap(), "s3cret");
        assert_eq!(read_password(&b"no newline"[..]).unwrap(), "no newline");
        assert_eq!(read_password(&b" spaced \n"[..]).unwrap(), " spaced ");
        assert!(read_password(&b""[..]).is_err());
        assert!(read_password(&b"\n"[..]).is_err());
    }

    #[test]
    fn the_command_line_parses() {
        let cli = Cli::try_parse_from([
            "portcullis",
            "scram",
            "add",
            "--config",
            "c.toml",
            "--user",
            "alice",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password-stdin",
        ])
        .unwrap();
        match cli.command {
            Command::Scram(ScramCommand::Add(add)) => {
                assert_eq!(add.mechanism, ScramMechanism::Sha512);
                assert_eq!(add.iterations, 4096);
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            &[
                "portcullis",
                "scram",
                "add",
                "--config",
                "c",
                "--user",
                "a",
                "--mechanism",
                "SCRAM-SHA-512",
            ][..],
            &[
                "portcullis",
                "scram",
                "add",
                "--config",
                "c",
                "--user",
                "a",
                "--mechanism",
                "MD5",
                "--password-stdin",
            ],
            &[
                "portcullis",
                "scram",
                "add",
                "--config",
                "c",
                "--user",
                "a",
                "--mechanism",
                "SCRAM-SHA-256",
                "--iterations",
                "100",
                "--password-stdin",
            ],
            &["portcullis", "check-config"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
