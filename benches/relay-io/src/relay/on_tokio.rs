//! The relay on tokio (epoll readiness), on the split halves of the two sockets: either
//! `read_buf` into a `BytesMut` and `write_all` of what was read, as Portcullis does, or
//! `splice(2)` through a pipe ([`super::splice`]). Everything else — the runtime, the connection
//! setup, one task per direction, how a connection ends — is the same for both.
//! [`Tasks::OneForBoth`] is the exception: one task polls both directions (`copy_bidirectional`),
//! so a request and its response never hand over between tasks.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use super::{announce, report_connection_error, splice, READ_BYTES};

/// How a direction moves its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// Through a user-space buffer: `read_buf`, then `write_all`.
    Buffered,
    /// Socket → pipe → socket with `splice(2)`, never through user space.
    Splice,
}

/// Which tasks move a connection's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tasks {
    /// One task per direction, each moving its bytes the way the [`Transfer`] says.
    PerDirection(Transfer),
    /// One task polls both directions, each through a user-space buffer.
    OneForBoth,
}

/// Builds the runtime (multi-thread or current-thread) and relays until the process is killed.
pub fn run(
    mut builder: tokio::runtime::Builder,
    tasks: Tasks,
    listen: SocketAddr,
    upstream: SocketAddr,
) -> Result<()> {
    let runtime = builder
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(accept_loop(tasks, listen, upstream))
}

async fn accept_loop(tasks: Tasks, listen: SocketAddr, upstream: SocketAddr) -> Result<()> {
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    announce(listener.local_addr().context("reading the bound address")?)?;
    loop {
        let (client, _) = listener.accept().await.context("accepting a connection")?;
        tokio::spawn(async move {
            if let Err(e) = connection(tasks, client, upstream).await {
                report_connection_error(&e);
            }
        });
    }
}

/// Relays one client connection. Per direction: two tasks, and the first to end ends the
/// connection (aborting the other drops its halves, so both sockets close). One for both:
/// [`one_task`].
async fn connection(tasks: Tasks, client: TcpStream, upstream: SocketAddr) -> Result<()> {
    let server = TcpStream::connect(upstream)
        .await
        .with_context(|| format!("connecting to the upstream {upstream}"))?;
    client
        .set_nodelay(true)
        .context("TCP_NODELAY on the client socket")?;
    server
        .set_nodelay(true)
        .context("TCP_NODELAY on the upstream socket")?;
    let transfer = match tasks {
        Tasks::OneForBoth => return one_task(client, server).await,
        Tasks::PerDirection(transfer) => transfer,
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let mut requests = tokio::spawn(one_way(
        transfer,
        client_read,
        server_write,
        "client → upstream",
    ));
    let mut responses = tokio::spawn(one_way(
        transfer,
        server_read,
        client_write,
        "upstream → client",
    ));
    let (first, other) = tokio::select! {
        ended = &mut requests => (ended, responses),
        ended = &mut responses => (ended, requests),
    };
    other.abort();
    first.context("a relay task failed")?
}

/// Relays one direction until end of stream, the way `transfer` says.
async fn one_way(
    transfer: Transfer,
    from: OwnedReadHalf,
    to: OwnedWriteHalf,
    direction: &'static str,
) -> Result<()> {
    match transfer {
        Transfer::Buffered => copy(from, to, direction).await,
        Transfer::Splice => splice::copy(from, to, direction).await,
    }
}

/// Relays both directions from this one task until either side ends. tokio's
/// `copy_bidirectional` shuts the other side's write half down at one side's end of stream and
/// goes on until both ends; a Kafka connection ends both ways at once, so that is the same end.
async fn one_task(mut client: TcpStream, mut server: TcpStream) -> Result<()> {
    tokio::io::copy_bidirectional_with_sizes(&mut client, &mut server, READ_BYTES, READ_BYTES)
        .await
        .context("relaying both directions in one task")?;
    Ok(())
}

/// Copies one direction until end of stream: each read takes what the socket holds, up to
/// [`READ_BYTES`], and all of it is written before the next read.
async fn copy(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    direction: &'static str,
) -> Result<()> {
    // Allocated once; `clear` keeps the capacity, so every read is offered READ_BYTES.
    let mut buffer = BytesMut::with_capacity(READ_BYTES);
    loop {
        buffer.clear();
        let read = from
            .read_buf(&mut buffer)
            .await
            .with_context(|| format!("{direction}: reading"))?;
        if read == 0 {
            return Ok(());
        }
        to.write_all(&buffer)
            .await
            .with_context(|| format!("{direction}: writing {read} bytes"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that answers every byte it receives with that byte plus one, until the end of
    /// its stream; so a relay that swapped, lost or echoed bytes is caught.
    async fn upstream() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                // The relay's close may come as a reset: that ends the upstream too.
                let read = socket.read(&mut buffer).await.unwrap_or(0);
                if read == 0 {
                    return;
                }
                for byte in &mut buffer[..read] {
                    *byte = byte.wrapping_add(1);
                }
                if socket.write_all(&buffer[..read]).await.is_err() {
                    return;
                }
            }
        });
        address
    }

    /// Sends 1 MiB through a relay of the given tasks while reading the answer (the upstream
    /// answers each byte as it comes) and checks every byte of it. Then the client closes, as a
    /// Kafka client does (never half-closing), and the relay must end.
    async fn relays_both_ways(tasks: Tasks) {
        let upstream = upstream().await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay_address = listener.local_addr().unwrap();
        let relay = tokio::spawn(async move {
            let (client, _) = listener.accept().await.unwrap();
            connection(tasks, client, upstream).await
        });
        let client = TcpStream::connect(relay_address).await.unwrap();
        let (mut reader, mut writer) = client.into_split();
        let sent: Vec<u8> = (0..1024 * 1024).map(|i: u32| (i % 251) as u8).collect();
        let expected: Vec<u8> = sent.iter().map(|b| b.wrapping_add(1)).collect();
        let writing = tokio::spawn(async move {
            writer.write_all(&sent).await.unwrap();
            writer
        });
        let mut received = vec![0u8; expected.len()];
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            reader.read_exact(&mut received),
        )
        .await
        .unwrap_or_else(|_| panic!("{tasks:?}: the answer did not come back"))
        .unwrap();
        assert!(received == expected, "{tasks:?}: bytes changed");
        drop((reader, writing.await.unwrap()));
        // The connection's end may reach the relay as an end of stream or as a reset; either way
        // it must stop relaying.
        tokio::time::timeout(std::time::Duration::from_secs(10), relay)
            .await
            .expect("the relay did not end after the client closed")
            .unwrap()
            .ok();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_buffered_relay_moves_every_byte_both_ways() {
        relays_both_ways(Tasks::PerDirection(Transfer::Buffered)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_splice_relay_moves_every_byte_both_ways() {
        relays_both_ways(Tasks::PerDirection(Transfer::Splice)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_one_task_relay_moves_every_byte_both_ways() {
        relays_both_ways(Tasks::OneForBoth).await;
    }
}
