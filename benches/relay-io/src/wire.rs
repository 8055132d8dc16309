//! The synthetic protocol of the consumers and the broker: Kafka's framing (a 4-byte big-endian
//! size, then that many bytes), with payloads a relay cannot get wrong unnoticed.
//!
//! Every payload starts with an 8-byte stamp, the number of the exchange on its connection
//! (from 0), so a lost, repeated or reordered frame is caught; the rest is a fixed pattern whose
//! byte `i` is `i mod 251`, so a shifted or corrupted payload is caught. The receiver checks every
//! frame's size, its stamp, its last bytes and a 64-byte window that moves from frame to frame,
//! and compares the whole payload on every `verify_every`-th frame (a full comparison of every
//! 1 MiB response would cost the harness, which shares the cores with the relay, more CPU).

use std::io::{self, ErrorKind, Read};
use std::ops::Range;

use anyhow::{anyhow, bail, ensure, Context, Result};

/// The size prefix of a frame.
pub const HEADER_BYTES: usize = 4;
/// The exchange number at the start of every payload.
const STAMP_BYTES: usize = 8;
/// The payload of the small message of an exchange (the request of a consume, the response of
/// a produce).
pub const SMALL_PAYLOAD: usize = 64;
/// The smallest payload the checks work on: the stamp and a few pattern bytes.
pub const MIN_PAYLOAD: usize = 16;
/// The moving window compared on every frame.
const SAMPLE_BYTES: usize = 64;
/// Prime, so a payload shifted by anything but a multiple of it no longer matches the pattern.
const PATTERN_PERIOD: usize = 251;

/// Names a socket timeout as one: std reports it as `WouldBlock` (EAGAIN) on Linux.
pub fn io_error(error: io::Error) -> anyhow::Error {
    match error.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            anyhow!("nothing moved within the socket timeout (--timeout-secs)")
        }
        _ => error.into(),
    }
}

/// A payload of `len` bytes with a zero stamp.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            if i < STAMP_BYTES {
                0
            } else {
                (i % PATTERN_PERIOD) as u8
            }
        })
        .collect()
}

/// A frame to send, built once and stamped before each send, so sending is one `write_all` of a
/// preallocated buffer (a broker answering a Fetch from its page cache does no more).
pub struct Outbound {
    bytes: Vec<u8>,
}

impl Outbound {
    pub fn new(payload_len: usize) -> Result<Self> {
        ensure!(
            payload_len >= MIN_PAYLOAD,
            "a payload of {payload_len} bytes is below the minimum of {MIN_PAYLOAD}"
        );
        let size = i32::try_from(payload_len)
            .with_context(|| format!("a payload of {payload_len} bytes does not fit a frame"))?;
        let mut bytes = Vec::with_capacity(HEADER_BYTES + payload_len);
        bytes.extend_from_slice(&size.to_be_bytes());
        bytes.extend_from_slice(&pattern(payload_len));
        Ok(Self { bytes })
    }

    /// Writes the exchange number into the payload.
    pub fn stamp(&mut self, exchange: u64) {
        if let Some(stamp) = self.bytes.get_mut(HEADER_BYTES..HEADER_BYTES + STAMP_BYTES) {
            stamp.copy_from_slice(&exchange.to_be_bytes());
        }
    }

    /// The whole frame, size prefix included.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Receives and checks frames of one size.
pub struct Inbound {
    expected: Vec<u8>,
    payload: Vec<u8>,
    verify_every: u64,
}

impl Inbound {
    /// `verify_every`: compare the whole payload of every n-th frame (the first included);
    /// 0 never does, 1 always does.
    pub fn new(payload_len: usize, verify_every: u64) -> Self {
        Self {
            expected: pattern(payload_len),
            payload: vec![0; payload_len],
            verify_every,
        }
    }

    /// Reads and checks the frame of exchange `exchange`. `Ok(false)`: the peer closed the
    /// connection before the frame started.
    pub fn receive(&mut self, stream: &mut impl Read, exchange: u64) -> Result<bool> {
        let Some(size) = read_size(stream)? else {
            return Ok(false);
        };
        ensure!(
            size == self.payload.len(),
            "frame {exchange}: {size} bytes announced, {} expected",
            self.payload.len()
        );
        stream
            .read_exact(&mut self.payload)
            .map_err(io_error)
            .with_context(|| {
                format!(
                    "frame {exchange}: reading its {} payload bytes",
                    self.payload.len()
                )
            })?;
        let whole = self.verify_every != 0 && exchange.is_multiple_of(self.verify_every);
        check(&self.payload, &self.expected, exchange, whole)
            .with_context(|| format!("frame {exchange}"))?;
        Ok(true)
    }
}

/// Reads a size prefix; `None` when the stream ends before it.
fn read_size(stream: &mut impl Read) -> Result<Option<usize>> {
    let mut header = [0u8; HEADER_BYTES];
    let (first, rest) = header.split_at_mut(1);
    loop {
        match stream.read(first) {
            Ok(0) => return Ok(None),
            Ok(_) => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error(e)).context("waiting for a frame"),
        }
    }
    stream
        .read_exact(rest)
        .map_err(io_error)
        .context("reading a frame's size prefix")?;
    let size = i32::from_be_bytes(header);
    usize::try_from(size)
        .ok()
        .with_context(|| format!("a negative frame size ({size})"))
        .map(Some)
}

