//! The command line's clap definitions: every command and its arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use portcullis::credentials::ScramMechanism;

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
    /// Ask the running node to read its configuration file again (over its admin endpoint,
    /// `[telemetry] prometheus_address`) and print what changed, or why it was refused (exit 1;
    /// the old configuration keeps running).
    Reload(ReloadArgs),
}

/// `portcullis reload`.
#[derive(Debug, Args)]
pub struct ReloadArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub config: ConfigArg,
    /// The node's admin endpoint (`IP:PORT`), when the file does not say.
    #[arg(long, value_name = "IP:PORT")]
    pub admin: Option<String>,
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
