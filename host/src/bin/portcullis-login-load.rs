//! `portcullis-login-load`: measures how many full Kafka SASL logins a listener completes.
//!
//! One login is what a fresh Kafka client does before its first real request: TCP connect →
//! ApiVersions v3 → SaslHandshake v1 → one (PLAIN) or two (SCRAM) SaslAuthenticate rounds, the
//! SCRAM server signature verified → close. `--connections` workers run logins back to back until
//! `--duration` has passed or `--logins` logins were measured, whichever comes first; every login
//! has its own `--timeout-ms`, so the tool always stops by itself.
//!
//! The SCRAM client salts the password with PBKDF2 (4096 iterations or more) once per salt and
//! iteration count and reuses the result ([`SaltedPasswordCache`](portcullis_plugin_scram::SaltedPasswordCache)); otherwise the tool would mostly
//! measure its own PBKDF2 rather than the server.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

fn main() -> ExitCode {
    let args = args::Args::parse();
    let plan = match args.plan() {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("portcullis-login-load: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match runner::build_runtime(plan.threads) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("portcullis-login-load: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let plan = Arc::new(plan);
    let cpu_before = report::process_cpu_seconds();
    let outcome = runtime.block_on(runner::run(Arc::clone(&plan)));
    let cpu_after = report::process_cpu_seconds();
    let summary = report::Summary::new(
        &plan,
        outcome,
        cpu_before.zip(cpu_after).map(|(b, a)| a - b),
    );
    if plan.json {
        match serde_json::to_string_pretty(&summary) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("portcullis-login-load: cannot write JSON: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", summary.render_text());
    }
    // A benchmark with failures or without a single login is not a result to quote.
    if summary.failures_total > 0 || summary.logins == 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Command-line options and the validated run plan built from them.
mod args {
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
}

/// Kafka framing over one TCP connection: size-prefixed request out, size-prefixed response in.
mod wire {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::{RequestHeader, ResponseHeader};
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// The client id sent in every request header.
    pub const CLIENT_ID: &str = "portcullis-login-load";

    /// The largest response accepted. Pre-authentication responses are small (Kafka's ApiVersions
    /// answer is under 1 KiB); a larger size field means a broken or hostile peer.
    const MAX_RESPONSE: usize = 1 << 20;

    /// What went wrong on the wire.
    #[derive(Debug, thiserror::Error)]
    pub enum WireError {
        #[error("i/o: {0}")]
        Io(std::io::ErrorKind),
        #[error("connection closed by the server")]
        Closed,
        #[error("response size {0} out of range")]
        Size(i32),
        #[error("cannot encode {0}")]
        Encode(&'static str),
        #[error("cannot decode {0}")]
        Decode(&'static str),
        #[error("{api} response has correlation id {got}, expected {expected}")]
        Correlation {
            api: &'static str,
            got: i32,
            expected: i32,
        },
    }

    impl From<std::io::Error> for WireError {
        fn from(e: std::io::Error) -> Self {
            match e.kind() {
                std::io::ErrorKind::UnexpectedEof => WireError::Closed,
                kind => WireError::Io(kind),
            }
        }
    }

    /// One client connection.
    pub struct Connection {
        stream: TcpStream,
        next_correlation_id: i32,
        out: BytesMut,
    }

    impl Connection {
        pub fn new(stream: TcpStream) -> Self {
            Self {
                stream,
                next_correlation_id: 1,
                out: BytesMut::with_capacity(512),
            }
        }

        /// Sends `request` at `version` and reads its response.
        pub async fn round_trip<R: Request>(
            &mut self,
            api: &'static str,
            request: &R,
            version: i16,
        ) -> Result<R::Response, WireError> {
            let correlation_id = self.next_correlation_id;
            self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
            let header = RequestHeader::default()
                .with_request_api_key(R::KEY)
                .with_request_api_version(version)
                .with_correlation_id(correlation_id)
                .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));

            self.out.clear();
            self.out.extend_from_slice(&[0; 4]);
            header
                .encode(&mut self.out, R::header_version(version))
                .map_err(|_| WireError::Encode(api))?;
            request
                .encode(&mut self.out, version)
                .map_err(|_| WireError::Encode(api))?;
            let size = i32::try_from(self.out.len() - 4).map_err(|_| WireError::Encode(api))?;
            if let Some(prefix) = self.out.get_mut(..4) {
                prefix.copy_from_slice(&size.to_be_bytes());
            }
            self.stream.write_all(&self.out).await?;

            let mut body = self.read_frame().await?;
            let response_header =
                ResponseHeader::decode(&mut body, R::Response::header_version(version))
                    .map_err(|_| WireError::Decode(api))?;
            if response_header.correlation_id != correlation_id {
                return Err(WireError::Correlation {
                    api,
                    got: response_header.correlation_id,
                    expected: correlation_id,
                });
            }
            R::Response::decode(&mut body, version).map_err(|_| WireError::Decode(api))
        }

        async fn read_frame(&mut self) -> Result<Bytes, WireError> {
            let size = self.stream.read_i32().await?;
            let len = usize::try_from(size)
                .ok()
                .filter(|&n| n <= MAX_RESPONSE)
                .ok_or(WireError::Size(size))?;
            let mut body = BytesMut::zeroed(len);
            self.stream.read_exact(&mut body).await?;
            Ok(body.freeze())
        }

        /// Ends the connection the way a client does after its work: a FIN, then the socket closes.
        pub async fn close(mut self) {
            // The login is already complete; a failing shutdown changes nothing for the result.
            let _ = self.stream.shutdown().await;
        }
    }
}

/// The client side of the SASL mechanisms the tool speaks.
mod mechanisms {
    use std::sync::Arc;

    use portcullis::login::{LoginError, SaslClientExchange};
    use portcullis::secret::Secret;
    use portcullis_plugin_scram::{SaltedPasswordCache, ScramClient};

    use crate::args::Mechanism;

    /// PLAIN (RFC 4616) without an authorization id: one message, and the server's answer is empty.
    pub struct PlainClient {
        user: String,
        password: Secret,
        state: PlainState,
    }

    enum PlainState {
        Start,
        Sent,
        Complete,
        Failed,
    }

    impl SaslClientExchange for PlainClient {
        fn initial(&mut self) -> Result<Vec<u8>, LoginError> {
            if !matches!(self.state, PlainState::Start) {
                self.state = PlainState::Failed;
                return Err(LoginError("PLAIN exchange already started".to_owned()));
            }
            let mut token = Vec::with_capacity(2 + self.user.len() + self.password.expose().len());
            token.push(0);
            token.extend_from_slice(self.user.as_bytes());
            token.push(0);
            token.extend_from_slice(self.password.expose().as_bytes());
            self.state = PlainState::Sent;
            Ok(token)
        }

        fn step(&mut self, _server_token: &[u8]) -> Result<Option<Vec<u8>>, LoginError> {
            match self.state {
                // Success is the error code of the SaslAuthenticate response, checked by the caller;
                // PLAIN's server message carries nothing.
                PlainState::Sent => {
                    self.state = PlainState::Complete;
                    Ok(None)
                }
                _ => {
                    self.state = PlainState::Failed;
                    Err(LoginError("PLAIN exchange stepped out of order".to_owned()))
                }
            }
        }

        fn is_complete(&self) -> bool {
            matches!(self.state, PlainState::Complete)
        }
    }

    /// What every login of one run shares: credentials and the SCRAM salted-password cache.
    pub struct ClientFactory {
        mechanism: Mechanism,
        user: String,
        password: Secret,
        cache: Arc<SaltedPasswordCache>,
    }

    impl ClientFactory {
        pub fn new(mechanism: Mechanism, user: String, password: Secret) -> Self {
            Self {
                mechanism,
                user,
                password,
                cache: Arc::new(SaltedPasswordCache::new()),
            }
        }

        pub fn mechanism_name(&self) -> &'static str {
            self.mechanism.name()
        }

        /// A fresh client exchange for one login.
        pub fn start(&self) -> Box<dyn SaslClientExchange> {
            match self.mechanism {
                Mechanism::Scram(m) => Box::new(
                    ScramClient::new(m, self.user.clone(), self.password.clone())
                        .with_cache(Arc::clone(&self.cache)),
                ),
                Mechanism::Plain => Box::new(PlainClient {
                    user: self.user.clone(),
                    password: self.password.clone(),
                    state: PlainState::Start,
                }),
            }
        }
    }
}

/// One full login: connect, ApiVersions, SaslHandshake, SaslAuthenticate rounds, close.
mod login {
    use bytes::Bytes;
    use kafka_protocol::messages::{
        ApiKey, ApiVersionsRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
    };
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::ResponseError;
    use tokio::net::TcpStream;

    use crate::mechanisms::ClientFactory;
    use crate::wire::{Connection, WireError, CLIENT_ID};

    const API_VERSIONS_VERSION: i16 = 3;
    const HANDSHAKE_VERSION: i16 = 1;
    /// The newest SaslAuthenticate the tool speaks; the server's ApiVersions may lower it.
    const MAX_AUTHENTICATE_VERSION: i16 = 2;
    /// SCRAM needs two rounds, PLAIN one; more means the server is looping.
    const MAX_ROUNDS: usize = 4;

    /// Why a login failed. The `Display` text is the reason the report counts, so it holds no
    /// per-login detail (no nonces, no addresses) and never any secret.
    #[derive(Debug, thiserror::Error)]
    pub enum LoginFailure {
        #[error("connect: {0:?}")]
        Connect(std::io::ErrorKind),
        #[error("{0}")]
        Wire(#[from] WireError),
        #[error("ApiVersions: {0}")]
        ApiVersions(String),
        #[error("server does not advertise SaslAuthenticate")]
        NoAuthenticate,
        #[error("SaslHandshake: {0}")]
        Handshake(String),
        #[error("SaslAuthenticate: {0}")]
        Authenticate(String),
        #[error("client: {0}")]
        Client(String),
        #[error("server did not finish the exchange in {MAX_ROUNDS} rounds")]
        TooManyRounds,
    }

    fn error_name(code: i16) -> String {
        ResponseError::try_from_code(code).map_or_else(|| "none".to_owned(), |e| e.to_string())
    }

    /// Keeps a server message short and on one line for the reason counts.
    fn short(message: Option<&StrBytes>) -> String {
        message
            .map(|m| {
                m.as_str()
                    .chars()
                    .take(120)
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect::<String>()
            })
            .filter(|m| !m.is_empty())
            .map(|m| format!(" ({m})"))
            .unwrap_or_default()
    }

    pub async fn login(bootstrap: &str, clients: &ClientFactory) -> Result<(), LoginFailure> {
        let stream = TcpStream::connect(bootstrap)
            .await
            .map_err(|e| LoginFailure::Connect(e.kind()))?;
        // A login is a handful of small request/response pairs: Nagle would add delay.
        stream
            .set_nodelay(true)
            .map_err(|e| LoginFailure::Connect(e.kind()))?;
        let mut conn = Connection::new(stream);

        let versions = conn
            .round_trip(
                "ApiVersions",
                &ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str(CLIENT_ID))
                    .with_client_software_version(StrBytes::from_static_str(env!(
                        "CARGO_PKG_VERSION"
                    ))),
                API_VERSIONS_VERSION,
            )
            .await?;
        if versions.error_code != 0 {
            return Err(LoginFailure::ApiVersions(error_name(versions.error_code)));
        }
        let authenticate_version = versions
            .api_keys
            .iter()
            .find(|v| v.api_key == ApiKey::SaslAuthenticate as i16)
            .map(|v| v.max_version.min(MAX_AUTHENTICATE_VERSION))
            .filter(|&v| v >= 0)
            .ok_or(LoginFailure::NoAuthenticate)?;

        let mut exchange = clients.start();
        let mechanism = clients.mechanism_name();
        let handshake = conn
            .round_trip(
                "SaslHandshake",
                &SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_static_str(mechanism)),
                HANDSHAKE_VERSION,
            )
            .await?;
        if handshake.error_code != 0 {
            return Err(LoginFailure::Handshake(error_name(handshake.error_code)));
        }

        let mut token = exchange.initial().map_err(|e| LoginFailure::Client(e.0))?;
        for _ in 0..MAX_ROUNDS {
            let response = conn
                .round_trip(
                    "SaslAuthenticate",
                    &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
                    authenticate_version,
                )
                .await?;
            if response.error_code != 0 {
                return Err(LoginFailure::Authenticate(format!(
                    "{}{}",
                    error_name(response.error_code),
                    short(response.error_message.as_ref())
                )));
            }
            match exchange
                .step(&response.auth_bytes)
                .map_err(|e| LoginFailure::Client(e.0))?
            {
                Some(next) => token = next,
                None if exchange.is_complete() => {
                    conn.close().await;
                    return Ok(());
                }
                None => {
                    return Err(LoginFailure::Client(
                        "exchange ended without completing".to_owned(),
                    ))
                }
            }
        }
        Err(LoginFailure::TooManyRounds)
    }
}

/// Workers, the stop conditions and what they measured.
mod runner {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use crate::args::Plan;
    use crate::login::login;
    use crate::mechanisms::ClientFactory;

    /// What one worker (or the whole run, once merged) measured.
    #[derive(Debug, Default)]
    pub struct Tally {
        /// Latency of each successful measured login, in nanoseconds.
        pub latencies_ns: Vec<u64>,
        /// Failure reason → count, for measured logins.
        pub failures: BTreeMap<String, u64>,
    }

    impl Tally {
        fn merge(&mut self, other: Tally) {
            self.latencies_ns.extend(other.latencies_ns);
            for (reason, n) in other.failures {
                *self.failures.entry(reason).or_default() += n;
            }
        }
    }

    /// The run's result.
    #[derive(Debug)]
    pub struct Outcome {
        pub tally: Tally,
        /// From the end of the warm-up to the last worker's stop.
        pub measured: Duration,
        /// Logins done during the warm-up (not in the tally).
        pub warmup_logins: u64,
        /// Workers that had to be aborted at the hard deadline (should be zero).
        pub aborted_workers: usize,
    }

    pub fn build_runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
        if threads == 1 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .enable_all()
                .build()
        }
    }

    struct Shared {
        plan: Arc<Plan>,
        clients: ClientFactory,
        measure_from: Instant,
        stop_at: Instant,
        /// Measured logins started so far, for `--logins`.
        started: AtomicU64,
        warmup_logins: AtomicU64,
    }

    impl Shared {
        /// Claims the next login, or says the run is over. Warm-up logins claim nothing.
        fn claim(&self, now: Instant) -> Option<bool> {
            if now >= self.stop_at {
                return None;
            }
            if now < self.measure_from {
                return Some(false);
            }
            match self.plan.logins {
                Some(limit) if self.started.fetch_add(1, Ordering::Relaxed) >= limit => None,
                _ => Some(true),
            }
        }
    }

    async fn worker(shared: Arc<Shared>) -> Tally {
        let mut tally = Tally::default();
        loop {
            let start = Instant::now();
            let Some(measured) = shared.claim(start) else {
                return tally;
            };
            let result = tokio::time::timeout(
                shared.plan.timeout,
                login(&shared.plan.bootstrap, &shared.clients),
            )
            .await;
            let elapsed = start.elapsed();
            if !measured {
                shared.warmup_logins.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match result {
                Ok(Ok(())) => tally
                    .latencies_ns
                    .push(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)),
                Ok(Err(failure)) => *tally.failures.entry(failure.to_string()).or_default() += 1,
                Err(_) => *tally.failures.entry("timeout".to_owned()).or_default() += 1,
            }
        }
    }

    pub async fn run(plan: Arc<Plan>) -> Outcome {
        let begin = Instant::now();
        let measure_from = begin + plan.warmup;
        let stop_at = measure_from + plan.duration;
        // Every login in flight at `stop_at` ends within its timeout; this is only a backstop.
        let hard_stop = stop_at + plan.timeout + Duration::from_secs(1);
        let shared = Arc::new(Shared {
            clients: ClientFactory::new(plan.mechanism, plan.user.clone(), plan.password.clone()),
            plan: Arc::clone(&plan),
            measure_from,
            stop_at,
            started: AtomicU64::new(0),
            warmup_logins: AtomicU64::new(0),
        });
        let handles: Vec<_> = (0..plan.connections)
            .map(|_| tokio::spawn(worker(Arc::clone(&shared))))
            .collect();

        let mut tally = Tally::default();
        let mut aborted_workers = 0;
        for handle in handles {
            let abort = handle.abort_handle();
            match tokio::time::timeout_at(hard_stop, handle).await {
                Ok(Ok(worker_tally)) => tally.merge(worker_tally),
                Ok(Err(_)) | Err(_) => {
                    abort.abort();
                    aborted_workers += 1;
                }
            }
        }
        let end = Instant::now();
        Outcome {
            tally,
            measured: end.saturating_duration_since(measure_from),
            warmup_logins: shared.warmup_logins.load(Ordering::Relaxed),
            aborted_workers,
        }
    }
}

