//! The relay on tokio (epoll readiness), on the split halves of the two sockets: either
//! `read_buf` into a `BytesMut` and `write_all` of what was read, as Portcullis does, or
//! `splice(2)` through a pipe ([`super::splice`]). Everything else — the runtime, the connection
//! setup, one task per direction, how a connection ends — is the same for both.

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

/// Builds the runtime (multi-thread or current-thread) and relays until the process is killed.
pub fn run(
    mut builder: tokio::runtime::Builder,
    transfer: Transfer,
    listen: SocketAddr,
    upstream: SocketAddr,
) -> Result<()> {
    let runtime = builder
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(accept_loop(transfer, listen, upstream))
}

async fn accept_loop(transfer: Transfer, listen: SocketAddr, upstream: SocketAddr) -> Result<()> {
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    announce(listener.local_addr().context("reading the bound address")?)?;
    loop {
        let (client, _) = listener.accept().await.context("accepting a connection")?;
        tokio::spawn(async move {
            if let Err(e) = connection(transfer, client, upstream).await {
                report_connection_error(&e);
            }
        });
    }
}

/// Relays one client connection: two tasks, one per direction. The first to end ends the
/// connection; aborting the other drops its halves, so both sockets close.
async fn connection(transfer: Transfer, client: TcpStream, upstream: SocketAddr) -> Result<()> {
    let server = TcpStream::connect(upstream)
        .await
        .with_context(|| format!("connecting to the upstream {upstream}"))?;
    client
        .set_nodelay(true)
        .context("TCP_NODELAY on the client socket")?;
    server
        .set_nodelay(true)
        .context("TCP_NODELAY on the upstream socket")?;
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
