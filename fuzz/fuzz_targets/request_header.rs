//! The request header parser and the Produce `acks` peek see every byte a client sends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::protocol::{header, produce};

fuzz_target!(|data: &[u8]| {
    let frame = bytes::Bytes::copy_from_slice(data);
    if let Ok(h) = header::parse(&frame) {
        assert!(h.header_len <= data.len());
        let body = data.get(h.header_len..).unwrap_or_default();
        let _ = produce::expects_response(h.api_version, body);
    }
    let _ = header::peek_ids(data);
});
