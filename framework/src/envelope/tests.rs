//! The Envelope codec and the principal serde against Kafka's encodings.

use super::*;
use kafka_protocol::messages::{EnvelopeRequest as KpRequest, EnvelopeResponse as KpResponse};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

fn alice(token: bool) -> ForwardedPrincipal {
    ForwardedPrincipal {
        principal: Principal::user("alice"),
        token_authenticated: token,
        groups: Vec::new(),
    }
}

#[test]
fn a_sessions_groups_travel_in_a_tagged_field_and_only_then() {
    let with = ForwardedPrincipal {
        groups: vec![Principal::group("readers"), Principal::group("é:x")],
        ..alice(false)
    };
    let bytes = serialize_principal(&with);
    let plain = serialize_principal(&alice(false));
    // The same bytes as Kafka's up to the tagged-field section.
    assert_eq!(bytes[..plain.len() - 1], plain[..plain.len() - 1]);
    assert_eq!(deserialize_principal(&bytes).unwrap(), with);
    for cut in plain.len() - 1..bytes.len() {
        assert!(
            deserialize_principal(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert!(deserialize_principal(&trailing).is_err());
    // Another tag, two tagged fields, no group, an empty group name: refused.
    let head = &plain[..plain.len() - 1];
    let with_tail = |tail: &[u8]| [head, tail].concat();
    assert!(deserialize_principal(&with_tail(&[1, 5, 0])).is_err());
    assert!(deserialize_principal(&with_tail(&[2, 0, 0, 1, 0])).is_err());
    let tag = {
        let mut out = BytesMut::new();
        put_uvarint(&mut out, u64::from(GROUPS_TAG));
        out.to_vec()
    };
    let field = |data: &[u8]| {
        let mut tail = vec![1];
        tail.extend_from_slice(&tag);
        tail.push(data.len() as u8);
        tail.extend_from_slice(data);
        with_tail(&tail)
    };
    assert!(deserialize_principal(&field(&[0])).is_err());
    assert_eq!(
        deserialize_principal(&field(&[1, 6, b'G', b'r', b'o', b'u', b'p', 1])),
        Err(PrincipalSerdeError::Empty)
    );
    assert!(deserialize_principal(&field(&[1, 2, b'G', 2, b'g'])).is_ok());
    assert!(deserialize_principal(&field(&[9, 2, b'G', 2, b'g'])).is_err());
}

#[test]
fn a_principal_with_a_longer_varint_than_needed_is_refused() {
    // "User" with its length 5 written as two bytes (0x85 0x00): Kafka's reader takes it, no
    // serializer writes it.
    let canonical = serialize_principal(&alice(false));
    let mut padded = canonical[..2].to_vec();
    padded.extend_from_slice(&[0x85, 0x00]);
    padded.extend_from_slice(&canonical[3..]);
    assert!(deserialize_principal(&canonical).is_ok());
    assert_eq!(
        deserialize_principal(&padded),
        Err(Malformed("a varint longer than its value needs").into())
    );
}

#[test]
fn principal_round_trips_in_kafkas_format() {
    let bytes = serialize_principal(&alice(true));
    // Kafka's bytes for KafkaPrincipal("User", "alice", tokenAuthenticated=true): version 0,
    // compact "User", compact "alice", true, no tagged fields.
    assert_eq!(
        bytes,
        [0, 0, 5, b'U', b's', b'e', b'r', 6, b'a', b'l', b'i', b'c', b'e', 1, 0]
    );
    assert_eq!(deserialize_principal(&bytes).unwrap(), alice(true));
}

#[test]
fn principal_refuses_other_versions_truncation_and_garbage() {
    let mut bytes = serialize_principal(&alice(false));
    bytes[1] = 1;
    assert_eq!(
        deserialize_principal(&bytes),
        Err(PrincipalSerdeError::UnknownVersion(1))
    );
    let good = serialize_principal(&alice(false));
    for cut in 0..good.len() {
        assert!(deserialize_principal(&good[..cut]).is_err(), "cut at {cut}");
    }
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(deserialize_principal(&trailing).is_err());
    // A forged string length far past the end.
    assert!(deserialize_principal(&[0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    // A boolean that is neither 0 nor 1, and tagged fields Kafka never writes (found by the
    // fuzzer: both were accepted and dropped, so the bytes did not round-trip).
    assert!(deserialize_principal(&[0, 0, 2, 2, 2, 4, 65, 0]).is_err());
    assert!(deserialize_principal(&[0, 0, 2, b'U', 2, b'a', 0, 1, 33, 0]).is_err());
    assert!(deserialize_principal(&[0, 0, 2, b'U', 2, b'a', 0, 0]).is_ok());
    // Empty type.
    assert_eq!(
        deserialize_principal(&[0, 0, 1, 2, b'a', 0, 0]),
        Err(PrincipalSerdeError::Empty)
    );
}

#[test]
fn envelope_request_matches_kafka_protocol_encoding() {
    let inner = [0u8, 30, 0, 3, 0, 0, 0, 9, 0, 1, b'c', 0, 1, 0];
    let principal = serialize_principal(&alice(false));
    let frame = encode_request(
        77,
        "node-2",
        &inner,
        &principal,
        "10.1.2.3".parse().unwrap(),
    );
    let mut buf = frame.clone();
    let header = RequestHeader::decode(&mut buf, 2).unwrap();
    assert_eq!(
        (header.request_api_key, header.request_api_version),
        (58, 0)
    );
    assert_eq!(header.correlation_id, 77);
    let body = KpRequest::decode(&mut buf, 0).unwrap();
    assert_eq!(&body.request_data[..], &inner);
    assert_eq!(body.request_principal.as_deref(), Some(&principal[..]));
    assert_eq!(&body.client_host_address[..], &[10, 1, 2, 3]);

    let header_len = frame.len() - {
        let mut b = BytesMut::new();
        body.encode(&mut b, 0).unwrap();
        b.len()
    };
    let decoded = decode_request(&frame[header_len..]).unwrap();
    assert_eq!(decoded.request_data, &inner);
    assert_eq!(decoded.principal, Some(&principal[..]));
    assert_eq!(
        parse_ip(decoded.client_host),
        Some("10.1.2.3".parse().unwrap())
    );
}

#[test]
fn envelope_response_round_trips_and_matches_kafka_protocol() {
    let response = EnvelopeResponse {
        error: ErrorCode::NONE,
        response_data: Some(Bytes::from_static(&[0, 0, 0, 9, 0, 1, 2])),
    };
    let frame = encode_response(5, &response);
    let mut buf = frame.clone();
    let header = ResponseHeader::decode(&mut buf, 1).unwrap();
    assert_eq!(header.correlation_id, 5);
    let body = KpResponse::decode(&mut buf, 0).unwrap();
    assert_eq!(
        body.response_data.as_deref(),
        Some(&[0u8, 0, 0, 9, 0, 1, 2][..])
    );
    assert_eq!(decode_response(&frame).unwrap(), (5, response));

    let refused = EnvelopeResponse {
        error: ErrorCode::NOT_CONTROLLER,
        response_data: None,
    };
    assert_eq!(
        decode_response(&encode_response(6, &refused)).unwrap(),
        (6, refused)
    );
}

#[test]
fn truncated_envelopes_are_errors() {
    let frame = encode_request(1, "x", &[1, 2, 3], &[4], "::1".parse().unwrap());
    // The body starts after 2+2+4+(2+1)+1 header bytes.
    let body = &frame[12..];
    assert!(decode_request(body).is_ok());
    for cut in 0..body.len() - 1 {
        assert!(decode_request(&body[..cut]).is_err(), "cut at {cut}");
    }
    let response = encode_response(
        1,
        &EnvelopeResponse {
            error: ErrorCode::NONE,
            response_data: Some(Bytes::from_static(b"abc")),
        },
    );
    for cut in 0..response.len() {
        assert!(decode_response(&response[..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn the_request_id_travels_in_a_tagged_field_kafka_skips() {
    let id = crate::local::forwarded::RequestIds::new(2, 0xabc).next();
    let ip = "10.0.0.1".parse().unwrap();
    let frame = encode_request_with_id(3, "node-2", &[1, 2], &[4], ip, Some(&id));
    let plain = encode_request(3, "node-2", &[1, 2], &[4], ip);
    let header_len = 12 + "node-2".len() - 1;
    let decoded = decode_request(&frame[header_len..]).unwrap();
    assert_eq!(decoded.request_id, Some(id.clone()));
    assert_eq!(
        decode_request(&plain[header_len..]).unwrap().request_id,
        None
    );
    // Kafka's own decoder reads the same request and ignores the unknown tag.
    let mut buf = frame.clone();
    let _ = RequestHeader::decode(&mut buf, 2).unwrap();
    let body = KpRequest::decode(&mut buf, 0).unwrap();
    assert_eq!(&body.request_data[..], &[1, 2]);
    // Truncated anywhere: an error.
    let body = &frame[header_len..];
    for cut in 0..body.len() {
        assert!(decode_request(&body[..cut]).is_err(), "cut at {cut}");
    }
    // Two ids, a bad id, an oversized one, too many tagged fields: refused.
    let prefix = &plain[header_len..plain.len() - 1];
    let field = |data: &[u8]| {
        let mut out = BytesMut::new();
        put_uvarint(&mut out, u64::from(REQUEST_ID_TAG));
        put_uvarint(&mut out, data.len() as u64);
        out.put_slice(data);
        out.to_vec()
    };
    let with = |fields: &[Vec<u8>]| {
        let mut out = prefix.to_vec();
        out.push(fields.len() as u8);
        for f in fields {
            out.extend_from_slice(f);
        }
        out
    };
    assert!(decode_request(&with(&[field(b"a-1")])).is_ok());
    assert!(decode_request(&with(&[field(b"a-1"), field(b"a-2")])).is_err());
    assert!(decode_request(&with(&[field(b"a 1")])).is_err());
    assert!(decode_request(&with(&[field(&[b'a'; 129])])).is_err());
    assert!(decode_request(&with(&[field(b"")])).is_err());
    let mut many = prefix.to_vec();
    many.push(17);
    for _ in 0..17 {
        many.extend_from_slice(&[1, 0]);
    }
    assert!(decode_request(&many).is_err());
    // An unknown tag is skipped.
    let mut other = prefix.to_vec();
    other.extend_from_slice(&[1, 7, 1, 9]);
    assert_eq!(decode_request(&other).unwrap().request_id, None);
}

#[test]
fn ip_addresses_are_4_or_16_bytes() {
    for ip in ["127.0.0.1", "::1", "fe80::1"] {
        let ip: IpAddr = ip.parse().unwrap();
        assert_eq!(parse_ip(&ip_bytes(ip)), Some(ip));
    }
    assert_eq!(parse_ip(&[1, 2, 3]), None);
    assert_eq!(parse_ip(&[]), None);
}
