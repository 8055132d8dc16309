//! OffsetCommit and OffsetDelete, and the commit check TxnOffsetCommit shares with OffsetCommit
//! (both end in Kafka's group coordinator, which checks the group and the topics the same way).

use bytes::Bytes;
use kafka_protocol::messages::{OffsetCommitResponse, OffsetDeleteResponse};

use super::super::check::{Checker, Loud};
use super::super::entries::{
    allowed_topics, put_back, respond_denied, split_topic_errors, TopicErrorResponse, GROUP_DENIED,
};
use super::super::wire::{self, PlanError, TopicPartitions, Topics, Walk};
use super::super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};
use crate::protocol::reader::Malformed;

/// Denied partitions of OffsetCommit / OffsetDelete to put back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OffsetCommitMerge {
    denied: TopicPartitions,
    delete: bool,
}

impl OffsetCommitMerge {
    pub(crate) fn apply(&self, response: &Response<'_>) -> Result<Bytes, PlanError> {
        if self.delete {
            put_back::<OffsetDeleteResponse>(response, &self.denied)
        } else {
            put_back::<OffsetCommitResponse>(response, &self.denied)
        }
    }
}

/// The `topics` array of OffsetCommit and TxnOffsetCommit: `[name, [partition_index,
/// committed_offset, committed_leader_epoch (when `leader_epoch`), committed_metadata]]`.
pub(crate) fn commit_topics<'a>(
    w: &mut Walk<'a>,
    leader_epoch: bool,
) -> Result<Topics<'a>, Malformed> {
    wire::topic_array(w, |w| {
        let index = w.i32()?;
        let _offset = w.i64()?;
        if leader_epoch {
            let _leader_epoch = w.i32()?;
        }
        let _metadata = w.nullable_string()?;
        w.tags()?;
        Ok(index)
    })
}

/// The check of an offset commit (OffsetCommit, TxnOffsetCommit after its transactional id): READ
/// on the group, else every partition fails with GROUP_AUTHORIZATION_FAILED; then READ on each
/// topic: a denied topic's partitions fail with TOPIC_AUTHORIZATION_FAILED and the rest is
/// committed.
pub(crate) fn authorize_commit<R: TopicErrorResponse>(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
    group: &str,
    topics: &Topics,
    rewrite: impl FnOnce(TopicPartitions) -> Rewrite,
) -> Result<Outcome, Refusal> {
    if !chk.allowed(AclOperation::Read, ResourceType::Group, group, Loud::Yes) {
        return respond_denied::<R>(req, &topics.all(), GROUP_DENIED);
    }
    let keep = allowed_topics(chk, AclOperation::Read, topics);
    split_topic_errors::<R>(req, topics, &keep, rewrite)
}

/// OffsetCommit v2–9.
pub(crate) fn offset_commit(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let v = req.version;
    let mut w = req.walk();
    let group_id = w.string()?;
    let _generation = w.i32()?;
    let _member_id = w.string()?;
    if v >= 7 {
        let _instance_id = w.nullable_string()?;
    }
    if v <= 4 {
        let _retention_time_ms = w.i64()?;
    }
    let topics = commit_topics(&mut w, v >= 6)?;
    w.tags()?;
    w.finish()?;
    authorize_commit::<OffsetCommitResponse>(req, chk, &group_id, &topics, |denied| {
        Rewrite::OffsetCommit(OffsetCommitMerge {
            denied,
            delete: false,
        })
    })
}

