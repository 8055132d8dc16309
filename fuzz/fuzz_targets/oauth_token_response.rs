//! A token endpoint's answer comes from the network (the upstream OAuth login modules): the JSON
//! body, the access token's JWT payload inside it, and a refusal's `error` code. None may panic; an
//! accepted token keeps its text and a non-blank principal, and an error never holds the token.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis_plugin_login::oauth_token::{error_code, parse_access_token, parse_token_response};

fuzz_target!(|data: &[u8]| {
    let _ = error_code(data);
    if let Ok(token) = parse_token_response(data, "sub") {
        assert!(!token.principal.trim().is_empty());
        assert!(!token.token.expose().is_empty());
    }
    if let Ok(text) = std::str::from_utf8(data) {
        match parse_access_token(text, "sub") {
            Ok(token) => assert_eq!(token.token.expose(), text),
            // The messages are fixed texts without a '.', so one that held a token with a dot
            // would show it (a dot-free input may equal a message: the fuzzer found that).
            Err(error) if text.contains('.') => assert!(!error.to_string().contains(text)),
            Err(_) => {}
        }
    }
});
