//! The id of one forwarded mutation: the same for every retry of it, so that the writer applies it
//! once (see [`super::dedup`]).
//!
//! A node makes ids as `<node id>-<boot>-<sequence>`: the boot part is random per process, so a
//! restarted node never reuses an id of its previous life even though its sequence starts again
//! at 0. Ids arrive from peers over the network, so they are checked before anything keeps them:
//! 1 to [`MAX_LEN`] bytes of `[A-Za-z0-9._:-]` (they become a key of the shared log).

use std::sync::atomic::{AtomicU64, Ordering};

/// The longest id accepted (a node's own ids are under 40 bytes).
pub const MAX_LEN: usize = 128;

/// A checked request id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(String);

/// Why bytes are not a request id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestIdError {
    /// Empty.
    #[error("an empty request id")]
    Empty,
    /// Longer than [`MAX_LEN`].
    #[error("a request id of {0} bytes (at most {MAX_LEN})")]
    TooLong(usize),
    /// A byte outside `[A-Za-z0-9._:-]`.
    #[error("a request id with a byte outside [A-Za-z0-9._:-]")]
    Character,
}

impl RequestId {
    /// Checks `bytes` (from the network or the log).
    ///
    /// # Errors
    /// [`RequestIdError`].
    pub fn parse(bytes: &[u8]) -> Result<Self, RequestIdError> {
        if bytes.is_empty() {
            return Err(RequestIdError::Empty);
        }
        if bytes.len() > MAX_LEN {
            return Err(RequestIdError::TooLong(bytes.len()));
        }
        if !bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        {
            return Err(RequestIdError::Character);
        }
        // Only ASCII bytes remain: the conversion cannot fail.
        Ok(Self(String::from_utf8_lossy(bytes).into_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Makes the ids of one node's process.
#[derive(Debug)]
pub struct RequestIds {
    prefix: String,
    next: AtomicU64,
}

impl RequestIds {
    /// The ids of node `node_id` in the process started with the random `boot`.
    pub fn new(node_id: i32, boot: u64) -> Self {
        Self {
            prefix: format!("{node_id}-{boot:016x}"),
            next: AtomicU64::new(0),
        }
    }

    /// A fresh id.
    pub fn next(&self) -> RequestId {
        let sequence = self.next.fetch_add(1, Ordering::Relaxed);
        RequestId(format!("{}-{sequence}", self.prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_per_process_and_parse_back() {
        let ids = RequestIds::new(-3, u64::MAX);
        let (a, b) = (ids.next(), ids.next());
        assert_ne!(a, b);
        assert_eq!(RequestId::parse(a.as_str().as_bytes()), Ok(a.clone()));
        assert_ne!(RequestIds::new(-3, 1).next(), RequestIds::new(-3, 2).next());
        assert!(a.as_str().len() < 40, "{a}");
    }

    #[test]
    fn bad_ids_are_refused() {
        assert_eq!(RequestId::parse(b""), Err(RequestIdError::Empty));
        assert_eq!(
            RequestId::parse(&[b'a'; MAX_LEN + 1]),
            Err(RequestIdError::TooLong(MAX_LEN + 1))
        );
        assert!(RequestId::parse(&[b'a'; MAX_LEN]).is_ok());
        for bad in [&b"a b"[..], b"a\"", b"{x}", b"\xff", b"a\0"] {
            assert_eq!(RequestId::parse(bad), Err(RequestIdError::Character));
        }
    }
}
