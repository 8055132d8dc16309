//! Produce (API 0). Kafka's `handleProduceRequest`:
//! - if any record batch is transactional, the request needs WRITE on its TRANSACTIONAL_ID (a null
//!   id fails too); otherwise every partition gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
//! - there is no IDEMPOTENT_WRITE check here since KIP-679 (it moved to InitProducerId);
//! - each topic needs WRITE; the partitions of a denied topic get TOPIC_AUTHORIZATION_FAILED and
//!   the rest is appended;
//! - with `acks=0` there is no response, and Kafka closes the connection when any partition
//!   failed so that the producer refreshes its metadata.

use bytes::Bytes;
use kafka_protocol::messages::ProduceResponse;

use super::check::{Checker, Loud};
use super::entries::{allowed_topics, put_back, respond_denied};
use super::wire::{self, PlanError, TopicPartitions, Topics, Walk};
use super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};
use crate::connection::request_error::RequestError;
use crate::errors::ErrorCode;
use crate::protocol::reader::Malformed;

/// Denied partitions to put back into the upstream response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Merge {
    denied: TopicPartitions,
}

struct Parsed<'a> {
    transactional_id: Option<&'a str>,
    acks: i16,
    transactional_records: bool,
    topics: Topics<'a>,
}

fn parse<'a>(walk: &mut Walk<'a>) -> Result<Parsed<'a>, Malformed> {
    let transactional_id = walk.nullable_str()?;
    let acks = walk.i16()?;
    let _timeout_ms = walk.i32()?;
    let mut transactional_records = false;
    let topics = wire::topic_array(walk, |w| {
        let index = w.i32()?;
        if let Some(records) = w.nullable_bytes()? {
            transactional_records |= has_transactional_batch(records);
        }
        w.tags()?;
        Ok(index)
    })?;
    walk.tags()?;
    walk.finish()?;
    Ok(Parsed {
        transactional_id,
        acks,
        transactional_records,
        topics,
    })
}

/// Whether any record batch (magic 2) in `records` has the transactional attribute. Batches
/// are walked by their length field; a truncated tail ends the walk (the broker rejects it).
fn has_transactional_batch(records: &[u8]) -> bool {
    const TRANSACTIONAL: i16 = 0x10;
    let mut at = 0usize;
    loop {
        let Some(len) = records
            .get(at + 8..at + 12)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(i32::from_be_bytes)
        else {
            return false;
        };
        let magic = records.get(at + 16).copied();
        let attributes = records
            .get(at + 21..at + 23)
            .and_then(|b| <[u8; 2]>::try_from(b).ok())
            .map(i16::from_be_bytes);
        if let (Some(2), Some(attributes)) = (magic, attributes) {
            if attributes & TRANSACTIONAL != 0 {
                return true;
            }
        }
        let Ok(len) = usize::try_from(len) else {
            return false;
        };
        match at.checked_add(12).and_then(|a| a.checked_add(len)) {
            Some(next) if next > at => at = next,
            _ => return false,
        }
    }
}

pub(crate) fn enforce(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let parsed = parse(&mut req.walk())?;
    if parsed.transactional_records {
        let allowed = match &parsed.transactional_id {
            Some(id) => chk.allowed(
                AclOperation::Write,
                ResourceType::TransactionalId,
                id,
                Loud::Yes,
            ),
            None => false,
        };
        if !allowed {
            return deny_all(
                req,
                &parsed,
                &parsed.topics.all(),
                ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            );
        }
    }
    let keep = allowed_topics(chk, AclOperation::Write, &parsed.topics);
    if keep.iter().all(|k| *k) {
        return Ok(req.unchanged());
    }
    let denied = parsed.topics.denied(&keep);
    if parsed.acks == 0 {
        // Kafka appends the authorized partitions, then closes because a partition failed; we
        // close without forwarding (the client sees the same disconnect).
        return Ok(Outcome::Close(RequestError::ProduceWithoutAcksFailed {
            code: ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        }));
    }
    if keep.iter().all(|k| !*k) {
        return deny_all(req, &parsed, &denied, ErrorCode::TOPIC_AUTHORIZATION_FAILED);
    }
    let mut edits = Vec::new();
    parsed.topics.span.keep_only(&keep, &mut edits);
    Ok(Outcome::Forward(
        req.rewritten(edits),
        Rewrite::Produce(Merge { denied }),
    ))
}

fn deny_all(
    req: &Request<'_>,
    parsed: &Parsed<'_>,
    denied: &TopicPartitions,
    code: ErrorCode,
) -> Result<Outcome, Refusal> {
    if parsed.acks == 0 {
        return Ok(Outcome::Close(RequestError::ProduceWithoutAcksFailed {
            code,
        }));
    }
    respond_denied::<ProduceResponse>(req, denied, code.0)
}

impl Merge {
    pub(crate) fn apply(&self, response: &Response<'_>) -> Result<Bytes, PlanError> {
        put_back::<ProduceResponse>(response, &self.denied)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::Verdict;
    use super::*;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{ApiKey, TopicName};
    use kafka_protocol::messages::{ProduceRequest, TransactionalId};

    fn batch(transactional: bool) -> Bytes {
        let mut b = vec![0u8; 8];
        b.extend_from_slice(&11i32.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 0, 2, 0, 0, 0, 0]);
        b.extend_from_slice(&(if transactional { 0x10i16 } else { 0 }).to_be_bytes());
        Bytes::from(b)
    }

