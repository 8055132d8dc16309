//! ListOffsets (API 2) and OffsetForLeaderEpoch (API 23).
//! - ListOffsets: DESCRIBE on each topic (`partitionSeqByAuthorized`); denied partitions get
//!   TOPIC_AUTHORIZATION_FAILED with timestamp and offset -1.
//! - OffsetForLeaderEpoch: CLUSTER_ACTION on the cluster (asked without logging a denial) covers
//!   every topic; otherwise DESCRIBE on each topic, denied partitions get TOPIC_AUTHORIZATION_FAILED.

use bytes::Bytes;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    ApiKey, ListOffsetsResponse, OffsetForLeaderEpochResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::check::{Checker, Loud};
use super::wire::{self, PlanError, Topics};
use super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};
use crate::errors::ErrorCode;

/// Denied partitions to put back into the upstream response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Overwrite {
    denied: Vec<(String, Vec<i32>)>,
}

const DENIED: i16 = ErrorCode::TOPIC_AUTHORIZATION_FAILED.0;

fn name(text: &str) -> TopicName {
    TopicName(StrBytes::from_string(text.to_owned()))
}

/// Splits the topics by `keep`: all kept → unchanged, none → `respond`, some → splice.
fn split(
    req: &Request<'_>,
    topics: &Topics,
    keep: &[bool],
    respond: impl FnOnce(&[(String, Vec<i32>)]) -> Result<Outcome, Refusal>,
    rewrite: impl FnOnce(Overwrite) -> Rewrite,
) -> Result<Outcome, Refusal> {
    if keep.iter().all(|k| *k) {
        return Ok(req.unchanged());
    }
    let denied = topics.denied(keep);
    if keep.iter().all(|k| !*k) {
        return respond(&denied);
    }
    let mut edits = Vec::new();
    topics.span.keep_only(keep, &mut edits);
    Ok(Outcome::Forward(
        req.rewritten(edits),
        rewrite(Overwrite { denied }),
    ))
}

fn keep_described(chk: &mut Checker<'_>, topics: &Topics) -> Vec<bool> {
    let allowed = chk.allowed_names(
        AclOperation::Describe,
        ResourceType::Topic,
        topics.entries.iter().map(|e| e.name.as_str()),
        Loud::Yes,
    );
    topics
        .entries
        .iter()
        .map(|e| allowed.contains(&e.name))
        .collect()
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
    let keep = keep_described(chk, &topics);
    split(
        req,
        &topics,
        &keep,
        |denied| req.respond(&ListOffsetsResponse::default().with_topics(list_offsets_entries(denied))),
        Rewrite::ListOffsets,
    )
}

fn list_offsets_entries(denied: &[(String, Vec<i32>)]) -> Vec<ListOffsetsTopicResponse> {
    denied
        .iter()
        .map(|(topic, partitions)| {
            ListOffsetsTopicResponse::default()
                .with_name(name(topic))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| {
                            ListOffsetsPartitionResponse::default()
                                .with_partition_index(*p)
                                .with_error_code(DENIED)
                                .with_timestamp(-1)
                                .with_offset(-1)
                                .with_leader_epoch(-1)
                        })
                        .collect(),
                )
        })
        .collect()
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
        vec![true; topics.entries.len()]
    } else {
        keep_described(chk, &topics)
    };
    split(
        req,
        &topics,
        &keep,
        |denied| {
            req.respond(
                &OffsetForLeaderEpochResponse::default().with_topics(epoch_entries(denied)),
            )
        },
        Rewrite::OffsetForLeaderEpoch,
    )
}

fn epoch_entries(denied: &[(String, Vec<i32>)]) -> Vec<OffsetForLeaderTopicResult> {
    denied
        .iter()
        .map(|(topic, partitions)| {
            OffsetForLeaderTopicResult::default()
                .with_topic(name(topic))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| {
                            EpochEndOffset::default()
                                .with_partition(*p)
                                .with_error_code(DENIED)
                                .with_leader_epoch(-1)
                                .with_end_offset(-1)
                        })
                        .collect(),
                )
        })
        .collect()
}

impl Overwrite {
    pub(crate) fn apply_list_offsets(&self, response: &Response<'_>) -> Result<Bytes, PlanError> {
        let mut body: ListOffsetsResponse = response.decode(ApiKey::ListOffsets)?;
        body.topics.extend(list_offsets_entries(&self.denied));
        response.encode(ApiKey::ListOffsets, &body)
    }

    pub(crate) fn apply_offset_for_leader_epoch(
        &self,
        response: &Response<'_>,
    ) -> Result<Bytes, PlanError> {
        let mut body: OffsetForLeaderEpochResponse =
            response.decode(ApiKey::OffsetForLeaderEpoch)?;
        body.topics.extend(epoch_entries(&self.denied));
        response.encode(ApiKey::OffsetForLeaderEpoch, &body)
    }
}
