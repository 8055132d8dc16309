//! Kafka framing on the inter-node connections (a 4-byte big-endian size, then that many bytes),
//! shared by the listener ([`super::listener`]) and the forwarder ([`super::forward`]).
//!
//! One request or response at a time travels each way, so this is the plain form: read the size,
//! check it against the caller's limit before anything is allocated, read the frame. The client
//! listeners' reader (`server/frames.rs`) is cancel-safe and pipelined; none of that is needed
//! between nodes.

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why a frame could not be read or written; the connection is then closed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection inside a frame.
    #[error("the connection ended inside a frame")]
    Truncated,
    /// The announced size is negative (Kafka's size is a signed 32-bit integer).
    #[error("a negative frame size {0}")]
    Negative(i32),
    /// The announced size is over the limit.
    #[error("a frame of {size} bytes (the limit is {limit})")]
    TooLarge {
        /// The announced size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A frame to send is over the 2 GiB a size prefix can announce.
    #[error("a frame of {0} bytes cannot be sent")]
    Unsendable(usize),
    /// The socket failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The next frame, or `None` when the peer closed the connection between frames.
///
/// # Errors
/// [`FrameError`]: the size is negative or over `limit`, the connection ended inside the frame,
/// or the socket failed.
pub async fn read_frame<S: AsyncRead + Unpin>(
    stream: &mut S,
    limit: usize,
) -> Result<Option<Bytes>, FrameError> {
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let size = i32::from_be_bytes(size);
    let size = usize::try_from(size).map_err(|_| FrameError::Negative(size))?;
    if size > limit {
        return Err(FrameError::TooLarge { size, limit });
    }
    let mut frame = vec![0u8; size];
    stream.read_exact(&mut frame).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            FrameError::Truncated
        } else {
            e.into()
        }
    })?;
    Ok(Some(Bytes::from(frame)))
}

/// Sends `frame` with its size prefix in one write, and flushes (TLS buffers records).
///
/// # Errors
/// [`FrameError::Unsendable`] for a frame over `i32::MAX` bytes; [`FrameError::Io`].
pub async fn write_frame<S: AsyncWrite + Unpin>(
    stream: &mut S,
    frame: &[u8],
) -> Result<(), FrameError> {
    let size = i32::try_from(frame.len()).map_err(|_| FrameError::Unsendable(frame.len()))?;
    let mut out = Vec::with_capacity(4 + frame.len());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(frame);
    stream.write_all(&out).await?;
    stream.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_frame_round_trips_and_a_clean_end_is_none() {
        let mut wire = Vec::new();
        write_frame(&mut wire, b"hello").await.unwrap();
        write_frame(&mut wire, b"").await.unwrap();
        let mut reader = &wire[..];
        assert_eq!(read_frame(&mut reader, 16).await.unwrap().unwrap(), "hello");
        assert_eq!(read_frame(&mut reader, 16).await.unwrap().unwrap(), "");
        assert!(read_frame(&mut reader, 16).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn sizes_are_checked_before_anything_is_allocated() {
        let mut huge = &(i32::MAX).to_be_bytes()[..];
        assert!(matches!(
            read_frame(&mut huge, 1024).await,
            Err(FrameError::TooLarge { limit: 1024, .. })
        ));
        let mut negative = &(-1i32).to_be_bytes()[..];
        assert!(matches!(
            read_frame(&mut negative, 1024).await,
            Err(FrameError::Negative(-1))
        ));
        let mut cut = &[0, 0, 0, 5, b'h', b'i'][..];
        assert!(matches!(
            read_frame(&mut cut, 1024).await,
            Err(FrameError::Truncated)
        ));
    }
}
