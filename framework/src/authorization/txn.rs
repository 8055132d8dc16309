//! Transactions, as Kafka's `KafkaApis` authorizes them:
//! - InitProducerId: a transactional id needs WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
//!   an idempotent producer needs IDEMPOTENT_WRITE on the cluster (denial not logged) or, since
//!   KIP-679, WRITE on some topic (`authorize_by_resource_type`), else CLUSTER_AUTHORIZATION_FAILED.
//! - AddPartitionsToTxn (v0–3, from clients; v4+ is inter-broker): WRITE on the transactional id,
//!   then WRITE on every topic; if any topic is denied nothing is added: denied partitions get
//!   TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED.
//! - AddOffsetsToTxn: WRITE on the transactional id, then READ on the group.
//! - EndTxn: WRITE on the transactional id.
//! - TxnOffsetCommit: WRITE on the transactional id, READ on the group (each failing every
//!   partition), READ per topic (denied partitions TOPIC_AUTHORIZATION_FAILED, the rest committed).
//! - DescribeProducers: READ per topic. DescribeTransactions: DESCRIBE per transactional id, and
//!   only DESCRIBE-able topics are listed. ListTransactions: only DESCRIBE-able ids are listed.

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_response::AddPartitionsToTxnTopicResult;
use kafka_protocol::messages::describe_transactions_response::TransactionState;
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, ApiKey, DescribeProducersResponse,
    DescribeTransactionsResponse, EndTxnResponse, InitProducerIdResponse, ListTransactionsResponse,
    ProducerId, TransactionalId, TxnOffsetCommitResponse,
};

use super::check::{Checker, Loud};
use super::entries::{
    allowed_topics, put_back, respond_denied, split_topic_errors, text, TopicErrors, GROUP_DENIED,
    TOPIC_DENIED, TXN_DENIED,
};
use super::groups::{authorize_commit, commit_topics};
use super::wire::{self, PlanError, TopicPartitions};
use super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};
use crate::errors::ErrorCode;

/// OPERATION_NOT_ATTEMPTED.
const NOT_ATTEMPTED: i16 = 55;

/// What to put back into or filter out of a transaction API response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Merge {
    TxnOffsetCommit { denied: TopicPartitions },
    DescribeProducers { denied: TopicPartitions },
    DescribeTransactions { denied: Vec<String> },
    ListTransactions,
}

fn write_txn(chk: &mut Checker<'_>, id: &str) -> bool {
    chk.allowed(
        AclOperation::Write,
        ResourceType::TransactionalId,
        id,
        Loud::Yes,
    )
}

/// InitProducerId v0–5 (v6 adds two-phase commit, whose ACL operation Portcullis does not model).
pub(crate) fn init_producer_id(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    let transactional_id = req.walk().nullable_string()?;
    let error = match &transactional_id {
        Some(id) => (!write_txn(chk, id)).then_some(TXN_DENIED),
        None => (!chk.cluster(AclOperation::IdempotentWrite, Loud::IfAllowed)
            && !chk.by_resource_type(AclOperation::Write, ResourceType::Topic))
        .then_some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0),
    };
    match error {
        None => Ok(req.unchanged()),
        Some(code) => req.respond(
            &InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
    }
}

/// AddPartitionsToTxn v0–3.
pub(crate) fn add_partitions_to_txn(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let id = w.string()?;
    let _producer_id = w.i64()?;
    let _producer_epoch = w.i16()?;
    let topics = wire::topic_array(&mut w, |w| w.i32())?;
    w.tags()?;
    w.finish()?;
    let respond = |code_for: &dyn Fn(&str) -> i16| {
        let results = topics
            .entries
            .iter()
            .map(|e| {
                AddPartitionsToTxnTopicResult::denied(&e.name, &e.partitions, code_for(&e.name))
            })
            .collect();
        req.respond(
            &AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results),
        )
    };
    if !write_txn(chk, &id) {
        return respond(&|_| TXN_DENIED);
    }
    let ok = chk.allowed_names(
        AclOperation::Write,
        ResourceType::Topic,
        topics.entries.iter().map(|e| e.name.as_str()),
        Loud::Yes,
    );
    if topics.entries.iter().all(|e| ok.contains(&e.name)) {
        return Ok(req.unchanged());
    }
    respond(&|name| {
        if ok.contains(name) {
            NOT_ATTEMPTED
        } else {
            TOPIC_DENIED
        }
    })
}