/// Checks a received payload against the pattern and the expected stamp.
fn check(payload: &[u8], expected: &[u8], exchange: u64, whole: bool) -> Result<()> {
    let len = payload.len();
    ensure!(
        len == expected.len() && len >= MIN_PAYLOAD,
        "a payload of {len} bytes"
    );
    let stamp = payload
        .get(..STAMP_BYTES)
        .and_then(|s| <[u8; STAMP_BYTES]>::try_from(s).ok())
        .map(u64::from_be_bytes);
    ensure!(
        stamp == Some(exchange),
        "stamp {stamp:?} where {exchange} was expected: a frame was lost, repeated or reordered"
    );
    if whole {
        return same(payload, expected, STAMP_BYTES..len);
    }
    same(payload, expected, sample(len, exchange))?;
    same(payload, expected, len - STAMP_BYTES..len)
}

/// The moving window of exchange `exchange`, past the stamp.
fn sample(len: usize, exchange: u64) -> Range<usize> {
    let span = len - STAMP_BYTES;
    let window = SAMPLE_BYTES.min(span);
    // Spread the windows over the payload: a large odd multiplier walks through every offset.
    let start = STAMP_BYTES + (exchange as usize).wrapping_mul(40_503) % (span - window + 1);
    start..start + window
}

fn same(payload: &[u8], expected: &[u8], range: Range<usize>) -> Result<()> {
    let (Some(got), Some(want)) = (payload.get(range.clone()), expected.get(range.clone())) else {
        bail!("bytes {range:?} are out of the payload");
    };
    // Slice equality is a memcmp; the byte-by-byte search only runs to name the first difference.
    if got == want {
        return Ok(());
    }
    if let Some(offset) = got.iter().zip(want).position(|(g, w)| g != w) {
        bail!(
            "byte {} differs from the pattern (bytes {range:?} checked)",
            range.start + offset
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload_len: usize, exchange: u64) -> Vec<u8> {
        let mut out = Outbound::new(payload_len).unwrap();
        out.stamp(exchange);
        out.bytes().to_vec()
    }

    #[test]
    fn a_sent_frame_is_received_and_the_stream_end_is_seen() {
        let mut bytes = frame(1000, 0);
        bytes.extend(frame(1000, 1));
        let mut inbound = Inbound::new(1000, 1);
        let mut stream = bytes.as_slice();
        assert!(inbound.receive(&mut stream, 0).unwrap());
        assert!(inbound.receive(&mut stream, 1).unwrap());
        assert!(!inbound.receive(&mut stream, 2).unwrap());
    }

    #[test]
    fn a_lost_frame_is_caught_by_the_stamp() {
        let bytes = frame(1000, 1);
        let err = Inbound::new(1000, 0)
            .receive(&mut bytes.as_slice(), 0)
            .unwrap_err();
        assert!(format!("{err:#}").contains("stamp"), "{err:#}");
    }

    #[test]
    fn a_truncated_frame_is_an_error() {
        let bytes = frame(1000, 0);
        let mut stream = &bytes[..bytes.len() - 1];
        assert!(Inbound::new(1000, 0).receive(&mut stream, 0).is_err());
        let mut header_only = &bytes[..2];
        assert!(Inbound::new(1000, 0).receive(&mut header_only, 0).is_err());
    }

    #[test]
    fn a_frame_of_another_size_is_an_error() {
        let bytes = frame(999, 0);
        assert!(Inbound::new(1000, 0)
            .receive(&mut bytes.as_slice(), 0)
            .is_err());
    }

    #[test]
    fn the_whole_comparison_catches_a_corrupted_byte_anywhere() {
        let len = 4096;
        let bytes = frame(len, 0);
        for at in [HEADER_BYTES + STAMP_BYTES, HEADER_BYTES + len / 2] {
            let mut corrupted = bytes.clone();
            corrupted[at] ^= 1;
            let err = Inbound::new(len, 1)
                .receive(&mut corrupted.as_slice(), 0)
                .unwrap_err();
            assert!(format!("{err:#}").contains("differs"), "{err:#}");
        }
    }

    #[test]
    fn the_sampled_checks_catch_a_corrupted_tail() {
        let len = 4096;
        let mut bytes = frame(len, 3);
        *bytes.last_mut().unwrap() ^= 0xff;
        assert!(Inbound::new(len, 0)
            .receive(&mut bytes.as_slice(), 3)
            .is_err());
    }

    #[test]
    fn the_sample_window_stays_inside_the_payload() {
        for len in [MIN_PAYLOAD, 17, 64, 72, 73, 1 << 20] {
            for exchange in 0..1000 {
                let range = sample(len, exchange);
                assert!(
                    range.start >= STAMP_BYTES && range.end <= len,
                    "{len} {range:?}"
                );
            }
        }
    }

    #[test]
    fn a_shifted_pattern_does_not_match() {
        let p = pattern(2000);
        let shifted: Vec<u8> = p.iter().skip(1).chain([0].iter()).copied().collect();
        assert!(same(&shifted, &p, STAMP_BYTES..1000).is_err());
    }
}
