//! Connections to the upstream cluster: opening one (TCP, then SASL with the node's
//! [`LoginModule`](portcullis::login::LoginModule) when the upstream requires it), sending frames and reading responses.
//!
//! Portcullis' own requests (ApiVersions, SaslHandshake, SaslAuthenticate, discovery Metadata) use
//! correlation ids from a reserved range at the top of `i32`, as the Java client does. Most are
//! sent before any client frame. A client's connection is then split: the request side sends on
//! an [`UpstreamSender`], the response side reads the [`UpstreamReader`]. A re-authentication
//! (KIP-368) happens between client frames: its requests are entries of the connection's response
//! queue like the client's, so the response side, which reads every response in order, relays the
//! answers to earlier client requests to the client and hands the re-authentication's own answers
//! back to the request side.
//!
//! When the upstream reports a session lifetime, the connection re-authenticates before sending
//! the first client frame after a jittered 85–95 % of that lifetime (the Java client's choice), so
//! the upstream never sees a request on an expired session.
//!
//! With `SSL` / `SASL_SSL` the TCP connection is wrapped in rustls first ([`super::tls`]); the
//! server name checked is the host of the address connected to.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use arc_swap::{ArcSwap, ArcSwapOption};
use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use portcullis::protocol::versions::ApiVersionTable;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;

use super::frames::{FrameError, FrameReader, Outgoing, ReadOutcome, BURST_READ};
use super::queue::{Internal, ResponseQueue};
use super::sockets::{upstream_plain, upstream_tls, UpstreamRead, UpstreamWrite};
use super::upstream_calls::{call, InternalIds, RoundTrip};
use super::upstream_sasl::{authenticate, authenticate_version, Reauth};
use super::wire::response_correlation_id;

pub use super::upstream_calls::pick_version;
pub use super::upstream_error::UpstreamError;
pub use super::upstream_reader::UpstreamReader;
pub use super::upstream_sasl::{login_slot, reauth_delay, ActiveLogin, LoginSlot};

/// Responses come from the operator's own cluster; this only guards against a broken length.
const MAX_RESPONSE: usize = i32::MAX as usize;

/// How to reach and authenticate to the upstream cluster.
pub struct UpstreamSettings {
    /// `[upstream] bootstrap_servers`.
    pub bootstrap_servers: Vec<String>,
    /// The login module for `SASL_PLAINTEXT` / `SASL_SSL`; `None` for `PLAINTEXT` / `SSL`. A
    /// reload may store another: each new connection takes the one of the moment.
    pub login: Option<Arc<LoginSlot>>,
    /// TLS to the brokers, for `SSL` / `SASL_SSL`. A reload replaces it (`[upstream.tls]`'s
    /// files read again); each new connection takes the one of the moment, an open one keeps its
    /// session.
    pub tls: Arc<ArcSwapOption<TlsConnector>>,
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
                &self
                    .login
                    .as_ref()
                    .map(|l| l.load().module.mechanism().to_owned()),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls.load().is_some())
            .finish_non_exhaustive()
    }
}

/// One upstream connection while Portcullis alone talks on it: opening it (TLS, SASL), and the
/// discovery requests. A client's connection is then split with
/// [`UpstreamConnection::into_halves`].
pub struct UpstreamConnection {
    address: String,
    reader: FrameReader<UpstreamRead>,
    writer: UpstreamWrite,
    /// Frames queued by [`UpstreamConnection::send`], written by [`UpstreamConnection::flush`].
    out: Outgoing,
    ids: InternalIds,
    /// How to re-authenticate, when the upstream gave the session a lifetime.
    reauth: Option<Reauth>,
}

/// The request side's half of a client's upstream connection: it sends the client's requests,
/// and re-authenticates the session between them when it is due.
pub struct UpstreamSender {
    address: String,
    writer: UpstreamWrite,
    out: Outgoing,
    ids: InternalIds,
    reauth: Option<Reauth>,
    /// Bound on one of Portcullis' own round trips (`connect_timeout_ms`).
    call_timeout: Duration,
}

impl std::fmt::Debug for UpstreamConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConnection")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for UpstreamSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamSender")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl RoundTrip for UpstreamConnection {
    fn next_id(&mut self) -> i32 {
        self.ids.next()
    }

    /// Nothing but Portcullis' own requests was sent on this connection: the next response is the
    /// answer.
    async fn round_trip(
        &mut self,
        frame: Bytes,
        correlation_id: i32,
    ) -> Result<Bytes, UpstreamError> {
        self.send(frame)?;
        self.flush().await?;
        let response = self.read_frame().await?;
        let got = response_correlation_id(&response).unwrap_or(-1);
        if got != correlation_id {
            return Err(UpstreamError::OutOfOrder {
                expected: correlation_id,
                got,
            });
        }
        Ok(response)
    }
}

/// A re-authentication on a client's upstream connection: the requests go out between the
/// client's, and the response side, which reads every response in order, hands each answer back
/// through the queue (responses to the client's earlier requests go on to the client meanwhile).
struct ThroughQueue<'a> {
    sender: &'a mut UpstreamSender,
    queue: &'a ResponseQueue,
}

