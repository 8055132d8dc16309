//! The inter-node listener (`[cluster] listener`): where the writer receives the mutations the
//! other nodes forward (KIP-590 Envelopes), over mutual TLS only.
//!
//! - A peer must present a certificate chaining to `[cluster] ca_file`; without one the TLS
//!   handshake fails and nothing is read. Its principal is what the node's `PrincipalBuilder`
//!   makes of the certificate (`crate::tls_peer`; the default builder: `User:` + the subject, as
//!   Kafka's default SSL principal).
//! - The listener serves ApiVersions and Envelope only; any other request closes the connection
//!   (as a Kafka controller listener does). Client listeners never serve Envelope.
//! - An Envelope is checked as a KRaft controller checks it (kafka-security-semantics §7.3):
//!   ClusterAction on Cluster for the peer (CLUSTER_AUTHORIZATION_FAILED), the forwarded
//!   principal (PRINCIPAL_DESERIALIZATION_FAILURE), the client's IP (INVALID_REQUEST), the inner
//!   request (UNSUPPORTED_VERSION when it cannot be parsed, INVALID_REQUEST when it is not a
//!   forwardable API), this node being the writer (NOT_CONTROLLER); then the inner request runs
//!   as the forwarded principal and IP, and its response goes back in the Envelope response.
//! - The Envelope's request id (a tagged field; see `super::idempotence`) makes a retried request
//!   get its first answer instead of running again; an id already applied for another principal
//!   or request is refused with INVALID_REQUEST.
//!
//! Every byte read here comes from the network: the frame size is bounded before anything is
//! allocated, and the Envelope and principal are decoded with the bounds-checked reader.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use portcullis::envelope::{self, EnvelopeResponse};
use portcullis::errors::ErrorCode;
use portcullis::principal::{Principal, TlsPeer};
use portcullis::protocol::api::{API_VERSIONS, ENVELOPE};
use portcullis::protocol::codec::CodecError;
use portcullis::protocol::header;
use portcullis::protocol::header::HeaderError;
use portcullis::protocol::reader::Malformed;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::frames::{read_frame, write_frame, FrameError};
use super::{Cluster, Deciders, Failure};
use crate::config::{ClientAuth, ClusterConfig, TlsConfig};

/// The largest request accepted from a peer: an Envelope around one client mutation.
const MAX_REQUEST: usize = 16 * 1024 * 1024;

