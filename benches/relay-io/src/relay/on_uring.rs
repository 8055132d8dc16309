//! The relay on tokio-uring (io_uring completions): each direction owns a buffer that it hands
//! to the kernel for a `read`, gets back filled, and hands over again for `write_all`.
//!
//! tokio-uring's sockets are not split: both direction tasks share the two sockets through an
//! `Rc` (the runtime is single-threaded). Dropping a task with an operation in flight does not
//! cancel the operation in tokio-uring 0.5 (the operation keeps the socket open until it
//! completes), so the connection is not ended by aborting the other task: the direction that ends
//! shuts both sockets down, which completes the other direction's pending read with end of
//! stream, and the sockets close when both tasks have let go of them.

use std::net::{Shutdown, SocketAddr};
use std::rc::Rc;

use anyhow::{Context, Result};
use tokio_uring::net::{TcpListener, TcpStream};

use super::{announce, report_connection_error, READ_BYTES};

/// Starts the io_uring runtime on this thread and relays until the process is killed.
pub fn run(listen: SocketAddr, upstream: SocketAddr) -> Result<()> {
    // `Runtime::new` rather than `tokio_uring::start`, which panics when io_uring is unavailable
    // (e.g. kernel.io_uring_disabled = 2 or a seccomp filter): this way it is an error message.
    let runtime = tokio_uring::Runtime::new(&tokio_uring::builder())
        .context("creating the io_uring runtime (is io_uring enabled on this kernel?)")?;
    runtime.block_on(accept_loop(listen, upstream))
}

async fn accept_loop(listen: SocketAddr, upstream: SocketAddr) -> Result<()> {
    let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    announce(listener.local_addr().context("reading the bound address")?)?;
    loop {
        let (client, _) = listener.accept().await.context("accepting a connection")?;
        tokio_uring::spawn(async move {
            if let Err(e) = connection(client, upstream).await {
                report_connection_error(&e);
            }
        });
    }
}

/// Relays one client connection: two tasks, one per direction, each ending the connection when
/// it ends (see the module comment).
async fn connection(client: TcpStream, upstream: SocketAddr) -> Result<()> {
    let server = TcpStream::connect(upstream)
        .await
        .with_context(|| format!("connecting to the upstream {upstream}"))?;
    client
        .set_nodelay(true)
        .context("TCP_NODELAY on the client socket")?;
    server
        .set_nodelay(true)
        .context("TCP_NODELAY on the upstream socket")?;
    let client = Rc::new(client);
    let server = Rc::new(server);
    let requests = tokio_uring::spawn(copy(
        Rc::clone(&client),
        Rc::clone(&server),
        "client → upstream",
    ));
    let responses = tokio_uring::spawn(copy(server, client, "upstream → client"));
    let requests = requests.await.context("the request task failed")?;
    let responses = responses.await.context("the response task failed")?;
    requests.and(responses)
}

/// Copies one direction until end of stream or an error, then ends the connection.
async fn copy(from: Rc<TcpStream>, to: Rc<TcpStream>, direction: &'static str) -> Result<()> {
    let copied = pump(&from, &to, direction).await;
    // The other direction may already have shut the sockets down (ENOTCONN): nothing to report.
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
    copied
}

/// The copy loop: one owned buffer of READ_BYTES, read into from its start (it is cleared
/// first), then written whole.
async fn pump(from: &TcpStream, to: &TcpStream, direction: &'static str) -> Result<()> {
    let mut buffer = Vec::with_capacity(READ_BYTES);
    loop {
        buffer.clear();
        // tokio-uring reads into the capacity and sets the length to what was read.
        let (read, returned) = from.read(buffer).await;
        buffer = returned;
        let read = read.with_context(|| format!("{direction}: reading"))?;
        if read == 0 {
            return Ok(());
        }
        let (written, returned) = to.write_all(buffer).await;
        buffer = returned;
        written.with_context(|| format!("{direction}: writing {read} bytes"))?;
    }
}
