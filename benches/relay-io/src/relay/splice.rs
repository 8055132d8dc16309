//! The zero-copy direction of the tokio relay: Linux `splice(2)` moves the bytes from the source
//! socket into a pipe and from the pipe into the destination socket, so they never pass through
//! user space. The relay hands the kernel page references (socket buffer → pipe → socket buffer)
//! where `read` and `write` copy every byte twice (socket buffer → user buffer → socket buffer).
//!
//! Each direction owns a pipe, nonblocking like the sockets. Readiness comes from tokio: a splice
//! runs inside `TcpStream::try_io`, so that `EAGAIN` from the socket clears tokio's readiness
//! flag and the task then sleeps until epoll reports the socket again (without that, a task
//! would spin on a socket it believes ready, or sleep forever on an edge that already passed).
//!
//! The loop keeps the shape of the buffered direction: splice up to [`READ_BYTES`] from the
//! socket into the empty pipe, then splice all of it on before splicing from the socket again.
//! Because the pipe is empty whenever it is filled and holds data whenever it is drained, an
//! `EAGAIN` always comes from the socket (nothing to receive, or no room to send), never from
//! the pipe.

use std::io;
use std::os::fd::OwnedFd;

use anyhow::{Context, Result};
use rustix::pipe::{
    fcntl_getpipe_size, fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags,
};
use tokio::io::Interest;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::READ_BYTES;

/// The pipe size asked for: room for a whole [`READ_BYTES`] splice even when the socket's
/// buffers hold less than a page each (a pipe holds size / 4 KiB buffers, whatever they hold).
/// Unprivileged, the kernel allows up to `/proc/sys/fs/pipe-max-size` (1 MiB by default) while
/// the user's pipes stay under `/proc/sys/fs/pipe-user-pages-soft`; otherwise the pipe keeps the
/// default size (64 KiB), which only makes each splice move less.
const PIPE_BYTES: usize = 1 << 20;

/// `SPLICE_F_NONBLOCK`: never wait on the pipe (the sockets are nonblocking already).
/// `SPLICE_F_MOVE`: move pages rather than copy them where the kernel can (a hint).
const FLAGS: SpliceFlags = SpliceFlags::NONBLOCK.union(SpliceFlags::MOVE);

/// A pipe that the bytes of one direction pass through.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Its capacity in bytes.
    capacity: usize,
}

impl Pipe {
    fn new() -> io::Result<Self> {
        let (read, write) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
        // Not allowed (EPERM over the limits above): the default size, quietly.
        let capacity = match fcntl_setpipe_size(&write, PIPE_BYTES) {
            Ok(capacity) => capacity,
            Err(_) => fcntl_getpipe_size(&write)?,
        };
        Ok(Self {
            read,
            write,
            capacity,
        })
    }
}

/// Relays one direction until end of stream: each splice into the pipe takes what the socket
/// holds, up to [`READ_BYTES`], and all of it is spliced on before the next. Returning drops
/// `to`, which shuts its socket down for writing, as the buffered direction does.
pub async fn copy(from: OwnedReadHalf, to: OwnedWriteHalf, direction: &'static str) -> Result<()> {
    let pipe = Pipe::new().with_context(|| format!("{direction}: creating the pipe"))?;
    let offer = READ_BYTES.min(pipe.capacity);
    loop {
        let moved = fill(&from, &pipe, offer)
            .await
            .with_context(|| format!("{direction}: splicing from the socket"))?;
        if moved == 0 {
            return Ok(());
        }
        drain(&to, &pipe, moved)
            .await
            .with_context(|| format!("{direction}: splicing {moved} bytes to the socket"))?;
    }
}

/// Splices up to `offer` bytes from the socket into the (empty) pipe once the socket is
/// readable. 0: end of stream.
async fn fill(from: &OwnedReadHalf, pipe: &Pipe, offer: usize) -> io::Result<usize> {
    let socket = from.as_ref();
    loop {
        from.readable().await?;
        let spliced = socket.try_io(Interest::READABLE, || {
            Ok(splice(socket, None, &pipe.write, None, offer, FLAGS)?)
        });
        match spliced {
            Err(e) if retry(&e) => continue,
            done => return done,
        }
    }
}

/// Splices the `in_pipe` bytes the pipe holds into the socket, waiting for room as needed.
async fn drain(to: &OwnedWriteHalf, pipe: &Pipe, mut in_pipe: usize) -> io::Result<()> {
    let socket = to.as_ref();
    while in_pipe > 0 {
        to.writable().await?;
        let spliced = socket.try_io(Interest::WRITABLE, || {
            Ok(splice(&pipe.read, None, socket, None, in_pipe, FLAGS)?)
        });
        match spliced {
            // The pipe is not empty, so 0 would be a kernel surprise: fail rather than spin.
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "splice moved nothing from a non-empty pipe",
                ))
            }
            Ok(sent) => in_pipe = in_pipe.saturating_sub(sent),
            Err(e) if retry(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `EAGAIN` (tokio has cleared the readiness; wait for the next) or `EINTR`.
fn retry(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A connected pair of loopback sockets.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (connected, accepted) = tokio::join!(TcpStream::connect(address), listener.accept());
        (connected.unwrap(), accepted.unwrap().0)
    }

    #[test]
    fn a_pipe_is_made() {
        let pipe = Pipe::new().unwrap();
        assert!(pipe.capacity >= 4096, "{}", pipe.capacity);
    }

    /// Sender → (a, b) → splice → (c, d) → receiver: every byte arrives in order, and the end
    /// of the sender's stream ends the copy and reaches the receiver.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bytes_and_the_end_of_stream_go_through() {
        let (mut sender, b) = pair().await;
        let (c, mut receiver) = pair().await;
        let (from, _) = b.into_split();
        let (_, to) = c.into_split();
        let relay = tokio::spawn(copy(from, to, "test"));
        let sent: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
        let expected = sent.clone();
        let writer = tokio::spawn(async move {
            sender.write_all(&sent).await.unwrap();
            sender.shutdown().await.unwrap();
        });
        let mut received = Vec::new();
        receiver.read_to_end(&mut received).await.unwrap();
        writer.await.unwrap();
        relay.await.unwrap().unwrap();
        assert!(received == expected, "{} bytes received", received.len());
    }
}
