//! Security records are read back from two places a node does not control byte by byte: the file
//! store's log and commit record on disk (damage, a copy cut short, a file from something else),
//! and the messages of the `kafka` store's compacted topic (anyone who may write the topic).
//! Neither may panic or size an allocation by what it reads; a record that decodes encodes back to
//! itself, so what a node reads is what it would have written.
//!
//! The first byte picks the input's shape:
//! - 0: the file store's commit file (64 bytes) and log image as they are;
//! - 1: a log whose frames carry the rest as payloads with valid checksums (each payload a 2-byte
//!   length and its bytes), so the JSON of the records is reached;
//! - 2: a message of the topic: a 2-byte key length, the key, the value (an empty value is a
//!   tombstone).
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::store::StoredRecord;
use portcullis_plugin_stores::fuzzing;

// The topic's codec, compiled from the kafka store's own source: the fuzz crate does not build
// librdkafka (which the rest of that crate links) for 30 lines of parsing.
#[allow(dead_code)]
#[path = "../../plugins/kafka-store/src/codec.rs"]
mod codec;

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    match shape % 3 {
        0 => {
            let (commit, image) = rest.split_at(rest.len().min(64));
            if let Ok(records) = fuzzing::analyse(commit, image) {
                round_trip(&records);
            }
        }
        1 => {
            let (commit, image) = fuzzing::log_image(payloads(rest));
            if let Ok(records) = fuzzing::analyse(&commit, &image) {
                round_trip(&records);
            }
        }
        _ => topic_message(rest),
    }
});

/// The records a log held are read again from a log that holds only them.
fn round_trip(records: &[StoredRecord]) {
    let (commit, image) = fuzzing::encode_log(records);
    if image.is_empty() {
        return;
    }
    match fuzzing::analyse(&commit, &image) {
        Ok(again) => assert_eq!(again, records),
        Err(error) => panic!("a log the store wrote does not open: {error}"),
    }
}

/// A 2-byte length and what follows it, cut at that length (or at the end).
fn length_prefixed(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (length, body) = bytes.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_be_bytes(*length));
    Some(body.split_at(len.min(body.len())))
}

fn payloads(mut rest: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let Some((payload, tail)) = length_prefixed(rest) {
        out.push(payload);
        rest = tail;
    }
    out
}

fn topic_message(rest: &[u8]) {
    let Some((key, value)) = length_prefixed(rest) else {
        return;
    };
    let value = (!value.is_empty()).then_some(value);
    if let Ok(codec::Decoded::Record(record)) = codec::decode(Some(key), value) {
        let (key, value) = codec::encode(&record);
        match codec::decode(Some(&key), value.as_deref()) {
            Ok(codec::Decoded::Record(again)) => assert_eq!(again, record),
            other => panic!("a record the store encodes does not decode: {other:?}"),
        }
    }
}
