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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::config::{ClusterConfig, UpstreamTlsConfig};

/// One attempt's bound: a writer that does not answer within it (paused, cut off) is given up
/// on, and the request is retried where the log says the writer is. Longer than the election's
/// default session timeout (6 s), so that the retry finds the successor.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(8);
/// Idle connections kept per writer.
const MAX_IDLE: usize = 16;
/// The largest Envelope response accepted (the inner responses are small).
const MAX_RESPONSE: usize = 16 * 1024 * 1024;

type Connection = TlsStream<TcpStream>;

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
    ) -> Result<EnvelopeResponse, String> {
        let correlation = self.correlation.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let request = envelope::encode_request(
            correlation,
            &self.client_id,
            frame,
            principal,
            client_address,
        );
        let exchange = async {
            let mut connection = match self.take_idle(address) {
                Some(c) => c,
                None => self.connect(address).await?,
            };
            write_frame(&mut connection, &request).await?;
            let response = read_frame(&mut connection).await?;
            let (answered, response) = envelope::decode_response(&response)
                .map_err(|e| format!("an Envelope response that does not parse: {e}"))?;
            if answered != correlation {
                return Err(format!(
                    "the writer answered correlation id {answered} to {correlation}"
                ));
            }
            self.put_idle(address, connection);
            Ok(response)
        };
        tokio::time::timeout(ATTEMPT_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("no answer within {ATTEMPT_TIMEOUT:?}"))?
    }

    async fn connect(&self, address: &str) -> Result<Connection, String> {
        let name = crate::server::tls::server_name(address)?;
        let tcp = TcpStream::connect(address)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        self.connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))
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

async fn write_frame(connection: &mut Connection, frame: &[u8]) -> Result<(), String> {
    let size = u32::try_from(frame.len()).map_err(|_| "a frame over 4 GiB".to_owned())?;
    let mut out = Vec::with_capacity(4 + frame.len());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(frame);
    connection
        .write_all(&out)
        .await
        .map_err(|e| format!("cannot send: {e}"))?;
    connection
        .flush()
        .await
        .map_err(|e| format!("cannot send: {e}"))
}

async fn read_frame(connection: &mut Connection) -> Result<Vec<u8>, String> {
    let mut size = [0u8; 4];
    connection
        .read_exact(&mut size)
        .await
        .map_err(|e| format!("connection lost before the answer: {e}"))?;
    let size = u32::from_be_bytes(size) as usize;
    if size > MAX_RESPONSE {
        return Err(format!("an answer of {size} bytes"));
    }
    let mut frame = vec![0u8; size];
    connection
        .read_exact(&mut frame)
        .await
        .map_err(|e| format!("connection lost during the answer: {e}"))?;
    Ok(frame)
}
