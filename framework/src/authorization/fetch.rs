//! Fetch (API 1), v4–v12 (v13+ names topics by id only). Kafka's `handleFetchRequest`:
//! - a fetch from a follower (`replica_id >= 0`) needs CLUSTER_ACTION; clients are never
//!   followers here, so every partition gets TOPIC_AUTHORIZATION_FAILED (Kafka's answer to an
//!   unauthorized follower) without asking;
//! - a consumer fetch needs READ on each topic; the partitions of a denied topic get
//!   TOPIC_AUTHORIZATION_FAILED, the rest is served.
//!
//! Incremental fetch sessions (KIP-227) let the broker serve partitions the request does not
//! list, which would escape per-request authorization. Every forwarded Fetch is therefore turned
//! into a sessionless full fetch (session id 0, epoch -1, Kafka's `FetchMetadata.LEGACY`); the
//! upstream answers with session id 0 and the client keeps sending full requests.

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::FetchableTopicResponse;
use kafka_protocol::messages::FetchResponse;
use smallvec::{smallvec, SmallVec};

use super::check::Checker;
use super::entries::{allowed_topics, denied_topics, put_back, TOPIC_DENIED};
use super::wire::{self, Edit, PlanError, TopicPartitions, Topics, Walk};
use super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::AclOperation;
use crate::protocol::reader::Malformed;

/// Denied partitions to put back into the upstream response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Merge {
    denied: TopicPartitions,
}

struct Parsed<'a> {
    replica_id: i32,
    /// Where session id and epoch lie (v7+).
    session: Option<std::ops::Range<usize>>,
    topics: Topics<'a>,
}

/// Session id 0 and epoch -1: Kafka's `FetchMetadata.LEGACY`, a sessionless full fetch.
const LEGACY_SESSION: [u8; 8] = [0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];

fn parse<'a>(walk: &mut Walk<'a>, version: i16) -> Result<Parsed<'a>, Malformed> {
    let replica_id = walk.i32()?;
    let _max_wait_ms = walk.i32()?;
    let _min_bytes = walk.i32()?;
    let _max_bytes = walk.i32()?;
    let _isolation_level = walk.i8()?;
    let session = if version >= 7 {
        let at = walk.pos();
        let _session_id = walk.i32()?;
        let _session_epoch = walk.i32()?;
        Some(at..walk.pos())
    } else {
        None
    };
    let topics = wire::topic_array(walk, |w| {
        let index = w.i32()?;
        if version >= 9 {
            let _current_leader_epoch = w.i32()?;
        }
        let _fetch_offset = w.i64()?;
        if version >= 12 {
            let _last_fetched_epoch = w.i32()?;
        }
        if version >= 5 {
            let _log_start_offset = w.i64()?;
        }
        let _partition_max_bytes = w.i32()?;
        w.tags()?;
        Ok(index)
    })?;
    if version >= 7 {
        // Forgotten topics: meaningless once the fetch is sessionless.
        let n = walk.array_len_required()?;
        for _ in 0..n {
            walk.skip_string()?;
            walk.i32s()?;
            walk.tags()?;
        }
    }
    if version >= 11 {
        walk.skip_string()?; // rack id
    }
    walk.tags()?;
    walk.finish()?;
    Ok(Parsed {
        replica_id,
        session,
        topics,
    })
}

pub(crate) fn enforce(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let parsed = parse(&mut req.walk(), req.version)?;
    let keep: SmallVec<[bool; 8]> = if parsed.replica_id >= 0 {
        smallvec![false; parsed.topics.entries.len()]
    } else {
        allowed_topics(chk, AclOperation::Read, &parsed.topics)
    };
    let denied = parsed.topics.denied(&keep);
    if parsed.replica_id >= 0 || (!keep.is_empty() && keep.iter().all(|k| !*k)) {
        let body = FetchResponse::default()
            .with_session_id(0)
            .with_responses(denied_topics::<FetchableTopicResponse>(
                &denied,
                TOPIC_DENIED,
            ));
        return req.respond(&body);
    }
    if denied.is_empty() {
        return Ok(match parsed.session {
            Some(session) => Outcome::Forward(
                wire::overwrite(req.frame, req.header.header_len, session, &LEGACY_SESSION),
                Rewrite::Unchanged,
            ),
            None => req.unchanged(),
        });
    }
    let mut edits = Vec::new();
    if let Some(session) = parsed.session {
        edits.push(Edit {
            range: session,
            replacement: LEGACY_SESSION.to_vec(),
        });
    }
    parsed.topics.span.keep_only(&keep, &mut edits);
    Ok(Outcome::Forward(
        req.rewritten(edits),
        Rewrite::Fetch(Merge { denied }),
    ))
}

