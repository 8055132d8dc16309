//! ListOffsets (API 2) and OffsetForLeaderEpoch (API 23).
//! - ListOffsets: DESCRIBE on each topic (`partitionSeqByAuthorized`); denied partitions get
//!   TOPIC_AUTHORIZATION_FAILED with timestamp and offset -1.
//! - OffsetForLeaderEpoch: CLUSTER_ACTION on the cluster (asked without logging a denial) covers
//!   every topic; otherwise DESCRIBE on each topic, denied partitions get TOPIC_AUTHORIZATION_FAILED.

use bytes::Bytes;
use kafka_protocol::messages::{ListOffsetsResponse, OffsetForLeaderEpochResponse};

use super::check::{Checker, Loud};
use super::entries::{allowed_topics, put_back, split_topic_errors};
use super::wire::{self, PlanError, TopicPartitions};
use super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::AclOperation;

/// Denied partitions to put back into the upstream response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Overwrite {
    denied: TopicPartitions,
}

pub(crate) fn list_offsets(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let v = req.version;
    let mut walk = req.walk();
    let _replica_id = walk.i32()?;
    if v >= 2 {
        let _isolation_level = walk.i8()?;
    }
    let topics = wire::topic_array(&mut walk, |w| {
        let index = w.i32()?;
        if v >= 4 {
            let _current_leader_epoch = w.i32()?;
        }
        let _timestamp = w.i64()?;
        w.tags()?;
        Ok(index)
    })?;
    if v >= 10 {
        let _timeout_ms = walk.i32()?;
    }
    walk.tags()?;
    walk.finish()?;
    let keep = allowed_topics(chk, AclOperation::Describe, &topics);
    split_topic_errors::<ListOffsetsResponse>(req, &topics, &keep, |denied| {
        Rewrite::ListOffsets(Overwrite { denied })
    })
}

pub(crate) fn offset_for_leader_epoch(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    let mut walk = req.walk();
    if req.version >= 3 {
        let _replica_id = walk.i32()?;
    }
    let topics = wire::topic_array(&mut walk, |w| {
        let index = w.i32()?;
        let _current_leader_epoch = w.i32()?;
        let _leader_epoch = w.i32()?;
        w.tags()?;
        Ok(index)
    })?;
    walk.tags()?;
    walk.finish()?;
    let keep = if chk.cluster(AclOperation::ClusterAction, Loud::IfAllowed) {
        smallvec::smallvec![true; topics.entries.len()]
    } else {
        allowed_topics(chk, AclOperation::Describe, &topics)
    };
    split_topic_errors::<OffsetForLeaderEpochResponse>(req, &topics, &keep, |denied| {
        Rewrite::OffsetForLeaderEpoch(Overwrite { denied })
    })
}

impl Overwrite {
    pub(crate) fn apply_list_offsets(&self, response: &Response<'_>) -> Result<Bytes, PlanError> {
        put_back::<ListOffsetsResponse>(response, &self.denied)
    }

    pub(crate) fn apply_offset_for_leader_epoch(
        &self,
        response: &Response<'_>,
    ) -> Result<Bytes, PlanError> {
        put_back::<OffsetForLeaderEpochResponse>(response, &self.denied)
    }
}

#[cfg(test)]
mod tests {
    use super::super::entries::denied_topics;
    use super::super::testing::*;
    use super::*;
    use crate::acl::ResourceType;
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::{ApiKey, TopicName};
    use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, OffsetForLeaderEpochRequest};

    #[test]
    fn list_offsets_needs_describe_per_topic() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Topic, "b")
            .arc();
        let topic = |n: &str| {
            ListOffsetsTopic::default()
                .with_name(TopicName(s(n)))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(3)
                    .with_timestamp(-1)])
        };
        for version in [1, 4, 6, 10] {
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![topic("a"), topic("b"), topic("c")]);
            let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::ListOffsets, version, &req)));
            let sent: ListOffsetsRequest = request_body(&out);
            let names: Vec<_> = sent.topics.iter().map(|t| t.name.0.to_string()).collect();
            assert_eq!(names, ["b"], "v{version}");
            let upstream = ListOffsetsResponse::default()
                .with_topics(denied_topics(&[("b".into(), vec![3])], 29));
            let mut upstream = upstream;
            upstream.topics[0].partitions[0].error_code = 0;
            upstream.topics[0].partitions[0].offset = 100;
            let merged: ListOffsetsResponse =
                applied(&plan, ApiKey::ListOffsets, version, &upstream);
            let got: Vec<_> = merged
                .topics
                .iter()
                .map(|t| (t.name.0.to_string(), t.partitions[0].error_code))
                .collect();
            assert_eq!(got, [("b".into(), 0), ("a".into(), 29), ("c".into(), 29)]);
            assert_eq!(merged.topics[0].partitions[0].offset, 100);
        }
        let none = AllowList::new().arc();
        let req = ListOffsetsRequest::default().with_topics(vec![topic("a")]);
        let r: ListOffsetsResponse = response_body(
            ApiKey::ListOffsets,
            6,
            &responded(&run(&none, &frame(ApiKey::ListOffsets, 6, &req))),
        );
        assert_eq!(r.topics[0].partitions[0].error_code, 29);
    }

    #[test]
    fn offset_for_leader_epoch_cluster_action_covers_all_topics() {
        let req = OffsetForLeaderEpochRequest::default().with_topics(vec![
            OffsetForLeaderTopic::default()
                .with_topic(TopicName(s("a")))
                .with_partitions(vec![OffsetForLeaderPartition::default().with_partition(0)]),
            OffsetForLeaderTopic::default()
                .with_topic(TopicName(s("b")))
                .with_partitions(vec![OffsetForLeaderPartition::default().with_partition(1)]),
        ]);
        let cluster = AllowList::new()
            .allow(
                AclOperation::ClusterAction,
                ResourceType::Cluster,
                "kafka-cluster",
            )
            .arc();
        let f = frame(ApiKey::OffsetForLeaderEpoch, 4, &req);
        assert_eq!(forwarded(&run(&cluster, &f)).0, f);
        let topic_b = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Topic, "b")
            .arc();
        for version in [2, 3, 4] {
            let f = frame(ApiKey::OffsetForLeaderEpoch, version, &req);
            let e = run(&topic_b, &f);
            let (out, plan) = forwarded(&e);
            let sent: OffsetForLeaderEpochRequest = request_body(&out);
            assert_eq!(sent.topics.len(), 1);
            assert_eq!(sent.topics[0].topic.0.as_str(), "b");
            let merged: OffsetForLeaderEpochResponse = applied(
                &plan,
                ApiKey::OffsetForLeaderEpoch,
                version,
                &OffsetForLeaderEpochResponse::default(),
            );
            assert_eq!(merged.topics[0].topic.0.as_str(), "a");
            assert_eq!(merged.topics[0].partitions[0].error_code, 29);
            // The CLUSTER_ACTION probe is not logged when denied.
            match &e.decisions[0] {
                super::super::Checked::Action { action, .. } => {
                    assert_eq!(action.operation, AclOperation::ClusterAction);
                    assert!(!action.log_if_denied);
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
