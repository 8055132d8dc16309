//! The forwarding side of KIP-590: Envelope requests to the writer's inter-node listener, over
//! mutual TLS (this node's `[cluster]` certificate, the writer's checked against `ca_file` and the
//! host of its address).
//!
//! Connections are kept per writer address and reused; each carries one request at a time, and
//! a request that finds none idle opens another, so concurrent mutations do not queue behind
//! each other here (the writer group-commits them).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use portcullis::envelope::{self, EnvelopeResponse};
use portcullis::local::forwarded::RequestId;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::frames::{read_frame, write_frame, FrameError};
use crate::config::{ClusterConfig, UpstreamTlsConfig};
use crate::server::tls::InvalidServerName;

/// One attempt's bound: a writer that does not answer within it (paused, cut off) is given up
/// on, and the request is retried where the log says the writer is. Longer than the election's
/// default session timeout (6 s), so that the retry finds the successor.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(8);
/// Idle connections kept per writer.
const MAX_IDLE: usize = 16;
/// The largest Envelope response accepted (the inner responses are small).
const MAX_RESPONSE: usize = 16 * 1024 * 1024;

type Connection = TlsStream<TcpStream>;

/// Why one attempt to reach the writer got no answer. The writer may or may not have run the
/// request; the caller retries with the same request id, which the writer applies once.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The writer's address has no host a certificate could name.
    #[error(transparent)]
    Address(#[from] InvalidServerName),
    /// No TCP connection.
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    /// The TLS handshake failed (the writer's certificate, or ours, refused).
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    /// The request could not be sent or the answer read.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The writer closed the connection before answering.
    #[error("the connection closed before the answer")]
    Closed,
    /// The answer is not an Envelope response.
    #[error("an Envelope response that does not parse: {0}")]
    Malformed(portcullis::protocol::reader::Malformed),
    /// The answer is another request's.
    #[error("the writer answered correlation id {answered} to {sent}")]
    Correlation {
        /// The id in the answer.
        answered: i32,
        /// The id sent.
        sent: i32,
    },
    /// No answer within the attempt timeout (8 s).
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Connections to the writers.
pub struct Peers {
    connector: TlsConnector,
    client_id: String,
    idle: Mutex<HashMap<String, Vec<Connection>>>,
    correlation: AtomicI32,
}

impl Peers {
    /// The forwarding client of node `node_id`.
    ///
    /// # Errors
    /// The certificate, key or CA of `[cluster]` cannot be read.
    pub fn new(config: &ClusterConfig, node_id: i32) -> anyhow::Result<Self> {
        let tls = crate::server::tls::client_config(&UpstreamTlsConfig {
            ca_file: Some(config.ca_file.clone()),
            cert_file: Some(config.cert_file.clone()),
            key_file: Some(config.key_file.clone()),
            verify_server_name: true,
        })
        .map_err(|e| anyhow::anyhow!("[cluster] TLS: {e}"))?;
        Ok(Self {
            connector: TlsConnector::from(std::sync::Arc::new(tls)),
            client_id: format!("portcullis-node-{node_id}"),
            idle: Mutex::new(HashMap::new()),
            correlation: AtomicI32::new(0),
        })
    }

    /// Sends the client's `frame` to the writer at `address` in an Envelope and returns the
    /// Envelope response.
    ///
    /// # Errors
    /// The writer cannot be reached, or the connection failed or timed out before an answer (the
    /// caller retries; the writer may or may not have run the request).
    pub async fn send(
        &self,
        address: &str,
        frame: &Bytes,
        principal: &[u8],
        client_address: IpAddr,
        request_id: &RequestId,
    ) -> Result<EnvelopeResponse, ForwardError> {
        let correlation = self.correlation.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let request = envelope::encode_request_with_id(
            correlation,
            &self.client_id,
            frame,
            principal,
            client_address,
            Some(request_id),
        );
        let exchange = async {
            let mut connection = match self.take_idle(address) {
                Some(c) => c,
                None => self.connect(address).await?,
            };
            write_frame(&mut connection, &request).await?;
            let response = read_frame(&mut connection, MAX_RESPONSE)
                .await?
                .ok_or(ForwardError::Closed)?;
            let (answered, response) =
                envelope::decode_response(&response).map_err(ForwardError::Malformed)?;
            if answered != correlation {
                return Err(ForwardError::Correlation {
                    answered,
                    sent: correlation,
                });
            }
            self.put_idle(address, connection);
            Ok(response)
        };
        tokio::time::timeout(ATTEMPT_TIMEOUT, exchange)
            .await
            .map_err(|_| ForwardError::Timeout(ATTEMPT_TIMEOUT))?
    }

    async fn connect(&self, address: &str) -> Result<Connection, ForwardError> {
        let name = crate::server::tls::server_name(address)?;
        let tcp = TcpStream::connect(address)
            .await
            .map_err(ForwardError::Connect)?;
        let _ = tcp.set_nodelay(true);
        self.connector
            .connect(name, tcp)
            .await
            .map_err(ForwardError::Tls)
    }

    fn take_idle(&self, address: &str) -> Option<Connection> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(address)
            .and_then(Vec::pop)
    }

    fn put_idle(&self, address: &str, connection: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let list = idle.entry(address.to_owned()).or_default();
        if list.len() < MAX_IDLE {
            list.push(connection);
        }
    }
}