impl Merge {
    pub(crate) fn apply(&self, response: &Response<'_>) -> Result<Bytes, PlanError> {
        put_back::<FetchResponse>(response, &self.denied)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::acl::ResourceType;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
    use kafka_protocol::messages::fetch_response::PartitionData;
    use kafka_protocol::messages::{ApiKey, TopicName};
    use kafka_protocol::messages::{BrokerId, FetchRequest};

    fn request(replica: i32) -> FetchRequest {
        let topic = |name: &str| {
            FetchTopic::default()
                .with_topic(TopicName(s(name)))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(5),
                    FetchPartition::default().with_partition(1),
                ])
        };
        FetchRequest::default()
            .with_replica_id(BrokerId(replica))
            .with_max_bytes(1 << 20)
            .with_topics(vec![topic("a"), topic("b")])
    }

    #[test]
    fn denied_topics_are_spliced_out_and_fetches_become_sessionless() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Topic, "a")
            .arc();
        for version in [4, 7, 11, 12] {
            let mut req = request(-1);
            if version >= 7 {
                req = req
                    .with_session_id(77)
                    .with_session_epoch(3)
                    .with_forgotten_topics_data(vec![ForgottenTopic::default()
                        .with_topic(TopicName(s("z")))
                        .with_partitions(vec![1])]);
            }
            if version >= 11 {
                req = req.with_rack_id(s("r1"));
            }
            let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::Fetch, version, &req)));
            let sent: FetchRequest = request_body(&out);
            assert_eq!(sent.topics.len(), 1, "v{version}");
            assert_eq!(sent.topics[0].topic.0.as_str(), "a");
            assert_eq!(sent.topics[0].partitions[0].fetch_offset, 5);
            if version >= 7 {
                assert_eq!((sent.session_id, sent.session_epoch), (0, -1));
            }
            let upstream =
                FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                    .with_topic(TopicName(s("a")))
                    .with_partitions(vec![PartitionData::default()
                        .with_partition_index(0)
                        .with_high_watermark(9)
                        .with_records(Some(Bytes::from_static(b"rec")))])]);
            let merged: FetchResponse = applied(&plan, ApiKey::Fetch, version, &upstream);
            assert_eq!(merged.responses.len(), 2);
            assert_eq!(
                merged.responses[0].partitions[0].records.as_deref(),
                Some(&b"rec"[..])
            );
            let b = &merged.responses[1];
            assert_eq!(b.topic.0.as_str(), "b");
            assert_eq!(b.partitions.len(), 2);
            assert!(b.partitions.iter().all(|p| p.error_code == 29));
        }
    }

    #[test]
    fn allowed_fetches_keep_their_bytes_except_the_session() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Topic, "*")
            .arc();
        let f = frame(ApiKey::Fetch, 4, &request(-1));
        assert_eq!(forwarded(&run(&authz, &f)).0, f);
        let f = frame(ApiKey::Fetch, 12, &request(-1).with_session_epoch(0));
        let (out, plan) = forwarded(&run(&authz, &f));
        assert!(plan.is_unchanged());
        let sent: FetchRequest = request_body(&out);
        assert_eq!(sent.session_epoch, -1);
        assert_eq!(out.len(), f.len());
    }

    #[test]
    fn follower_fetches_and_fully_denied_fetches_are_answered_locally() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Topic, "*")
            .arc();
        let r: FetchResponse = response_body(
            ApiKey::Fetch,
            12,
            &responded(&run(&authz, &frame(ApiKey::Fetch, 12, &request(1)))),
        );
        assert_eq!(r.responses.len(), 2);
        assert!(r
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .all(|p| p.error_code == 29));
        let none = AllowList::new().arc();
        let r: FetchResponse = response_body(
            ApiKey::Fetch,
            7,
            &responded(&run(&none, &frame(ApiKey::Fetch, 7, &request(-1)))),
        );
        assert_eq!(r.responses.len(), 2);
    }
}
