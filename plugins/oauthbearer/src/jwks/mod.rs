//! The JWKS validator: signed JWTs checked against a key set the host fetches and refreshes,
//! with Kafka's KIP-768 semantics (`OAuthBearerValidatorCallbackHandler`) plus ours.
//!
//! - Algorithms: RS256/384/512, PS256/384/512, ES256/384, EdDSA. `none` and HS* are always
//!   refused, and `oct` keys are never loaded, so no key set makes an HMAC token verify.
//! - The key must fit the token's `alg`: its `kty` (and `crv`), and its own `alg` when it names
//!   one. A token without `kid` is tried against the keys that fit (at most
//!   [`MAX_KEYLESS_CANDIDATES`]), as jose4j does under Kafka.
//! - Claims: `exp` and `iat` required (numbers ≥ 0), `nbf` honoured, the skew applied to all
//!   three; audience any-of; issuer exact; the sub claim non-blank, trimmed; a scope string is
//!   split on spaces (Kafka keeps it whole); groups; required claims and scopes (see
//!   [`crate::ClaimRules`]). With no `expected_audience`, a token naming an audience is refused,
//!   as jose4j does under Kafka.
//! - An unknown `kid` asks the host for a refresh through [`KeyRefresh`], rate-limited
//!   ([`RefreshLimits`]), and the token is refused: the next login after the refresh succeeds.
//!   The SASL step never waits for the network.

mod alg;
mod keyset;
mod limiter;
mod validator;
mod verify;

pub use keyset::{KeySet, KeySetError, SharedKeySet, MAX_KEYS, MAX_KEY_SET_LEN};
pub use limiter::RefreshLimits;
pub use validator::{JwksValidator, KeyRefresh, NoRefresh, MAX_KEYLESS_CANDIDATES};
