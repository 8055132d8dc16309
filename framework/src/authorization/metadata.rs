//! Metadata (API 3), v4+. Kafka's `handleTopicMetadataRequest`:
//! - explicitly requested topics need DESCRIBE; a denied topic is answered with
//!   TOPIC_AUTHORIZATION_FAILED (no topic id, no partitions) whether or not it exists;
//! - an all-topics request lists only the topics the principal may DESCRIBE (denials not logged);
//! - auto-creation of a missing topic needs CREATE on the cluster or on the topic; a missing topic
//!   the principal may not create is answered with TOPIC_AUTHORIZATION_FAILED;
//! - authorized-operations bitfields (v8+) are computed for this principal: the cluster's (v8–10)
//!   only when it may DESCRIBE the cluster (else 0), each listed topic's when asked, otherwise the
//!   schema default `i32::MIN`.
//!
//! Portcullis does not know which topics exist, so when some requested topic may not be created it
//! turns `allow_auto_topic_creation` off for the whole request and maps the upstream's
//! UNKNOWN_TOPIC_OR_PARTITION to TOPIC_AUTHORIZATION_FAILED for the topics it could not create.
//! (A topic this principal could have created is then not auto-created in that request.)
//! Topics requested by id only (v12+) cannot be authorized by name: they are removed from the
//! request and answered with TOPIC_AUTHORIZATION_FAILED and their id (Kafka treats ids as not
//! sensitive).

use bytes::Bytes;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{ApiKey, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::check::{Checker, Loud};
use super::wire::{ArraySpan, Edit, PlanError};
use super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};
use crate::errors::ErrorCode;

/// How to rewrite the upstream Metadata response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Requested topics denied DESCRIBE: appended with TOPIC_AUTHORIZATION_FAILED.
    denied: Vec<String>,
    /// Topics requested by id only: appended with TOPIC_AUTHORIZATION_FAILED.
    denied_ids: Vec<[u8; 16]>,
    /// Topics the principal may not create (auto-creation was turned off for them).
    not_creatable: Vec<String>,
    /// An all-topics request: filter the listed topics by DESCRIBE.
    all_topics: bool,
    /// v8–10 `include_cluster_authorized_operations`.
    cluster_operations: bool,
    /// v8+ `include_topic_authorized_operations`.
    topic_operations: bool,
}

/// One requested topic.
struct Entry {
    name: Option<String>,
    id: [u8; 16],
}

pub(crate) fn enforce(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let v = req.version;
    let mut walk = req.walk();
    let start = walk.pos();
    let count = walk.array_len()?;
    let mut span = ArraySpan::begin(&walk, start);
    let mut entries = Vec::new();
    for _ in 0..count.unwrap_or(0) {
        let at = walk.pos();
        let (name, id) = if v >= 10 {
            let id = walk.uuid()?;
            let name = walk.nullable_string()?;
            // Kafka looks a topic up by its id whenever the id is set, ignoring the name: such
            // an entry cannot be authorized by the name it carries.
            (name.filter(|_| id == [0; 16]), id)
        } else {
            (Some(walk.string()?), [0; 16])
        };
        walk.tags()?;
        span.elements.push(at..walk.pos());
        entries.push(Entry { name, id });
    }
    let auto_create_at = walk.pos();
    let allow_auto_create = walk.bool()?; // v4+ (older versions are not authorizable)
    let cluster_operations = if (8..=10).contains(&v) {
        walk.bool()?
    } else {
        false
    };
    let topic_operations = if v >= 8 { walk.bool()? } else { false };
    walk.tags()?;
    walk.finish()?;

    let all_topics = count.is_none();
    let names: Vec<&str> = entries.iter().filter_map(|e| e.name.as_deref()).collect();
    let describable = chk.allowed_names(
        AclOperation::Describe,
        ResourceType::Topic,
        names.iter().copied(),
        Loud::Yes,
    );
    let keep: Vec<bool> = entries
        .iter()
        .map(|e| e.name.as_ref().is_some_and(|n| describable.contains(n)))
        .collect();
    let denied: Vec<String> = entries
        .iter()
        .filter_map(|e| e.name.clone())
        .filter(|n| !describable.contains(n))
        .collect();
    let denied_ids: Vec<[u8; 16]> = entries
        .iter()
        .filter(|e| e.name.is_none())
        .map(|e| e.id)
        .collect();

    let mut not_creatable = Vec::new();
    if allow_auto_create
        && !describable.is_empty()
        && !chk.cluster(AclOperation::Create, Loud::IfAllowed)
    {
        let creatable = chk.allowed_names(
            AclOperation::Create,
            ResourceType::Topic,
            describable.iter(),
            Loud::IfAllowed,
        );
        not_creatable = describable
            .iter()
            .filter(|n| !creatable.contains(*n))
            .map(str::to_owned)
            .collect();
    }

    let mut edits = Vec::new();
    if keep.iter().any(|k| !*k) {
        span.keep_only(&keep, &mut edits);
    }
    if !not_creatable.is_empty() {
        edits.push(Edit {
            range: auto_create_at..auto_create_at + 1,
            replacement: vec![0],
        });
    }
    let plan = Plan {
        denied,
        denied_ids,
        not_creatable,
        all_topics,
        cluster_operations,
        topic_operations,
    };
    // Every Metadata response is rewritten: authorized-operations bitfields from the upstream
    // describe Portcullis' service identity, never this principal.
    let frame = req.rewritten(edits);
    Ok(Outcome::Forward(frame, Rewrite::Metadata(plan)))
}

