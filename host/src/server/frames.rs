//! Kafka framing: a 4-byte big-endian size, then that many bytes. Requests, responses and the raw
//! SASL tokens of SaslHandshake v0 all travel this way.
//!
//! [`FrameReader::next_frame`] is cancel-safe (its only await point is `read_buf`, and every byte
//! read is kept in the reader's buffer), so the connection driver can race it against the
//! upstream in one `select!` loop. The size limit is a parameter of each call because it changes
//! when the client authenticates; the announced size is checked before any payload is buffered
//! beyond one read chunk, so a hostile size costs no memory.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How many bytes one read may add to the buffer.
const READ_CHUNK: usize = 64 * 1024;
/// The least room offered to one read: most Kafka requests fit in one read. Each read is also
/// offered one byte more than the frame still needs, so the read that takes the last bytes of a
/// frame is short when nothing else is queued; a short read tells tokio the socket is drained, and
/// the next wait costs no `read` call that would only return `EWOULDBLOCK` (offering exactly the 4
/// bytes of a size prefix filled the room every time). Small, because an idle connection holds it.
const MIN_READ: usize = 1024;

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

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader over `inner`.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buffer: BytesMut::new(),
        }
    }

    /// The next frame, refusing any whose announced size exceeds `max_size`. Cancel-safe.
    pub async fn next_frame(&mut self, max_size: usize) -> Result<ReadOutcome, FrameError> {
        loop {
            if let Some(outcome) = self.parse(max_size)? {
                return Ok(outcome);
            }
            let wanted = self
                .bytes_missing()
                .saturating_add(1)
                .clamp(MIN_READ, READ_CHUNK);
            self.buffer.reserve(wanted);
            let read = self.inner.read_buf(&mut self.buffer).await?;
            if read == 0 {
                return if self.buffer.is_empty() {
                    Ok(ReadOutcome::Closed)
                } else {
                    Err(FrameError::Truncated)
                };
            }
        }
    }

    /// Reads and throws away everything the peer sends until it closes (`Ok`) or the socket
    /// fails: a closing connection reads its input to the end so that closing it does not make
    /// the kernel answer unread bytes with a reset, which can destroy answers already sent.
    /// Cancel-safe; keeps at most one read chunk in memory.
    pub async fn discard_until_eof(&mut self) -> std::io::Result<()> {
        loop {
            self.buffer.clear();
            self.buffer.reserve(READ_CHUNK);
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

/// Writes one frame with its size prefix (not flushed).
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    payload: &[u8],
) -> Result<(), FrameError> {
    let size = i32::try_from(payload.len()).map_err(|_| FrameError::Oversized(payload.len()))?;
    writer.write_all(&size.to_be_bytes()).await?;
    writer.write_all(payload).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(input: &[u8], max: usize) -> Vec<Result<ReadOutcome, String>> {
        let mut reader = FrameReader::new(input);
        let mut out = Vec::new();
        loop {
            let r = reader.next_frame(max).await.map_err(|e| e.to_string());
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
            reader.next_frame(2).await.unwrap(),
            ReadOutcome::TooLarge(3)
        );
        assert_eq!(
            reader.next_frame(3).await.unwrap(),
            ReadOutcome::Frame(Bytes::from_static(&[1, 2, 3]))
        );
    }

    #[tokio::test]
    async fn writes_the_size_prefix() {
        let mut out = Vec::new();
        write_frame(&mut out, &[5, 6]).await.unwrap();
        assert_eq!(out, vec![0, 0, 0, 2, 5, 6]);
    }
}
