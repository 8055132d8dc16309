//! Portcullis' own requests on an upstream connection: their correlation ids (a reserved range at
//! the top of `i32`, as the Java client does), the version they are sent at, and one round trip
//! ([`RoundTrip`], [`call`]) whatever carries it.

use std::future::Future;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable};
use portcullis::protocol::versions::ApiVersionTable;

use super::upstream_error::UpstreamError;
use super::wire::{decode_response, encode_request};

/// The lowest correlation id Portcullis uses for its own requests (the Java client's choice).
const RESERVED_CORRELATION_MIN: i32 = i32::MAX - 7;

/// Correlation ids for Portcullis' own requests.
pub(super) struct InternalIds(i32);

impl InternalIds {
    pub(super) fn new() -> Self {
        Self(RESERVED_CORRELATION_MIN)
    }

    pub(super) fn next(&mut self) -> i32 {
        let id = self.0;
        // Stay inside the reserved range however many requests a connection sends.
        self.0 = if id == i32::MAX {
            RESERVED_CORRELATION_MIN
        } else {
            id + 1
        };
        id
    }
}

/// One of Portcullis' own round trips on an upstream connection: send a request frame, get the
/// response frame that carries its correlation id.
pub(super) trait RoundTrip {
    /// The correlation id for the next request.
    fn next_id(&mut self) -> i32;
    /// Sends `frame` and returns the response to `correlation_id`.
    fn round_trip(
        &mut self,
        frame: Bytes,
        correlation_id: i32,
    ) -> impl Future<Output = Result<Bytes, UpstreamError>> + Send;
}

/// Sends one of Portcullis' own requests and decodes its response.
pub(super) fn call<'a, T: RoundTrip + Send, Req: Encodable, Resp: Decodable>(
    transport: &'a mut T,
    api: ApiKey,
    version: i16,
    request: &Req,
) -> impl Future<Output = Result<Resp, UpstreamError>> + Send + 'a {
    let correlation_id = transport.next_id();
    let frame = encode_request(api, version, correlation_id, request);
    async move {
        let response = transport.round_trip(frame?, correlation_id).await?;
        let (_, body) = decode_response::<Resp>(api, version, response)?;
        Ok(body)
    }
}

/// The highest version of `api` that the upstream, kafka-protocol and `ours` all support.
pub fn pick_version(upstream: &ApiVersionTable, api: ApiKey, ours: i16) -> Option<i16> {
    let (min, max) = upstream.range(api as i16)?;
    let known = api.valid_versions();
    let version = max.min(ours).min(known.max);
    (version >= min.max(known.min)).then_some(version)
}