fn denied_topic(name: Option<String>, id: [u8; 16]) -> MetadataResponseTopic {
    let mut topic = MetadataResponseTopic::default()
        .with_error_code(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0)
        .with_name(name.map(|n| TopicName(StrBytes::from_string(n))))
        .with_is_internal(false)
        .with_partitions(Vec::new())
        .with_topic_authorized_operations(i32::MIN);
    // Sixteen bytes always make a UUID.
    topic.topic_id = TryFrom::try_from(id.to_vec()).unwrap_or_default();
    topic
}

impl Plan {
    pub(crate) fn apply(
        &self,
        response: &Response<'_>,
        chk: &mut Checker<'_>,
    ) -> Result<Bytes, PlanError> {
        let mut body: MetadataResponse = response.decode(ApiKey::Metadata)?;
        if self.all_topics {
            let names: Vec<String> = body
                .topics
                .iter()
                .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
                .collect();
            let visible = chk.allowed_names(
                AclOperation::Describe,
                ResourceType::Topic,
                names.iter().map(String::as_str),
                Loud::IfAllowed,
            );
            body.topics.retain(|t| {
                t.name
                    .as_ref()
                    .is_some_and(|n| visible.contains(n.0.as_str()))
            });
        }
        for topic in &mut body.topics {
            let name = topic.name.as_ref().map(|n| n.0.to_string());
            if topic.error_code == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0
                && name
                    .as_ref()
                    .is_some_and(|n| self.not_creatable.contains(n))
            {
                topic.error_code = ErrorCode::TOPIC_AUTHORIZATION_FAILED.0;
                topic.partitions.clear();
            }
            topic.topic_authorized_operations = match (&name, self.topic_operations) {
                (Some(name), true) => chk.authorized_operations(ResourceType::Topic, name),
                _ => i32::MIN,
            };
        }
        body.cluster_authorized_operations = if self.cluster_operations {
            if chk.cluster(AclOperation::Describe, Loud::Yes) {
                chk.authorized_operations(ResourceType::Cluster, crate::acl::CLUSTER_NAME)
            } else {
                0
            }
        } else {
            i32::MIN
        };
        body.topics.extend(
            self.denied
                .iter()
                .map(|n| denied_topic(Some(n.clone()), [0; 16])),
        );
        body.topics
            .extend(self.denied_ids.iter().map(|id| denied_topic(None, *id)));
        response.encode(ApiKey::Metadata, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::MetadataRequest;

    fn listed(name: &str, error: i16) -> MetadataResponseTopic {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(s(name))))
            .with_error_code(error)
    }

