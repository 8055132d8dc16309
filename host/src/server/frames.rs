//! Kafka framing: a 4-byte big-endian size, then that many bytes. Requests, responses and the raw
//! SASL tokens of SaslHandshake v0 all travel this way.
//!
//! Reading ([`FrameReader`]): [`FrameReader::next_frame`] is cancel-safe (its await points are the
//! readiness wait and `read_buf`, and every byte read is kept in the reader's buffer), so the
//! connection driver can race it against other events. The size limit is a parameter of each call
//! because it changes when the client authenticates; the announced size is checked before any
//! payload is buffered beyond one read, so a hostile size costs no memory.
//!
//! How much one read may take is chosen to make few system calls without holding memory on idle
//! connections ([`read_some`]):
//! - a reader with nothing buffered holds **no buffer** while it waits: it waits for the socket to
//!   become readable first ([`ReadSource::readable`]), and only then takes a buffer of `burst`
//!   bytes (64 KiB on an authenticated connection), so one read takes every frame the client
//!   pipelined;
//! - a read that completes a frame is offered at least one byte more than the frame needs, so the
//!   read that takes a frame's last bytes is short when nothing else is queued: a short read tells
//!   tokio the socket is drained, and the next wait costs no `read` that would return
//!   `EWOULDBLOCK`.
//!
//! Writing ([`Outgoing`]): frames and relayed bytes are collected and sent with one vectored write
//! (`writev`), the size prefix and the payload in the same system call (a separate 4-byte write
//! became its own TCP segment with `TCP_NODELAY`), and nothing is copied into a write buffer.

use std::future::Future;
use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The room offered to a read when the source cannot say whether bytes are waiting (TLS, whose
/// records are buffered by rustls), and before authentication: small, because an idle or
/// unauthenticated connection holds it.
pub const MIN_READ: usize = 1024;
/// The least room of a read on an authenticated connection: enough for every request a client
/// pipelines at once.
pub const BURST_READ: usize = 64 * 1024;
/// The most one read may add to a buffer.
pub const MAX_READ: usize = 1024 * 1024;
/// Slices handed to one `writev` (Linux allows 1024).
const MAX_SLICES: usize = 64;

/// A byte source that can wait for input without holding a buffer.
pub trait ReadSource: AsyncRead + Unpin {
    /// Whether [`ReadSource::readable`] can wait for input without a buffer (a TCP socket can;
    /// TLS cannot: rustls buffers records itself, and only a read can tell).
    fn waits_without_buffer(&self) -> bool;

    /// Reads what is already waiting, without waiting: `Ok(None)` when nothing is.
    fn try_read_now(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<usize>>;

    /// Completes when a read would find bytes (or EOF). Cancel-safe.
    fn readable(&self) -> impl Future<Output = std::io::Result<()>> + Send;
}

impl ReadSource for &[u8] {
    fn waits_without_buffer(&self) -> bool {
        false
    }

    fn try_read_now(&mut self, _: &mut BytesMut) -> std::io::Result<Option<usize>> {
        Ok(None)
    }

    fn readable(&self) -> impl Future<Output = std::io::Result<()>> + Send {
        std::future::ready(Ok(()))
    }
}

/// Reads more bytes into `buffer`, at most `room`. When `buffer` is empty and the source can wait
/// without one, bytes already waiting are read into the memory held, and otherwise the buffer is
/// let go before waiting: a connection that waits (idle, or for a long-polled Fetch) holds no read
/// buffer. A source that cannot wait without a buffer gets [`MIN_READ`] bytes of room while
/// `idle`. Returns how many bytes were read (0: end of stream). Cancel-safe.
pub async fn read_some<R: ReadSource>(
    source: &mut R,
    buffer: &mut BytesMut,
    room: usize,
    idle: bool,
) -> std::io::Result<usize> {
    let room = room.clamp(1, MAX_READ);
    if buffer.is_empty() {
        if source.waits_without_buffer() {
            buffer.reserve(room);
            if let Some(read) = source.try_read_now(buffer)? {
                return Ok(read);
            }
            // Frames handed out keep their part of the old allocation alive until dropped.
            *buffer = BytesMut::new();
            source.readable().await?;
            buffer.reserve(room);
        } else {
            buffer.reserve(if idle { MIN_READ.min(room) } else { room });
        }
    } else {
        buffer.reserve(room);
    }
    source.read_buf(buffer).await
}

/// What the next read produced.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// A complete frame (without its size prefix).
    Frame(Bytes),
    /// The peer announced a frame larger than the limit; nothing of it was consumed.
    TooLarge(usize),
    /// The peer closed the connection between frames.
    Closed,
}

/// A framing violation or an I/O error.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// A size prefix below zero.
    #[error("negative frame size {0}")]
    NegativeSize(i32),
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed inside a frame")]
    Truncated,
    /// A frame too large for the 4-byte size prefix.
    #[error("frame of {0} bytes does not fit a Kafka size prefix")]
    Oversized(usize),
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads frames from any byte stream.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    buffer: BytesMut,
}

