//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup and ConsumerGroupHeartbeat: READ on the group.

use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatResponse, HeartbeatResponse, JoinGroupResponse,
    LeaveGroupResponse, SyncGroupResponse,
};

use super::super::check::{Checker, Loud};
use super::super::entries::{text, GROUP_DENIED};
use super::super::{Outcome, Refusal, Request};
use crate::acl::{AclOperation, ResourceType};
use crate::errors::ErrorCode;

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

#[cfg(test)]
mod tests {
    use super::super::super::testing::*;
    use super::*;
    use kafka_protocol::messages::{
        ConsumerGroupHeartbeatRequest, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
        SyncGroupRequest, TopicName,
    };

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
}
