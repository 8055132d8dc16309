//! Cutting the upstream's byte stream into responses as the bytes arrive, without waiting for a
//! response's end when it can go to the client unchanged (sans-I/O: it sees buffered bytes and
//! says what to do with them; the response side of a connection does the reading and writing).
//!
//! The upstream answers a connection's requests in order, so the next response always belongs to
//! the oldest request still awaiting one, which the caller names with an [`Expected`]: its
//! correlation id and its [`Mode`]. The size prefix and the correlation id (the first 8 bytes) are
//! checked before any byte of a response is passed on; a response with another correlation id, a
//! negative size or one too short to hold a correlation id is an error (the connection is closed).
//!
//! - [`Mode::Stream`]: a response that needs no change is relayed as it comes, size prefix
//!   included, in as many [`Step::Pass`] pieces as the reads deliver. Until its last byte is
//!   passed the relay stays inside it, whatever the caller expects next.
//! - [`Mode::Whole`]: a response that is filtered, rewritten, or answers Portcullis' own request
//!   is handed over once complete ([`Step::Whole`]).
//!
//! This module uses nothing but the standard library: the fuzz target `relay` compiles it on its
//! own.

use std::fmt;

/// How the response at the head of a connection's queue goes to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Relayed as its bytes arrive: nothing in it changes.
    Stream,
    /// Collected whole first: it is filtered or rewritten, or it is Portcullis' own.
    Whole,
}

/// The response the upstream must send next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The correlation id of the request it answers.
    pub correlation_id: i32,
    /// How it is forwarded.
    pub mode: Mode,
}

/// What to do with the buffered upstream bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing more can be done before more bytes arrive; `missing` more are needed at least.
    Read {
        /// Bytes still needed for the next step (the rest of a whole response, of a header, or
        /// of a streamed response).
        missing: usize,
    },
    /// The first `len` buffered bytes go to the client as they are; `last` when they end the
    /// response (its queue entry is answered).
    Pass {
        /// Bytes to relay.
        len: usize,
        /// Whether they complete the response.
        last: bool,
    },
    /// The first `4 + len` buffered bytes are one whole response: its size prefix, then `len`
    /// bytes (correlation id first).
    Whole {
        /// The response's size (without its prefix).
        len: usize,
    },
}

/// An upstream byte stream that is not the answer to the requests sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayError {
    /// A size prefix below zero.
    NegativeSize(i32),
    /// A response too short to carry a correlation id.
    TooShort(usize),
    /// A response to be collected whole that is larger than allowed.
    TooLarge {
        /// Its announced size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A response that answers another request (`expected` is -1 when none was awaited).
    OutOfOrder {
        /// The correlation id awaited.
        expected: i32,
        /// The correlation id received.
        got: i32,
    },
}

impl fmt::Display for RelayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NegativeSize(size) => write!(f, "upstream sent a negative response size {size}"),
            Self::TooShort(size) => write!(
                f,
                "upstream sent a {size}-byte response, too short for a correlation id"
            ),
            Self::TooLarge { size, max } => write!(
                f,
                "upstream sent a {size}-byte response, more than the {max} bytes allowed"
            ),
            Self::OutOfOrder { expected, got } => {
                write!(
                    f,
                    "upstream answered correlation id {got}, expected {expected}"
                )
            }
        }
    }
}

impl std::error::Error for RelayError {}

/// The size prefix and the correlation id.
const HEADER: usize = 8;

/// Where the relay is in the upstream's byte stream.
#[derive(Debug)]
pub struct Relay {
    /// Bytes of the streamed response being relayed that are still to come (0: between responses).
    remaining: usize,
    /// The largest response collected whole.
    max_whole: usize,
}

impl Relay {
    /// A relay at the start of a stream; responses collected whole may be up to `max_whole` bytes.
    pub fn new(max_whole: usize) -> Self {
        Self {
            remaining: 0,
            max_whole,
        }
    }

    /// Whether a streamed response has been partly relayed: its remaining bytes must follow
    /// before anything else is written to the client.
    pub fn inside_response(&self) -> bool {
        self.remaining > 0
    }

