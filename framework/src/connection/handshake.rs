//! The SaslHandshake machinery shared by a first authentication and a re-authentication:
//! decoding it, answering it, and starting the chosen mechanism's exchange.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::SaslHandshakeRequest;

use super::action::Action;
use super::close::CloseReason;
use super::delays::protocol_failure_delay;
use super::request_error::RequestError;
use super::responses;
use super::transition::{fail_silently, Transition};
use super::{Authenticating, Connection, SaslFraming, State};
use crate::errors::ErrorCode;
use crate::events::Event;
use crate::protocol::codec::{decode_body, CodecError};
use crate::protocol::header::RequestHeader;
use crate::sasl::{ExchangeContext, SaslMechanism};

/// A decoded SaslHandshake.
pub(super) struct Handshake {
    pub(super) version: i16,
    pub(super) correlation_id: i32,
    pub(super) mechanism: String,
}

/// Decodes a SaslHandshake frame.
pub(super) fn decode_handshake(
    header: &RequestHeader,
    frame: &Bytes,
) -> Result<Handshake, RequestError> {
    let body = frame.get(header.header_len..).unwrap_or_default();
    let request = decode_body::<SaslHandshakeRequest>("SaslHandshake", body, header.api_version)?;
    Ok(Handshake {
        version: header.api_version,
        correlation_id: header.correlation_id,
        mechanism: request.mechanism.as_str().to_owned(),
    })
}

/// Answers a handshake for a mechanism that is not enabled: UNSUPPORTED_SASL_MECHANISM with the
/// enabled list, then a delayed close.
pub(super) fn unsupported_mechanism(conn: &Connection, handshake: &Handshake) -> Transition {
    conn.config
        .services
        .events
        .publish(Event::AuthenticationFailed {
            mechanism: None,
            client_address: conn.client_address,
            reason: "unsupported SASL mechanism".into(),
        });
    let enabled = conn.config.services.enabled_mechanism_names();
    let response = responses::handshake(
        ErrorCode::UNSUPPORTED_SASL_MECHANISM,
        &enabled,
        handshake.version,
        handshake.correlation_id,
    );
    match response {
        Ok(bytes) => (
            State::Failed,
            vec![
                Action::Respond(bytes),
                Action::CloseAfter(protocol_failure_delay(conn)),
            ],
        ),
        Err(e) => fail_silently(conn, CloseReason::InvalidRequest(e.into())),
    }
}

/// Starts an exchange for an enabled mechanism.
pub(super) fn start_exchange(
    conn: &Connection,
    mechanism: Arc<dyn SaslMechanism>,
    handshake: &Handshake,
    now_ms: i64,
    reauthentication: bool,
) -> Authenticating {
    let context = ExchangeContext::new(conn.client_address, conn.config.listener.clone(), now_ms);
    let exchange = mechanism.start(&context);
    let framing = if handshake.version == 0 {
        SaslFraming::Raw
    } else {
        SaslFraming::Framed
    };
    let span = tracing::info_span!(
        target: crate::telemetry::SPAN_TARGET,
        "sasl.authenticate",
        sasl.mechanism = mechanism.name(),
        sasl.reauthentication = reauthentication,
        sasl.outcome = tracing::field::Empty,
        sasl.failure = tracing::field::Empty,
        enduser.id = tracing::field::Empty,
    );
    Authenticating {
        mechanism,
        exchange,
        framing,
        started_at_ms: now_ms,
        span,
    }
}

/// The successful handshake response.
pub(super) fn handshake_ok(conn: &Connection, handshake: &Handshake) -> Result<Bytes, CodecError> {
    responses::handshake(
        ErrorCode::NONE,
        &conn.config.services.enabled_mechanism_names(),
        handshake.version,
        handshake.correlation_id,
    )
}
