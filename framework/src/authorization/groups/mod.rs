//! Consumer-group APIs, as Kafka's `KafkaApis` authorizes them, one module per family:
//! - [`membership`]: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat: READ on
//!   the group, else the whole request fails with GROUP_AUTHORIZATION_FAILED. ConsumerGroupHeartbeat
//!   (KIP-848) also needs DESCRIBE on every subscribed topic name (TOPIC_AUTHORIZATION_FAILED).
//! - [`commit`]: OffsetCommit: READ on the group (else every partition GROUP_AUTHORIZATION_FAILED),
//!   READ on each topic (denied partitions TOPIC_AUTHORIZATION_FAILED). OffsetDelete: DELETE on the
//!   group (else GROUP_AUTHORIZATION_FAILED), READ on each topic. TxnOffsetCommit shares the check.
//! - [`offset_fetch`]: OffsetFetch: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED),
//!   DESCRIBE on each topic: requested topics that are denied get TOPIC_AUTHORIZATION_FAILED, an
//!   all-topics fetch lists only describable topics.
//! - [`describe`]: DescribeGroups, ConsumerGroupDescribe: DESCRIBE per group (denied groups get
//!   GROUP_AUTHORIZATION_FAILED); authorized operations computed for this principal. ListGroups:
//!   DESCRIBE on the cluster lists every group; otherwise only describable groups.
//! - [`delete`]: DeleteGroups: DELETE per group.
//! - [`coordinator`]: FindCoordinator: DESCRIBE on the group (GROUP key) or transactional id
//!   (TRANSACTION key).

mod commit;
mod coordinator;
mod delete;
mod describe;
mod membership;
mod offset_fetch;

pub(crate) use commit::{
    authorize_commit, commit_topics, offset_commit, offset_delete, OffsetCommitMerge,
};
pub(crate) use coordinator::{find_coordinator, FindCoordinatorMerge};
pub(crate) use delete::{delete_groups, DeleteGroupsMerge};
pub(crate) use describe::{
    consumer_group_describe, describe_groups, filter_list_groups, list_groups, DescribeGroupsMerge,
};
pub(crate) use membership::{consumer_group_heartbeat, membership};
pub(crate) use offset_fetch::{offset_fetch, OffsetFetchPlan};