/// The summary: rates, latency percentiles, failures; as text or JSON.
mod report {
    use std::collections::BTreeMap;
    use std::fmt::Write;

    use serde::Serialize;

    use crate::args::Plan;
    use crate::runner::Outcome;

    /// Latency percentiles of successful logins, in milliseconds.
    #[derive(Debug, Serialize)]
    pub struct Latency {
        pub p50_ms: f64,
        pub p90_ms: f64,
        pub p99_ms: f64,
        pub max_ms: f64,
        pub mean_ms: f64,
    }

    #[derive(Debug, Serialize)]
    pub struct Summary {
        pub bootstrap: String,
        pub mechanism: &'static str,
        pub connections: usize,
        pub threads: usize,
        pub warmup_s: f64,
        pub warmup_logins: u64,
        pub measured_s: f64,
        /// Successful measured logins.
        pub logins: u64,
        pub logins_per_s: f64,
        pub latency: Option<Latency>,
        pub failures_total: u64,
        pub failures: BTreeMap<String, u64>,
        /// CPU seconds the tool itself used over the whole run (warm-up included), if known.
        pub client_cpu_s: Option<f64>,
        pub aborted_workers: usize,
    }

    /// Nearest-rank percentile of sorted values.
    pub(crate) fn percentile(sorted: &[u64], p: f64) -> u64 {
        if sorted.is_empty() {
            return 0;
        }
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        let index = rank.clamp(1, sorted.len()) - 1;
        sorted.get(index).copied().unwrap_or(0)
    }