    fn request(names: Option<&[&str]>, auto: bool, ops: bool) -> MetadataRequest {
        MetadataRequest::default()
            .with_topics(names.map(|n| {
                n.iter()
                    .map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(s(t)))))
                    .collect()
            }))
            .with_allow_auto_topic_creation(auto)
            .with_include_topic_authorized_operations(ops)
    }

    #[test]
    fn explicit_topics_denied_describe_are_answered_with_29() {
        let authz = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Topic, "a")
            .allow(AclOperation::Create, ResourceType::Topic, "a")
            .arc();
        for version in [4, 8, 9, 10, 12, 13] {
            let ops = version >= 8;
            let req = request(Some(&["a", "secret"]), true, ops);
            let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::Metadata, version, &req)));
            let sent: MetadataRequest = request_body(&out);
            let topics = sent.topics.unwrap();
            assert_eq!(topics.len(), 1, "v{version}");
            assert!(sent.allow_auto_topic_creation);
            let upstream = MetadataResponse::default().with_topics(vec![listed("a", 0)]);
            let merged: MetadataResponse = applied(&plan, ApiKey::Metadata, version, &upstream);
            assert_eq!(merged.topics.len(), 2);
            assert_eq!(merged.topics[1].name.as_ref().unwrap().0.as_str(), "secret");
            assert_eq!(merged.topics[1].error_code, 29);
            if ops {
                // DESCRIBE (bit 8) and CREATE (bit 5), computed for alice, not the upstream's.
                assert_eq!(
                    merged.topics[0].topic_authorized_operations,
                    (1 << 8) | (1 << 5)
                );
                assert_eq!(merged.topics[1].topic_authorized_operations, i32::MIN);
            }
        }
    }

    #[test]
    fn all_topics_are_filtered_and_bitfields_replaced() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Topic, "a")
            .arc();
        let f = frame(ApiKey::Metadata, 9, &request(None, true, false));
        let e = run(&authz, &f);
        let (out, plan) = forwarded(&e);
        assert_eq!(out, f);
        let upstream = MetadataResponse::default()
            .with_cluster_authorized_operations(-1)
            .with_topics(vec![listed("a", 0), listed("b", 0)]);
        let applied = plan
            .apply(response(ApiKey::Metadata, 9, &upstream))
            .unwrap();
        let merged: MetadataResponse = response_body(ApiKey::Metadata, 9, &applied.frame);
        assert_eq!(merged.topics.len(), 1);
        assert_eq!(merged.topics[0].name.as_ref().unwrap().0.as_str(), "a");
        assert_eq!(merged.topics[0].topic_authorized_operations, i32::MIN);
        assert_eq!(merged.cluster_authorized_operations, i32::MIN);
        // The filtering decisions are reported, and denials are not logged.
        assert!(applied.decisions.iter().any(|d| matches!(d,
            super::super::Checked::Action { action, .. }
                if action.resource.name == "b" && !action.log_if_denied)));
    }

    #[test]
    fn auto_creation_is_turned_off_without_create_and_unknown_becomes_29() {
        let authz = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Topic, "*")
            .arc();
        let req = request(Some(&["new"]), true, false);
        let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::Metadata, 12, &req)));
        let sent: MetadataRequest = request_body(&out);
        assert!(!sent.allow_auto_topic_creation);
        let upstream = MetadataResponse::default().with_topics(vec![listed("new", 3)]);
        let merged: MetadataResponse = applied(&plan, ApiKey::Metadata, 12, &upstream);
        assert_eq!(merged.topics[0].error_code, 29);
        // CREATE on the cluster keeps auto-creation.
        let authz = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Topic, "*")
            .allow(AclOperation::Create, ResourceType::Cluster, "kafka-cluster")
            .arc();
        let f = frame(ApiKey::Metadata, 12, &req);
        assert_eq!(forwarded(&run(&authz, &f)).0, f);
    }

    #[test]
    fn cluster_operations_need_describe_on_the_cluster() {
        let req = request(Some(&[]), false, false).with_include_cluster_authorized_operations(true);
        let upstream = MetadataResponse::default().with_cluster_authorized_operations(-1);
        let none = AllowList::new().arc();
        let (_, plan) = forwarded(&run(&none, &frame(ApiKey::Metadata, 10, &req)));
        let merged: MetadataResponse = applied(&plan, ApiKey::Metadata, 10, &upstream);
        assert_eq!(merged.cluster_authorized_operations, 0);
        let describe = AllowList::new()
            .allow(
                AclOperation::Describe,
                ResourceType::Cluster,
                "kafka-cluster",
            )
            .arc();
        let (_, plan) = forwarded(&run(&describe, &frame(ApiKey::Metadata, 10, &req)));
        let merged: MetadataResponse = applied(&plan, ApiKey::Metadata, 10, &upstream);
        assert_eq!(merged.cluster_authorized_operations, 1 << 8);
    }

    #[test]
    fn topics_by_id_only_are_denied_with_their_id() {
        let authz = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Topic, "*")
            .arc();
        // A name the principal may describe does not cover the id Kafka would look up.
        let mut by_id = MetadataRequestTopic::default().with_name(Some(TopicName(s("ok"))));
        by_id.topic_id = TryFrom::try_from(vec![7u8; 16]).unwrap();
        let req = MetadataRequest::default().with_topics(Some(vec![by_id]));
        let f = frame(ApiKey::Metadata, 12, &req);
        let (out, plan) = forwarded(&run(&authz, &f));
        let sent: MetadataRequest = request_body(&out);
        assert!(sent.topics.unwrap().is_empty(), "{f:?} -> {out:?}");
        let merged: MetadataResponse =
            applied(&plan, ApiKey::Metadata, 12, &MetadataResponse::default());
        assert_eq!(merged.topics[0].error_code, 29);
        assert_eq!(merged.topics[0].topic_id.as_bytes(), &[7u8; 16]);
    }

    /// librdkafka 2.16's all-topics Metadata v13 request, captured on the wire: three bytes follow
    /// its tagged fields. Kafka answers it, so Portcullis must forward it (unchanged).
    #[test]
    fn librdkafka_all_topics_v13_with_trailing_bytes_is_forwarded() {
        let authz = AllowList::new().arc();
        let captured = Bytes::from_static(&[
            0x00, 0x03, 0x00, 0x0d, 0x00, 0x00, 0x00, 0x06, 0x00, 0x07, b'r', b'd', b'k', b'a',
            b'f', b'k', b'a', 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
        ]);
        let (out, _plan) = forwarded(&run(&authz, &captured));
        assert_eq!(out, captured);
    }
}