impl RoundTrip for ThroughQueue<'_> {
    fn next_id(&mut self) -> i32 {
        self.sender.ids.next()
    }

    async fn round_trip(
        &mut self,
        frame: Bytes,
        correlation_id: i32,
    ) -> Result<Bytes, UpstreamError> {
        let (reply, answer) = oneshot::channel();
        // Queued before it is sent, so the answer always finds its entry.
        self.queue.push_internal(Internal {
            correlation_id,
            reply,
        });
        self.sender.send(frame)?;
        self.sender.flush().await?;
        match tokio::time::timeout(self.sender.call_timeout, answer).await {
            Ok(Ok(response)) => Ok(response),
            // The response side ended (the upstream closed or failed).
            Ok(Err(_)) => Err(UpstreamError::Closed),
            Err(_) => Err(UpstreamError::NoAnswer(self.sender.address.clone())),
        }
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
            let connector = settings.tls.load_full();
            let (read, write) = match connector.as_deref() {
                None => upstream_plain(stream),
                Some(connector) => {
                    let tls = |reason: String| UpstreamError::Tls {
                        address: address.to_owned(),
                        reason,
                    };
                    let name = super::tls::server_name(address).map_err(|e| tls(e.to_string()))?;
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
                ids: InternalIds::new(),
                reauth: None,
            };
            let table = match software {
                Some(software) => Some(connection.api_versions(software).await?),
                None => None,
            };
            if let Some(slot) = &settings.login {
                let login = slot.load_full();
                let versions = match &table {
                    Some(t) => t.clone(),
                    None => settings.versions.load().as_ref().clone(),
                };
                let version = authenticate_version(&versions)?;
                let address = connection.address.clone();
                connection.reauth =
                    authenticate(&mut connection, &address, &login, version).await?;
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

    /// Splits the connection for a client: the request side sends on it, the response side reads
    /// it. One of Portcullis' own round trips (a re-authentication) may take up to `call_timeout`.
    pub fn into_halves(self, call_timeout: Duration) -> (UpstreamSender, UpstreamReader) {
        let (read, buffer) = self.reader.into_parts();
        (
            UpstreamSender {
                address: self.address.clone(),
                writer: self.writer,
                out: self.out,
                ids: self.ids,
                reauth: self.reauth,
                call_timeout,
            },
            UpstreamReader {
                address: self.address,
                read,
                buffer,
            },
        )
    }

    fn send(&mut self, frame: Bytes) -> Result<(), UpstreamError> {
        Ok(self.out.push_frame(frame)?)
    }

    async fn flush(&mut self) -> Result<(), UpstreamError> {
        self.out
            .write_to(&mut self.writer)
            .await
            .map_err(FrameError::Io)?;
        Ok(())
    }

    async fn read_frame(&mut self) -> Result<Bytes, UpstreamError> {
        match self.reader.next_frame(MAX_RESPONSE, BURST_READ).await? {
            ReadOutcome::Frame(frame) => Ok(frame),
            ReadOutcome::Closed | ReadOutcome::TooLarge(_) => Err(UpstreamError::Closed),
        }
    }

    /// Re-authenticates if the session is close to its end. For a connection that carries only
    /// Portcullis' own requests (the `delegated` policy's service connection), so the answers are
    /// read here directly.
    pub async fn reauthenticate_if_due(&mut self) -> Result<bool, UpstreamError> {
        let Some(reauth) = &self.reauth else {
            return Ok(false);
        };
        if Instant::now() < reauth.due {
            return Ok(false);
        }
        let (login, version) = (Arc::clone(&reauth.login), reauth.authenticate_version);
        let address = self.address.clone();
        self.reauth = authenticate(self, &address, &login, version).await?;
        tracing::debug!(%address, "upstream session re-authenticated");
        Ok(true)
    }

    /// Sends one of Portcullis' own requests and waits for its response.
    pub async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, UpstreamError> {
        call(self, api, version, request).await
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
}

impl UpstreamSender {
    /// The address this connection goes to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Queues a frame (a client's request, unchanged); [`UpstreamSender::flush`] sends it, with
    /// every other frame queued, in one vectored write.
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

    /// Whether [`UpstreamSender::reauthenticate_if_due`] has something to do now.
    pub fn reauthentication_due(&self) -> bool {
        self.reauth
            .as_ref()
            .is_some_and(|reauth| Instant::now() >= reauth.due)
    }

    /// Re-authenticates if the upstream session is close to its end. Call before queueing a
    /// client frame: the upstream processes requests in order, so a re-authentication started
    /// here is never interleaved with a client request. Its requests go through `queue`, whose
    /// response side hands their answers back.
    pub async fn reauthenticate_if_due(
        &mut self,
        queue: &ResponseQueue,
    ) -> Result<bool, UpstreamError> {
        let Some(reauth) = &self.reauth else {
            return Ok(false);
        };
        if Instant::now() < reauth.due {
            return Ok(false);
        }
        let (login, version) = (Arc::clone(&reauth.login), reauth.authenticate_version);
        self.flush().await?;
        let address = self.address.clone();
        let mut transport = ThroughQueue {
            sender: self,
            queue,
        };
        let reauth = authenticate(&mut transport, &address, &login, version).await?;
        self.reauth = reauth;
        tracing::debug!(address = %self.address, "upstream session re-authenticated");
        Ok(true)
    }
}