    fn ms(ns: u64) -> f64 {
        ns as f64 / 1e6
    }

    impl Summary {
        pub fn new(plan: &Plan, outcome: Outcome, client_cpu_s: Option<f64>) -> Self {
            let mut latencies = outcome.tally.latencies_ns;
            latencies.sort_unstable();
            let logins = latencies.len() as u64;
            let measured_s = outcome.measured.as_secs_f64();
            let latency = (!latencies.is_empty()).then(|| Latency {
                p50_ms: ms(percentile(&latencies, 50.0)),
                p90_ms: ms(percentile(&latencies, 90.0)),
                p99_ms: ms(percentile(&latencies, 99.0)),
                max_ms: ms(latencies.last().copied().unwrap_or(0)),
                mean_ms: ms(latencies.iter().sum::<u64>() / logins.max(1)),
            });
            Summary {
                bootstrap: plan.bootstrap.clone(),
                mechanism: plan.mechanism.name(),
                connections: plan.connections,
                threads: plan.threads,
                warmup_s: plan.warmup.as_secs_f64(),
                warmup_logins: outcome.warmup_logins,
                measured_s,
                logins,
                logins_per_s: if measured_s > 0.0 {
                    logins as f64 / measured_s
                } else {
                    0.0
                },
                latency,
                failures_total: outcome.tally.failures.values().sum(),
                failures: outcome.tally.failures,
                client_cpu_s,
                aborted_workers: outcome.aborted_workers,
            }
        }

