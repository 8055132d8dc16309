//! FindCoordinator: DESCRIBE on the group (GROUP key) or the transactional id (TRANSACTION key).

use bytes::Bytes;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{ApiKey, FindCoordinatorResponse};

use super::super::check::{Checker, Loud};
use super::super::entries::text;
use super::super::wire::{self, PlanError};
use super::super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};
use crate::errors::ErrorCode;

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
    use super::super::super::testing::*;
    use super::super::super::Verdict;
    use super::*;
    use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;

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
            let merged: FindCoordinatorResponse = applied(
                &plan,
                ApiKey::FindCoordinator,
                version,
                &FindCoordinatorResponse::default(),
            );
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