/// AddOffsetsToTxn v0–4.
pub(crate) fn add_offsets_to_txn(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let id = w.string()?;
    let _producer_id = w.i64()?;
    let _producer_epoch = w.i16()?;
    let group = w.string()?;
    w.tags()?;
    w.finish()?;
    let code = if !write_txn(chk, &id) {
        TXN_DENIED
    } else if !chk.allowed(AclOperation::Read, ResourceType::Group, &group, Loud::Yes) {
        GROUP_DENIED
    } else {
        return Ok(req.unchanged());
    };
    req.respond(&AddOffsetsToTxnResponse::default().with_error_code(code))
}

/// EndTxn v0–5.
pub(crate) fn end_txn(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let id = req.walk().string()?;
    if write_txn(chk, &id) {
        return Ok(req.unchanged());
    }
    req.respond(
        &EndTxnResponse::default()
            .with_error_code(TXN_DENIED)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    )
}

/// TxnOffsetCommit v0–5.
pub(crate) fn txn_offset_commit(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    let v = req.version;
    let mut w = req.walk();
    let id = w.string()?;
    let group = w.string()?;
    let _producer_id = w.i64()?;
    let _producer_epoch = w.i16()?;
    if v >= 3 {
        let _generation = w.i32()?;
        let _member_id = w.string()?;
        let _instance_id = w.nullable_string()?;
    }
    let topics = commit_topics(&mut w, v >= 2)?;
    w.tags()?;
    w.finish()?;
    if !write_txn(chk, &id) {
        return respond_denied::<TxnOffsetCommitResponse>(req, &topics.all(), TXN_DENIED);
    }
    authorize_commit::<TxnOffsetCommitResponse>(req, chk, &group, &topics, |denied| {
        Rewrite::Txn(Merge::TxnOffsetCommit { denied })
    })
}

fn transaction_entries(denied: &[String]) -> Vec<TransactionState> {
    denied
        .iter()
        .map(|id| {
            TransactionState::default()
                .with_error_code(TXN_DENIED)
                .with_transactional_id(TransactionalId(text(id)))
        })
        .collect()
}

/// DescribeProducers v0.
pub(crate) fn describe_producers(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let topics = wire::topic_array(&mut w, |w| w.i32())?;
    w.tags()?;
    w.finish()?;
    let keep = allowed_topics(chk, AclOperation::Read, &topics);
    split_topic_errors::<DescribeProducersResponse>(req, &topics, &keep, |denied| {
        Rewrite::Txn(Merge::DescribeProducers { denied })
    })
}

/// DescribeTransactions v0: forwarded without the denied ids; topics filtered on the way back.
pub(crate) fn describe_transactions(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    let mut w = req.walk();
    let (span, ids) = wire::string_array(&mut w)?;
    w.tags()?;
    w.finish()?;
    let ok = chk.allowed_names(
        AclOperation::Describe,
        ResourceType::TransactionalId,
        ids.iter().map(String::as_str),
        Loud::Yes,
    );
    let keep: Vec<bool> = ids.iter().map(|id| ok.contains(id)).collect();
    let denied: Vec<String> = ids.iter().filter(|id| !ok.contains(*id)).cloned().collect();
    if !keep.is_empty() && keep.iter().all(|k| !*k) {
        return req.respond(
            &DescribeTransactionsResponse::default()
                .with_transaction_states(transaction_entries(&denied)),
        );
    }
    let mut edits = Vec::new();
    if !denied.is_empty() {
        span.keep_only(&keep, &mut edits);
    }
    let frame = req.rewritten(edits);
    Ok(Outcome::Forward(
        frame,
        Rewrite::Txn(Merge::DescribeTransactions { denied }),
    ))
}