        pub fn render_text(&self) -> String {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "{} {} x{} connections, {:.1} s measured ({} warm-up logins in {:.1} s)",
                self.bootstrap,
                self.mechanism,
                self.connections,
                self.measured_s,
                self.warmup_logins,
                self.warmup_s
            );
            let _ = writeln!(
                out,
                "  logins: {} ok, {} failed, {:.1} logins/s",
                self.logins, self.failures_total, self.logins_per_s
            );
            if let Some(l) = &self.latency {
                let _ = writeln!(
                    out,
                    "  latency ms: p50 {:.3}  p90 {:.3}  p99 {:.3}  max {:.3}  mean {:.3}",
                    l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms, l.mean_ms
                );
            }
            for (reason, n) in &self.failures {
                let _ = writeln!(out, "  failure x{n}: {reason}");
            }
            if let Some(cpu) = self.client_cpu_s {
                let _ = writeln!(out, "  client CPU: {cpu:.2} s");
            }
            if self.aborted_workers > 0 {
                let _ = writeln!(
                    out,
                    "  {} workers aborted at the hard deadline",
                    self.aborted_workers
                );
            }
            out
        }
    }

    /// User + system CPU seconds of this process so far, from /proc/self/stat (Linux; USER_HZ is
    /// 100 on every Linux ABI the tool targets). `None` where that file does not exist.
    pub fn process_cpu_seconds() -> Option<f64> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name (field 2) may contain spaces; the fields after its ')' are fixed.
        let after_name = stat.get(stat.rfind(')')? + 1..)?;
        let mut fields = after_name.split_whitespace();
        // Fields 3.. follow; utime and stime are fields 14 and 15, i.e. the 12th and 13th here.
        let utime: u64 = fields.nth(11)?.parse().ok()?;
        let stime: u64 = fields.next()?.parse().ok()?;
        Some((utime + stime) as f64 / 100.0)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use portcullis::credentials::ScramMechanism;
    use portcullis::secret::Secret;

    use crate::args::{Args, Mechanism};
    use crate::mechanisms::ClientFactory;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec![
            "portcullis-login-load",
            "--bootstrap",
            "127.0.0.1:9",
            "--user",
            "u",
        ];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).unwrap()
    }

    #[test]
    fn mechanisms_parse_case_insensitively() {
        let plan = args(&["--password", "p", "--mechanism", "scram-sha-256"])
            .plan()
            .unwrap();
        assert_eq!(plan.mechanism, Mechanism::Scram(ScramMechanism::Sha256));
        let plan = args(&["--password", "p", "--mechanism", "plain"])
            .plan()
            .unwrap();
        assert_eq!(plan.mechanism, Mechanism::Plain);
        assert!(args(&["--password", "p", "--mechanism", "GSSAPI"])
            .plan()
            .is_err());
    }

    #[test]
    fn a_run_is_bounded_and_needs_a_password() {
        assert!(args(&[]).plan().is_err());
        assert!(args(&["--password", "p", "--connections", "0"])
            .plan()
            .is_err());
        assert!(args(&["--password", "p", "--duration", "0"])
            .plan()
            .is_err());
        assert!(args(&["--password", "p", "--duration", "inf"])
            .plan()
            .is_err());
        assert!(args(&["--password", "p", "--logins", "0"]).plan().is_err());
        assert!(
            args(&["--password-env", "PORTCULLIS_LOAD_TEST_UNSET_VARIABLE"])
                .plan()
                .is_err()
        );
        let plan = args(&["--password", "p", "--logins", "10"]).plan().unwrap();
        assert_eq!(plan.logins, Some(10));
        assert!(plan.duration.as_secs_f64() > 0.0);
    }

    #[test]
    fn plain_sends_one_message_and_completes_on_the_answer() {
        let factory = ClientFactory::new(Mechanism::Plain, "alice".into(), Secret::new("s3cret"));
        let mut client = factory.start();
        assert_eq!(client.initial().unwrap(), b"\0alice\0s3cret");
        assert!(!client.is_complete());
        assert_eq!(client.step(b"").unwrap(), None);
        assert!(client.is_complete());
        assert!(client.step(b"").is_err());
    }

    #[test]
    fn scram_client_refuses_a_forged_server_first() {
        let factory = ClientFactory::new(
            Mechanism::Scram(ScramMechanism::Sha512),
            "alice".into(),
            Secret::new("s3cret"),
        );
        let mut client = factory.start();
        let first = client.initial().unwrap();
        assert!(first.starts_with(b"n,,n=alice,r="));
        // A server nonce that does not extend the client's.
        assert!(client.step(b"r=abc,s=c2FsdA==,i=4096").is_err());
        assert!(!client.is_complete());
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(crate::report::percentile(&values, 50.0), 50);
        assert_eq!(crate::report::percentile(&values, 99.0), 99);
        assert_eq!(crate::report::percentile(&values, 100.0), 100);
        assert_eq!(crate::report::percentile(&[7], 90.0), 7);
        assert_eq!(crate::report::percentile(&[], 50.0), 0);
    }

    #[test]
    fn own_cpu_time_is_readable_on_linux() {
        if std::path::Path::new("/proc/self/stat").exists() {
            let spent = crate::report::process_cpu_seconds().unwrap();
            assert!(spent >= 0.0);
        }
    }
}