    /// Bytes of the streamed response being relayed that have not been passed yet (0 between
    /// responses). With nothing buffered, they may go to the client without the buffer
    /// ([`Relay::passed_directly`]).
    pub fn rest_of_response(&self) -> usize {
        self.remaining
    }

    /// `len` bytes of the streamed response being relayed went to the client straight from the
    /// upstream (spliced), never buffered; the caller moved at most [`Relay::rest_of_response`].
    /// Returns whether they ended the response (its queue entry is answered).
    pub fn passed_directly(&mut self, len: usize) -> bool {
        // More would be bytes of the next response, sent unchecked: the caller asks for no more.
        debug_assert!(len <= self.remaining);
        self.remaining -= len.min(self.remaining);
        self.remaining == 0
    }

    /// The next step for `buffered` (the upstream bytes not yet handed out, from the start of
    /// the stream's next unhandled byte), when the oldest request awaiting an answer is
    /// `expected` (`None`: no request awaits one, so any response is an error).
    ///
    /// After [`Step::Pass`] the caller removes `len` bytes from the front of its buffer, after
    /// [`Step::Whole`] `4 + len`; then it asks again.
    pub fn step(
        &mut self,
        buffered: &[u8],
        expected: Option<Expected>,
    ) -> Result<Step, RelayError> {
        if self.remaining > 0 {
            return Ok(self.pass(buffered.len()));
        }
        let size = match buffered {
            [a, b, c, d, ..] => i32::from_be_bytes([*a, *b, *c, *d]),
            _ => {
                return Ok(Step::Read {
                    missing: HEADER - buffered.len(),
                })
            }
        };
        let size = usize::try_from(size).map_err(|_| RelayError::NegativeSize(size))?;
        if size < 4 {
            return Err(RelayError::TooShort(size));
        }
        let got = match buffered {
            [_, _, _, _, a, b, c, d, ..] => i32::from_be_bytes([*a, *b, *c, *d]),
            _ => {
                return Ok(Step::Read {
                    missing: HEADER - buffered.len(),
                })
            }
        };
        let expected = expected.ok_or(RelayError::OutOfOrder { expected: -1, got })?;
        if got != expected.correlation_id {
            return Err(RelayError::OutOfOrder {
                expected: expected.correlation_id,
                got,
            });
        }
        // At most i32::MAX + 4: no overflow.
        let total = size + 4;
        match expected.mode {
            Mode::Stream => {
                self.remaining = total;
                Ok(self.pass(buffered.len()))
            }
            Mode::Whole if size > self.max_whole => Err(RelayError::TooLarge {
                size,
                max: self.max_whole,
            }),
            Mode::Whole => Ok(match total.checked_sub(buffered.len()) {
                Some(missing) if missing > 0 => Step::Read { missing },
                _ => Step::Whole { len: size },
            }),
        }
    }

