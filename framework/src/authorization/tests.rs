//! Cross-API properties: every API the passthrough policy forwards is mapped or refused, refused
//! and unauthorizable requests are never forwarded, and no body makes enforcement panic.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;

use super::testing::{context, Fixed};
use super::{authorizable_versions, enforce, enforce_verdict, mapping, Mapping, Verdict};
use crate::authorizer::{Authorizer, Decision};
use crate::protocol::api::is_security_api;
use crate::protocol::header;

/// A frame with a header of the right version for `key`/`version` and `body`.
fn frame(key: ApiKey, version: i16, body: &[u8]) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(key as i16);
    out.put_i16(version);
    out.put_i32(7);
    out.put_i16(-1); // null client id
    if key.request_header_version(version) >= 2 {
        out.put_u8(0); // no tagged fields
    }
    out.extend_from_slice(body);
    out.freeze()
}

/// The APIs Portcullis must authorize before anything else (the brief's priority list).
const MUST_BE_MAPPED: &[ApiKey] = &[
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::Metadata,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::FindCoordinator,
    ApiKey::JoinGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::SyncGroup,
    ApiKey::DescribeGroups,
    ApiKey::ListGroups,
    ApiKey::DeleteGroups,
    ApiKey::OffsetForLeaderEpoch,
    ApiKey::OffsetDelete,
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::ConsumerGroupDescribe,
    ApiKey::DescribeCluster,
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::CreatePartitions,
    ApiKey::DeleteRecords,
    ApiKey::DescribeConfigs,
    ApiKey::AlterConfigs,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::InitProducerId,
    ApiKey::AddPartitionsToTxn,
    ApiKey::AddOffsetsToTxn,
    ApiKey::EndTxn,
    ApiKey::TxnOffsetCommit,
    ApiKey::DescribeProducers,
    ApiKey::DescribeTransactions,
    ApiKey::ListTransactions,
    ApiKey::ElectLeaders,
    ApiKey::AlterPartitionReassignments,
    ApiKey::ListPartitionReassignments,
    ApiKey::DescribeClientQuotas,
    ApiKey::AlterClientQuotas,
    ApiKey::DescribeLogDirs,
    ApiKey::AlterReplicaLogDirs,
    ApiKey::UpdateFeatures,
    ApiKey::DescribeQuorum,
];

#[test]
fn every_forwarded_api_is_mapped_or_explicitly_refused() {
    let deny: Arc<dyn Authorizer> = Arc::new(Fixed(Decision::Denied));
    let allow: Arc<dyn Authorizer> = Arc::new(Fixed(Decision::Allowed));
    let mut refused = Vec::new();
    for key in ApiKey::iter() {
        if is_security_api(key as i16) {
            // The passthrough policy serves these locally; they are never forwarded.
            assert!(matches!(mapping(key), Mapping::Refused(_)), "{key:?}");
            continue;
        }
        match (mapping(key), authorizable_versions(key as i16)) {
            (Mapping::Enforced { .. }, Some((min, max))) => {
                let valid = key.valid_versions();
                assert!(valid.min <= min && max <= valid.max, "{key:?}");
                // A version outside the authorizable range is never forwarded.
                if max < valid.max {
                    let f = frame(key, max + 1, &[]);
                    let h = header::parse(&f).unwrap();
                    let e = enforce(&allow, &context(key, max + 1), &h, &f);
                    assert!(
                        matches!(e.verdict, Verdict::Close(_)),
                        "{key:?} v{}",
                        max + 1
                    );
                }
            }
            (Mapping::Refused(why), None) => {
                refused.push(key);
                let v = key.valid_versions().max;
                let f = frame(key, v, &[0; 64]);
                let h = header::parse(&f).unwrap();
                for authz in [&allow, &deny] {
                    let e = enforce(authz, &context(key, v), &h, &f);
                    assert!(
                        matches!(&e.verdict, Verdict::Close(reason) if reason.to_string().contains(why)),
                        "{key:?}: {:?}",
                        e.verdict
                    );
                    assert!(e.decisions.is_empty());
                }
            }
            (m, r) => panic!(
                "{key:?}: mapping {} with authorizable versions {r:?}",
                matches!(m, Mapping::Enforced { .. })
            ),
        }
    }
    for key in MUST_BE_MAPPED {
        assert!(authorizable_versions(*key as i16).is_some(), "{key:?}");
    }
    assert!(refused.contains(&ApiKey::WriteTxnMarkers));
    assert!(refused.contains(&ApiKey::DescribeTopicPartitions));
    assert!(refused.contains(&ApiKey::BrokerHeartbeat));
}

/// A small deterministic generator (xorshift) for junk bodies.
fn junk(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Bias toward small counts and lengths, which reach deeper into the walkers.
            match x % 4 {
                0 => 0,
                1 => 1,
                _ => (x >> 8) as u8,
            }
        })
        .collect()
}

#[test]
fn no_body_makes_enforcement_panic() {
    let authorizers: [Arc<dyn Authorizer>; 2] = [
        Arc::new(Fixed(Decision::Allowed)),
        Arc::new(Fixed(Decision::Denied)),
    ];
    let mut bodies: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x7f, 0xff, 0xff, 0xff],
        vec![0xff; 8],
        vec![0x80; 12],
        vec![0; 40],
    ];
    for seed in 0..40 {
        bodies.push(junk(seed, (seed as usize * 7) % 90));
    }
    for key in ApiKey::iter() {
        let Some((min, max)) = authorizable_versions(key as i16) else {
            continue;
        };
        for version in min..=max {
            for body in &bodies {
                let f = frame(key, version, body);
                let h = header::parse(&f).unwrap();
                for authz in &authorizers {
                    // Upstream responses are decoded with kafka-protocol (the upstream is
                    // trusted, docs/security.md), so only the client side is exercised here.
                    let e = enforce(authz, &context(key, version), &h, &f);
                    assert_eq!(
                        enforce_verdict(authz, &context(key, version), &h, &f),
                        e.verdict,
                        "{key:?} v{version}"
                    );
                    if let Verdict::Forward { frame: out, .. } = &e.verdict {
                        // What is forwarded is the client's frame or a strict edit of it.
                        assert!(out.len() <= f.len() + 4, "{key:?} v{version}");
                    }
                }
            }
        }
    }
}

#[test]
fn advertised_versions_are_restricted_to_what_can_be_authorized() {
    use super::restrict_versions;
    use crate::protocol::versions::ApiVersionTable;
    let table = ApiVersionTable::from_ranges([
        (0, 3, 13), // Produce: v13 names topics by id
        (1, 4, 18), // Fetch
        (3, 0, 13), // Metadata: v4+
        (18, 0, 4), // ApiVersions: served locally, kept
        (75, 0, 0), // DescribeTopicPartitions: refused, dropped
        (27, 1, 1), // WriteTxnMarkers: inter-broker, dropped
        (22, 0, 6), // InitProducerId: up to v5
    ]);
    let r = restrict_versions(&table);
    assert_eq!(r.range(0), Some((3, 12)));
    assert_eq!(r.range(1), Some((4, 12)));
    assert_eq!(r.range(3), Some((4, 13)));
    assert_eq!(r.range(18), Some((0, 4)));
    assert_eq!(r.range(75), None);
    assert_eq!(r.range(27), None);
    assert_eq!(r.range(22), Some((0, 5)));
}
