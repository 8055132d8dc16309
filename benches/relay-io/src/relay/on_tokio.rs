//! The relay on tokio (epoll readiness), on the split halves of the two sockets: either
//! `read_buf` into a `BytesMut` and `write_all` of what was read, as Portcullis does, or
//! `splice(2)` through a pipe ([`super::splice`]). Everything else — the runtime, the connection
//! setup, one task per direction, how a connection ends — is the same for both. `OneTask` is the
//! exception: one task polls both directions (`copy_bidirectional`), so a request and its
//! response never hand over between tasks.

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

/// Relays one client connection: two tasks, one per direction (or one for both). The first to end ends the
/// connection; aborting the other drops its halves, so both sockets close.
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