/// OffsetDelete v0: DELETE on the group (else only the top-level error), READ on each topic.
pub(crate) fn offset_delete(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let group_id = w.string()?;
    let topics = wire::topic_array(&mut w, |w| w.i32())?;
    w.tags()?;
    w.finish()?;
    if !chk.allowed(
        AclOperation::Delete,
        ResourceType::Group,
        &group_id,
        Loud::Yes,
    ) {
        return req.respond(&OffsetDeleteResponse::default().with_error_code(GROUP_DENIED));
    }
    let keep = allowed_topics(chk, AclOperation::Read, &topics);
    split_topic_errors::<OffsetDeleteResponse>(req, &topics, &keep, |denied| {
        Rewrite::OffsetCommit(OffsetCommitMerge {
            denied,
            delete: true,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::*;
    use super::*;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_delete_response::{
        OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
    };
    use kafka_protocol::messages::{ApiKey, OffsetCommitRequest, TopicName};

    fn commit(group: &str) -> OffsetCommitRequest {
        let topic = |n: &str| {
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(s(n)))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(2)
                    .with_committed_offset(10)
                    .with_committed_metadata(Some(s("m")))])
        };
        OffsetCommitRequest::default()
            .with_group_id(g(group))
            .with_member_id(s("m1"))
            .with_topics(vec![topic("a"), topic("b")])
    }

    #[test]
    fn offset_commit_needs_read_on_group_and_topics() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Group, "ok")
            .allow(AclOperation::Read, ResourceType::Topic, "b")
            .arc();
        for version in [2, 5, 7, 8, 9] {
            let (out, plan) = forwarded(&run(
                &authz,
                &frame(ApiKey::OffsetCommit, version, &commit("ok")),
            ));
            let sent: OffsetCommitRequest = request_body(&out);
            assert_eq!(sent.topics.len(), 1, "v{version}");
            assert_eq!(sent.topics[0].name.0.as_str(), "b");
            assert_eq!(sent.topics[0].partitions[0].committed_offset, 10);
            let merged: OffsetCommitResponse = applied(
                &plan,
                ApiKey::OffsetCommit,
                version,
                &OffsetCommitResponse::default(),
            );
            assert_eq!(merged.topics[0].name.0.as_str(), "a");
            assert_eq!(merged.topics[0].partitions[0].error_code, 29);

            let r: OffsetCommitResponse = response_body(
                ApiKey::OffsetCommit,
                version,
                &responded(&run(
                    &authz,
                    &frame(ApiKey::OffsetCommit, version, &commit("no")),
                )),
            );
            assert_eq!(r.topics.len(), 2);
            assert!(r
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .all(|p| p.error_code == 30));
        }
    }

    #[test]
    fn offset_delete_needs_delete_on_the_group_and_read_on_topics() {
        use kafka_protocol::messages::offset_delete_request::{
            OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
        };
        use kafka_protocol::messages::OffsetDeleteRequest;
        let authz = AllowList::new()
            .allow(AclOperation::Delete, ResourceType::Group, "ok")
            .allow(AclOperation::Read, ResourceType::Topic, "b")
            .arc();
        let req = |group: &str, topics: &[&str]| {
            OffsetDeleteRequest::default()
                .with_group_id(g(group))
                .with_topics(
                    topics
                        .iter()
                        .map(|t| {
                            OffsetDeleteRequestTopic::default()
                                .with_name(TopicName(s(t)))
                                .with_partitions(vec![
                                    OffsetDeleteRequestPartition::default().with_partition_index(3)
                                ])
                        })
                        .collect(),
                )
        };
        // The group denied: one top-level error, no per-topic entries.
        let r: OffsetDeleteResponse = response_body(
            ApiKey::OffsetDelete,
            0,
            &responded(&run(
                &authz,
                &frame(ApiKey::OffsetDelete, 0, &req("no", &["b"])),
            )),
        );
        assert_eq!((r.error_code, r.topics.len()), (30, 0));
        // One topic denied: spliced out, put back with 29 after the upstream's entries.
        let (out, plan) = forwarded(&run(
            &authz,
            &frame(ApiKey::OffsetDelete, 0, &req("ok", &["a", "b"])),
        ));
        let sent: OffsetDeleteRequest = request_body(&out);
        assert_eq!(sent.topics.len(), 1);
        assert_eq!(sent.topics[0].name.0.as_str(), "b");
        let upstream =
            OffsetDeleteResponse::default().with_topics(vec![OffsetDeleteResponseTopic::default()
                .with_name(TopicName(s("b")))
                .with_partitions(vec![
                    OffsetDeleteResponsePartition::default().with_partition_index(3)
                ])]);
        let merged: OffsetDeleteResponse = applied(&plan, ApiKey::OffsetDelete, 0, &upstream);
        let codes = first_partition_codes!(merged.topics);
        assert_eq!(codes, [("b".into(), 3, 0), ("a".into(), 3, 29)]);
        // Every topic denied: answered locally, per partition.
        let r: OffsetDeleteResponse = response_body(
            ApiKey::OffsetDelete,
            0,
            &responded(&run(
                &authz,
                &frame(ApiKey::OffsetDelete, 0, &req("ok", &["a"])),
            )),
        );
        assert_eq!(r.error_code, 0);
        assert_eq!(r.topics[0].partitions[0].error_code, 29);
    }
}
