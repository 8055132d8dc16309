//! The two halves of a connection's socket, plain TCP or TLS, for the client side and the
//! upstream side alike.
//!
//! A plain TCP stream is split with `into_split`: each half is its own object with its own
//! readiness, so the request side and the response side of a connection can use them from two
//! tasks without a lock. A TLS stream has one rustls state for both directions, so its halves
//! (`tokio::io::split`) share it behind a lock.

use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::frames::ReadSource;

/// The read half of a socket whose TLS stream type is `T`.
#[derive(Debug)]
pub enum SocketRead<T> {
    /// Plain TCP.
    Plain(OwnedReadHalf),
    /// TLS.
    Tls(ReadHalf<T>),
}

/// The write half of a socket whose TLS stream type is `T`.
#[derive(Debug)]
pub enum SocketWrite<T> {
    /// Plain TCP. Dropping it sends a FIN.
    Plain(OwnedWriteHalf),
    /// TLS.
    Tls(WriteHalf<T>),
}

/// A client connection's halves.
pub type ClientRead = SocketRead<tokio_rustls::server::TlsStream<TcpStream>>;
/// A client connection's halves.
pub type ClientWrite = SocketWrite<tokio_rustls::server::TlsStream<TcpStream>>;
/// An upstream connection's halves.
pub type UpstreamRead = SocketRead<tokio_rustls::client::TlsStream<TcpStream>>;
/// An upstream connection's halves.
pub type UpstreamWrite = SocketWrite<tokio_rustls::client::TlsStream<TcpStream>>;

/// A socket a listener accepted, split into its halves.
pub(super) trait ClientStream: Send + 'static {
    /// Splits the stream.
    fn into_halves(self) -> (ClientRead, ClientWrite);
}

impl ClientStream for TcpStream {
    fn into_halves(self) -> (ClientRead, ClientWrite) {
        let (read, write) = self.into_split();
        (SocketRead::Plain(read), SocketWrite::Plain(write))
    }
}

impl ClientStream for tokio_rustls::server::TlsStream<TcpStream> {
    fn into_halves(self) -> (ClientRead, ClientWrite) {
        let (read, write) = tokio::io::split(self);
        (SocketRead::Tls(read), SocketWrite::Tls(write))
    }
}

/// Splits a plain upstream stream.
pub fn upstream_plain(stream: TcpStream) -> (UpstreamRead, UpstreamWrite) {
    let (read, write) = stream.into_split();
    (SocketRead::Plain(read), SocketWrite::Plain(write))
}

/// Splits a TLS upstream stream.
pub fn upstream_tls(
    stream: tokio_rustls::client::TlsStream<TcpStream>,
) -> (UpstreamRead, UpstreamWrite) {
    let (read, write) = tokio::io::split(stream);
    (SocketRead::Tls(read), SocketWrite::Tls(write))
}

impl<T> SocketRead<T> {
    /// The TCP half, when no TLS is on it: only then can bytes bypass Portcullis' buffers.
    pub(super) fn plain(&self) -> Option<&OwnedReadHalf> {
        match self {
            Self::Plain(read) => Some(read),
            Self::Tls(_) => None,
        }
    }
}

impl<T> SocketWrite<T> {
    /// The TCP half, when no TLS is on it.
    pub(super) fn plain(&self) -> Option<&OwnedWriteHalf> {
        match self {
            Self::Plain(write) => Some(write),
            Self::Tls(_) => None,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for SocketRead<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(read) => Pin::new(read).poll_read(cx, buf),
            Self::Tls(read) => Pin::new(read).poll_read(cx, buf),
        }
    }
}

impl<T: AsyncRead + Unpin + Send> ReadSource for SocketRead<T> {
    fn waits_without_buffer(&self) -> bool {
        // The kernel says when bytes are there; rustls buffers records itself, only a read can tell.
        matches!(self, Self::Plain(_))
    }

    fn try_read_now(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<usize>> {
        match self {
            // tokio checks the readiness it knows first: no system call when nothing arrived.
            Self::Plain(read) => match read.try_read_buf(buf) {
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(e),
            },
            Self::Tls(_) => Ok(None),
        }
    }

    fn readable(&self) -> impl Future<Output = std::io::Result<()>> + Send {
        let plain = match self {
            Self::Plain(read) => Some(read),
            Self::Tls(_) => None,
        };
        async move {
            match plain {
                Some(read) => read.readable().await,
                None => Ok(()),
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for SocketWrite<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(write) => Pin::new(write).poll_write(cx, buf),
            Self::Tls(write) => Pin::new(write).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(write) => Pin::new(write).poll_flush(cx),
            Self::Tls(write) => Pin::new(write).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(write) => Pin::new(write).poll_shutdown(cx),
            Self::Tls(write) => Pin::new(write).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(write) => Pin::new(write).poll_write_vectored(cx, bufs),
            Self::Tls(write) => Pin::new(write).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(write) => write.is_write_vectored(),
            Self::Tls(write) => write.is_write_vectored(),
        }
    }
}
