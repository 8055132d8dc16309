//! Before authentication: ApiVersions, SaslHandshake and the SASL exchange. Nothing else is
//! accepted, and no other request body is parsed (CVE-2022-34917's lesson). The handshake
//! machinery is in [`super::handshake`], the exchange's steps in [`super::sasl_step`].

use bytes::Bytes;
use kafka_protocol::messages::ApiVersionsRequest;

use super::action::Action;
use super::close::{CloseReason, IllegalState};
use super::handshake::{decode_handshake, handshake_ok, start_exchange, unsupported_mechanism};
use super::request_error::RequestError;
use super::responses::{self, API_VERSIONS_MAX};
use super::transition::{fail_silently, respond_or_close, Transition};
use super::{Connection, State};
use crate::errors::ErrorCode;
use crate::protocol::api::{API_VERSIONS, SASL_HANDSHAKE};
use crate::protocol::codec::decode_body;
use crate::protocol::header;

/// The first frames of a connection: ApiVersions (only as the very first request) and SaslHandshake.
pub(super) fn on_first_frames(
    conn: &Connection,
    frame: Bytes,
    now_ms: i64,
    first: bool,
) -> Transition {
    let (api_key, _, _) = match header::peek_ids(&frame) {
        Ok(ids) => ids,
        Err(e) => return fail_silently(conn, CloseReason::InvalidRequest(e.into())),
    };
    match api_key {
        API_VERSIONS if first => api_versions(conn, &frame),
        // Kafka treats a second ApiVersions before the handshake as an internal illegal state and
        // closes at once, without a response.
        API_VERSIONS => (
            State::Failed,
            vec![Action::Close(IllegalState::SecondApiVersions.into())],
        ),
        SASL_HANDSHAKE => handshake(conn, &frame, now_ms),
        other => fail_silently(
            conn,
            IllegalState::DuringHandshake { api_key: other }.into(),
        ),
    }
}

fn api_versions(conn: &Connection, frame: &Bytes) -> Transition {
    let (_, version, correlation_id) = match header::peek_ids(frame) {
        Ok(ids) => ids,
        Err(e) => return fail_silently(conn, CloseReason::InvalidRequest(e.into())),
    };
    if !(0..=API_VERSIONS_MAX).contains(&version) {
        // The client may retry with a version we support: stay in the initial state.
        return respond_or_close(
            State::Initial,
            responses::api_versions_unsupported(correlation_id),
        );
    }
    let parsed = header::parse(frame)
        .map_err(|e| e.to_string())
        .and_then(|h| {
            let body = frame.get(h.header_len..).unwrap_or_default();
            decode_body::<ApiVersionsRequest>("ApiVersions", body, version)
                .map_err(|e| e.to_string())
        });
    match parsed {
        Ok(_request) => {
            let table = conn.config.api_versions.load();
            respond_or_close(
                State::VersionsSeen,
                responses::api_versions(&table, version, correlation_id),
            )
        }
        Err(_) => respond_or_close(
            State::Initial,
            responses::api_versions_error(ErrorCode::INVALID_REQUEST, version, correlation_id),
        ),
    }
}

fn handshake(conn: &Connection, frame: &Bytes, now_ms: i64) -> Transition {
    let handshake = match header::parse(frame)
        .map_err(RequestError::from)
        .and_then(|header| decode_handshake(&header, frame))
    {
        Ok(h) => h,
        Err(reason) => return fail_silently(conn, CloseReason::InvalidRequest(reason)),
    };
    let Some(mechanism) = conn.config.services.mechanism(&handshake.mechanism) else {
        return unsupported_mechanism(conn, &handshake);
    };
    let auth = start_exchange(conn, mechanism, &handshake, now_ms, false);
    respond_or_close(State::Authenticating(auth), handshake_ok(conn, &handshake))
}
