//! Listening sockets: the bootstrap listener and one listener per upstream broker
//! (`broker_port_base + node_id`), each accepting clients and handing them to [`client::serve`],
//! through TLS when `[listener.tls]` is set.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::admission::Slot;
use super::brokers::{broker_port, Target};
use super::{client, Shared};

/// How long a client may take to finish the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How long a refused connection's input is read before it is dropped.
const REFUSED_LINGER: Duration = Duration::from_secs(1);

/// The broker listeners opened so far.
#[derive(Debug)]
pub struct BrokerListeners {
    ip: IpAddr,
    port_base: u16,
    /// `None` records a port that could not be bound, so it is reported once, not per response.
    opened: Mutex<HashMap<i32, Option<SocketAddr>>>,
}

impl BrokerListeners {
    /// Broker listeners on `ip`, at `port_base + node_id`.
    pub fn new(ip: IpAddr, port_base: u16) -> Self {
        Self {
            ip,
            port_base,
            opened: Mutex::new(HashMap::new()),
        }
    }
}

impl BrokerListeners {
    /// Makes sure broker `node_id` has a listener; binding happens synchronously, so the port
    /// accepts connections as soon as this returns. A method reached through `Shared`, so that
    /// the connection code (which learns broker ids from responses) needs no import of this
    /// module, which itself starts connections: the two modules do not import each other.
    pub(super) fn ensure(&self, shared: &Arc<Shared>, node_id: i32) {
        ensure_broker_listener(self, shared, node_id);
    }
}

fn ensure_broker_listener(listeners: &BrokerListeners, shared: &Arc<Shared>, node_id: i32) {
    let mut opened = listeners
        .opened
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if opened.contains_key(&node_id) {
        return;
    }
    let port = match broker_port(listeners.port_base, node_id) {
        Ok(port) => port,
        Err(e) => {
            tracing::warn!(error = %e, "cannot serve upstream broker");
            opened.insert(node_id, None);
            return;
        }
    };
    let address = SocketAddr::new(listeners.ip, port);
    match bind_now(address) {
        Ok(listener) => {
            tracing::info!(%address, node_id, "listening on {address} for upstream broker {node_id}");
            opened.insert(node_id, Some(address));
            tokio::spawn(accept_loop(
                shared.clone(),
                listener,
                Target::Broker(node_id),
            ));
        }
        Err(e) => {
            tracing::warn!(%address, node_id, error = %e, "cannot listen for upstream broker");
            opened.insert(node_id, None);
        }
    }
}

fn bind_now(address: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}

/// Accepts clients until the server stops. While `max_connections` are open it does not
/// accept (clients wait in the kernel's backlog); a client whose address is over
/// `max_connections_per_ip` is closed at once.
pub(super) async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, target: Target) {
    let mut shutdown = shared.shutdown.clone();
    if *shutdown.borrow_and_update() {
        return;
    }
    loop {
        let accepted = tokio::select! {
            _ = shutdown.changed() => return,
            accepted = async {
                shared.admission.wait_for_free_slot().await;
                listener.accept().await
            } => accepted,
        };
        match accepted {
            Ok((stream, peer)) => match shared.admission.admit(peer.ip()) {
                Ok(slot) => {
                    tracing::debug!(%peer, ?target, "connection accepted");
                    tokio::spawn(handle(shared.clone(), stream, peer, target, slot));
                }
                Err(refused) => {
                    tracing::debug!(%peer, ?target, reason = %refused, "connection refused");
                    tokio::spawn(close_refused(stream));
                }
            },
            Err(e) => {
                tracing::warn!(?target, error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// Closes a connection that was not admitted: FIN at once, then its input is read to the end
/// (briefly), so the close is not a reset.
async fn close_refused(mut stream: TcpStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let mut scratch = [0u8; 4096];
    let _ = tokio::time::timeout(REFUSED_LINGER, async {
        while matches!(stream.read(&mut scratch).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// The future `make` makes, on the heap. Made inside this plain function: made in the async
/// function that awaits it, even boxed at once, it would still take its full size in that
/// function's own state (the closure holds only the arguments).
fn boxed<F: std::future::Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    Box::pin(make())
}

async fn handle(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    target: Target,
    slot: Slot,
) {
    // Kafka requests are small and latency-bound; Nagle would delay pipelined responses.
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
    }
    // The listener's configuration now: a reload after this point does not change this
    // connection's certificate or limits.
    let live = shared.live.load_full();
    // The connection's future is boxed (see `boxed`), and so is the TLS path: the
    // handshake's result holds the whole TLS stream, which a plaintext connection's task would
    // otherwise be sized for too. Inline, an idle plaintext connection's task was 11 KiB.
    match live.tls.clone() {
        None => boxed(|| client::serve(shared, stream, peer, target, None, slot, live)).await,
        Some(acceptor) => {
            let tls = Box::pin(async move {
                let handshake = boxed(|| acceptor.accept(stream));
                match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, handshake).await {
                    Ok(Ok(tls)) => {
                        // The client's certificate chain, for the principal builder.
                        let tls_peer =
                            crate::tls_peer::peer_of(tls.get_ref().1.peer_certificates());
                        let tls_peer = Some(tls_peer);
                        boxed(|| client::serve(shared, tls, peer, target, tls_peer, slot, live))
                            .await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
            });
            tls.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn future_size<F, Fut>(_: &F) -> usize
    where
        F: Fn(Arc<Shared>, TcpStream, SocketAddr, Target, Slot) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// A connection's task keeps the size of its future for its whole life: it must hold the
    /// boxed serving future, not the serving future (nor a TLS stream) itself. 216 bytes in a
    /// release build when written; inline, 11 KiB.
    #[test]
    fn a_connections_task_holds_its_serving_future_boxed() {
        let size = future_size(&handle);
        assert!(size <= 1024, "the connection task's future is {size} bytes");
    }
}