/// Why an inter-node connection was closed (logged at debug: the peer sees the close).
#[derive(Debug, thiserror::Error)]
enum PeerError {
    /// The TLS handshake failed: no certificate from the cluster's CA, or a bad one.
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    /// The principal builder made no principal of the peer's certificate.
    #[error("no principal: {0}")]
    NoPrincipal(portcullis::principal::PrincipalError),
    /// A frame could not be read or written.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The request header does not parse.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// An API other than ApiVersions and Envelope.
    #[error("{principal} sent API {api_key} to the inter-node listener")]
    NotServed {
        /// The peer.
        principal: Principal,
        /// The API key it sent.
        api_key: i16,
    },
    /// An Envelope of a version this listener does not serve.
    #[error("Envelope v{0}")]
    EnvelopeVersion(i16),
    /// The Envelope's body does not parse.
    #[error(transparent)]
    Envelope(#[from] Malformed),
    /// The ApiVersions answer could not be encoded.
    #[error(transparent)]
    Encode(#[from] CodecError),
}

/// Binds the inter-node listener and serves it on the current runtime.
///
/// # Errors
/// The TLS material cannot be read or the address cannot be bound.
pub async fn spawn(
    cluster: Arc<Cluster>,
    config: &ClusterConfig,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let tls = crate::server::tls::server_config(&TlsConfig {
        cert_file: config.cert_file.clone(),
        key_file: config.key_file.clone(),
        client_auth: ClientAuth::Required,
        ca_file: Some(config.ca_file.clone()),
    })
    .map_err(|e| anyhow::anyhow!("[cluster] TLS: {e}"))?;
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let address = config.socket_address()?;
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on [cluster] listener {address}: {e}"))?;
    tracing::info!(%address, "inter-node listener (mutual TLS) ready");
    Ok(tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((socket, peer)) => {
                    let (cluster, acceptor) = (Arc::clone(&cluster), acceptor.clone());
                    tokio::spawn(async move {
                        if let Err(reason) = serve(cluster, acceptor, socket, peer).await {
                            tracing::debug!(%peer, %reason, "inter-node connection closed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "inter-node listener: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }))
}

async fn serve(
    cluster: Arc<Cluster>,
    acceptor: TlsAcceptor,
    socket: tokio::net::TcpStream,
    peer: SocketAddr,
) -> Result<(), PeerError> {
    let _ = socket.set_nodelay(true);
    let mut stream = acceptor.accept(socket).await.map_err(|e| {
        // A peer without a certificate from the cluster's CA ends here.
        tracing::info!(%peer, error = %e, "inter-node TLS handshake refused");
        PeerError::Tls(e)
    })?;
    // The peer's principal comes from its certificate through the node's principal builder,
    // the same path a client certificate takes on a TLS client listener: checked now, so that a
    // peer without one is refused at once, and again for each Envelope with the deciders that
    // admit and run it (a reload may have chosen another builder since; connections are pooled).
    let tls_peer = crate::tls_peer::peer_of(stream.get_ref().1.peer_certificates());
    let mut principal = named(&cluster.deciders(), &tls_peer, peer)?;
    loop {
        let Some(frame) = read_frame(&mut stream, MAX_REQUEST).await? else {
            return Ok(());
        };
        let response = match header::peek_ids(&frame) {
            Ok((API_VERSIONS, version, correlation_id)) => api_versions(version, correlation_id)?,
            Ok((ENVELOPE, _, correlation_id)) => {
                let deciders = cluster.deciders();
                principal = named(&deciders, &tls_peer, peer)?;
                let answer =
                    envelope_answer(&cluster, &deciders, &principal, peer.ip(), &frame).await?;
                envelope::encode_response(correlation_id, &answer)
            }
            Ok((api_key, ..)) => return Err(PeerError::NotServed { principal, api_key }),
            Err(e) => return Err(e.into()),
        };
        write_frame(&mut stream, &response).await?;
    }
}

/// The peer's principal by `deciders`' builder; `Err` closes the connection.
fn named(deciders: &Deciders, tls: &TlsPeer, peer: SocketAddr) -> Result<Principal, PeerError> {
    deciders.peer_principal(tls, peer.ip()).map_err(|e| {
        tracing::warn!(%peer, error = %e, "inter-node peer refused: no principal");
        PeerError::NoPrincipal(e)
    })
}

/// Checks and runs one Envelope with one snapshot of the deciders; `Err` closes the connection
/// (an envelope that does not parse).
async fn envelope_answer(
    cluster: &Cluster,
    deciders: &Deciders,
    peer: &Principal,
    peer_address: IpAddr,
    frame: &Bytes,
) -> Result<EnvelopeResponse, PeerError> {
    let refused = |error: ErrorCode| EnvelopeResponse {
        error,
        response_data: None,
    };
    let header = header::parse(frame)?;
    if header.api_version != envelope::ENVELOPE_VERSION {
        return Err(PeerError::EnvelopeVersion(header.api_version));
    }
    let body = frame.get(header.header_len..).unwrap_or_default();
    let request = envelope::decode_request(body)?;
    if !deciders.peer_may_forward(peer, peer_address) {
        tracing::warn!(%peer, "an Envelope from a peer without ClusterAction on the cluster");
        return Ok(refused(ErrorCode::CLUSTER_AUTHORIZATION_FAILED));
    }
    let Some(principal) = request
        .principal
        .and_then(|bytes| envelope::deserialize_principal(bytes).ok())
    else {
        return Ok(refused(ErrorCode::PRINCIPAL_DESERIALIZATION_FAILURE));
    };
    let Some(client_address) = envelope::parse_ip(request.client_host) else {
        return Ok(refused(ErrorCode::INVALID_REQUEST));
    };
    let inner = Bytes::copy_from_slice(request.request_data);
    Ok(
        match cluster
            .run_here(
                deciders,
                &inner,
                &principal,
                client_address,
                request.request_id.as_ref(),
            )
            .await
        {
            Ok(data) => EnvelopeResponse {
                error: ErrorCode::NONE,
                response_data: Some(data),
            },
            Err(Failure::Retry(_)) => refused(ErrorCode::NOT_CONTROLLER),
            Err(Failure::Envelope(code)) => refused(code),
        },
    )
}

/// ApiVersions: this listener serves ApiVersions (0–3) and Envelope (0).
fn api_versions(version: i16, correlation_id: i32) -> Result<Bytes, CodecError> {
    let keys = vec![
        ApiVersion::default()
            .with_api_key(API_VERSIONS)
            .with_min_version(0)
            .with_max_version(3),
        ApiVersion::default()
            .with_api_key(ENVELOPE)
            .with_min_version(0)
            .with_max_version(0),
    ];
    let (error, version) = if (0..=3).contains(&version) {
        (ErrorCode::NONE, version)
    } else {
        // KIP-511: an unknown version gets a v0 answer the client can read.
        (ErrorCode::UNSUPPORTED_VERSION, 0)
    };
    let body = ApiVersionsResponse::default()
        .with_error_code(error.0)
        .with_api_keys(keys);
    portcullis::protocol::codec::encode_response(
        ApiKey::ApiVersions,
        version,
        correlation_id,
        &body,
    )
}
