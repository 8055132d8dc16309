//! Topic and configuration administration, as Kafka's `ControllerApis` / `KafkaApis` authorize it:
//! - CreateTopics: CREATE on the cluster (denial not logged) or on each topic; denied topics get
//!   TOPIC_AUTHORIZATION_FAILED "Authorization failed."; created topics' configs are shown only
//!   with DESCRIBE_CONFIGS on the topic (else `topic_config_error_code` TOPIC_AUTHORIZATION_FAILED).
//! - DeleteTopics: DELETE on the cluster (denial not logged) or on each topic (which implies
//!   DESCRIBE); denied topics get TOPIC_AUTHORIZATION_FAILED. Topics named by id cannot be
//!   authorized by name here and are denied the same way (their name is not revealed).
//! - CreatePartitions: ALTER per topic. DeleteRecords: DELETE per topic.
//! - DescribeConfigs: DESCRIBE_CONFIGS, AlterConfigs / IncrementalAlterConfigs: ALTER_CONFIGS, on
//!   the topic (TOPIC_AUTHORIZATION_FAILED), the group (GROUP_AUTHORIZATION_FAILED) or, for broker,
//!   broker-logger and client-metrics resources, the cluster (CLUSTER_AUTHORIZATION_FAILED).

use bytes::Bytes;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as IncrementalResult;
use kafka_protocol::messages::{
    AlterConfigsResponse, ApiKey, CreatePartitionsResponse, CreateTopicsResponse,
    DeleteRecordsResponse, DeleteTopicsResponse, DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
};

use super::check::{Checker, Loud};
use super::entries::{put_back, respond_denied, text, topic_name, TOPIC_DENIED};
use super::wire::{self, ArraySpan, PlanError, TopicPartitions, Walk};
use super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::errors::ErrorCode;
use crate::protocol::reader::Malformed;

/// What to put back into (or fix in) an admin response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Merge {
    CreateTopics {
        denied: Vec<String>,
    },
    DeleteTopics {
        denied: Vec<Option<String>>,
        ids: Vec<[u8; 16]>,
    },
    CreatePartitions {
        denied: Vec<String>,
    },
    DeleteRecords {
        denied: TopicPartitions,
    },
    Configs {
        denied: Vec<Denied>,
    },
}

/// A config resource that was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Denied {
    resource_type: i8,
    name: String,
    error: i16,
}

/// Keeps `keep`, answering locally when nothing is left.
fn split(
    req: &Request<'_>,
    span: &ArraySpan,
    keep: &[bool],
    merge: Merge,
) -> Result<Outcome, Refusal> {
    if keep.iter().all(|k| *k) {
        // Nothing denied; CreateTopics still filters configs in the response.
        return Ok(match merge {
            Merge::CreateTopics { .. } if req.version >= 5 => {
                Outcome::Forward(req.frame.clone(), Rewrite::Admin(merge))
            }
            _ => req.unchanged(),
        });
    }
    if keep.iter().all(|k| !*k) {
        return merge.respond(req);
    }
    let mut edits = Vec::new();
    span.keep_only(keep, &mut edits);
    Ok(Outcome::Forward(
        req.rewritten(edits),
        Rewrite::Admin(merge),
    ))
}

