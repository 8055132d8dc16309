//! Connections to the upstream cluster: opening one (TCP, then SASL with the node's
//! [`LoginModule`] when the upstream requires it), sending frames and reading responses.
//!
//! Portcullis' own requests (ApiVersions, SaslHandshake, SaslAuthenticate, discovery Metadata) use
//! correlation ids from a reserved range at the top of `i32`, as the Java client does. Most are
//! sent before any client frame; a re-authentication (KIP-368) happens between client frames, and
//! responses to earlier client requests that arrive meanwhile are kept aside and handed out
//! afterwards, in order (the Java client's `pendingAuthenticatedReceives`).
//!
//! When the upstream reports a session lifetime, the connection re-authenticates before sending
//! the first client frame after a jittered 85–95 % of that lifetime (the Java client's choice), so
//! the upstream never sees a request on an expired session.
//!
//! With `SSL` / `SASL_SSL` the TCP connection is wrapped in rustls first ([`super::tls`]); the
//! server name checked is the host of the address connected to.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use arc_swap::ArcSwap;
use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use portcullis::login::{LoginError, LoginModule};
use portcullis::protocol::versions::ApiVersionTable;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::frames::{FrameError, FrameReader, Outgoing, ReadOutcome, BURST_READ};
use super::sockets::{upstream_plain, upstream_tls, UpstreamRead, UpstreamWrite};
use super::wire::{decode_response, encode_request, response_correlation_id, WireError};

/// The lowest correlation id Portcullis uses for its own requests (the Java client's choice).
const RESERVED_CORRELATION_MIN: i32 = i32::MAX - 7;
/// Responses come from the operator's own cluster; this only guards against a broken length.
const MAX_RESPONSE: usize = i32::MAX as usize;
/// SASL exchanges that need more rounds than this are broken.
const MAX_SASL_ROUNDS: usize = 16;

/// How to reach and authenticate to the upstream cluster.
pub struct UpstreamSettings {
    /// `[upstream] bootstrap_servers`.
    pub bootstrap_servers: Vec<String>,
    /// The login module for `SASL_PLAINTEXT` / `SASL_SSL`; `None` for `PLAINTEXT` / `SSL`.
    pub login: Option<Arc<dyn LoginModule>>,
    /// TLS to the brokers, for `SSL` / `SASL_SSL`.
    pub tls: Option<TlsConnector>,
    /// Bound on connecting and authenticating one connection.
    pub connect_timeout: Duration,
    /// The upstream's own API versions (not the advertised ones), learned at discovery.
    pub versions: ArcSwap<ApiVersionTable>,
}

