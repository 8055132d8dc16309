//! Command-line options and the validated run plan built from them.

use std::time::Duration;

use portcullis::credentials::ScramMechanism;
use portcullis::secret::Secret;

/// Runs full SASL logins against a Kafka listener and reports logins/s and latency.
#[derive(Debug, clap::Parser)]
#[command(name = "portcullis-login-load", version)]
pub struct Args {
    /// The listener, HOST:PORT.
    #[arg(long)]
    bootstrap: String,
    /// SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN.
    #[arg(long, default_value = "SCRAM-SHA-512")]
    mechanism: String,
    /// The user name.
    #[arg(long)]
    user: String,
    /// The password (visible to other local users in the process list; prefer --password-env).
    #[arg(long, conflicts_with = "password_env")]
    password: Option<String>,
    /// The name of an environment variable that holds the password.
    #[arg(long)]
    password_env: Option<String>,
    /// Concurrent workers, each with at most one login in flight.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Stop measuring after this many seconds (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Stop after this many measured logins (successful or not), if reached before --duration.
    #[arg(long)]
    logins: Option<u64>,
    /// Run logins for this many seconds first without recording them (JIT, caches, PBKDF2).
    #[arg(long, default_value_t = 0.0)]
    warmup: f64,
    /// Give up on one login after this many milliseconds.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Runtime worker threads for the tool itself (1 = everything on one thread).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// The SASL mechanism a login uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// SCRAM-SHA-256 or SCRAM-SHA-512: two SaslAuthenticate rounds.
    Scram(ScramMechanism),
    /// PLAIN: one round.
    Plain,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Scram(m) => m.mechanism_name(),
            Mechanism::Plain => "PLAIN",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        let upper = name.to_ascii_uppercase();
        if upper == "PLAIN" {
            return Some(Mechanism::Plain);
        }
        ScramMechanism::from_mechanism_name(&upper).map(Mechanism::Scram)
    }
}

/// A validated run.
#[derive(Debug)]
pub struct Plan {
    pub bootstrap: String,
    pub mechanism: Mechanism,
    pub user: String,
    pub password: Secret,
    pub connections: usize,
    pub duration: Duration,
    pub logins: Option<u64>,
    pub warmup: Duration,
    pub timeout: Duration,
    pub threads: usize,
    pub json: bool,
}

/// Why the options do not make a run.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    #[error("unknown mechanism '{0}' (expected SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN)")]
    Mechanism(String),
    #[error("give the password with --password or --password-env")]
    NoPassword,
    #[error("environment variable {0} is not set or not UTF-8")]
    PasswordEnv(String),
    #[error("--{0} must be {1}")]
    Range(&'static str, &'static str),
}

/// The longest run the tool accepts: it is a benchmark, not a soak test.
const MAX_SECONDS: f64 = 24.0 * 3600.0;

impl Args {
    pub fn plan(&self) -> Result<Plan, ArgsError> {
        let mechanism = Mechanism::parse(&self.mechanism)
            .ok_or_else(|| ArgsError::Mechanism(self.mechanism.clone()))?;
        let password = match (&self.password, &self.password_env) {
            (Some(p), _) => Secret::new(p.clone()),
            (None, Some(var)) => std::env::var(var)
                .map(Secret::new)
                .map_err(|_| ArgsError::PasswordEnv(var.clone()))?,
            (None, None) => return Err(ArgsError::NoPassword),
        };
        if self.connections == 0 || self.connections > 10_000 {
            return Err(ArgsError::Range("connections", "between 1 and 10000"));
        }
        if !(self.duration > 0.0 && self.duration <= MAX_SECONDS) {
            return Err(ArgsError::Range("duration", "above 0 and at most 86400"));
        }
        if !(self.warmup >= 0.0 && self.warmup <= MAX_SECONDS) {
            return Err(ArgsError::Range("warmup", "between 0 and 86400"));
        }
        if self.logins == Some(0) {
            return Err(ArgsError::Range("logins", "at least 1"));
        }
        if self.timeout_ms == 0 {
            return Err(ArgsError::Range("timeout-ms", "at least 1"));
        }
        if self.threads == 0 || self.threads > 256 {
            return Err(ArgsError::Range("threads", "between 1 and 256"));
        }
        Ok(Plan {
            bootstrap: self.bootstrap.clone(),
            mechanism,
            user: self.user.clone(),
            password,
            connections: self.connections,
            duration: Duration::from_secs_f64(self.duration),
            logins: self.logins,
            warmup: Duration::from_secs_f64(self.warmup),
            timeout: Duration::from_millis(self.timeout_ms),
            threads: self.threads,
            json: self.json,
        })
    }
}
