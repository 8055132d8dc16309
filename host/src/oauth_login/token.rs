//! What a token endpoint answers: parsed sans-I/O in `portcullis_plugin_login::oauth_token`
//! (fuzzed there); the host only fetches it.

pub use portcullis_plugin_login::oauth_token::{
    error_code, parse_access_token, parse_token_response, AccessToken, TokenResponseError,
};