/// ListTransactions v0–2: forwarded; the listing is filtered on the way back.
pub(crate) fn list_transactions(
    req: &Request<'_>,
    _chk: &mut Checker<'_>,
) -> Result<Outcome, Refusal> {
    Ok(Outcome::Forward(
        req.frame.clone(),
        Rewrite::Txn(Merge::ListTransactions),
    ))
}

impl Merge {
    pub(crate) fn apply(
        &self,
        response: &Response<'_>,
        chk: &mut Checker<'_>,
    ) -> Result<Bytes, PlanError> {
        match self {
            Merge::TxnOffsetCommit { denied } => {
                put_back::<TxnOffsetCommitResponse>(response, denied)
            }
            Merge::DescribeProducers { denied } => {
                put_back::<DescribeProducersResponse>(response, denied)
            }
            Merge::DescribeTransactions { denied } => {
                let mut body: DescribeTransactionsResponse =
                    response.decode(ApiKey::DescribeTransactions)?;
                for state in &mut body.transaction_states {
                    let names: Vec<String> =
                        state.topics.iter().map(|t| t.topic.0.to_string()).collect();
                    let ok = chk.allowed_names(
                        AclOperation::Describe,
                        ResourceType::Topic,
                        names.iter().map(String::as_str),
                        Loud::IfAllowed,
                    );
                    state.topics.retain(|t| ok.contains(t.topic.0.as_str()));
                }
                body.transaction_states.extend(transaction_entries(denied));
                response.encode(ApiKey::DescribeTransactions, &body)
            }
            Merge::ListTransactions => {
                let mut body: ListTransactionsResponse =
                    response.decode(ApiKey::ListTransactions)?;
                let ids: Vec<String> = body
                    .transaction_states
                    .iter()
                    .map(|s| s.transactional_id.0.to_string())
                    .collect();
                let ok = chk.allowed_names(
                    AclOperation::Describe,
                    ResourceType::TransactionalId,
                    ids.iter().map(String::as_str),
                    Loud::IfAllowed,
                );
                body.transaction_states
                    .retain(|s| ok.contains(s.transactional_id.0.as_str()));
                response.encode(ApiKey::ListTransactions, &body)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::entries::topic_name;
    use super::super::testing::*;
    use super::*;
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::describe_transactions_response::TopicData;
    use kafka_protocol::messages::list_transactions_response::TransactionState as Listed;
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{
        AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, DescribeProducersRequest,
        DescribeTransactionsRequest, EndTxnRequest, GroupId, InitProducerIdRequest,
        ListTransactionsRequest, TxnOffsetCommitRequest,
    };

    fn tx(s: &str) -> TransactionalId {
        TransactionalId(text(s))
    }

    #[test]
    fn init_producer_id_transactional_and_idempotent() {
        let authz = AllowList::new()
            .allow(AclOperation::Write, ResourceType::TransactionalId, "tx")
            .arc();
        for version in [0, 2, 4, 5] {
            let ok = frame(
                ApiKey::InitProducerId,
                version,
                &InitProducerIdRequest::default().with_transactional_id(Some(tx("tx"))),
            );
            assert_eq!(forwarded(&run(&authz, &ok)).0, ok);
            let no = frame(
                ApiKey::InitProducerId,
                version,
                &InitProducerIdRequest::default().with_transactional_id(Some(tx("other"))),
            );
            let r: InitProducerIdResponse = response_body(
                ApiKey::InitProducerId,
                version,
                &responded(&run(&authz, &no)),
            );
            assert_eq!(r.error_code, 53);
            // Idempotent: no topic WRITE anywhere and no IDEMPOTENT_WRITE.
            let idem = frame(
                ApiKey::InitProducerId,
                version,
                &InitProducerIdRequest::default().with_transactional_id(None),
            );
            let r: InitProducerIdResponse = response_body(
                ApiKey::InitProducerId,
                version,
                &responded(&run(&authz, &idem)),
            );
            assert_eq!(r.error_code, 31);
        }
        // KIP-679: WRITE on any topic is enough.
        let writer = AllowList::new()
            .allow(AclOperation::Write, ResourceType::Topic, "t")
            .arc();
        let idem = frame(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default().with_transactional_id(None),
        );
        let e = run(&writer, &idem);
        assert_eq!(forwarded(&e).0, idem);
        assert!(e
            .decisions
            .iter()
            .any(|d| matches!(d, super::super::Checked::ResourceType { .. })));
    }

    #[test]
    fn add_partitions_to_txn_all_or_nothing() {
        let authz = AllowList::new()
            .allow(AclOperation::Write, ResourceType::TransactionalId, "tx")
            .allow(AclOperation::Write, ResourceType::Topic, "a")
            .arc();
        let req = |topics: &[&str]| {
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(tx("tx"))
                .with_v3_and_below_topics(
                    topics
                        .iter()
                        .map(|t| {
                            AddPartitionsToTxnTopic::default()
                                .with_name(topic_name(t))
                                .with_partitions(vec![0])
                        })
                        .collect(),
                )
        };
        for version in [0, 2, 3] {
            let f = frame(ApiKey::AddPartitionsToTxn, version, &req(&["a"]));
            assert_eq!(forwarded(&run(&authz, &f)).0, f);
            let f = frame(ApiKey::AddPartitionsToTxn, version, &req(&["a", "b"]));
            let r: AddPartitionsToTxnResponse = response_body(
                ApiKey::AddPartitionsToTxn,
                version,
                &responded(&run(&authz, &f)),
            );
            let codes: Vec<_> = r
                .results_by_topic_v3_and_below
                .iter()
                .map(|t| {
                    (
                        t.name.0.to_string(),
                        t.results_by_partition[0].partition_error_code,
                    )
                })
                .collect();
            assert_eq!(codes, [("a".into(), 55), ("b".into(), 29)]);
        }
    }

    #[test]
    fn offsets_and_end_need_the_transactional_id_and_group() {
        let authz = AllowList::new()
            .allow(AclOperation::Write, ResourceType::TransactionalId, "tx")
            .allow(AclOperation::Read, ResourceType::Group, "g")
            .allow(AclOperation::Read, ResourceType::Topic, "a")
            .arc();
        for version in [0, 3, 4] {
            let req = AddOffsetsToTxnRequest::default()
                .with_transactional_id(tx("tx"))
                .with_group_id(GroupId(text("h")));
            let r: AddOffsetsToTxnResponse = response_body(
                ApiKey::AddOffsetsToTxn,
                version,
                &responded(&run(&authz, &frame(ApiKey::AddOffsetsToTxn, version, &req))),
            );
            assert_eq!(r.error_code, 30);
        }
        for version in [0, 3, 5] {
            let req = EndTxnRequest::default().with_transactional_id(tx("nope"));
            let r: EndTxnResponse = response_body(
                ApiKey::EndTxn,
                version,
                &responded(&run(&authz, &frame(ApiKey::EndTxn, version, &req))),
            );
            assert_eq!(r.error_code, 53);
        }
        for version in [0, 2, 3, 5] {
            let req = TxnOffsetCommitRequest::default()
                .with_transactional_id(tx("tx"))
                .with_group_id(GroupId(text("g")))
                .with_topics(
                    ["a", "b"]
                        .iter()
                        .map(|t| {
                            TxnOffsetCommitRequestTopic::default()
                                .with_name(topic_name(t))
                                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                                    .with_partition_index(1)
                                    .with_committed_offset(8)])
                        })
                        .collect(),
                );
            let (out, plan) =
                forwarded(&run(&authz, &frame(ApiKey::TxnOffsetCommit, version, &req)));
            let sent: TxnOffsetCommitRequest = request_body(&out);
            assert_eq!(sent.topics.len(), 1, "v{version}");
            assert_eq!(sent.topics[0].name.0.as_str(), "a");
            let merged: TxnOffsetCommitResponse = applied(
                &plan,
                ApiKey::TxnOffsetCommit,
                version,
                &TxnOffsetCommitResponse::default(),
            );
            assert_eq!(merged.topics[0].name.0.as_str(), "b");
            assert_eq!(merged.topics[0].partitions[0].error_code, 29);
        }
    }

    #[test]
    fn txn_offset_commit_denied_id_or_group_fails_every_partition() {
        let authz = AllowList::new()
            .allow(AclOperation::Write, ResourceType::TransactionalId, "tx")
            .allow(AclOperation::Read, ResourceType::Group, "g")
            .allow(AclOperation::Read, ResourceType::Topic, "a")
            .arc();
        let req = |id: &str, group: &str| {
            TxnOffsetCommitRequest::default()
                .with_transactional_id(tx(id))
                .with_group_id(GroupId(text(group)))
                .with_topics(
                    ["a", "b"]
                        .iter()
                        .map(|t| {
                            TxnOffsetCommitRequestTopic::default()
                                .with_name(topic_name(t))
                                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                                    .with_partition_index(6)])
                        })
                        .collect(),
                )
        };
        for version in [0, 3, 5] {
            for (id, group, code) in [("other", "g", 53), ("tx", "h", 30)] {
                let f = frame(ApiKey::TxnOffsetCommit, version, &req(id, group));
                let r: TxnOffsetCommitResponse = response_body(
                    ApiKey::TxnOffsetCommit,
                    version,
                    &responded(&run(&authz, &f)),
                );
                let got = first_partition_codes!(r.topics);
                assert_eq!(got, [("a".into(), 6, code), ("b".into(), 6, code)]);
            }
        }
    }

    #[test]
    fn describe_and_list_apis_hide_what_may_not_be_described() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Topic, "a")
            .allow(AclOperation::Describe, ResourceType::TransactionalId, "tx")
            .arc();
        let req = DescribeProducersRequest::default().with_topics(vec![
            TopicRequest::default()
                .with_name(topic_name("a"))
                .with_partition_indexes(vec![0]),
            TopicRequest::default()
                .with_name(topic_name("b"))
                .with_partition_indexes(vec![0]),
        ]);
        let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::DescribeProducers, 0, &req)));
        let sent: DescribeProducersRequest = request_body(&out);
        assert_eq!(sent.topics.len(), 1);
        let merged: DescribeProducersResponse = applied(
            &plan,
            ApiKey::DescribeProducers,
            0,
            &DescribeProducersResponse::default(),
        );
        assert_eq!(merged.topics[0].partitions[0].error_code, 29);

        let req = DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![tx("tx"), tx("other")]);
        let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::DescribeTransactions, 0, &req)));
        let sent: DescribeTransactionsRequest = request_body(&out);
        assert_eq!(sent.transactional_ids, vec![tx("tx")]);
        let upstream = DescribeTransactionsResponse::default().with_transaction_states(vec![
            TransactionState::default()
                .with_transactional_id(tx("tx"))
                .with_topics(vec![
                    TopicData::default()
                        .with_topic(topic_name("a"))
                        .with_partitions(vec![0]),
                    TopicData::default()
                        .with_topic(topic_name("secret"))
                        .with_partitions(vec![0]),
                ]),
        ]);
        let merged: DescribeTransactionsResponse =
            applied(&plan, ApiKey::DescribeTransactions, 0, &upstream);
        assert_eq!(merged.transaction_states[0].topics.len(), 1);
        assert_eq!(merged.transaction_states[1].transactional_id, tx("other"));
        assert_eq!(merged.transaction_states[1].error_code, 53);

        for version in [0, 1, 2] {
            let (_, plan) = forwarded(&run(
                &authz,
                &frame(
                    ApiKey::ListTransactions,
                    version,
                    &ListTransactionsRequest::default(),
                ),
            ));
            let upstream = ListTransactionsResponse::default().with_transaction_states(vec![
                Listed::default().with_transactional_id(tx("tx")),
                Listed::default().with_transactional_id(tx("other")),
            ]);
            let merged: ListTransactionsResponse =
                applied(&plan, ApiKey::ListTransactions, version, &upstream);
            assert_eq!(merged.transaction_states.len(), 1);
            assert_eq!(merged.transaction_states[0].transactional_id, tx("tx"));
        }
    }
}
