//! Consumer-group APIs, as Kafka's `KafkaApis` authorizes them:
//! - JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat: READ on the group, else
//!   the whole request fails with GROUP_AUTHORIZATION_FAILED. ConsumerGroupHeartbeat (KIP-848)
//!   also needs DESCRIBE on every subscribed topic name (TOPIC_AUTHORIZATION_FAILED).
//! - OffsetCommit: READ on the group (else every partition GROUP_AUTHORIZATION_FAILED), READ on
//!   each topic (denied partitions TOPIC_AUTHORIZATION_FAILED).
//! - OffsetFetch: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED), DESCRIBE on each
//!   topic: requested topics that are denied get TOPIC_AUTHORIZATION_FAILED, an all-topics fetch
//!   lists only describable topics.
//! - OffsetDelete: DELETE on the group (else GROUP_AUTHORIZATION_FAILED), READ on each topic.
//! - DescribeGroups, ConsumerGroupDescribe: DESCRIBE per group (denied groups get
//!   GROUP_AUTHORIZATION_FAILED); authorized operations computed for this principal.
//! - ListGroups: DESCRIBE on the cluster lists every group; otherwise only describable groups.
//! - DeleteGroups: DELETE per group.
//! - FindCoordinator: DESCRIBE on the group (GROUP key) or transactional id (TRANSACTION key).

use bytes::Bytes;
use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup as CgDescribed;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse, DeleteGroupsResponse,
    DescribeGroupsResponse, FindCoordinatorResponse, GroupId, HeartbeatResponse, JoinGroupResponse,
    LeaveGroupResponse, ListGroupsResponse, OffsetCommitResponse, OffsetDeleteResponse,
    OffsetFetchResponse, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::check::{Checker, Loud};
use super::wire::{self, PlanError, Topics};
use super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};
use crate::errors::ErrorCode;

const GROUP_DENIED: i16 = ErrorCode::GROUP_AUTHORIZATION_FAILED.0;
const TOPIC_DENIED: i16 = ErrorCode::TOPIC_AUTHORIZATION_FAILED.0;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}
fn topic(s: &str) -> TopicName {
    TopicName(text(s))
}
fn group(s: &str) -> GroupId {
    GroupId(text(s))
}

/// JoinGroup, SyncGroup, Heartbeat, LeaveGroup: the group id is the first field of every version.
pub(crate) fn membership(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let group_id = req.walk().string()?;
    if chk.allowed(
        AclOperation::Read,
        ResourceType::Group,
        &group_id,
        Loud::Yes,
    ) {
        return Ok(req.unchanged());
    }
    match req.key {
        ApiKey::JoinGroup => req.respond(
            &JoinGroupResponse::default()
                .with_error_code(GROUP_DENIED)
                .with_generation_id(-1),
        ),
        ApiKey::SyncGroup => {
            req.respond(&SyncGroupResponse::default().with_error_code(GROUP_DENIED))
        }
        ApiKey::Heartbeat => {
            req.respond(&HeartbeatResponse::default().with_error_code(GROUP_DENIED))
        }
        _ => req.respond(&LeaveGroupResponse::default().with_error_code(GROUP_DENIED)),
    }
}

/// ConsumerGroupHeartbeat (v0–1, flexible).
pub(crate) fn consumer_group_heartbeat(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let group_id = w.string()?;
    let _member_id = w.string()?;
    let _member_epoch = w.i32()?;
    let _instance_id = w.nullable_string()?;
    let _rack_id = w.nullable_string()?;
    let _rebalance_timeout_ms = w.i32()?;
    let subscribed = w.strings()?.unwrap_or_default();
    let deny = |code: ErrorCode, message: &str| {
        req.respond(
            &ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code.0)
                .with_error_message(Some(text(message))),
        )
    };
    if !chk.allowed(
        AclOperation::Read,
        ResourceType::Group,
        &group_id,
        Loud::Yes,
    ) {
        return deny(ErrorCode::GROUP_AUTHORIZATION_FAILED, "");
    }
    let describable = chk.allowed_names(
        AclOperation::Describe,
        ResourceType::Topic,
        subscribed.iter().map(String::as_str),
        Loud::Yes,
    );
    if subscribed.iter().any(|t| !describable.contains(t)) {
        return deny(
            ErrorCode::TOPIC_AUTHORIZATION_FAILED,
            "not authorized to describe some subscribed topics",
        );
    }
    Ok(req.unchanged())
}

/// Denied partitions of OffsetCommit / OffsetDelete to put back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OffsetCommitMerge {
    denied: Vec<(String, Vec<i32>)>,
    delete: bool,
}