impl<R: ReadSource> FrameReader<R> {
    /// A reader over `inner`.
    pub fn new(inner: R) -> Self {
        Self::with_buffer(inner, BytesMut::new())
    }

    /// A reader over `inner` that has already read `buffer`.
    pub fn with_buffer(inner: R, buffer: BytesMut) -> Self {
        Self { inner, buffer }
    }

    /// The source and the bytes read from it but not consumed.
    pub fn into_parts(self) -> (R, BytesMut) {
        (self.inner, self.buffer)
    }

    /// The next frame, refusing any whose announced size exceeds `max_size`; a read into an empty
    /// buffer takes up to `burst` bytes (see the module documentation). Cancel-safe.
    pub async fn next_frame(
        &mut self,
        max_size: usize,
        burst: usize,
    ) -> Result<ReadOutcome, FrameError> {
        loop {
            if let Some(outcome) = self.parse(max_size)? {
                return Ok(outcome);
            }
            let idle = self.buffer.is_empty();
            let room = if idle {
                burst
            } else {
                self.bytes_missing().saturating_add(1).max(burst)
            };
            let read = read_some(&mut self.inner, &mut self.buffer, room, idle).await?;
            if read == 0 {
                return if self.buffer.is_empty() {
                    Ok(ReadOutcome::Closed)
                } else {
                    Err(FrameError::Truncated)
                };
            }
        }
    }

    /// The next frame if it is already buffered (no read): handling every frame a read brought
    /// in before sending anything upstream lets one write carry them all.
    pub fn buffered_frame(&mut self, max_size: usize) -> Result<Option<ReadOutcome>, FrameError> {
        self.parse(max_size)
    }

    /// Reads and throws away everything the peer sends until it closes (`Ok`) or the socket
    /// fails: a closing connection reads its input to the end so that closing it does not make
    /// the kernel answer unread bytes with a reset, which can destroy answers already sent.
    /// Cancel-safe; keeps at most one read chunk in memory.
    pub async fn discard_until_eof(&mut self) -> std::io::Result<()> {
        loop {
            self.buffer.clear();
            self.buffer.reserve(BURST_READ);
            if self.inner.read_buf(&mut self.buffer).await? == 0 {
                return Ok(());
            }
        }
    }

    /// How many more bytes complete the frame at the head of the buffer (its size prefix first).
    fn bytes_missing(&self) -> usize {
        match announced_size(&self.buffer) {
            Some(size) if size >= 0 => (size as usize)
                .saturating_add(4)
                .saturating_sub(self.buffer.len()),
            _ => 4usize.saturating_sub(self.buffer.len()),
        }
    }

    fn parse(&mut self, max_size: usize) -> Result<Option<ReadOutcome>, FrameError> {
        let Some(size) = announced_size(&self.buffer) else {
            return Ok(None);
        };
        let size = usize::try_from(size).map_err(|_| FrameError::NegativeSize(size))?;
        if size > max_size {
            return Ok(Some(ReadOutcome::TooLarge(size)));
        }
        let total = size.saturating_add(4);
        if self.buffer.len() < total {
            return Ok(None);
        }
        self.buffer.advance(4);
        Ok(Some(ReadOutcome::Frame(
            self.buffer.split_to(size).freeze(),
        )))
    }
}

