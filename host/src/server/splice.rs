//! The rest of a large relayed response moved from the upstream socket to the client socket with
//! `splice(2)` through a pipe: its bytes never enter Portcullis' memory.
//!
//! Why: on the project's machine (Intel host, 2026-12-06) the two copies of a consumed byte, into
//! the read buffer and out of it again, were 54 % of Portcullis' CPU while consuming
//! (`_copy_to_iter` 43 %, `_copy_from_iter` 11 %; docs/benchmarks-history.md, issue 24). A
//! splice moves page references from the upstream socket into the pipe and from the pipe into the
//! client socket.
//!
//! Only bytes that pass through unchanged can go this way: the part of a streamed response
//! ([`super::relay::Mode::Stream`]) after its size and correlation id were checked, and only
//! between two plain TCP sockets (TLS decrypts and encrypts in user space). The response side
//! asks for at most the response's rest, so a splice never takes a byte of the next response.
//!
//! A pipe is made for one response and closed when it ends: an idle connection holds no pipe.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(target_os = "linux")]
use rustix::pipe::{
    fcntl_getpipe_size, fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags,
};
#[cfg(target_os = "linux")]
use tokio::io::Interest;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// The room asked for a pipe (a splice of up to 1 MiB costs no memory of ours; the size measured
/// in docs/benchmarks-history.md). Linux counts each user's pipe pages (`pipe-user-pages-soft`,
/// 64 MiB per UID by default, not for root): past it, 64 connections splicing at once, it refuses
/// the size and later pipes get 8 KiB, which [`MIN_PIPE`] turns down.
#[cfg(target_os = "linux")]
const PIPE_SIZE: usize = 1024 * 1024;

/// A pipe smaller than this would move a large response in too many small steps: the response
/// is copied instead.
#[cfg(target_os = "linux")]
const MIN_PIPE: usize = 64 * 1024;

/// Both ends are non-blocking: readiness is the sockets', and the pipe is always drained before
/// it is filled again, so a splice into the pipe never waits for it and one out of it never finds
/// it empty.
#[cfg(target_os = "linux")]
const FLAGS: SpliceFlags = SpliceFlags::NONBLOCK.union(SpliceFlags::MOVE);

/// Bytes of relayed responses that went to clients by splice, and through the buffer: an
/// operator sees which path the data takes (`portcullis.relayed`, docs/observability.md).
/// One relaxed add per splice or write, a few thousand per GiB.
static SPLICED: AtomicU64 = AtomicU64::new(0);
static BUFFERED: AtomicU64 = AtomicU64::new(0);

/// Counts relayed bytes written from the buffer (unchanged responses read and written), when
/// they are handed to the write (spliced bytes are counted once the client socket took them).
pub(super) fn count_buffered(bytes: usize) {
    BUFFERED.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Relayed bytes so far: (spliced, through the buffer).
pub fn relayed_bytes() -> (u64, u64) {
    (
        SPLICED.load(Ordering::Relaxed),
        BUFFERED.load(Ordering::Relaxed),
    )
}

/// A pipe between an upstream socket and a client socket.
#[derive(Debug)]
pub(super) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// What the pipe holds at most.
    capacity: usize,
    /// Bytes in the pipe, not yet in the client socket.
    held: usize,
}

impl Pipe {
    /// A new, empty pipe (two file descriptors), or an error when none of a useful size can be had
    /// (out of descriptors, past the user's pipe page limit): the caller copies.
    #[cfg(target_os = "linux")]
    pub(super) fn new() -> io::Result<Self> {
        let (read, write) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
        // Refused past the user's pipe page limit: the size it has is checked next.
        let _ = fcntl_setpipe_size(&write, PIPE_SIZE);
        let capacity = fcntl_getpipe_size(&write)?;
        if capacity < MIN_PIPE {
            return Err(io::Error::other(format!(
                "a pipe of {capacity} bytes (the user's pipe page limit is reached)"
            )));
        }
        Ok(Self {
            read,
            write,
            capacity,
            held: 0,
        })
    }