fn split_topics(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
    topics: &Topics,
    respond: impl FnOnce(&[(String, Vec<i32>)], i16) -> Result<Outcome, Refusal>,
    delete: bool,
) -> Result<Outcome, Refusal> {
    let allowed = chk.allowed_names(
        AclOperation::Read,
        ResourceType::Topic,
        topics.entries.iter().map(|e| e.name.as_str()),
        Loud::Yes,
    );
    let keep: Vec<bool> = topics
        .entries
        .iter()
        .map(|e| allowed.contains(&e.name))
        .collect();
    super::split_topics(
        req,
        topics,
        &keep,
        |denied| respond(denied, TOPIC_DENIED),
        |denied| Rewrite::OffsetCommit(OffsetCommitMerge { denied, delete }),
    )
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
    let topics = wire::topic_array(&mut w, |w| {
        let index = w.i32()?;
        let _offset = w.i64()?;
        if v >= 6 {
            let _leader_epoch = w.i32()?;
        }
        let _metadata = w.nullable_string()?;
        w.tags()?;
        Ok(index)
    })?;
    w.tags()?;
    w.finish()?;
    let respond = |denied: &[(String, Vec<i32>)], code: i16| {
        req.respond(&OffsetCommitResponse::default().with_topics(commit_entries(denied, code)))
    };
    if !chk.allowed(
        AclOperation::Read,
        ResourceType::Group,
        &group_id,
        Loud::Yes,
    ) {
        let all = topics.denied(&vec![false; topics.entries.len()]);
        return respond(&all, GROUP_DENIED);
    }
    split_topics(req, chk, &topics, respond, false)
}

