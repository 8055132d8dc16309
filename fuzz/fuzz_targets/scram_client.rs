//! The SCRAM client parses server-first and server-final from the upstream broker: fuzz both.
//! Input: `server-first, NUL, server-final`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::credentials::ScramMechanism;
use portcullis::login::SaslClientExchange;
use portcullis::secret::Secret;
use portcullis_plugin_scram::{messages, ScramClient};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |&b| b == 0);
    let first = parts.next().unwrap_or_default();
    let last = parts.next().unwrap_or_default();
    let mut client = ScramClient::new(ScramMechanism::Sha256, "alice", Secret::new("pw"));
    let Ok(_) = client.initial() else {
        panic!("initial message for a valid user must succeed");
    };
    // The client nonce is random, so a server-first the fuzzer wrote is refused at the nonce
    // check unless it gets lucky; the parsers in front of it are what this target exercises.
    if let Ok(Some(_)) = client.step(first) {
        let _ = client.step(last);
        // A server signature cannot be forged without the password.
        assert!(!client.is_complete());
    }
    // The client's random nonce keeps the fuzzer from reaching server-final through the
    // exchange, so its parser is fed directly.
    let _ = messages::parse_server_final(last);
});
