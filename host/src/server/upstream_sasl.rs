//! Logging in to the upstream with the node's [`LoginModule`]: SaslHandshake, then
//! SaslAuthenticate rounds, on whatever carries Portcullis' own round trips (a fresh connection,
//! or a client's connection through its response queue), and when to log in again (KIP-368).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use portcullis::login::LoginModule;
use portcullis::protocol::versions::ApiVersionTable;
use tokio::time::Instant;

use super::upstream_calls::{call, pick_version, RoundTrip};
use super::upstream_error::UpstreamError;

/// SASL exchanges that need more rounds than this are broken.
const MAX_SASL_ROUNDS: usize = 16;

/// The login module as upstream connections hold it: a connection that re-authenticates keeps
/// the one it logged in with (a re-authentication must use the same mechanism), so a module a
/// reload replaced lives on while such a connection does, and its credential refresh stops when
/// the last one is gone (see `services::spawn_credential_refresh`).
pub struct ActiveLogin {
    /// The module.
    pub module: Arc<dyn LoginModule>,
}

/// Where new upstream connections find the login module of the moment; a reload stores another.
pub type LoginSlot = arc_swap::ArcSwap<ActiveLogin>;

/// A slot holding `module`.
pub fn login_slot(module: Arc<dyn LoginModule>) -> Arc<LoginSlot> {
    Arc::new(LoginSlot::from_pointee(ActiveLogin { module }))
}

/// When and how to re-authenticate an upstream session.
pub(super) struct Reauth {
    pub(super) login: Arc<ActiveLogin>,
    pub(super) authenticate_version: i16,
    pub(super) due: Instant,
}

/// SaslHandshake v1, then SaslAuthenticate rounds until the login module's exchange is done;
/// returns when to re-authenticate, if the upstream gave the session a lifetime.
pub(super) async fn authenticate<T: RoundTrip + Send>(
    transport: &mut T,
    address: &str,
    login: &Arc<ActiveLogin>,
    authenticate_version: i16,
) -> Result<Option<Reauth>, UpstreamError> {
    let handshake = SaslHandshakeRequest::default()
        .with_mechanism(StrBytes::from_string(login.module.mechanism().to_owned()));
    let response: SaslHandshakeResponse =
        call(transport, ApiKey::SaslHandshake, 1, &handshake).await?;
    if response.error_code != 0 {
        let enabled: Vec<String> = response.mechanisms.iter().map(|m| m.to_string()).collect();
        return Err(UpstreamError::Refused {
            api: "SaslHandshake",
            code: response.error_code,
            message: Some(format!("upstream enables {enabled:?}")),
        });
    }
    let mut exchange = portcullis_plugin_login::start_exchange(login.module.as_ref())?;
    let mut token = exchange.initial()?;
    for _ in 0..MAX_SASL_ROUNDS {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        // The upstream's session starts when it reads the last SaslAuthenticate, later than this.
        // Counting from here keeps the re-authentication inside the session however long its
        // answer takes to come back (through the response side, under load).
        let sent = Instant::now();
        let response: SaslAuthenticateResponse = call(
            transport,
            ApiKey::SaslAuthenticate,
            authenticate_version,
            &request,
        )
        .await?;
        if response.error_code != 0 {
            return Err(UpstreamError::Refused {
                api: "SaslAuthenticate",
                code: response.error_code,
                message: response.error_message.map(|m| m.to_string()),
            });
        }
        match exchange.step(&response.auth_bytes)? {
            Some(next) => token = next,
            None if exchange.is_complete() => {
                tracing::debug!(%address, lifetime_ms = response.session_lifetime_ms, "upstream session authenticated");
                return Ok((response.session_lifetime_ms > 0).then(|| Reauth {
                    login: Arc::clone(login),
                    authenticate_version,
                    due: sent + reauth_delay(response.session_lifetime_ms, rand::random::<f64>()),
                }));
            }
            None => return Err(UpstreamError::Incomplete),
        }
    }
    Err(UpstreamError::Incomplete)
}

/// The SaslAuthenticate version to use with an upstream that supports `versions`.
pub(super) fn authenticate_version(versions: &ApiVersionTable) -> Result<i16, UpstreamError> {
    if versions
        .range(ApiKey::SaslHandshake as i16)
        .is_some_and(|(_, max)| max < 1)
    {
        return Err(UpstreamError::Unsupported("SaslHandshake v1"));
    }
    // Without a table (it is learned at discovery) v1 is the safe choice: every Kafka since 1.0.
    Ok(pick_version(versions, ApiKey::SaslAuthenticate, 2).unwrap_or(1))
}

/// When to re-authenticate a session of `lifetime_ms`: a uniformly jittered point between 85 %
/// and 95 % of the lifetime (`random` in `[0, 1)`), as the Java client does (KIP-368).
pub fn reauth_delay(lifetime_ms: i64, random: f64) -> Duration {
    let fraction = 0.85 + 0.10 * random.clamp(0.0, 1.0);
    Duration::from_millis((lifetime_ms.max(0) as f64 * fraction) as u64)
}
