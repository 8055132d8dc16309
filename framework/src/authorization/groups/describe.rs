//! DescribeGroups and ConsumerGroupDescribe (DESCRIBE per group; authorized operations computed
//! for this principal) and ListGroups (DESCRIBE on the cluster lists every group, otherwise only
//! the groups the principal may DESCRIBE).

use bytes::Bytes;
use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup as CgDescribed;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeResponse, DescribeGroupsResponse, GroupId, ListGroupsResponse,
};

use super::super::check::{Checker, Loud};
use super::super::entries::{text, GROUP_DENIED};
use super::super::wire::{self, PlanError};
use super::super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};

fn group_id(s: &str) -> GroupId {
    GroupId(text(s))
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
                    .with_group_id(group_id(g))
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
                    .with_group_id(group_id(g))
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

#[cfg(test)]
mod tests {
    use super::super::super::testing::*;
    use super::*;
    use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup as CgGroup;
    use kafka_protocol::messages::list_groups_response::ListedGroup;
    use kafka_protocol::messages::{
        ConsumerGroupDescribeRequest, DescribeGroupsRequest, ListGroupsRequest,
    };

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
            let merged: DescribeGroupsResponse =
                applied(&plan, ApiKey::DescribeGroups, version, &upstream);
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
        let merged: ConsumerGroupDescribeResponse =
            applied(&plan, ApiKey::ConsumerGroupDescribe, 1, &upstream);
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
            let merged: ListGroupsResponse = applied(&plan, ApiKey::ListGroups, version, &upstream);
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
}
