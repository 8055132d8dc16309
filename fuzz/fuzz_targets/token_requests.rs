//! The delegation-token request decoders (framework/src/local/delegation_tokens/decode.rs) on
//! arbitrary bytes at every version, in and out of range: they return a value or `Malformed`,
//! never panic, and never allocate more than the input could describe.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::local::delegation_tokens::decode;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let version = i16::from(selector >> 2) - 8;
    match selector & 0x03 {
        0 => {
            if let Ok(create) = decode::create(body, version) {
                assert!(create.renewers.len() <= body.len());
            }
        }
        1 => {
            if let Ok(h) = decode::hmac_and_period(body, version) {
                assert!(h.hmac.len() <= body.len());
            }
        }
        _ => {
            if let Ok(Some(owners)) = decode::describe(body, version) {
                assert!(owners.len() <= body.len());
            }
        }
    }
});
