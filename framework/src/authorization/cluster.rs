//! Cluster-level APIs. Kafka (KafkaApis / ControllerApis `authorizeClusterOperation`) checks one
//! operation on the CLUSTER resource and answers CLUSTER_AUTHORIZATION_FAILED:
//! - ALTER: ElectLeaders, AlterPartitionReassignments, AlterReplicaLogDirs, UpdateFeatures;
//! - DESCRIBE: ListPartitionReassignments, DescribeLogDirs, DescribeQuorum;
//! - DESCRIBE_CONFIGS: DescribeClientQuotas; ALTER_CONFIGS: AlterClientQuotas.
//!
//! DescribeCluster needs nothing; its authorized-operations bitfield is computed for this principal
//! (only when it may DESCRIBE the cluster, else 0).

use bytes::Bytes;
use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{
    AlterClientQuotasResponse, AlterPartitionReassignmentsResponse, AlterReplicaLogDirsResponse,
    ApiKey, DescribeClientQuotasResponse, DescribeClusterResponse, DescribeLogDirsResponse,
    DescribeQuorumResponse, ElectLeadersResponse, ListPartitionReassignmentsResponse, TopicName,
    UpdateFeaturesResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::check::{Checker, Loud};
use super::wire::PlanError;
use super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::errors::ErrorCode;

const DENIED: i16 = ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// Kafka checks nothing beyond authentication (client telemetry, KIP-714).
pub(crate) fn unchecked(req: &Request<'_>, _chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    Ok(req.unchanged())
}

pub(crate) fn enforce(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    use AclOperation::*;
    if req.key == ApiKey::DescribeCluster {
        return describe_cluster(req);
    }
    let operation = match req.key {
        ApiKey::ElectLeaders
        | ApiKey::AlterPartitionReassignments
        | ApiKey::AlterReplicaLogDirs
        | ApiKey::UpdateFeatures => Alter,
        ApiKey::DescribeClientQuotas => DescribeConfigs,
        ApiKey::AlterClientQuotas => AlterConfigs,
        _ => Describe,
    };
    if chk.cluster(operation, Loud::Yes) {
        return Ok(req.unchanged());
    }
    let message = Some(text("Cluster authorization failed."));
    let v = req.version;
    match req.key {
        ApiKey::ElectLeaders => elect_leaders_denied(req),
        ApiKey::AlterPartitionReassignments => req.respond(
            &AlterPartitionReassignmentsResponse::default()
                .with_error_code(DENIED)
                .with_error_message(message),
        ),
        ApiKey::ListPartitionReassignments => req.respond(
            &ListPartitionReassignmentsResponse::default()
                .with_error_code(DENIED)
                .with_error_message(message),
        ),
        ApiKey::DescribeClientQuotas => req.respond(
            &DescribeClientQuotasResponse::default()
                .with_error_code(DENIED)
                .with_error_message(message)
                .with_entries(None),
        ),
        ApiKey::AlterClientQuotas => alter_client_quotas_denied(req),
        // v1–2 have no error field: Kafka answers with no log dirs.
        ApiKey::DescribeLogDirs => req.respond(
            &DescribeLogDirsResponse::default().with_error_code(if v >= 3 { DENIED } else { 0 }),
        ),
        ApiKey::AlterReplicaLogDirs => alter_replica_log_dirs_denied(req),
        ApiKey::UpdateFeatures => req.respond(
            &UpdateFeaturesResponse::default()
                .with_error_code(DENIED)
                .with_error_message(message),
        ),
        _ => req.respond(
            &DescribeQuorumResponse::default()
                .with_error_code(DENIED)
                .with_error_message(if v >= 1 { message } else { None }),
        ),
    }
}

/// ElectLeaders v0–2: the top-level error (v1+) and each requested partition.
fn elect_leaders_denied(req: &Request<'_>) -> Result<Outcome, Refusal> {
    let v = req.version;
    let mut w = req.walk();
    if v >= 1 {
        let _election_type = w.i8()?;
    }
    let mut results = Vec::new();
    if let Some(n) = w.array_len()? {
        for _ in 0..n {
            let topic = w.string()?;
            let partitions = w.i32s()?;
            w.tags()?;
            results.push(
                ReplicaElectionResult::default()
                    .with_topic(TopicName(text(&topic)))
                    .with_partition_result(
                        partitions
                            .iter()
                            .map(|p| {
                                PartitionResult::default()
                                    .with_partition_id(*p)
                                    .with_error_code(DENIED)
                            })
                            .collect(),
                    ),
            );
        }
    }
    let _timeout_ms = w.i32()?;
    w.tags()?;
    w.finish()?;
    let mut body = ElectLeadersResponse::default().with_replica_election_results(results);
    if v >= 1 {
        body.error_code = DENIED;
    }
    req.respond(&body)
}

/// AlterClientQuotas v0–1: every entry fails.
fn alter_client_quotas_denied(req: &Request<'_>) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let n = w.array_len_required()?;
    let mut entries = Vec::new();
    for _ in 0..n {
        let m = w.array_len_required()?;
        let mut entity = Vec::new();
        for _ in 0..m {
            let entity_type = w.string()?;
            let entity_name = w.nullable_string()?;
            w.tags()?;
            entity.push(
                EntityData::default()
                    .with_entity_type(text(&entity_type))
                    .with_entity_name(entity_name.as_deref().map(text)),
            );
        }
        let ops = w.array_len_required()?;
        for _ in 0..ops {
            let _key = w.string()?;
            let _value = w.i64()?; // FLOAT64, 8 bytes
            let _remove = w.bool()?;
            w.tags()?;
        }
        w.tags()?;
        entries.push(
            EntryData::default()
                .with_error_code(DENIED)
                .with_error_message(Some(text("Cluster authorization failed.")))
                .with_entity(entity),
        );
    }
    let _validate_only = w.bool()?;
    w.tags()?;
    w.finish()?;
    req.respond(&AlterClientQuotasResponse::default().with_entries(entries))
}

/// AlterReplicaLogDirs v1–2: every partition fails.
fn alter_replica_log_dirs_denied(req: &Request<'_>) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let dirs = w.array_len_required()?;
    let mut results = Vec::new();
    for _ in 0..dirs {
        let _path = w.string()?;
        let topics = w.array_len_required()?;
        for _ in 0..topics {
            let name = w.string()?;
            let partitions = w.i32s()?;
            w.tags()?;
            results.push(
                AlterReplicaLogDirTopicResult::default()
                    .with_topic_name(TopicName(text(&name)))
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|p| {
                                AlterReplicaLogDirPartitionResult::default()
                                    .with_partition_index(*p)
                                    .with_error_code(DENIED)
                            })
                            .collect(),
                    ),
            );
        }
        w.tags()?;
    }
    w.tags()?;
    w.finish()?;
    req.respond(&AlterReplicaLogDirsResponse::default().with_results(results))
}