    /// Waits until `from` has bytes, then moves up to `max` of them (and at most what the pipe
    /// holds) into the pipe. Returns how many; 0 means the upstream closed. Cancel-safe: nothing
    /// moves before the last await.
    #[cfg(target_os = "linux")]
    pub(super) async fn fill(&mut self, from: &OwnedReadHalf, max: usize) -> io::Result<usize> {
        // An empty pipe: an EAGAIN can then only be the socket's, whose readiness `try_io`
        // clears.
        debug_assert_eq!(self.held, 0);
        let want = max.min(self.capacity - self.held);
        loop {
            from.readable().await?;
            // `try_io` clears tokio's readiness when the splice finds nothing (EAGAIN), so the
            // next `readable` waits for the kernel again instead of spinning.
            match from.as_ref().try_io(Interest::READABLE, || {
                splice(from.as_ref(), None, &self.write, None, want, FLAGS).map_err(io::Error::from)
            }) {
                Ok(moved) => {
                    self.held += moved;
                    return Ok(moved);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves everything the pipe holds into `to`, waiting for the client to take it. Not
    /// cancel-safe in the sense that bytes may remain held; the caller drops the connection then.
    #[cfg(target_os = "linux")]
    pub(super) async fn drain(&mut self, to: &OwnedWriteHalf) -> io::Result<()> {
        while self.held > 0 {
            to.writable().await?;
            match to.as_ref().try_io(Interest::WRITABLE, || {
                splice(&self.read, None, to.as_ref(), None, self.held, FLAGS)
                    .map_err(io::Error::from)
            }) {
                // The pipe is not empty, so 0 would mean the socket takes nothing: never loop on it.
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(moved) => {
                    self.held -= moved.min(self.held);
                    SPLICED.fetch_add(moved as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `splice(2)` is Linux's: elsewhere every relayed byte is copied.
    #[cfg(not(target_os = "linux"))]
    pub(super) fn new() -> io::Result<Self> {
        Err(io::ErrorKind::Unsupported.into())
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) async fn fill(&mut self, _: &OwnedReadHalf, _: usize) -> io::Result<usize> {
        Err(io::ErrorKind::Unsupported.into())
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) async fn drain(&mut self, _: &OwnedWriteHalf) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (connected, accepted) = tokio::join!(TcpStream::connect(address), listener.accept());
        (connected.unwrap(), accepted.unwrap().0)
    }

    /// 3 MB go from one socket to another through the pipe, byte for byte, and a splice never
    /// takes more than asked: the bytes after the limit stay in the source socket.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn moves_exactly_what_is_asked_byte_for_byte() {
        let (mut broker, upstream) = pair().await;
        let (client, mut consumer) = pair().await;
        let (from, _keep_from) = upstream.into_split();
        let (_keep_to, to) = client.into_split();
        let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let trailing = b"next response";
        let sent = payload.clone();
        let writer = tokio::spawn(async move {
            broker.write_all(&sent).await.unwrap();
            broker.write_all(trailing).await.unwrap();
            broker
        });
        let reader = tokio::spawn(async move {
            let mut got = vec![0; 3_000_000];
            consumer.read_exact(&mut got).await.unwrap();
            got
        });
        let mut pipe = Pipe::new().unwrap();
        assert!(pipe.capacity >= 4096);
        let mut rest = payload.len();
        while rest > 0 {
            let moved = pipe.fill(&from, rest).await.unwrap();
            assert!(moved > 0 && moved <= rest);
            rest -= moved;
            pipe.drain(&to).await.unwrap();
        }
        assert_eq!(reader.await.unwrap(), payload);
        let _broker = writer.await.unwrap();
        // What followed the limit was not taken.
        let mut next = vec![0; trailing.len()];
        let mut from = from;
        from.read_exact(&mut next).await.unwrap();
        assert_eq!(next, trailing);
    }

    /// The upstream's end is a fill of 0 bytes.
    #[tokio::test]
    async fn an_upstream_that_closes_fills_nothing() {
        let (broker, upstream) = pair().await;
        drop(broker);
        let (from, _write) = upstream.into_split();
        let mut pipe = Pipe::new().unwrap();
        assert_eq!(pipe.fill(&from, 1024).await.unwrap(), 0);
    }
}
