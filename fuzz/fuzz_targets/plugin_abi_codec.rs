//! What crosses the C ABI as bytes: a dynamic plugin's answers (ACL admin results, errors, login
//! credentials) and the host's arguments to it (events, credentials, string maps). The host must
//! survive whatever a faulty plugin returns, and a plugin built on this crate whatever a host
//! sends: no decoder may panic, and a value that decodes encodes to bytes that decode to a value
//! with the same encoding (some of these types hold secrets and have no `==`).
//!
//! The first byte picks the decoder; the rest is its input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::plugin_api::abi::codec::*;

macro_rules! round_trip {
    ($bytes:expr, $decode:ident, $encode:ident) => {
        if let Ok(value) = $decode($bytes) {
            let encoded = $encode(&value);
            let Ok(again) = $decode(&encoded) else {
                panic!("an encoded value does not decode");
            };
            assert_eq!($encode(&again), encoded);
        }
    };
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 11 {
        0 => round_trip!(bytes, decode_string_map, encode_string_map),
        1 => round_trip!(bytes, decode_byte_list, encode_byte_list),
        2 => round_trip!(bytes, decode_bindings, encode_bindings),
        3 => round_trip!(bytes, decode_filters, encode_filters),
        4 => round_trip!(bytes, decode_create_results, encode_create_results),
        5 => round_trip!(bytes, decode_delete_result, encode_delete_result),
        6 => round_trip!(bytes, decode_plugin_error, encode_plugin_error),
        7 => {
            // Infallible: whatever a plugin returns becomes some principal error.
            let error = decode_principal_error(bytes);
            assert_eq!(
                decode_principal_error(&encode_principal_error(&error)),
                error
            );
        }
        8 => round_trip!(bytes, decode_event, encode_event),
        9 => {
            round_trip!(bytes, decode_scram_credential, encode_scram_credential);
            round_trip!(bytes, decode_token_credential, encode_token_credential);
        }
        _ => round_trip!(
            bytes,
            decode_expiring_credential,
            encode_expiring_credential
        ),
    }
});