impl std::fmt::Debug for UpstreamSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamSettings")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field(
                "login",
                &self.login.as_ref().map(|l| l.mechanism().to_owned()),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// Why an upstream connection failed. Never carries a secret.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No address to connect to.
    #[error("no upstream address for {0}")]
    NoAddress(String),
    /// TCP connect failed.
    #[error("cannot connect to {address}: {source}")]
    Connect {
        /// The address.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// Connecting and authenticating took longer than `connect_timeout_ms`.
    #[error("connecting to {0} timed out")]
    Timeout(String),
    /// The TLS handshake failed (e.g. an untrusted certificate, or one for another name).
    #[error("TLS handshake with {address} failed: {reason}")]
    Tls {
        /// The address.
        address: String,
        /// Why (rustls' reason).
        reason: String,
    },
    /// Reading or writing failed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The upstream closed the connection.
    #[error("upstream closed the connection")]
    Closed,
    /// A response that does not parse.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A response to a request that was not sent.
    #[error("upstream answered correlation id {got}, expected {expected}")]
    OutOfOrder {
        /// The id waited for.
        expected: i32,
        /// The id received.
        got: i32,
    },
    /// The upstream refused a request with an error code.
    #[error("upstream {api} failed with error code {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Refused {
        /// The request.
        api: &'static str,
        /// The error code.
        code: i16,
        /// The upstream's message, if any.
        message: Option<String>,
    },
    /// The upstream does not support a version Portcullis needs.
    #[error("upstream does not support {0}")]
    Unsupported(&'static str),
    /// The login module failed.
    #[error(transparent)]
    Login(#[from] LoginError),
    /// The SASL exchange did not finish.
    #[error("upstream SASL exchange did not complete")]
    Incomplete,
}

/// One upstream TCP connection.
pub struct UpstreamConnection {
    address: String,
    reader: FrameReader<UpstreamRead>,
    writer: UpstreamWrite,
    /// Frames queued by [`UpstreamConnection::send`], written by [`UpstreamConnection::flush`].
    out: Outgoing,
    next_internal_id: i32,
    /// Client responses that arrived while Portcullis waited for one of its own.
    stash: VecDeque<Bytes>,
    /// How to re-authenticate, when the upstream gave the session a lifetime.
    reauth: Option<Reauth>,
}

/// When and how to re-authenticate an upstream session.
struct Reauth {
    login: Arc<dyn LoginModule>,
    authenticate_version: i16,
    due: Instant,
}

impl std::fmt::Debug for UpstreamConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConnection")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl UpstreamConnection {
    /// Opens an authenticated connection to the first of `addresses` that answers.
    pub async fn open_any(
        addresses: &[String],
        settings: &UpstreamSettings,
    ) -> Result<Self, UpstreamError> {
        let mut last = UpstreamError::NoAddress("the bootstrap servers".into());
        for address in addresses {
            match Self::open(address, settings, None).await {
                Ok((connection, _)) => return Ok(connection),
                Err(e) => {
                    tracing::debug!(%address, error = %e, "upstream bootstrap server unavailable");
                    last = e;
                }
            }
        }
        Err(last)
    }

    /// Opens an authenticated connection to `address`. With `software` (name, version) it first
    /// asks the upstream for its API versions and returns them.
    pub async fn open(
        address: &str,
        settings: &UpstreamSettings,
        software: Option<(&str, &str)>,
    ) -> Result<(Self, Option<ApiVersionTable>), UpstreamError> {
        let opening = async {
            let stream =
                TcpStream::connect(address)
                    .await
                    .map_err(|source| UpstreamError::Connect {
                        address: address.to_owned(),
                        source,
                    })?;
            // Kafka requests are small and latency-bound; Nagle would delay pipelined requests.
            stream.set_nodelay(true).map_err(FrameError::Io)?;
            let (read, write) = match &settings.tls {
                None => upstream_plain(stream),
                Some(connector) => {
                    let tls = |reason: String| UpstreamError::Tls {
                        address: address.to_owned(),
                        reason,
                    };
                    let name = super::tls::server_name(address).map_err(tls)?;
                    let stream = connector
                        .connect(name, stream)
                        .await
                        .map_err(|e| tls(e.to_string()))?;
                    upstream_tls(stream)
                }
            };
            let mut connection = Self {
                address: address.to_owned(),
                reader: FrameReader::new(read),
                writer: write,
                out: Outgoing::new(),
                next_internal_id: RESERVED_CORRELATION_MIN,
                stash: VecDeque::new(),
                reauth: None,
            };
            let table = match software {
                Some(software) => Some(connection.api_versions(software).await?),
                None => None,
            };
            if let Some(login) = &settings.login {
                let versions = match &table {
                    Some(t) => t.clone(),
                    None => settings.versions.load().as_ref().clone(),
                };
                let version = authenticate_version(&versions)?;
                connection.authenticate(login, version).await?;
            }
            Ok((connection, table))
        };
        tokio::time::timeout(settings.connect_timeout, opening)
            .await
            .map_err(|_| UpstreamError::Timeout(address.to_owned()))?
    }

    /// The address this connection goes to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Queues a frame (a client's request, unchanged); [`UpstreamConnection::flush`] sends it,
    /// with every other frame queued, in one vectored write.
    pub fn send(&mut self, frame: Bytes) -> Result<(), UpstreamError> {
        Ok(self.out.push_frame(frame)?)
    }

    /// Sends everything queued.
    pub async fn flush(&mut self) -> Result<(), UpstreamError> {
        self.out
            .write_to(&mut self.writer)
            .await
            .map_err(FrameError::Io)?;
        Ok(())
    }

    /// The next response to a client request. Cancel-safe.
    pub async fn next_response(&mut self) -> Result<Bytes, UpstreamError> {
        if let Some(frame) = self.stash.pop_front() {
            return Ok(frame);
        }
        self.read_frame().await
    }

    async fn read_frame(&mut self) -> Result<Bytes, UpstreamError> {
        match self.reader.next_frame(MAX_RESPONSE, BURST_READ).await? {
            ReadOutcome::Frame(frame) => Ok(frame),
            ReadOutcome::Closed | ReadOutcome::TooLarge(_) => Err(UpstreamError::Closed),
        }
    }

    /// Re-authenticates if the upstream session is close to its end. Call before sending a client
    /// frame: the upstream processes requests in order, so a re-authentication started here is
    /// never interleaved with a client request.
    pub async fn reauthenticate_if_due(&mut self) -> Result<bool, UpstreamError> {
        let Some(reauth) = &self.reauth else {
            return Ok(false);
        };
        if Instant::now() < reauth.due {
            return Ok(false);
        }
        let (login, version) = (Arc::clone(&reauth.login), reauth.authenticate_version);
        self.flush().await?;
        self.authenticate(&login, version).await?;
        tracing::debug!(address = %self.address, "upstream session re-authenticated");
        Ok(true)
    }

    /// Sends one of Portcullis' own requests and waits for its response.
    pub async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, UpstreamError> {
        let correlation_id = self.next_internal_id;
        // Stay inside the reserved range however many requests this connection sends.
        self.next_internal_id = if correlation_id == i32::MAX {
            RESERVED_CORRELATION_MIN
        } else {
            correlation_id + 1
        };
        let frame = encode_request(api, version, correlation_id, request)?;
        self.send(frame)?;
        self.flush().await?;
        let response = loop {
            let response = self.read_frame().await?;
            let got = response_correlation_id(&response).unwrap_or(-1);
            if got == correlation_id {
                break response;
            }
            if got >= RESERVED_CORRELATION_MIN {
                return Err(UpstreamError::OutOfOrder {
                    expected: correlation_id,
                    got,
                });
            }
            // A response to an earlier client request: keep it for the client, in order.
            self.stash.push_back(response);
        };
        let (_, body) = decode_response::<Resp>(api, version, response)?;
        Ok(body)
    }

    async fn api_versions(
        &mut self,
        (name, version): (&str, &str),
    ) -> Result<ApiVersionTable, UpstreamError> {
        // v3 is the first version with the client software fields (KIP-511); every Kafka since 2.4
        // serves it.
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_string(name.to_owned()))
            .with_client_software_version(StrBytes::from_string(version.to_owned()));
        let response: ApiVersionsResponse = self.call(ApiKey::ApiVersions, 3, &request).await?;
        if response.error_code != 0 {
            return Err(UpstreamError::Refused {
                api: "ApiVersions",
                code: response.error_code,
                message: None,
            });
        }
        Ok(ApiVersionTable::from_response(&response))
    }

    /// SaslHandshake v1, then SaslAuthenticate rounds until the login module's exchange is done.
    async fn authenticate(
        &mut self,
        login: &Arc<dyn LoginModule>,
        authenticate_version: i16,
    ) -> Result<(), UpstreamError> {
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_string(login.mechanism().to_owned()));
        let response: SaslHandshakeResponse =
            self.call(ApiKey::SaslHandshake, 1, &handshake).await?;
        if response.error_code != 0 {
            let enabled: Vec<String> = response.mechanisms.iter().map(|m| m.to_string()).collect();
            return Err(UpstreamError::Refused {
                api: "SaslHandshake",
                code: response.error_code,
                message: Some(format!("upstream enables {enabled:?}")),
            });
        }
        let mut exchange = login.start();
        let mut token = exchange.initial()?;
        for _ in 0..MAX_SASL_ROUNDS {
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
            let response: SaslAuthenticateResponse = self
                .call(ApiKey::SaslAuthenticate, authenticate_version, &request)
                .await?;
            if response.error_code != 0 {
                return Err(UpstreamError::Refused {
                    api: "SaslAuthenticate",
                    code: response.error_code,
                    message: response.error_message.map(|m| m.to_string()),
                });
            }
            match exchange.step(&response.auth_bytes)? {
                Some(next) => token = next,
                None if exchange.is_complete() => {
                    self.reauth = (response.session_lifetime_ms > 0).then(|| Reauth {
                        login: Arc::clone(login),
                        authenticate_version,
                        due: Instant::now()
                            + reauth_delay(response.session_lifetime_ms, rand::random::<f64>()),
                    });
                    tracing::debug!(address = %self.address, lifetime_ms = response.session_lifetime_ms, "upstream session authenticated");
                    return Ok(());
                }
                None => return Err(UpstreamError::Incomplete),
            }
        }
        Err(UpstreamError::Incomplete)
    }
}