    /// Relays what is buffered of the current streamed response.
    fn pass(&mut self, buffered: usize) -> Step {
        if buffered == 0 {
            return Step::Read {
                missing: self.remaining,
            };
        }
        let len = buffered.min(self.remaining);
        self.remaining -= len;
        Step::Pass {
            len,
            last: self.remaining == 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(correlation_id: i32, body: &[u8]) -> Vec<u8> {
        let mut out = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        out.extend_from_slice(&correlation_id.to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn stream(id: i32) -> Option<Expected> {
        Some(Expected {
            correlation_id: id,
            mode: Mode::Stream,
        })
    }

    fn whole(id: i32) -> Option<Expected> {
        Some(Expected {
            correlation_id: id,
            mode: Mode::Whole,
        })
    }

    #[test]
    fn the_rest_of_a_streamed_response_can_bypass_the_buffer() {
        let mut bytes = frame(7, &[1; 92]);
        bytes.extend(frame(8, &[2; 3]));
        let mut relay = Relay::new(1 << 20);
        assert_eq!(relay.rest_of_response(), 0);
        assert_eq!(
            relay.step(&bytes[..20], stream(7)),
            Ok(Step::Pass {
                len: 20,
                last: false
            })
        );
        assert_eq!(relay.rest_of_response(), 80);
        assert_eq!(relay.step(&[], None), Ok(Step::Read { missing: 80 }));
        // 50 bytes spliced, then the last 30.
        assert!(!relay.passed_directly(50));
        assert_eq!(relay.step(&[], None), Ok(Step::Read { missing: 30 }));
        assert!(relay.passed_directly(30));
        assert!(!relay.inside_response());
        // The next response is checked as usual.
        assert_eq!(
            relay.step(&bytes[100..], stream(8)),
            Ok(Step::Pass {
                len: 11,
                last: true
            })
        );
    }

    #[test]
    fn a_streamed_response_is_passed_as_it_arrives_and_stops_at_its_end() {
        let mut bytes = frame(7, &[1; 20]);
        bytes.extend(frame(8, &[2; 3]));
        let mut relay = Relay::new(1 << 20);
        // Not even a header yet.
        assert_eq!(
            relay.step(&bytes[..5], stream(7)),
            Ok(Step::Read { missing: 3 })
        );
        // The header and 2 bytes: passed at once.
        assert_eq!(
            relay.step(&bytes[..10], stream(7)),
            Ok(Step::Pass {
                len: 10,
                last: false
            })
        );
        assert!(relay.inside_response());
        // Inside the response the expected entry does not matter.
        assert_eq!(relay.step(&[], None), Ok(Step::Read { missing: 18 }));
        // The rest and the next response's bytes: only the rest is passed.
        assert_eq!(
            relay.step(&bytes[10..], None),
            Ok(Step::Pass {
                len: 18,
                last: true
            })
        );
        assert!(!relay.inside_response());
        assert_eq!(
            relay.step(&bytes[28..], stream(8)),
            Ok(Step::Pass {
                len: 11,
                last: true
            })
        );
    }

    #[test]
    fn a_whole_response_waits_for_its_last_byte() {
        let bytes = frame(3, &[9; 100]);
        let mut relay = Relay::new(1 << 20);
        assert_eq!(
            relay.step(&bytes[..50], whole(3)),
            Ok(Step::Read { missing: 58 })
        );
        assert_eq!(relay.step(&bytes, whole(3)), Ok(Step::Whole { len: 104 }));
        assert_eq!(
            Relay::new(100).step(&bytes, whole(3)),
            Err(RelayError::TooLarge {
                size: 104,
                max: 100
            })
        );
    }

    #[test]
    fn a_wrong_correlation_id_or_size_is_an_error_before_any_byte_is_passed() {
        let bytes = frame(5, &[0; 10]);
        assert_eq!(
            Relay::new(64).step(&bytes, stream(6)),
            Err(RelayError::OutOfOrder {
                expected: 6,
                got: 5
            })
        );
        assert_eq!(
            Relay::new(64).step(&bytes, None),
            Err(RelayError::OutOfOrder {
                expected: -1,
                got: 5
            })
        );
        assert_eq!(
            Relay::new(64).step(&[0xff, 0xff, 0xff, 0xff], stream(1)),
            Err(RelayError::NegativeSize(-1))
        );
        assert_eq!(
            Relay::new(64).step(&[0, 0, 0, 3, 0, 0, 0], stream(1)),
            Err(RelayError::TooShort(3))
        );
        // Nothing awaited and fewer than 8 bytes: wait to name the correlation id.
        assert_eq!(
            Relay::new(64).step(&bytes[..6], None),
            Ok(Step::Read { missing: 2 })
        );
    }

    #[test]
    fn the_largest_size_does_not_overflow() {
        let mut bytes = i32::MAX.to_be_bytes().to_vec();
        bytes.extend(1i32.to_be_bytes());
        let mut relay = Relay::new(usize::MAX);
        assert_eq!(
            relay.step(&bytes, stream(1)),
            Ok(Step::Pass {
                len: 8,
                last: false
            })
        );
        assert_eq!(
            relay.step(&[], None),
            Ok(Step::Read {
                missing: i32::MAX as usize + 4 - 8
            })
        );
    }
}
