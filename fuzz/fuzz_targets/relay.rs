//! The incremental response relay (`host/src/server/relay.rs`) sees every byte the upstream sends
//! a client connection. The input picks the requests awaiting answers (correlation id and mode),
//! the size of each read, and the upstream's bytes; the relay's output is checked against a
//! whole-stream reference parse (also when the rest of a streamed response bypasses the buffer, as
//! a splice does): every response relayed or handed over whole is exactly its bytes,
//! no byte of a response is passed before its size and correlation id are checked, and an error
//! comes exactly where the reference finds the stream wrong.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The relay is sans-I/O and uses only the standard library; compiling the module here keeps the
// host's runtime (tokio, rustls, …) out of the fuzz build.
#[path = "../../host/src/server/relay.rs"]
#[allow(dead_code, reason = "the fuzz target uses part of the module")]
mod relay;

use relay::{Expected, Mode, Relay, RelayError, Step};

const MAX_WHOLE: usize = 512;

/// What the reference parse expects for each awaited response.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The response's bytes (size prefix included).
    Complete(Vec<u8>),
    /// The stream ends inside it (or before its header).
    Incomplete,
    Error(RelayError),
}

fn reference(stream: &[u8], awaited: &[Expected]) -> (Vec<Outcome>, Option<Outcome>) {
    let mut at = 0;
    let mut outcomes = Vec::new();
    for expected in awaited {
        let Some(outcome) = parse_one(stream.get(at..).unwrap_or_default(), Some(*expected)) else {
            outcomes.push(Outcome::Incomplete);
            return (outcomes, None);
        };
        match outcome {
            Outcome::Complete(bytes) => {
                at += bytes.len();
                outcomes.push(Outcome::Complete(bytes));
            }
            other => {
                outcomes.push(other);
                return (outcomes, None);
            }
        }
    }
    // Past the last awaited response, any response is unexpected.
    let trailing = parse_one(stream.get(at..).unwrap_or_default(), None);
    (outcomes, trailing)
}

/// One response at the start of `bytes`; `None` if they end before it is decided.
fn parse_one(bytes: &[u8], expected: Option<Expected>) -> Option<Outcome> {
    let size = i32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
    if size < 0 {
        return Some(Outcome::Error(RelayError::NegativeSize(size)));
    }
    let size = size as usize;
    if size < 4 {
        return Some(Outcome::Error(RelayError::TooShort(size)));
    }
    let got = i32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?);
    let Some(expected) = expected else {
        return Some(Outcome::Error(RelayError::OutOfOrder { expected: -1, got }));
    };
    if got != expected.correlation_id {
        return Some(Outcome::Error(RelayError::OutOfOrder {
            expected: expected.correlation_id,
            got,
        }));
    }
    if expected.mode == Mode::Whole && size > MAX_WHOLE {
        return Some(Outcome::Error(RelayError::TooLarge {
            size,
            max: MAX_WHOLE,
        }));
    }
    match bytes.get(..size + 4) {
        Some(frame) => Some(Outcome::Complete(frame.to_vec())),
        None => Some(Outcome::Incomplete),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&count, rest)) = data.split_first() else {
        return;
    };
    let count = usize::from(count % 8);
    let Some(spec) = rest.get(..count * 2) else {
        return;
    };
    let rest = rest.get(count * 2..).unwrap_or_default();
    let awaited: Vec<Expected> = spec
        .chunks_exact(2)
        .map(|pair| Expected {
            correlation_id: i32::from(pair.first().copied().unwrap_or(0) % 4),
            mode: if pair.get(1).copied().unwrap_or(0) % 2 == 0 {
                Mode::Stream
            } else {
                Mode::Whole
            },
        })
        .collect();
    let Some((&chunk, stream)) = rest.split_first() else {
        return;
    };
    // The rest of a streamed response may bypass the buffer, as the response side splices it.
    let splice = chunk & 0x40 != 0;
    let chunk = usize::from(chunk % 64) + 1;

    let (expected_outcomes, trailing) = reference(stream, &awaited);

    let mut relay = Relay::new(MAX_WHOLE);
    let mut buffer: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut index = 0; // the awaited response being answered
    let mut current: Vec<u8> = Vec::new(); // bytes relayed of it so far
    let mut outcomes = Vec::new();
    let mut error = None;
    'feed: loop {
        loop {
            let head = awaited.get(index).copied();
            match relay.step(&buffer, head) {
                Ok(Step::Pass { len, last }) => {
                    assert!(
                        len > 0 && len <= buffer.len(),
                        "pass of {len} with {} buffered",
                        buffer.len()
                    );
                    let Some(head) = head else {
                        panic!("a pass answers an awaited response");
                    };
                    assert_eq!(head.mode, Mode::Stream);
                    if current.is_empty() {
                        assert!(len >= 8, "bytes passed before the header was checked");
                    }
                    current.extend(buffer.drain(..len));
                    if last {
                        outcomes.push(Outcome::Complete(std::mem::take(&mut current)));
                        index += 1;
                    }
                }
                Ok(Step::Whole { len }) => {
                    let Some(head) = head else {
                        panic!("a whole response answers an awaited one");
                    };
                    assert_eq!(head.mode, Mode::Whole);
                    assert!(current.is_empty());
                    assert!(buffer.len() >= len + 4);
                    let prefix = (len as i32).to_be_bytes();
                    assert_eq!(buffer.get(..4), Some(&prefix[..]));
                    outcomes.push(Outcome::Complete(buffer.drain(..len + 4).collect()));
                    index += 1;
                }
                Ok(Step::Read { missing }) => {
                    assert!(missing > 0);
                    let rest = relay.rest_of_response();
                    if splice && rest > 0 && fed < stream.len() {
                        // Only inside a response whose header was checked, with nothing buffered.
                        assert_eq!(missing, rest);
                        assert!(buffer.is_empty());
                        assert!(current.len() >= 8, "spliced before the header was checked");
                        let end = (fed + chunk.min(rest)).min(stream.len());
                        let direct = stream.get(fed..end).unwrap_or_default();
                        current.extend_from_slice(direct);
                        fed = end;
                        if relay.passed_directly(direct.len()) {
                            outcomes.push(Outcome::Complete(std::mem::take(&mut current)));
                            index += 1;
                        }
                        continue;
                    }
                    break;
                }
                Err(e) => {
                    error = Some(e);
                    break 'feed;
                }
            }
        }
        if fed >= stream.len() {
            break;
        }
        let end = (fed + chunk).min(stream.len());
        buffer.extend_from_slice(stream.get(fed..end).unwrap_or_default());
        fed = end;
    }

    // Compare with the reference, response by response.
    for (i, want) in expected_outcomes.iter().enumerate() {
        match want {
            Outcome::Complete(bytes) => assert_eq!(
                outcomes.get(i),
                Some(&Outcome::Complete(bytes.clone())),
                "response {i}"
            ),
            Outcome::Incomplete => {
                assert_eq!(outcomes.len(), i, "response {i} is incomplete");
                assert!(error.is_none(), "error {error:?} on an incomplete response");
            }
            Outcome::Error(e) => {
                assert_eq!(outcomes.len(), i);
                assert_eq!(error, Some(*e), "response {i}");
                assert!(current.is_empty(), "bytes of a wrong response were passed");
            }
        }
    }
    if expected_outcomes
        .iter()
        .all(|o| matches!(o, Outcome::Complete(_)))
    {
        assert_eq!(outcomes.len(), awaited.len());
        match trailing {
            Some(Outcome::Error(e)) => assert_eq!(error, Some(e)),
            _ => assert!(error.is_none(), "unexpected error {error:?}"),
        }
    }
});