    fn request(txn: Option<&str>, acks: i16, transactional: bool) -> ProduceRequest {
        let topic = |name: &str, parts: &[i32]| {
            TopicProduceData::default()
                .with_name(TopicName(s(name)))
                .with_partition_data(
                    parts
                        .iter()
                        .map(|p| {
                            PartitionProduceData::default()
                                .with_index(*p)
                                .with_records(Some(batch(transactional)))
                        })
                        .collect(),
                )
        };
        ProduceRequest::default()
            .with_transactional_id(txn.map(|t| TransactionalId(s(t))))
            .with_acks(acks)
            .with_timeout_ms(1000)
            .with_topic_data(vec![
                topic("a", &[0, 1]),
                topic("b", &[0]),
                topic("c", &[2]),
            ])
    }

    fn names(req: &ProduceRequest) -> Vec<String> {
        req.topic_data
            .iter()
            .map(|t| t.name.0.to_string())
            .collect()
    }

    #[test]
    fn partial_denial_splices_the_request_and_merges_the_response() {
        let authz = AllowList::new()
            .allow(AclOperation::Write, ResourceType::Topic, "a")
            .allow(AclOperation::Write, ResourceType::Topic, "c")
            .arc();
        for version in [3, 8, 9, 12] {
            let f = frame(ApiKey::Produce, version, &request(None, -1, false));
            let e = run(&authz, &f);
            let (out, plan) = forwarded(&e);
            let sent: ProduceRequest = request_body(&out);
            assert_eq!(names(&sent), ["a", "c"], "v{version}");
            assert_eq!(sent.topic_data[0].partition_data.len(), 2);
            assert_eq!(
                sent.topic_data[1].partition_data[0].records,
                Some(batch(false))
            );
            assert_eq!(e.decisions.len(), 3);

            let upstream =
                ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
                    .with_name(TopicName(s("a")))
                    .with_partition_responses(vec![PartitionProduceResponse::default()
                        .with_index(0)
                        .with_base_offset(42)])]);
            let merged: ProduceResponse = applied(&plan, ApiKey::Produce, version, &upstream);
            assert_eq!(merged.responses.len(), 2);
            assert_eq!(merged.responses[0].partition_responses[0].base_offset, 42);
            assert_eq!(merged.responses[1].name.0.as_str(), "b");
            let denied = &merged.responses[1].partition_responses[0];
            assert_eq!((denied.index, denied.error_code), (0, 29));
        }
    }

    #[test]
    fn everything_allowed_forwards_the_exact_bytes() {
        let authz = AllowList::new()
            .allow(AclOperation::Write, ResourceType::Topic, "*")
            .arc();
        let f = frame(ApiKey::Produce, 9, &request(None, 1, false));
        let (out, plan) = forwarded(&run(&authz, &f));
        assert_eq!(out, f);
        assert!(plan.is_unchanged());
    }

    #[test]
    fn all_denied_is_answered_locally_and_acks_zero_closes() {
        let authz = AllowList::new().arc();
        let f = frame(ApiKey::Produce, 9, &request(None, 1, false));
        let r: ProduceResponse = response_body(ApiKey::Produce, 9, &responded(&run(&authz, &f)));
        assert_eq!(r.responses.len(), 3);
        assert!(r
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .all(|p| p.error_code == 29));
        let f = frame(ApiKey::Produce, 9, &request(None, 0, false));
        assert!(matches!(run(&authz, &f).verdict, Verdict::Close(_)));
    }

    #[test]
    fn transactional_records_need_write_on_the_transactional_id() {
        let topics = AllowList::new().allow(AclOperation::Write, ResourceType::Topic, "*");
        let authz = topics.arc();
        let f = frame(ApiKey::Produce, 9, &request(Some("tx"), -1, true));
        let r: ProduceResponse = response_body(ApiKey::Produce, 9, &responded(&run(&authz, &f)));
        assert!(r
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .all(|p| p.error_code == 53));
        // A null id with transactional batches fails too.
        let f = frame(ApiKey::Produce, 9, &request(None, -1, true));
        assert!(matches!(run(&authz, &f).verdict, Verdict::Respond(_)));
        // With WRITE on the id it goes through.
        let authz = AllowList::new()
            .allow(AclOperation::Write, ResourceType::Topic, "*")
            .allow(AclOperation::Write, ResourceType::TransactionalId, "tx")
            .arc();
        let f = frame(ApiKey::Produce, 9, &request(Some("tx"), -1, true));
        assert_eq!(forwarded(&run(&authz, &f)).0, f);
        // A transactional id without transactional records is not checked (Kafka).
        let authz = AllowList::new()
            .allow(AclOperation::Write, ResourceType::Topic, "*")
            .arc();
        let f = frame(ApiKey::Produce, 9, &request(Some("tx"), -1, false));
        assert_eq!(forwarded(&run(&authz, &f)).0, f);
    }

    #[test]
    fn truncated_bodies_close() {
        let authz = AllowList::new().arc();
        let f = frame(ApiKey::Produce, 9, &request(None, 1, false));
        for cut in 1..f.len() - 20 {
            let short = f.slice(..f.len() - cut);
            if let Ok(h) = crate::protocol::header::parse(&short) {
                let e = super::super::enforce(&authz, &context(ApiKey::Produce, 9), &h, &short);
                assert!(matches!(e.verdict, Verdict::Close(_)), "cut {cut}");
            }
        }
    }
}
