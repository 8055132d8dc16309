//! Test helpers: an allow-list authorizer and request/response framing with kafka-protocol
//! (client-side encoding is fine in tests: these are our own bytes).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, GroupId, RequestHeader as WireHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::{
    enforce, enforce_in, enforce_verdict, enforce_verdict_in, Enforcement, FetchSessions, Verdict,
};
use crate::acl::{AclOperation, ResourceType};
use crate::authorizer::{
    Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};
use crate::principal::Principal;
use crate::protocol::header;

/// `(topic, first partition's index, its error code)` for each topic of a `[topic, [partition]]`
/// response (kafka-protocol generates a distinct type per API, hence a macro).
macro_rules! first_partition_codes {
    ($topics:expr) => {
        $topics
            .iter()
            .map(|t| {
                (
                    t.name.0.to_string(),
                    t.partitions[0].partition_index,
                    t.partitions[0].error_code,
                )
            })
            .collect::<Vec<_>>()
    };
}
pub(crate) use first_partition_codes;

/// Allows exactly the listed (operation, type, name) triples; `*` names match every resource.
/// DESCRIBE is implied by READ/WRITE/DELETE/ALTER, like Kafka.
#[derive(Default)]
pub(crate) struct AllowList {
    allowed: BTreeSet<(AclOperation, ResourceType, String)>,
    by_type: BTreeSet<(AclOperation, ResourceType)>,
}

impl AllowList {
    pub(crate) fn new() -> Self {
        Self::default()
    }
    pub(crate) fn allow(mut self, op: AclOperation, rt: ResourceType, name: &str) -> Self {
        self.allowed.insert((op, rt, name.to_owned()));
        self.by_type.insert((op, rt));
        self
    }
    pub(crate) fn arc(self) -> Arc<dyn Authorizer> {
        Arc::new(self)
    }
    fn allows(&self, op: AclOperation, rt: ResourceType, name: &str) -> bool {
        let implied: &[AclOperation] = match op {
            AclOperation::Describe => &[
                AclOperation::Describe,
                AclOperation::Read,
                AclOperation::Write,
                AclOperation::Delete,
                AclOperation::Alter,
            ],
            AclOperation::DescribeConfigs => {
                &[AclOperation::DescribeConfigs, AclOperation::AlterConfigs]
            }
            _ => std::slice::from_ref(&op),
        };
        implied.iter().any(|o| {
            self.allowed.contains(&(*o, rt, name.to_owned()))
                || self.allowed.contains(&(*o, rt, "*".to_owned()))
        })
    }
}

impl Authorizer for AllowList {
    fn authorize(&self, _: &RequestContext, actions: &[Action]) -> Vec<Authorization> {
        actions
            .iter()
            .map(|a| {
                let ok = self.allows(a.operation, a.resource.resource_type, &a.resource.name);
                Authorization {
                    decision: if ok {
                        Decision::Allowed
                    } else {
                        Decision::Denied
                    },
                    rule: DecidingRule::DefaultDeny,
                }
            })
            .collect()
    }
    fn authorize_by_resource_type(
        &self,
        _: &RequestContext,
        op: AclOperation,
        rt: ResourceType,
    ) -> Decision {
        if self.by_type.contains(&(op, rt)) {
            Decision::Allowed
        } else {
            Decision::Denied
        }
    }
}

pub(crate) fn context(key: ApiKey, version: i16) -> RequestContext<'static> {
    RequestContext::new(
        Principal::user("alice"),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        "test",
        key as i16,
        version,
        7,
    )
}

/// A request frame (no size prefix) with correlation id 7 and client id "c".
pub(crate) fn frame<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Bytes {
    let mut out = BytesMut::new();
    WireHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("c")))
        .encode(&mut out, key.request_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    out.freeze()
}

/// Runs `enforce` on a frame, checking that the unrecorded path the connection takes
/// (`enforce_verdict`) reaches the same verdict.
pub(crate) fn run(authorizer: &Arc<dyn Authorizer>, frame: &Bytes) -> Enforcement {
    let h = header::parse(frame).unwrap();
    let key = ApiKey::try_from(h.api_key).unwrap();
    let context = context(key, h.api_version);
    let enforcement = enforce(authorizer, &context, &h, frame);
    assert_eq!(
        enforce_verdict(authorizer, &context, &h, frame),
        enforcement.verdict
    );
    enforcement
}

/// [`run`] for a connection with fetch sessions, recording decisions ([`verdict_in`] is the
/// connection's path; both change the table, so a test picks one per frame).
pub(crate) fn run_in(
    authorizer: &Arc<dyn Authorizer>,
    frame: &Bytes,
    sessions: &FetchSessions,
) -> Enforcement {
    let h = header::parse(frame).unwrap();
    let key = ApiKey::try_from(h.api_key).unwrap();
    let context = context(key, h.api_version);
    enforce_in(authorizer, &context, &h, frame, sessions)
}

/// The unrecorded path of [`run_in`] (what the connection calls).
pub(crate) fn verdict_in(
    authorizer: &Arc<dyn Authorizer>,
    frame: &Bytes,
    sessions: &FetchSessions,
) -> Verdict {
    let h = header::parse(frame).unwrap();
    let key = ApiKey::try_from(h.api_key).unwrap();
    let context = context(key, h.api_version);
    enforce_verdict_in(authorizer, &context, &h, frame, sessions)
}

/// Decodes the body of a request frame.
pub(crate) fn request_body<T: Decodable>(frame: &Bytes) -> T {
    let h = header::parse(frame).unwrap();
    let mut body = frame.slice(h.header_len..);
    let decoded = T::decode(&mut body, h.api_version).unwrap();
    assert!(body.is_empty(), "trailing bytes after the request body");
    decoded
}

/// A response frame as the upstream would send it.
pub(crate) fn response<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Bytes {
    let mut out = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(7)
        .encode(&mut out, key.response_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    out.freeze()
}

/// Decodes a response frame, checking the correlation id.
pub(crate) fn response_body<T: Decodable>(key: ApiKey, version: i16, frame: &Bytes) -> T {
    let mut buf = frame.clone();
    let h = ResponseHeader::decode(&mut buf, key.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 7);
    let body = T::decode(&mut buf, version).unwrap();
    assert!(buf.is_empty(), "trailing bytes after the response body");
    body
}

/// The plan applied to `upstream` (a response body as the upstream would send it), decoded.
pub(crate) fn applied<T: Decodable>(
    plan: &super::ResponsePlan,
    key: ApiKey,
    version: i16,
    upstream: &impl Encodable,
) -> T {
    let merged = plan.apply(response(key, version, upstream)).unwrap();
    response_body(key, version, &merged.frame)
}

/// The forwarded frame and the plan, or a panic.
pub(crate) fn forwarded(e: &Enforcement) -> (Bytes, super::ResponsePlan) {
    match &e.verdict {
        Verdict::Forward { frame, plan } => (frame.clone(), plan.clone()),
        other => panic!("expected Forward, got {other:?}"),
    }
}

/// The locally built response, or a panic.
pub(crate) fn responded(e: &Enforcement) -> Bytes {
    match &e.verdict {
        Verdict::Respond(b) => b.clone(),
        other => panic!("expected Respond, got {other:?}"),
    }
}

pub(crate) fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

pub(crate) fn g(name: &str) -> GroupId {
    GroupId(s(name))
}

/// Answers every action the same way.
pub(crate) use crate::authorizer::FixedDecision as Fixed;
