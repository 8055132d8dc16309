//! The request frame the host's Kafka-backed tests send: a size prefix, a request header with
//! this test's client id, and the body, encoded with kafka-protocol (our own bytes); and the
//! record batch their Produce requests carry.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// One size-prefixed request frame.
pub fn request_frame<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &'static str,
    body: &T,
) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(client_id)));
    let mut payload = BytesMut::new();
    header
        .encode(&mut payload, api.request_header_version(version))
        .unwrap();
    body.encode(&mut payload, version).unwrap();
    let mut frame = BytesMut::new();
    frame.extend_from_slice(&i32::try_from(payload.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&payload);
    frame.freeze()
}

/// A record batch (magic 2, uncompressed) of one record with this value and no key; the broker
/// assigns its offset and timestamp type.
#[allow(
    dead_code,
    reason = "not every test binary that includes this module produces records"
)]
pub fn one_record_batch(value: Bytes) -> Bytes {
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 0,
        key: None,
        value: Some(value),
        headers: Default::default(),
    };
    let mut batch = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut batch,
        &[record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    batch.freeze()
}