/// Reads `[name, …rest of the entry…]` entries with `rest` reading what follows the name.
fn named_entries(
    w: &mut Walk<'_>,
    mut rest: impl FnMut(&mut Walk<'_>) -> Result<(), Malformed>,
) -> Result<(ArraySpan, Vec<String>), Malformed> {
    let start = w.pos();
    let n = w.array_len_required()?;
    let mut span = ArraySpan::begin(w, start);
    let mut names = Vec::new();
    for _ in 0..n {
        let at = w.pos();
        names.push(w.string()?);
        rest(w)?;
        w.tags()?;
        span.elements.push(at..w.pos());
    }
    Ok((span, names))
}

fn keep_allowed(
    chk: &mut Checker<'_>,
    operation: AclOperation,
    names: &[String],
    cluster_covers: bool,
) -> Vec<bool> {
    if cluster_covers {
        return vec![true; names.len()];
    }
    let ok = chk.allowed_names(
        operation,
        ResourceType::Topic,
        names.iter().map(String::as_str),
        Loud::Yes,
    );
    names.iter().map(|n| ok.contains(n)).collect()
}

/// CreateTopics v2–7.
pub(crate) fn create_topics(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let (span, names) = named_entries(&mut w, |w| {
        let _num_partitions = w.i32()?;
        let _replication_factor = w.i16()?;
        let n = w.array_len_required()?;
        for _ in 0..n {
            let _partition = w.i32()?;
            w.i32s()?;
            w.tags()?;
        }
        let n = w.array_len_required()?;
        for _ in 0..n {
            let _name = w.string()?;
            let _value = w.nullable_string()?;
            w.tags()?;
        }
        Ok(())
    })?;
    let _timeout_ms = w.i32()?;
    let _validate_only = w.bool()?;
    w.tags()?;
    w.finish()?;
    let cluster = !names.is_empty() && chk.cluster(AclOperation::Create, Loud::IfAllowed);
    let keep = keep_allowed(chk, AclOperation::Create, &names, cluster);
    let denied = deny_list(&names, &keep);
    split(req, &span, &keep, Merge::CreateTopics { denied })
}

fn deny_list(names: &[String], keep: &[bool]) -> Vec<String> {
    names
        .iter()
        .zip(keep)
        .filter(|(_, k)| !**k)
        .map(|(n, _)| n.clone())
        .collect()
}

/// DeleteTopics v1–6.
pub(crate) fn delete_topics(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let start = w.pos();
    let n = w.array_len_required()?;
    let mut span = ArraySpan::begin(&w, start);
    // (name, id): v6 names a topic by name or by id.
    let mut entries: Vec<(Option<String>, [u8; 16])> = Vec::new();
    for _ in 0..n {
        let at = w.pos();
        if req.version >= 6 {
            let name = w.nullable_string()?;
            let id = w.uuid()?;
            w.tags()?;
            entries.push((name, id));
        } else {
            entries.push((Some(w.string()?), [0; 16]));
        }
        span.elements.push(at..w.pos());
    }
    let _timeout_ms = w.i32()?;
    w.tags()?;
    w.finish()?;
    let names: Vec<String> = entries
        .iter()
        .filter(|(_, id)| *id == [0; 16])
        .filter_map(|(n, _)| n.clone())
        .collect();
    let cluster = !entries.is_empty() && chk.cluster(AclOperation::Delete, Loud::IfAllowed);
    let ok = if cluster {
        names.iter().cloned().collect()
    } else {
        chk.allowed_names(
            AclOperation::Delete,
            ResourceType::Topic,
            names.iter().map(String::as_str),
            Loud::Yes,
        )
    };
    let mut keep = Vec::new();
    let mut denied = Vec::new();
    let mut ids = Vec::new();
    for (name, id) in &entries {
        let allowed = match (name, *id == [0; 16]) {
            (Some(name), true) => ok.contains(name),
            // Named by id: Kafka resolves the id first; Portcullis cannot, so only a principal
            // allowed to delete every topic may.
            _ => cluster,
        };
        keep.push(allowed);
        if !allowed {
            if *id == [0; 16] {
                denied.push(name.clone());
            } else {
                ids.push(*id);
            }
        }
    }
    split(req, &span, &keep, Merge::DeleteTopics { denied, ids })
}

/// CreatePartitions v0–3.
pub(crate) fn create_partitions(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let (span, names) = named_entries(&mut w, |w| {
        let _count = w.i32()?;
        if let Some(n) = w.array_len()? {
            for _ in 0..n {
                w.i32s()?;
                w.tags()?;
            }
        }
        Ok(())
    })?;
    let _timeout_ms = w.i32()?;
    let _validate_only = w.bool()?;
    w.tags()?;
    w.finish()?;
    let keep = keep_allowed(chk, AclOperation::Alter, &names, false);
    let denied = deny_list(&names, &keep);
    split(req, &span, &keep, Merge::CreatePartitions { denied })
}

/// DeleteRecords v0–2.
pub(crate) fn delete_records(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let topics = wire::topic_array(&mut w, |w| {
        let index = w.i32()?;
        let _offset = w.i64()?;
        w.tags()?;
        Ok(index)
    })?;
    let _timeout_ms = w.i32()?;
    w.tags()?;
    w.finish()?;
    let names: Vec<String> = topics.entries.iter().map(|e| e.name.to_string()).collect();
    let keep = keep_allowed(chk, AclOperation::Delete, &names, false);
    let denied = topics.denied(&keep);
    split(req, &topics.span, &keep, Merge::DeleteRecords { denied })
}

/// The ACL resource and error for a config resource type; `None` for types Kafka rejects.
fn config_resource(resource_type: i8, name: &str) -> Option<(ResourceType, String, ErrorCode)> {
    match resource_type {
        2 => Some((
            ResourceType::Topic,
            name.to_owned(),
            ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        )),
        32 => Some((
            ResourceType::Group,
            name.to_owned(),
            ErrorCode::GROUP_AUTHORIZATION_FAILED,
        )),
        // BROKER, BROKER_LOGGER, CLIENT_METRICS
        4 | 8 | 16 => Some((
            ResourceType::Cluster,
            CLUSTER_NAME.to_owned(),
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
        )),
        _ => None,
    }
}

/// DescribeConfigs v1–4, AlterConfigs v0–2, IncrementalAlterConfigs v0–1.
pub(crate) fn configs(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let describe = req.key == ApiKey::DescribeConfigs;
    let incremental = req.key == ApiKey::IncrementalAlterConfigs;
    let mut w = req.walk();
    let start = w.pos();
    let n = w.array_len_required()?;
    let mut span = ArraySpan::begin(&w, start);
    let mut resources = Vec::new();
    for _ in 0..n {
        let at = w.pos();
        let resource_type = w.i8()?;
        let name = w.string()?;
        if describe {
            w.strings()?;
        } else {
            let m = w.array_len_required()?;
            for _ in 0..m {
                let _name = w.string()?;
                if incremental {
                    let _operation = w.i8()?;
                }
                let _value = w.nullable_string()?;
                w.tags()?;
            }
        }
        w.tags()?;
        span.elements.push(at..w.pos());
        resources.push((resource_type, name));
    }
    if describe {
        let _include_synonyms = w.bool()?;
        if req.version >= 3 {
            let _include_documentation = w.bool()?;
        }
    } else {
        let _validate_only = w.bool()?;
    }
    w.tags()?;
    w.finish()?;
    let operation = if describe {
        AclOperation::DescribeConfigs
    } else {
        AclOperation::AlterConfigs
    };
    let mut keep = Vec::new();
    let mut denied = Vec::new();
    for (resource_type, name) in &resources {
        let error = match config_resource(*resource_type, name) {
            Some((rt, acl_name, error)) => {
                (!chk.allowed(operation, rt, &acl_name, Loud::Yes)).then_some(error)
            }
            None => Some(ErrorCode::INVALID_REQUEST),
        };
        keep.push(error.is_none());
        if let Some(error) = error {
            denied.push(Denied {
                resource_type: *resource_type,
                name: name.clone(),
                error: error.0,
            });
        }
    }
    split(req, &span, &keep, Merge::Configs { denied })
}

impl Merge {
    fn respond(&self, req: &Request<'_>) -> Result<Outcome, Refusal> {
        match (self, req.key) {
            (Merge::CreateTopics { denied }, _) => {
                req.respond(&CreateTopicsResponse::default().with_topics(denied_results(denied)))
            }
            (Merge::DeleteTopics { denied, ids }, _) => req.respond(
                &DeleteTopicsResponse::default().with_responses(delete_entries(denied, ids)),
            ),
            (Merge::CreatePartitions { denied }, _) => req
                .respond(&CreatePartitionsResponse::default().with_results(denied_results(denied))),
            (Merge::DeleteRecords { denied }, _) => {
                respond_denied::<DeleteRecordsResponse>(req, denied, TOPIC_DENIED)
            }
            (Merge::Configs { denied }, ApiKey::DescribeConfigs) => req
                .respond(&DescribeConfigsResponse::default().with_results(denied_results(denied))),
            (Merge::Configs { denied }, ApiKey::AlterConfigs) => {
                req.respond(&AlterConfigsResponse::default().with_responses(denied_results(denied)))
            }
            (Merge::Configs { denied }, _) => req.respond(
                &IncrementalAlterConfigsResponse::default().with_responses(denied_results(denied)),
            ),
        }
    }

    pub(crate) fn apply(
        &self,
        key: ApiKey,
        response: &Response<'_>,
        chk: &mut Checker<'_>,
    ) -> Result<Bytes, PlanError> {
        match (self, key) {
            (Merge::CreateTopics { denied }, _) => {
                let mut body: CreateTopicsResponse = response.decode(ApiKey::CreateTopics)?;
                if response.version >= 5 {
                    let names: Vec<String> =
                        body.topics.iter().map(|t| t.name.0.to_string()).collect();
                    let ok = chk.allowed_names(
                        AclOperation::DescribeConfigs,
                        ResourceType::Topic,
                        names.iter().map(String::as_str),
                        Loud::Yes,
                    );
                    for t in &mut body.topics {
                        if !ok.contains(t.name.0.as_str()) {
                            t.configs = None;
                            t.topic_config_error_code = TOPIC_DENIED;
                        }
                    }
                }
                body.topics.extend(denied_results(denied));
                response.encode(ApiKey::CreateTopics, &body)
            }
            (Merge::DeleteTopics { denied, ids }, _) => {
                let mut body: DeleteTopicsResponse = response.decode(ApiKey::DeleteTopics)?;
                body.responses.extend(delete_entries(denied, ids));
                response.encode(ApiKey::DeleteTopics, &body)
            }
            (Merge::CreatePartitions { denied }, _) => {
                let mut body: CreatePartitionsResponse =
                    response.decode(ApiKey::CreatePartitions)?;
                body.results.extend(denied_results(denied));
                response.encode(ApiKey::CreatePartitions, &body)
            }
            (Merge::DeleteRecords { denied }, _) => {
                put_back::<DeleteRecordsResponse>(response, denied)
            }
            (Merge::Configs { denied }, ApiKey::DescribeConfigs) => {
                let mut body: DescribeConfigsResponse = response.decode(key)?;
                body.results.extend(denied_results(denied));
                response.encode(key, &body)
            }
            (Merge::Configs { denied }, ApiKey::AlterConfigs) => {
                let mut body: AlterConfigsResponse = response.decode(key)?;
                body.responses.extend(denied_results(denied));
                response.encode(key, &body)
            }
            (Merge::Configs { denied }, _) => {
                let mut body: IncrementalAlterConfigsResponse = response.decode(key)?;
                body.responses.extend(denied_results(denied));
                response.encode(key, &body)
            }
        }
    }
}

const AUTHORIZATION_FAILED: &str = "Authorization failed.";

fn delete_entries(denied: &[Option<String>], ids: &[[u8; 16]]) -> Vec<DeletableTopicResult> {
    let by_name = denied.iter().map(|n| {
        DeletableTopicResult::default()
            .with_name(n.as_deref().map(topic_name))
            .with_error_code(TOPIC_DENIED)
    });
    let by_id = ids.iter().map(|id| {
        let mut r = DeletableTopicResult::default()
            .with_name(None)
            .with_error_code(TOPIC_DENIED);
        r.topic_id = TryFrom::try_from(id.to_vec()).unwrap_or_default();
        r
    });
    by_name.chain(by_id).collect()
}

/// A per-resource result that carries only the resource and its error, built for a denial of
/// type `D` (a topic name, or a config resource).
trait DeniedResult<D>: Default {
    fn denied(denied: &D) -> Self;
}

fn denied_results<D, T: DeniedResult<D>>(denied: &[D]) -> Vec<T> {
    denied.iter().map(T::denied).collect()
}

/// Implements [`DeniedResult`], one entry per result type: `Type: |denial: D| { field = value… }`.
macro_rules! denied_results {
    ($($result:ty: |$d:ident: $denied:ty| { $($field:ident = $value:expr),* $(,)? })*) => {$(
        impl DeniedResult<$denied> for $result {
            fn denied($d: &$denied) -> Self {
                let mut result = Self::default();
                $(result.$field = $value;)*
                result
            }
        }
    )*};
}

denied_results! {
    CreatableTopicResult: |name: String| {
        name = topic_name(name),
        error_code = TOPIC_DENIED,
        error_message = Some(text(AUTHORIZATION_FAILED)),
    }
    CreatePartitionsTopicResult: |name: String| {
        name = topic_name(name),
        error_code = TOPIC_DENIED,
        error_message = Some(text(AUTHORIZATION_FAILED)),
    }
    DescribeConfigsResult: |d: Denied| {
        error_code = d.error, resource_type = d.resource_type, resource_name = text(&d.name)
    }
    AlterConfigsResourceResponse: |d: Denied| {
        error_code = d.error, resource_type = d.resource_type, resource_name = text(&d.name)
    }
    IncrementalResult: |d: Denied| {
        error_code = d.error, resource_type = d.resource_type, resource_name = text(&d.name)
    }
}

#[cfg(test)]
mod tests;