fn announced_size(buffer: &[u8]) -> Option<i32> {
    match buffer {
        [a, b, c, d, ..] => Some(i32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// The 4-byte size prefix of a frame of `len` bytes.
pub fn size_prefix(len: usize) -> Result<[u8; 4], FrameError> {
    let size = i32::try_from(len).map_err(|_| FrameError::Oversized(len))?;
    Ok(size.to_be_bytes())
}

/// One piece of [`Outgoing`].
#[derive(Debug)]
enum Part {
    Prefix([u8; 4]),
    Data(Bytes),
}

impl Part {
    fn bytes(&self) -> &[u8] {
        match self {
            Part::Prefix(prefix) => prefix,
            Part::Data(data) => data,
        }
    }
}

/// Bytes waiting to be sent with one vectored write: whole frames (size prefix and payload) and
/// raw bytes relayed unchanged. The payloads are shared, never copied.
#[derive(Debug, Default)]
pub struct Outgoing {
    parts: Vec<Part>,
    /// The first part not completely written, and how much of it was.
    head: usize,
    offset: usize,
}

impl Outgoing {
    /// Nothing queued.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues a frame: its size prefix, then `payload`.
    pub fn push_frame(&mut self, payload: Bytes) -> Result<(), FrameError> {
        self.parts.push(Part::Prefix(size_prefix(payload.len())?));
        self.push_raw(payload);
        Ok(())
    }

    /// Queues bytes that already carry their framing (relayed as they came).
    pub fn push_raw(&mut self, bytes: Bytes) {
        // No empty part: a write of nothing but empty slices would return 0.
        if !bytes.is_empty() {
            self.parts.push(Part::Data(bytes));
        }
    }

    /// Whether nothing is waiting to be written.
    pub fn is_empty(&self) -> bool {
        self.head >= self.parts.len()
    }

    /// Writes everything queued, in as few `writev` calls as the socket allows, releases the
    /// payloads and flushes (TLS keeps what the socket did not take yet). Cancel-safe: what was
    /// written is remembered, a later call writes the rest.
    pub async fn write_to<W: AsyncWrite + Unpin>(&mut self, writer: &mut W) -> std::io::Result<()> {
        while !self.is_empty() {
            // The slices are made on each poll, on the stack: held across the `.await` they would
            // be part of every connection's task, for its whole life (1 KiB each side).
            let written = std::future::poll_fn(|cx| {
                let mut slices = [IoSlice::new(&[]); MAX_SLICES];
                let count = self.fill(&mut slices);
                std::pin::Pin::new(&mut *writer)
                    .poll_write_vectored(cx, slices.get(..count).unwrap_or_default())
            })
            .await?;
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.advance(written);
        }
        self.parts.clear();
        self.head = 0;
        self.offset = 0;
        writer.flush().await
    }

    /// Points `slices` at what is still to be written, in order; returns how many it filled.
    fn fill<'a>(&'a self, slices: &mut [IoSlice<'a>]) -> usize {
        let pending = self.parts.get(self.head..).unwrap_or_default();
        let mut count = 0;
        for (i, (slot, part)) in slices.iter_mut().zip(pending).enumerate() {
            let bytes = part.bytes();
            let skip = if i == 0 { self.offset } else { 0 };
            *slot = IoSlice::new(bytes.get(skip..).unwrap_or_default());
            count += 1;
        }
        count
    }

    /// Marks `written` bytes from the head as sent.
    fn advance(&mut self, mut written: usize) {
        while written > 0 {
            let Some(part) = self.parts.get(self.head) else {
                return;
            };
            let left = part.bytes().len().saturating_sub(self.offset);
            if written < left {
                self.offset += written;
                return;
            }
            written -= left;
            // A written payload is released at once (it may pin a large read buffer).
            if let Some(slot) = self.parts.get_mut(self.head) {
                *slot = Part::Prefix([0; 4]);
            }
            self.head += 1;
            self.offset = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(input: &[u8], max: usize) -> Vec<Result<ReadOutcome, String>> {
        let mut reader = FrameReader::new(input);
        let mut out = Vec::new();
        loop {
            let r = reader
                .next_frame(max, MIN_READ)
                .await
                .map_err(|e| e.to_string());
            let stop = !matches!(r, Ok(ReadOutcome::Frame(_)));
            out.push(r);
            if stop {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn reads_consecutive_frames_then_eof() {
        let input = [0, 0, 0, 2, 9, 8, 0, 0, 0, 0, 0, 0, 0, 1, 7];
        let got = read_all(&input, 10).await;
        assert_eq!(
            got,
            vec![
                Ok(ReadOutcome::Frame(Bytes::from_static(&[9, 8]))),
                Ok(ReadOutcome::Frame(Bytes::new())),
                Ok(ReadOutcome::Frame(Bytes::from_static(&[7]))),
                Ok(ReadOutcome::Closed),
            ]
        );
    }

    #[tokio::test]
    async fn refuses_oversized_and_negative_sizes() {
        assert_eq!(
            read_all(&[0, 0, 0, 11], 10).await,
            vec![Ok(ReadOutcome::TooLarge(11))]
        );
        let got = read_all(&[0xff, 0xff, 0xff, 0xfe], 10).await;
        assert_eq!(got, vec![Err("negative frame size -2".to_owned())]);
    }

    #[tokio::test]
    async fn a_cut_frame_is_an_error() {
        assert_eq!(
            read_all(&[0, 0, 0, 3, 1], 10).await,
            vec![Err("connection closed inside a frame".to_owned())]
        );
        assert_eq!(
            read_all(&[0, 0], 10).await,
            vec![Err("connection closed inside a frame".to_owned())]
        );
    }

    #[tokio::test]
    async fn the_limit_applies_per_call() {
        let input = [0, 0, 0, 3, 1, 2, 3];
        let mut reader = FrameReader::new(&input[..]);
        assert_eq!(
            reader.next_frame(2, MIN_READ).await.unwrap(),
            ReadOutcome::TooLarge(3)
        );
        assert_eq!(
            reader.next_frame(3, MIN_READ).await.unwrap(),
            ReadOutcome::Frame(Bytes::from_static(&[1, 2, 3]))
        );
    }

    #[tokio::test]
    async fn writes_frames_with_their_size_prefix_and_raw_bytes_as_they_are() {
        let mut out = Outgoing::new();
        out.push_frame(Bytes::from_static(&[5, 6])).unwrap();
        out.push_raw(Bytes::from_static(&[0, 0, 0, 1, 9]));
        out.push_frame(Bytes::new()).unwrap();
        let mut sink = Vec::new();
        out.write_to(&mut sink).await.unwrap();
        assert_eq!(sink, vec![0, 0, 0, 2, 5, 6, 0, 0, 0, 1, 9, 0, 0, 0, 0]);
        assert!(out.is_empty());
    }

    /// A writer that takes at most `step` bytes per call, to exercise partial vectored writes.
    struct Trickle {
        step: usize,
        got: Vec<u8>,
        calls: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.step);
            self.got.extend_from_slice(&buf[..n]);
            self.calls += 1;
            std::task::Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let mut left = self.step;
            let mut n = 0;
            for buf in bufs {
                let take = buf.len().min(left);
                self.got.extend_from_slice(&buf[..take]);
                left -= take;
                n += take;
            }
            self.calls += 1;
            std::task::Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn partial_vectored_writes_resume_where_they_stopped() {
        let mut expected = Vec::new();
        let mut out = Outgoing::new();
        for i in 0..100u8 {
            let payload = vec![i; usize::from(i % 7)];
            expected.extend_from_slice(&(payload.len() as i32).to_be_bytes());
            expected.extend_from_slice(&payload);
            out.push_frame(Bytes::from(payload)).unwrap();
        }
        for step in [1, 3, 4, 5, 1000] {
            let mut out = Outgoing::new();
            let mut at = 0;
            while at < expected.len() {
                let end = (at + 11).min(expected.len());
                out.push_raw(Bytes::copy_from_slice(&expected[at..end]));
                at = end;
            }
            let mut sink = Trickle {
                step,
                got: Vec::new(),
                calls: 0,
            };
            out.write_to(&mut sink).await.unwrap();
            assert_eq!(sink.got, expected, "step {step}");
        }
        let mut sink = Trickle {
            step: 1 << 20,
            got: Vec::new(),
            calls: 0,
        };
        out.write_to(&mut sink).await.unwrap();
        assert_eq!(sink.got, expected);
        // 100 prefixes and 85 non-empty payloads, 64 slices per writev.
        assert_eq!(sink.calls, 3);
    }

    #[tokio::test]
    async fn buffered_frames_are_handed_out_without_reading() {
        let input = [0, 0, 0, 1, 7, 0, 0, 0, 2, 8, 9, 0, 0];
        let mut reader = FrameReader::new(&input[..]);
        assert_eq!(
            reader.next_frame(10, BURST_READ).await.unwrap(),
            ReadOutcome::Frame(Bytes::from_static(&[7]))
        );
        assert_eq!(
            reader.buffered_frame(10).unwrap(),
            Some(ReadOutcome::Frame(Bytes::from_static(&[8, 9])))
        );
        assert_eq!(reader.buffered_frame(10).unwrap(), None);
    }
}