/// The SaslAuthenticate version to use with an upstream that supports `versions`.
fn authenticate_version(versions: &ApiVersionTable) -> Result<i16, UpstreamError> {
    if versions
        .range(ApiKey::SaslHandshake as i16)
        .is_some_and(|(_, max)| max < 1)
    {
        return Err(UpstreamError::Unsupported("SaslHandshake v1"));
    }
    // Without a table (it is learned at discovery) v1 is the safe choice: every Kafka since 1.0.
    Ok(pick_version(versions, ApiKey::SaslAuthenticate, 2).unwrap_or(1))
}

/// When to re-authenticate a session of `lifetime_ms`: a uniformly jittered point between 85 %
/// and 95 % of the lifetime (`random` in `[0, 1)`), as the Java client does (KIP-368).
pub fn reauth_delay(lifetime_ms: i64, random: f64) -> Duration {
    let fraction = 0.85 + 0.10 * random.clamp(0.0, 1.0);
    Duration::from_millis((lifetime_ms.max(0) as f64 * fraction) as u64)
}

/// The highest version of `api` that the upstream, kafka-protocol and `ours` all support.
pub fn pick_version(upstream: &ApiVersionTable, api: ApiKey, ours: i16) -> Option<i16> {
    let (min, max) = upstream.range(api as i16)?;
    let known = api.valid_versions();
    let version = max.min(ours).min(known.max);
    (version >= min.max(known.min)).then_some(version)
}
