//! DeleteGroups: DELETE per group; denied groups are spliced out of the request and answered with
//! GROUP_AUTHORIZATION_FAILED.

use bytes::Bytes;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{ApiKey, DeleteGroupsResponse, GroupId};

use super::super::check::{Checker, Loud};
use super::super::entries::{text, GROUP_DENIED};
use super::super::wire::{self, PlanError};
use super::super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};

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
                    .with_group_id(GroupId(text(g)))
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

#[cfg(test)]
mod tests {
    use super::super::super::testing::*;
    use super::*;
    use kafka_protocol::messages::DeleteGroupsRequest;

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
            let merged: DeleteGroupsResponse = applied(
                &plan,
                ApiKey::DeleteGroups,
                version,
                &DeleteGroupsResponse::default(),
            );
            assert_eq!(merged.results[0].group_id, g("no"));
            assert_eq!(merged.results[0].error_code, 30);
        }
    }
}