/// DescribeCluster v0–2: forwarded; the bitfield is replaced on the way back.
fn describe_cluster(req: &Request<'_>) -> Result<Outcome, Refusal> {
    let v = req.version;
    let mut w = req.walk();
    let include_operations = w.bool()?;
    if v >= 1 {
        let _endpoint_type = w.i8()?;
    }
    if v >= 2 {
        let _include_fenced = w.bool()?;
    }
    w.tags()?;
    w.finish()?;
    Ok(Outcome::Forward(
        req.frame.clone(),
        Rewrite::DescribeCluster { include_operations },
    ))
}

pub(crate) fn describe_cluster_response(
    response: &Response<'_>,
    include_operations: bool,
    chk: &mut Checker<'_>,
) -> Result<Bytes, PlanError> {
    let mut body: DescribeClusterResponse = response.decode(ApiKey::DescribeCluster)?;
    body.cluster_authorized_operations = if include_operations {
        if chk.cluster(AclOperation::Describe, Loud::Yes) {
            chk.authorized_operations(ResourceType::Cluster, CLUSTER_NAME)
        } else {
            0
        }
    } else {
        i32::MIN
    };
    response.encode(ApiKey::DescribeCluster, &body)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use kafka_protocol::messages::alter_client_quotas_request::{
        EntityData as ReqEntity, EntryData as ReqEntry, OpData,
    };
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    use kafka_protocol::messages::{
        AlterClientQuotasRequest, DescribeClusterRequest, DescribeQuorumRequest,
        ElectLeadersRequest, ListPartitionReassignmentsRequest,
    };

    #[test]
    fn cluster_operations_are_checked_and_denied_with_31() {
        let none = AllowList::new().arc();
        let alter = AllowList::new()
            .allow(AclOperation::Alter, ResourceType::Cluster, CLUSTER_NAME)
            .arc();
        for version in [0, 1, 2] {
            let req = ElectLeadersRequest::default().with_topic_partitions(Some(vec![
                TopicPartitions::default()
                    .with_topic(TopicName(text("t")))
                    .with_partitions(vec![1, 2]),
            ]));
            let f = frame(ApiKey::ElectLeaders, version, &req);
            assert_eq!(forwarded(&run(&alter, &f)).0, f);
            let r: ElectLeadersResponse =
                response_body(ApiKey::ElectLeaders, version, &responded(&run(&none, &f)));
            assert_eq!(r.replica_election_results[0].partition_result.len(), 2);
            assert_eq!(
                r.replica_election_results[0].partition_result[0].error_code,
                31
            );
            if version >= 1 {
                assert_eq!(r.error_code, 31);
            }
        }
        let f = frame(
            ApiKey::ListPartitionReassignments,
            0,
            &ListPartitionReassignmentsRequest::default(),
        );
        // ALTER implies DESCRIBE (Kafka's implication rule, reproduced by the test authorizer).
        assert_eq!(forwarded(&run(&alter, &f)).0, f);
        let r: ListPartitionReassignmentsResponse = response_body(
            ApiKey::ListPartitionReassignments,
            0,
            &responded(&run(&none, &f)),
        );
        assert_eq!(r.error_code, 31);
        for version in [0, 1, 2] {
            let f = frame(
                ApiKey::DescribeQuorum,
                version,
                &DescribeQuorumRequest::default(),
            );
            let r: DescribeQuorumResponse =
                response_body(ApiKey::DescribeQuorum, version, &responded(&run(&none, &f)));
            assert_eq!(r.error_code, 31);
        }
        for version in [0, 1] {
            let req = AlterClientQuotasRequest::default().with_entries(vec![ReqEntry::default()
                .with_entity(vec![ReqEntity::default()
                    .with_entity_type(text("user"))
                    .with_entity_name(Some(text("bob")))])
                .with_ops(vec![OpData::default()
                    .with_key(text("producer_byte_rate"))
                    .with_value(1.5)])]);
            let f = frame(ApiKey::AlterClientQuotas, version, &req);
            let r: AlterClientQuotasResponse = response_body(
                ApiKey::AlterClientQuotas,
                version,
                &responded(&run(&alter, &f)),
            );
            assert_eq!(r.entries[0].error_code, 31);
            assert_eq!(r.entries[0].entity[0].entity_name.as_deref(), Some("bob"));
        }
    }

    #[test]
    fn describe_cluster_operations_are_this_principals() {
        let describe = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Cluster, CLUSTER_NAME)
            .allow(AclOperation::Alter, ResourceType::Cluster, CLUSTER_NAME)
            .arc();
        for version in [0, 1, 2] {
            let req =
                DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
            let f = frame(ApiKey::DescribeCluster, version, &req);
            let (out, plan) = forwarded(&run(&describe, &f));
            assert_eq!(out, f);
            let upstream =
                DescribeClusterResponse::default().with_cluster_authorized_operations(-1);
            let merged: DescribeClusterResponse =
                applied(&plan, ApiKey::DescribeCluster, version, &upstream);
            assert_eq!(merged.cluster_authorized_operations, (1 << 8) | (1 << 7));
        }
        let none = AllowList::new().arc();
        let req =
            DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
        let (_, plan) = forwarded(&run(&none, &frame(ApiKey::DescribeCluster, 1, &req)));
        let upstream = DescribeClusterResponse::default().with_cluster_authorized_operations(-1);
        let merged: DescribeClusterResponse = applied(&plan, ApiKey::DescribeCluster, 1, &upstream);
        assert_eq!(merged.cluster_authorized_operations, 0);
    }
}