fn commit_entries(denied: &[(String, Vec<i32>)], code: i16) -> Vec<OffsetCommitResponseTopic> {
    denied
        .iter()
        .map(|(name, partitions)| {
            OffsetCommitResponseTopic::default()
                .with_name(topic(name))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(*p)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect()
}

fn delete_entries(denied: &[(String, Vec<i32>)], code: i16) -> Vec<OffsetDeleteResponseTopic> {
    denied
        .iter()
        .map(|(name, partitions)| {
            OffsetDeleteResponseTopic::default()
                .with_name(topic(name))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| {
                            OffsetDeleteResponsePartition::default()
                                .with_partition_index(*p)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect()
}

/// OffsetDelete v0.
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
    let respond = |denied: &[(String, Vec<i32>)], code: i16| {
        req.respond(&OffsetDeleteResponse::default().with_topics(delete_entries(denied, code)))
    };
    split_topics(req, chk, &topics, respond, true)
}

impl OffsetCommitMerge {
    pub(crate) fn apply(&self, response: &Response<'_>) -> Result<Bytes, PlanError> {
        if self.delete {
            let mut body: OffsetDeleteResponse = response.decode(ApiKey::OffsetDelete)?;
            body.topics
                .extend(delete_entries(&self.denied, TOPIC_DENIED));
            response.encode(ApiKey::OffsetDelete, &body)
        } else {
            let mut body: OffsetCommitResponse = response.decode(ApiKey::OffsetCommit)?;
            body.topics
                .extend(commit_entries(&self.denied, TOPIC_DENIED));
            response.encode(ApiKey::OffsetCommit, &body)
        }
    }
}

/// How to rewrite an OffsetFetch response: per group (in request order), whether it was denied
/// and whether it asked for all topics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OffsetFetchPlan {
    groups: Vec<FetchGroup>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct FetchGroup {
    id: String,
    allowed: bool,
    all_topics: bool,
}

/// The topics array of OffsetFetch: `[name, [partition_index]]`, nullable.
fn fetch_topics(w: &mut wire::Walk<'_>) -> Result<Option<wire::TopicPartitions>, Refusal> {
    let Some(n) = w.array_len()? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for _ in 0..n {
        let name = w.string()?;
        let partitions = w.i32s()?;
        w.tags()?;
        out.push((name, partitions));
    }
    Ok(Some(out))
}

/// OffsetFetch v1–9. The request is read-only: it is forwarded whole and the response is
/// rewritten (denied groups and topics replaced by their errors), except that a single denied
/// group (v1–7) is answered locally.
pub(crate) fn offset_fetch(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let v = req.version;
    let mut w = req.walk();
    let mut groups = Vec::new();
    if v <= 7 {
        let id = w.string()?;
        let topics = fetch_topics(&mut w)?;
        groups.push((id, topics));
    } else {
        let n = w.array_len_required()?;
        for _ in 0..n {
            let id = w.string()?;
            if v >= 9 {
                let _member_id = w.nullable_string()?;
                let _member_epoch = w.i32()?;
            }
            let topics = fetch_topics(&mut w)?;
            w.tags()?;
            groups.push((id, topics));
        }
    }
    if v >= 7 {
        let _require_stable = w.bool()?;
    }
    w.tags()?;
    w.finish()?;
    let mut plan = OffsetFetchPlan { groups: Vec::new() };
    for (id, topics) in &groups {
        let allowed = chk.allowed(AclOperation::Describe, ResourceType::Group, id, Loud::Yes);
        plan.groups.push(FetchGroup {
            id: id.clone(),
            allowed,
            all_topics: topics.is_none(),
        });
    }
    if v <= 7 && plan.groups.iter().all(|g| !g.allowed) {
        // Kafka's error response: the top-level code (v2+), or each requested partition (v1).
        let mut body = OffsetFetchResponse::default();
        if v >= 2 {
            body.error_code = GROUP_DENIED;
        } else if let Some((_, Some(topics))) = groups.first() {
            body.topics = fetch_topic_entries(topics, GROUP_DENIED);
        }
        return req.respond(&body);
    }
    Ok(Outcome::Forward(
        req.frame.clone(),
        Rewrite::OffsetFetch(plan),
    ))
}

fn fetch_topic_entries(topics: &[(String, Vec<i32>)], code: i16) -> Vec<OffsetFetchResponseTopic> {
    topics
        .iter()
        .map(|(name, partitions)| {
            OffsetFetchResponseTopic::default()
                .with_name(topic(name))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| {
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(*p)
                                .with_committed_offset(-1)
                                .with_metadata(Some(text("")))
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect()
}

impl OffsetFetchPlan {
    pub(crate) fn apply(
        &self,
        response: &Response<'_>,
        chk: &mut Checker<'_>,
    ) -> Result<Bytes, PlanError> {
        let mut body: OffsetFetchResponse = response.decode(ApiKey::OffsetFetch)?;
        if response.version <= 7 {
            if let Some(g) = self.groups.first() {
                let names: Vec<String> = body.topics.iter().map(|t| t.name.0.to_string()).collect();
                let loud = if g.all_topics {
                    Loud::IfAllowed
                } else {
                    Loud::Yes
                };
                let ok = chk.allowed_names(
                    AclOperation::Describe,
                    ResourceType::Topic,
                    names.iter().map(String::as_str),
                    loud,
                );
                if g.all_topics {
                    body.topics.retain(|t| ok.contains(t.name.0.as_str()));
                } else {
                    for t in &mut body.topics {
                        if !ok.contains(t.name.0.as_str()) {
                            for p in &mut t.partitions {
                                p.committed_offset = -1;
                                p.committed_leader_epoch = -1;
                                p.metadata = Some(text(""));
                                p.error_code = TOPIC_DENIED;
                            }
                        }
                    }
                }
            }
            return response.encode(ApiKey::OffsetFetch, &body);
        }
        for g in &mut body.groups {
            let Some(plan) = self.groups.iter().find(|p| p.id == g.group_id.0.as_str()) else {
                // A group the client did not ask about: never pass it on.
                *g = OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_error_code(GROUP_DENIED);
                continue;
            };
            if !plan.allowed {
                *g = OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_error_code(GROUP_DENIED);
                continue;
            }
            let names: Vec<String> = g.topics.iter().map(|t| t.name.0.to_string()).collect();
            let loud = if plan.all_topics {
                Loud::IfAllowed
            } else {
                Loud::Yes
            };
            let ok = chk.allowed_names(
                AclOperation::Describe,
                ResourceType::Topic,
                names.iter().map(String::as_str),
                loud,
            );
            if plan.all_topics {
                g.topics.retain(|t| ok.contains(t.name.0.as_str()));
            } else {
                for t in &mut g.topics {
                    if !ok.contains(t.name.0.as_str()) {
                        t.partitions = t
                            .partitions
                            .iter()
                            .map(|p| {
                                OffsetFetchResponsePartitions::default()
                                    .with_partition_index(p.partition_index)
                                    .with_committed_offset(-1)
                                    .with_metadata(Some(text("")))
                                    .with_error_code(TOPIC_DENIED)
                            })
                            .collect();
                    }
                }
            }
        }
        response.encode(ApiKey::OffsetFetch, &body)
    }
}

/// Groups denied DESCRIBE, and whether to recompute authorized operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DescribeGroupsMerge {
    denied: Vec<String>,
    include_operations: bool,
}

fn describe_split(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
    consumer: bool,
) -> Result<Outcome, Refusal> {
    let v = req.version;
    let mut w = req.walk();
    let (span, groups) = wire::string_array(&mut w)?;
    let include_operations = if consumer || v >= 3 { w.bool()? } else { false };
    w.tags()?;
    w.finish()?;
    let allowed = chk.allowed_names(
        AclOperation::Describe,
        ResourceType::Group,
        groups.iter().map(String::as_str),
        Loud::Yes,
    );
    let keep: Vec<bool> = groups.iter().map(|g| allowed.contains(g)).collect();
    let denied: Vec<String> = groups
        .iter()
        .filter(|g| !allowed.contains(*g))
        .cloned()
        .collect();
    let merge = DescribeGroupsMerge {
        denied,
        include_operations,
    };
    if !keep.is_empty() && keep.iter().all(|k| !*k) {
        return if consumer {
            req.respond(&ConsumerGroupDescribeResponse::default().with_groups(merge.cg_entries()))
        } else {
            req.respond(&DescribeGroupsResponse::default().with_groups(merge.entries()))
        };
    }
    let frame = if keep.iter().all(|k| *k) {
        req.frame.clone()
    } else {
        let mut edits = Vec::new();
        span.keep_only(&keep, &mut edits);
        req.rewritten(edits)
    };
    // Always rewritten: authorized operations must describe this principal.
    let rewrite = if consumer {
        Rewrite::ConsumerGroupDescribe(merge)
    } else {
        Rewrite::DescribeGroups(merge)
    };
    Ok(Outcome::Forward(frame, rewrite))
}

/// DescribeGroups v0–6.
pub(crate) fn describe_groups(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    describe_split(req, chk, false)
}

/// ConsumerGroupDescribe v0–1.
pub(crate) fn consumer_group_describe(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    describe_split(req, chk, true)
}

impl DescribeGroupsMerge {
    fn entries(&self) -> Vec<DescribedGroup> {
        self.denied
            .iter()
            .map(|g| {
                DescribedGroup::default()
                    .with_group_id(group(g))
                    .with_error_code(GROUP_DENIED)
                    .with_authorized_operations(i32::MIN)
            })
            .collect()
    }

    fn cg_entries(&self) -> Vec<CgDescribed> {
        self.denied
            .iter()
            .map(|g| {
                CgDescribed::default()
                    .with_group_id(group(g))
                    .with_error_code(GROUP_DENIED)
                    .with_authorized_operations(i32::MIN)
            })
            .collect()
    }

    fn operations(&self, chk: &mut Checker<'_>, id: &str, error_code: i16) -> i32 {
        if self.include_operations && error_code == 0 {
            chk.authorized_operations(ResourceType::Group, id)
        } else {
            i32::MIN
        }
    }

    pub(crate) fn apply_describe_groups(
        &self,
        response: &Response<'_>,
        chk: &mut Checker<'_>,
    ) -> Result<Bytes, PlanError> {
        let mut body: DescribeGroupsResponse = response.decode(ApiKey::DescribeGroups)?;
        for g in &mut body.groups {
            g.authorized_operations = self.operations(chk, g.group_id.0.as_str(), g.error_code);
        }
        body.groups.extend(self.entries());
        response.encode(ApiKey::DescribeGroups, &body)
    }

    pub(crate) fn apply_consumer_group_describe(
        &self,
        response: &Response<'_>,
        chk: &mut Checker<'_>,
    ) -> Result<Bytes, PlanError> {
        let mut body: ConsumerGroupDescribeResponse =
            response.decode(ApiKey::ConsumerGroupDescribe)?;
        for g in &mut body.groups {
            g.authorized_operations = self.operations(chk, g.group_id.0.as_str(), g.error_code);
        }
        body.groups.extend(self.cg_entries());
        response.encode(ApiKey::ConsumerGroupDescribe, &body)
    }
}

/// ListGroups: DESCRIBE on the cluster (not logged when denied) lists everything.
pub(crate) fn list_groups(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    if chk.cluster(AclOperation::Describe, Loud::IfAllowed) {
        Ok(req.unchanged())
    } else {
        Ok(Outcome::Forward(req.frame.clone(), Rewrite::ListGroups))
    }
}

/// Keeps the groups this principal may DESCRIBE (denials not logged).
pub(crate) fn filter_list_groups(
    response: &Response<'_>,
    chk: &mut Checker<'_>,
) -> Result<Bytes, PlanError> {
    let mut body: ListGroupsResponse = response.decode(ApiKey::ListGroups)?;
    let names: Vec<String> = body
        .groups
        .iter()
        .map(|g| g.group_id.0.to_string())
        .collect();
    let ok = chk.allowed_names(
        AclOperation::Describe,
        ResourceType::Group,
        names.iter().map(String::as_str),
        Loud::IfAllowed,
    );
    body.groups.retain(|g| ok.contains(g.group_id.0.as_str()));
    response.encode(ApiKey::ListGroups, &body)
}

/// Groups denied DELETE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeleteGroupsMerge {
    denied: Vec<String>,
}

impl DeleteGroupsMerge {
    fn entries(&self) -> Vec<DeletableGroupResult> {
        self.denied
            .iter()
            .map(|g| {
                DeletableGroupResult::default()
                    .with_group_id(group(g))
                    .with_error_code(GROUP_DENIED)
            })
            .collect()
    }

    pub(crate) fn apply(&self, response: &Response<'_>) -> Result<Bytes, PlanError> {
        let mut body: DeleteGroupsResponse = response.decode(ApiKey::DeleteGroups)?;
        body.results.extend(self.entries());
        response.encode(ApiKey::DeleteGroups, &body)
    }
}

/// DeleteGroups v0–2.
pub(crate) fn delete_groups(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let (span, groups) = wire::string_array(&mut w)?;
    w.tags()?;
    w.finish()?;
    let allowed = chk.allowed_names(
        AclOperation::Delete,
        ResourceType::Group,
        groups.iter().map(String::as_str),
        Loud::Yes,
    );
    let keep: Vec<bool> = groups.iter().map(|g| allowed.contains(g)).collect();
    if keep.iter().all(|k| *k) {
        return Ok(req.unchanged());
    }
    let merge = DeleteGroupsMerge {
        denied: groups
            .iter()
            .filter(|g| !allowed.contains(*g))
            .cloned()
            .collect(),
    };
    if keep.iter().all(|k| !*k) {
        return req.respond(&DeleteGroupsResponse::default().with_results(merge.entries()));
    }
    let mut edits = Vec::new();
    span.keep_only(&keep, &mut edits);
    Ok(Outcome::Forward(
        req.rewritten(edits),
        Rewrite::DeleteGroups(merge),
    ))
}

/// Coordinator keys denied, with their error codes (v4+ batches).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FindCoordinatorMerge {
    denied: Vec<(String, i16)>,
}

impl FindCoordinatorMerge {
    fn entries(&self) -> Vec<Coordinator> {
        self.denied
            .iter()
            .map(|(key, code)| {
                Coordinator::default()
                    .with_key(text(key))
                    .with_node_id(kafka_protocol::messages::BrokerId(-1))
                    .with_host(text(""))
                    .with_port(-1)
                    .with_error_code(*code)
            })
            .collect()
    }

    pub(crate) fn apply(&self, response: &Response<'_>) -> Result<Bytes, PlanError> {
        let mut body: FindCoordinatorResponse = response.decode(ApiKey::FindCoordinator)?;
        body.coordinators.extend(self.entries());
        response.encode(ApiKey::FindCoordinator, &body)
    }
}

/// The error for a coordinator key, or `None` when allowed. Key types: 0 GROUP (DESCRIBE group),
/// 1 TRANSACTION (DESCRIBE transactional id); share-group keys (2) need CLUSTER_ACTION, which a
/// client never has here; anything else is INVALID_REQUEST.
fn coordinator_error(chk: &mut Checker<'_>, key_type: i8, key: &str) -> Option<ErrorCode> {
    match key_type {
        0 => (!chk.allowed(AclOperation::Describe, ResourceType::Group, key, Loud::Yes))
            .then_some(ErrorCode::GROUP_AUTHORIZATION_FAILED),
        1 => (!chk.allowed(
            AclOperation::Describe,
            ResourceType::TransactionalId,
            key,
            Loud::Yes,
        ))
        .then_some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        2 => Some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED),
        _ => Some(ErrorCode::INVALID_REQUEST),
    }
}

/// FindCoordinator v0–6.
pub(crate) fn find_coordinator(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    let v = req.version;
    let mut w = req.walk();
    if v <= 3 {
        let key = w.string()?;
        let key_type = if v >= 1 { w.i8()? } else { 0 };
        w.tags()?;
        w.finish()?;
        return match coordinator_error(chk, key_type, &key) {
            None => Ok(req.unchanged()),
            Some(code) => req.respond(
                &FindCoordinatorResponse::default()
                    .with_error_code(code.0)
                    .with_node_id(kafka_protocol::messages::BrokerId(-1))
                    .with_host(text(""))
                    .with_port(-1),
            ),
        };
    }
    let key_type = w.i8()?;
    let (span, keys) = wire::string_array(&mut w)?;
    w.tags()?;
    w.finish()?;
    let mut keep = Vec::new();
    let mut denied = Vec::new();
    for key in &keys {
        match coordinator_error(chk, key_type, key) {
            None => keep.push(true),
            Some(code) => {
                keep.push(false);
                denied.push((key.clone(), code.0));
            }
        }
    }
    if denied.is_empty() {
        return Ok(req.unchanged());
    }
    let merge = FindCoordinatorMerge { denied };
    if keep.iter().all(|k| !*k) {
        return req.respond(&FindCoordinatorResponse::default().with_coordinators(merge.entries()));
    }
    let mut edits = Vec::new();
    span.keep_only(&keep, &mut edits);
    Ok(Outcome::Forward(
        req.rewritten(edits),
        Rewrite::FindCoordinator(merge),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::Verdict;
    use super::*;
    use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup as CgGroup;
    use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
    use kafka_protocol::messages::list_groups_response::ListedGroup;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseTopics;
    use kafka_protocol::messages::{
        ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, DeleteGroupsRequest,
        DescribeGroupsRequest, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
        ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
    };

    fn g(name: &str) -> GroupId {
        GroupId(s(name))
    }

    #[test]
    fn membership_apis_need_read_on_the_group() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Group, "ok")
            .arc();
        for version in [0, 5, 6, 9] {
            let ok = frame(
                ApiKey::JoinGroup,
                version,
                &JoinGroupRequest::default().with_group_id(g("ok")),
            );
            assert_eq!(forwarded(&run(&authz, &ok)).0, ok);
            let no = frame(
                ApiKey::JoinGroup,
                version,
                &JoinGroupRequest::default().with_group_id(g("no")),
            );
            let r: JoinGroupResponse =
                response_body(ApiKey::JoinGroup, version, &responded(&run(&authz, &no)));
            assert_eq!(r.error_code, 30);
        }
        for version in [0, 4, 5] {
            let no = frame(
                ApiKey::SyncGroup,
                version,
                &SyncGroupRequest::default().with_group_id(g("no")),
            );
            let r: SyncGroupResponse =
                response_body(ApiKey::SyncGroup, version, &responded(&run(&authz, &no)));
            assert_eq!(r.error_code, 30);
            let no = frame(
                ApiKey::LeaveGroup,
                version,
                &LeaveGroupRequest::default().with_group_id(g("no")),
            );
            let r: LeaveGroupResponse =
                response_body(ApiKey::LeaveGroup, version, &responded(&run(&authz, &no)));
            assert_eq!(r.error_code, 30);
        }
        let no = frame(
            ApiKey::Heartbeat,
            4,
            &HeartbeatRequest::default().with_group_id(g("no")),
        );
        let r: HeartbeatResponse =
            response_body(ApiKey::Heartbeat, 4, &responded(&run(&authz, &no)));
        assert_eq!(r.error_code, 30);
    }

    #[test]
    fn consumer_group_heartbeat_needs_describe_on_subscribed_topics() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Group, "ok")
            .allow(AclOperation::Describe, ResourceType::Topic, "t1")
            .arc();
        let req = |topics: &[&str]| {
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(g("ok"))
                .with_subscribed_topic_names(Some(topics.iter().map(|t| TopicName(s(t))).collect()))
        };
        for version in [0, 1] {
            let f = frame(ApiKey::ConsumerGroupHeartbeat, version, &req(&["t1"]));
            assert_eq!(forwarded(&run(&authz, &f)).0, f);
            let f = frame(ApiKey::ConsumerGroupHeartbeat, version, &req(&["t1", "t2"]));
            let r: ConsumerGroupHeartbeatResponse = response_body(
                ApiKey::ConsumerGroupHeartbeat,
                version,
                &responded(&run(&authz, &f)),
            );
            assert_eq!(r.error_code, 29);
        }
    }

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
            let merged = plan
                .apply(response(
                    ApiKey::OffsetCommit,
                    version,
                    &OffsetCommitResponse::default(),
                ))
                .unwrap();
            let merged: OffsetCommitResponse =
                response_body(ApiKey::OffsetCommit, version, &merged.frame);
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
        let merged = plan
            .apply(response(ApiKey::OffsetDelete, 0, &upstream))
            .unwrap();
        let merged: OffsetDeleteResponse = response_body(ApiKey::OffsetDelete, 0, &merged.frame);
        let codes: Vec<_> = merged
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.0.to_string(),
                    t.partitions[0].partition_index,
                    t.partitions[0].error_code,
                )
            })
            .collect();
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

    #[test]
    fn offset_fetch_v8_masks_requested_topics_that_may_not_be_described() {
        let authz = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Group, "ok")
            .allow(AclOperation::Describe, ResourceType::Topic, "a")
            .arc();
        for version in [8, 9] {
            let req =
                OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                    .with_group_id(g("ok"))
                    .with_topics(Some(
                        ["a", "b"]
                            .iter()
                            .map(|t| {
                                OffsetFetchRequestTopics::default()
                                    .with_name(TopicName(s(t)))
                                    .with_partition_indexes(vec![4])
                            })
                            .collect(),
                    ))]);
            let (_, plan) = forwarded(&run(&authz, &frame(ApiKey::OffsetFetch, version, &req)));
            let upstream = OffsetFetchResponse::default().with_groups(vec![
                OffsetFetchResponseGroup::default()
                    .with_group_id(g("ok"))
                    .with_topics(
                        ["a", "b"]
                            .iter()
                            .map(|t| {
                                OffsetFetchResponseTopics::default()
                                    .with_name(TopicName(s(t)))
                                    .with_partitions(vec![OffsetFetchResponsePartitions::default()
                                        .with_partition_index(4)
                                        .with_committed_offset(55)
                                        .with_committed_leader_epoch(7)
                                        .with_metadata(Some(s("secret")))])
                            })
                            .collect(),
                    ),
            ]);
            let merged = plan
                .apply(response(ApiKey::OffsetFetch, version, &upstream))
                .unwrap();
            let merged: OffsetFetchResponse =
                response_body(ApiKey::OffsetFetch, version, &merged.frame);
            let topics = &merged.groups[0].topics;
            assert_eq!(topics[0].partitions[0].committed_offset, 55);
            let denied = &topics[1].partitions[0];
            assert_eq!(
                (
                    denied.partition_index,
                    denied.committed_offset,
                    denied.committed_leader_epoch,
                    denied.metadata.as_ref().map(|m| m.to_string()),
                    denied.error_code
                ),
                (4, -1, -1, Some(String::new()), 29)
            );
        }
    }

    #[test]
    fn offset_fetch_hides_denied_groups_and_topics() {
        let authz = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Group, "ok")
            .allow(AclOperation::Describe, ResourceType::Topic, "a")
            .arc();
        // v1–7: one group; explicit topics.
        for version in [1, 2, 6, 7] {
            let req = OffsetFetchRequest::default()
                .with_group_id(g("ok"))
                .with_topics(Some(vec![
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(s("a")))
                        .with_partition_indexes(vec![0]),
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(s("b")))
                        .with_partition_indexes(vec![0]),
                ]));
            let f = frame(ApiKey::OffsetFetch, version, &req);
            let (out, plan) = forwarded(&run(&authz, &f));
            assert_eq!(out, f);
            let upstream = OffsetFetchResponse::default().with_topics(
                ["a", "b"]
                    .iter()
                    .map(|t| {
                        OffsetFetchResponseTopic::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(vec![
                                OffsetFetchResponsePartition::default().with_committed_offset(55)
                            ])
                    })
                    .collect(),
            );
            let merged = plan
                .apply(response(ApiKey::OffsetFetch, version, &upstream))
                .unwrap();
            let merged: OffsetFetchResponse =
                response_body(ApiKey::OffsetFetch, version, &merged.frame);
            assert_eq!(merged.topics[0].partitions[0].committed_offset, 55);
            assert_eq!(merged.topics[1].partitions[0].committed_offset, -1);
            assert_eq!(merged.topics[1].partitions[0].error_code, 29);
            let denied = frame(ApiKey::OffsetFetch, version, &req.with_group_id(g("no")));
            let r: OffsetFetchResponse = response_body(
                ApiKey::OffsetFetch,
                version,
                &responded(&run(&authz, &denied)),
            );
            if version >= 2 {
                assert_eq!(r.error_code, 30);
            } else {
                assert!(r
                    .topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .all(|p| p.error_code == 30));
            }
        }
        // v8–9: several groups, all-topics fetch filtered.
        for version in [8, 9] {
            let req = OffsetFetchRequest::default().with_groups(vec![
                OffsetFetchRequestGroup::default()
                    .with_group_id(g("ok"))
                    .with_topics(None),
                OffsetFetchRequestGroup::default()
                    .with_group_id(g("no"))
                    .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                        .with_name(TopicName(s("a")))
                        .with_partition_indexes(vec![0])])),
            ]);
            let (_, plan) = forwarded(&run(&authz, &frame(ApiKey::OffsetFetch, version, &req)));
            let topics = |names: &[&str]| -> Vec<OffsetFetchResponseTopics> {
                names
                    .iter()
                    .map(|t| {
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(vec![
                                OffsetFetchResponsePartitions::default().with_committed_offset(55)
                            ])
                    })
                    .collect()
            };
            let upstream = OffsetFetchResponse::default().with_groups(vec![
                OffsetFetchResponseGroup::default()
                    .with_group_id(g("ok"))
                    .with_topics(topics(&["a", "b"])),
                OffsetFetchResponseGroup::default()
                    .with_group_id(g("no"))
                    .with_topics(topics(&["a"])),
            ]);
            let merged = plan
                .apply(response(ApiKey::OffsetFetch, version, &upstream))
                .unwrap();
            let merged: OffsetFetchResponse =
                response_body(ApiKey::OffsetFetch, version, &merged.frame);
            let ok = &merged.groups[0];
            assert_eq!(ok.topics.len(), 1);
            assert_eq!(ok.topics[0].name.0.as_str(), "a");
            let no = &merged.groups[1];
            assert_eq!(no.error_code, 30);
            assert!(no.topics.is_empty());
        }
    }

    #[test]
    fn describe_groups_per_group_errors_and_operations_for_this_principal() {
        let authz = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Group, "ok")
            .arc();
        for version in [0, 3, 5, 6] {
            let req = DescribeGroupsRequest::default()
                .with_groups(vec![g("ok"), g("no")])
                .with_include_authorized_operations(version >= 3);
            let (out, plan) =
                forwarded(&run(&authz, &frame(ApiKey::DescribeGroups, version, &req)));
            let sent: DescribeGroupsRequest = request_body(&out);
            assert_eq!(sent.groups, vec![g("ok")]);
            let mut upstream = DescribeGroupsResponse::default()
                .with_groups(vec![DescribedGroup::default().with_group_id(g("ok"))]);
            if version >= 3 {
                upstream.groups[0].authorized_operations = -1;
            }
            let merged = plan
                .apply(response(ApiKey::DescribeGroups, version, &upstream))
                .unwrap();
            let merged: DescribeGroupsResponse =
                response_body(ApiKey::DescribeGroups, version, &merged.frame);
            assert_eq!(merged.groups[1].group_id, g("no"));
            assert_eq!(merged.groups[1].error_code, 30);
            if version >= 3 {
                assert_eq!(merged.groups[0].authorized_operations, 1 << 8);
            }
        }
        let req = ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![g("no")])
            .with_include_authorized_operations(true);
        let r: ConsumerGroupDescribeResponse = response_body(
            ApiKey::ConsumerGroupDescribe,
            0,
            &responded(&run(&authz, &frame(ApiKey::ConsumerGroupDescribe, 0, &req))),
        );
        assert_eq!(r.groups[0].error_code, 30);
        let req = req.with_group_ids(vec![g("ok")]);
        let (_, plan) = forwarded(&run(&authz, &frame(ApiKey::ConsumerGroupDescribe, 1, &req)));
        let upstream =
            ConsumerGroupDescribeResponse::default().with_groups(vec![CgGroup::default()
                .with_group_id(g("ok"))
                .with_authorized_operations(-1)]);
        let merged = plan
            .apply(response(ApiKey::ConsumerGroupDescribe, 1, &upstream))
            .unwrap();
        let merged: ConsumerGroupDescribeResponse =
            response_body(ApiKey::ConsumerGroupDescribe, 1, &merged.frame);
        assert_eq!(merged.groups[0].authorized_operations, 1 << 8);
    }

    #[test]
    fn list_groups_is_filtered_without_cluster_describe() {
        let upstream = ListGroupsResponse::default().with_groups(vec![
            ListedGroup::default().with_group_id(g("ok")),
            ListedGroup::default().with_group_id(g("no")),
        ]);
        let authz = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Group, "ok")
            .arc();
        for version in [0, 3, 5] {
            let (_, plan) = forwarded(&run(
                &authz,
                &frame(ApiKey::ListGroups, version, &ListGroupsRequest::default()),
            ));
            let merged = plan
                .apply(response(ApiKey::ListGroups, version, &upstream))
                .unwrap();
            let merged: ListGroupsResponse =
                response_body(ApiKey::ListGroups, version, &merged.frame);
            assert_eq!(merged.groups.len(), 1);
            assert_eq!(merged.groups[0].group_id, g("ok"));
        }
        let cluster = AllowList::new()
            .allow(
                AclOperation::Describe,
                ResourceType::Cluster,
                "kafka-cluster",
            )
            .arc();
        let (_, plan) = forwarded(&run(
            &cluster,
            &frame(ApiKey::ListGroups, 4, &ListGroupsRequest::default()),
        ));
        assert!(plan.is_unchanged());
    }

    #[test]
    fn delete_groups_per_group() {
        let authz = AllowList::new()
            .allow(AclOperation::Delete, ResourceType::Group, "ok")
            .arc();
        for version in [0, 1, 2] {
            let req = DeleteGroupsRequest::default().with_groups_names(vec![g("no"), g("ok")]);
            let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::DeleteGroups, version, &req)));
            let sent: DeleteGroupsRequest = request_body(&out);
            assert_eq!(sent.groups_names, vec![g("ok")]);
            let merged = plan
                .apply(response(
                    ApiKey::DeleteGroups,
                    version,
                    &DeleteGroupsResponse::default(),
                ))
                .unwrap();
            let merged: DeleteGroupsResponse =
                response_body(ApiKey::DeleteGroups, version, &merged.frame);
            assert_eq!(merged.results[0].group_id, g("no"));
            assert_eq!(merged.results[0].error_code, 30);
        }
    }

    #[test]
    fn find_coordinator_by_key_type() {
        let authz = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Group, "ok")
            .allow(AclOperation::Write, ResourceType::TransactionalId, "tx")
            .arc();
        for version in [0, 1, 2, 3] {
            let f = frame(
                ApiKey::FindCoordinator,
                version,
                &FindCoordinatorRequest::default().with_key(s("ok")),
            );
            assert_eq!(forwarded(&run(&authz, &f)).0, f);
            let f = frame(
                ApiKey::FindCoordinator,
                version,
                &FindCoordinatorRequest::default().with_key(s("no")),
            );
            let r: FindCoordinatorResponse = response_body(
                ApiKey::FindCoordinator,
                version,
                &responded(&run(&authz, &f)),
            );
            assert_eq!(r.error_code, 30);
        }
        let f = frame(
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default()
                .with_key(s("other"))
                .with_key_type(1),
        );
        let r: FindCoordinatorResponse =
            response_body(ApiKey::FindCoordinator, 3, &responded(&run(&authz, &f)));
        assert_eq!(r.error_code, 53);
        for version in [4, 5, 6] {
            let req = FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![s("no"), s("ok")]);
            let (out, plan) =
                forwarded(&run(&authz, &frame(ApiKey::FindCoordinator, version, &req)));
            let sent: FindCoordinatorRequest = request_body(&out);
            assert_eq!(sent.coordinator_keys, vec![s("ok")]);
            let merged = plan
                .apply(response(
                    ApiKey::FindCoordinator,
                    version,
                    &FindCoordinatorResponse::default(),
                ))
                .unwrap();
            let merged: FindCoordinatorResponse =
                response_body(ApiKey::FindCoordinator, version, &merged.frame);
            assert_eq!(merged.coordinators[0].key.as_str(), "no");
            assert_eq!(merged.coordinators[0].error_code, 30);
            let share = frame(
                ApiKey::FindCoordinator,
                version,
                &req.clone()
                    .with_key_type(2)
                    .with_coordinator_keys(vec![s("g:t:0")]),
            );
            assert!(matches!(run(&authz, &share).verdict, Verdict::Respond(_)));
        }
    }
}
