//! KIP-590 Envelopes come from peers over the network: the Envelope request body, the
//! `DefaultPrincipalData` principal inside it, the Envelope response a forwarder reads back, and
//! the inner request the writer runs (`run_on_writer`, which parses its header and routes it to a
//! handler) and whose error answer a forwarder builds (`error_response`). None may panic, and a
//! principal that decodes serializes back to the same bytes.
#![no_main]

use std::sync::Arc;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use portcullis::envelope::{
    decode_request, decode_response, deserialize_principal, parse_ip, serialize_principal,
};
use portcullis::errors::ErrorCode;
use portcullis::local::acls::AclApis;
use portcullis::local::forwarded::{error_response, run_on_writer};
use portcullis::local::LocalHandler;

fuzz_target!(|data: &[u8]| {
    if let Ok(principal) = deserialize_principal(data) {
        assert_eq!(serialize_principal(&principal), data);
    }
    let _ = decode_response(data);
    let _ = error_response(
        &Bytes::copy_from_slice(data),
        ErrorCode::UNKNOWN_SERVER_ERROR,
    );
    let Ok(envelope) = decode_request(data) else {
        return;
    };
    let _ = parse_ip(envelope.client_host);
    let Some(principal) = envelope
        .principal
        .and_then(|p| deserialize_principal(p).ok())
    else {
        return;
    };
    // The writer's side with the ACL handlers and no authorizer (every path answers without a
    // store): the inner request is parsed and answered, never trusted.
    let handlers: Vec<Arc<dyn LocalHandler>> = AclApis::handlers(None).into_iter().collect();
    let inner = Bytes::copy_from_slice(envelope.request_data);
    let _ = run_on_writer(
        &handlers,
        &inner,
        &principal,
        std::net::IpAddr::from([127, 0, 0, 1]),
        "fuzz",
        0,
    );
});
