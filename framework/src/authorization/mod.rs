//! Authorization of forwarded requests: for every Kafka API Portcullis forwards, the actions
//! Kafka's own broker checks (`KafkaApis` / `AuthHelper` in apache/kafka), applied with the
//! session's principal before the request leaves, and again on the upstream response where Kafka
//! filters what it returns.
//!
//! The flow, sans-I/O:
//! 1. [`enforce`] reads the client's body with the bounds-checked reader (never kafka-protocol's
//!    decoder: it preallocates from wire lengths), asks the [`Authorizer`], and answers
//!    [`Verdict::Forward`] (maybe with denied entries spliced out of the bytes the client sent),
//!    [`Verdict::Respond`] (everything denied: a locally built response with Kafka's error codes)
//!    or [`Verdict::Close`].
//! 2. A forwarded request carries a [`ResponsePlan`]. The host calls [`ResponsePlan::apply`] on the
//!    upstream response before queueing it: the plan puts back the entries denied locally (with
//!    their error codes), drops what the principal may not see, and recomputes authorized-operations
//!    bitfields for this principal instead of Portcullis' service identity.
//!
//! An API without a mapping is never forwarded unchecked: it is refused (fail closed).

mod check;
mod cluster;
mod entries;
mod fetch;
mod fetch_session;
mod groups;
mod metadata;
mod offsets;
mod produce;
#[cfg(test)]
pub(crate) mod testing;
mod topics;
mod txn;
pub(crate) mod wire;

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::authorizer::{Authorizer, RequestContext};
use crate::connection::request_error::RequestError;
use crate::protocol::api::is_security_api;
use crate::protocol::header::{HeaderError, RequestHeader};
use crate::protocol::reader::Malformed;
use crate::protocol::versions::ApiVersionTable;

pub use check::Checked;
pub use fetch_session::FetchSessions;
pub use wire::PlanError;

use check::Checker;

/// The outcome of [`enforce`] and every decision taken on the way.
#[derive(Debug)]
#[non_exhaustive]
#[must_use]
pub struct Enforcement {
    /// What to do with the request.
    pub verdict: Verdict,
    /// Every authorizer decision, in order, for the audit log (each action's `log_if_allowed` /
    /// `log_if_denied` say whether Kafka would log it).
    pub decisions: Vec<Checked>,
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Forward this frame (the client's bytes, or the client's bytes with denied entries spliced
    /// out) and pass the upstream response through the plan.
    Forward {
        /// The frame to send upstream.
        frame: Bytes,
        /// What to do with the upstream response.
        plan: ResponsePlan,
    },
    /// Nothing may be forwarded: answer the client with this locally built response.
    Respond(Bytes),
    /// Close the connection: a body that does not parse, an API that is not authorizable, or
    /// Kafka's own reaction (Produce `acks=0` with an authorization error).
    Close(RequestError),
}

/// Authorizes one request that the forwarding policy sends upstream, and returns every decision
/// taken on the way.
///
/// `header` must be the parsed header of `frame`.
pub fn enforce(
    authorizer: &Arc<dyn Authorizer>,
    context: &RequestContext<'_>,
    header: &RequestHeader,
    frame: &Bytes,
) -> Enforcement {
    enforce_with(authorizer, context, header, frame, None, true)
}

/// [`enforce`] for a request of a connection whose Fetch requests may use incremental fetch
/// sessions (KIP-227): `sessions` is the connection's table (see [`FetchSessions`]). Without it
/// every Fetch is made sessionless.
pub fn enforce_in(
    authorizer: &Arc<dyn Authorizer>,
    context: &RequestContext<'_>,
    header: &RequestHeader,
    frame: &Bytes,
    sessions: &FetchSessions,
) -> Enforcement {
    enforce_with(authorizer, context, header, frame, Some(sessions), true)
}

/// [`enforce_verdict`] with the connection's fetch sessions (see [`enforce_in`]): what the
/// connection calls for every upstream-bound request.
pub fn enforce_verdict_in(
    authorizer: &Arc<dyn Authorizer>,
    context: &RequestContext<'_>,
    header: &RequestHeader,
    frame: &Bytes,
    sessions: &FetchSessions,
) -> Verdict {
    enforce_with(authorizer, context, header, frame, Some(sessions), false).verdict
}

/// [`enforce`] without the list of decisions (the connection calls [`enforce_verdict_in`], the
/// same with its fetch sessions; a request the forwarding policy refuses comes here). For
/// a producer's or consumer's request that names a handful of topics it allocates nothing but
/// what the verdict holds (a rewritten frame, a response plan), with an authorizer that answers
/// through [`Authorizer::authorize_each`] without allocating (the `acl` plugin does).
pub fn enforce_verdict(
    authorizer: &Arc<dyn Authorizer>,
    context: &RequestContext<'_>,
    header: &RequestHeader,
    frame: &Bytes,
) -> Verdict {
    enforce_with(authorizer, context, header, frame, None, false).verdict
}

fn enforce_with(
    authorizer: &Arc<dyn Authorizer>,
    context: &RequestContext<'_>,
    header: &RequestHeader,
    frame: &Bytes,
    sessions: Option<&FetchSessions>,
    record: bool,
) -> Enforcement {
    let mut checker = Checker::new(authorizer.as_ref(), context, record);
    let verdict = match enforce_inner(&mut checker, header, frame, sessions) {
        Ok(Outcome::Forward(frame, Rewrite::Unchanged)) => Verdict::Forward {
            frame,
            plan: ResponsePlan::unchanged(),
        },
        Ok(Outcome::Forward(frame, rewrite)) => Verdict::Forward {
            frame,
            plan: ResponsePlan(Some(Arc::new(Planned {
                rewrite,
                scope: Scope {
                    key: ApiKey::try_from(header.api_key).unwrap_or(ApiKey::ApiVersions),
                    authorizer: Arc::clone(authorizer),
                    context: context.clone().into_owned(),
                    api_version: header.api_version,
                    correlation_id: header.correlation_id,
                },
            }))),
        },
        Ok(Outcome::Respond(bytes)) => Verdict::Respond(bytes),
        Ok(Outcome::Close(reason)) => Verdict::Close(reason),
        Err(Refusal::Malformed(e)) => Verdict::Close(e.into()),
        Err(Refusal::Encode(e)) => Verdict::Close(e.into()),
    };
    if let Verdict::Close(reason) = &verdict {
        tracing::info!(principal = %context.principal, api_key = header.api_key,
            api_version = header.api_version, %reason, "request refused by authorization");
    }
    Enforcement {
        verdict,
        decisions: checker.decisions,
    }
}

/// The versions of `api_key` that [`enforce`] can authorize, `None` when the API is refused
/// whatever its version. The host must not advertise versions outside this range: requests that
/// name topics by id only (Produce v13, Fetch v13+, OffsetCommit/OffsetFetch v10) cannot be
/// authorized without a topic-id → name map, so those versions are not authorizable.
pub fn authorizable_versions(api_key: i16) -> Option<(i16, i16)> {
    let key = ApiKey::try_from(api_key).ok()?;
    match mapping(key) {
        Mapping::Enforced { min, max, .. } => {
            let range = key.valid_versions();
            let max = max.map_or(range.max, |m| m.min(range.max));
            let min = min.map_or(range.min, |m| m.max(range.min));
            (min <= max).then_some((min, max))
        }
        Mapping::Refused(_) => None,
    }
}

/// What to advertise in front of an authorizer: `table` with every upstream-bound API limited to
/// the versions [`enforce`] can authorize, and the APIs it refuses dropped (a client should not
/// be offered an API that closes its connection). Security APIs (served locally) are kept as they
/// are.
pub fn restrict_versions(table: &ApiVersionTable) -> ApiVersionTable {
    ApiVersionTable::from_ranges(table.iter().filter_map(|(key, min, max)| {
        if is_security_api(key) {
            return Some((key, min, max));
        }
        let (lo, hi) = authorizable_versions(key)?;
        let (min, max) = (min.max(lo), max.min(hi));
        (min <= max).then_some((key, min, max))
    }))
}

/// A parsed request as the per-API modules see it.
pub(crate) struct Request<'a> {
    pub(crate) key: ApiKey,
    pub(crate) header: &'a RequestHeader,
    pub(crate) frame: &'a Bytes,
    pub(crate) body: &'a [u8],
    pub(crate) version: i16,
    pub(crate) flexible: bool,
    /// The connection's fetch sessions (Fetch only; `None`: every Fetch is made sessionless).
    pub(crate) fetch_sessions: Option<&'a FetchSessions>,
}

impl<'a> Request<'a> {
    pub(crate) fn walk(&self) -> wire::Walk<'a> {
        wire::Walk::new(self.body, self.flexible)
    }

    /// Forward the client's frame unchanged.
    pub(crate) fn unchanged(&self) -> Outcome {
        Outcome::Forward(self.frame.clone(), Rewrite::Unchanged)
    }

    /// Encodes a locally built response.
    pub(crate) fn respond<T: kafka_protocol::protocol::Encodable>(
        &self,
        body: &T,
    ) -> Result<Outcome, Refusal> {
        let bytes = wire::encode_response(self.key, self.version, self.header.correlation_id, body)
            .map_err(Refusal::Encode)?;
        Ok(Outcome::Respond(bytes))
    }

    /// The frame with these body edits applied (the client's own bytes, shared, when there are
    /// none).
    pub(crate) fn rewritten(&self, edits: Vec<wire::Edit>) -> Bytes {
        if edits.is_empty() {
            return self.frame.clone();
        }
        wire::rewrite(self.frame, self.header.header_len, edits)
    }
}

/// What a per-API module decided.
pub(crate) enum Outcome {
    Forward(Bytes, Rewrite),
    Respond(Bytes),
    Close(RequestError),
}

/// Splits a request's `[topic, [partition…]]` entries by `keep`: all kept → forwarded unchanged;
/// none kept → answered locally by `respond`; some kept → the denied entries are spliced out of
/// the client's bytes and `rewrite` says how to merge them back into the upstream's response.
pub(crate) fn split_topics(
    req: &Request<'_>,
    topics: &wire::Topics,
    keep: &[bool],
    respond: impl FnOnce(&[(String, Vec<i32>)]) -> Result<Outcome, Refusal>,
    rewrite: impl FnOnce(wire::TopicPartitions) -> Rewrite,
) -> Result<Outcome, Refusal> {
    if keep.iter().all(|k| *k) {
        return Ok(req.unchanged());
    }
    let denied = topics.denied(keep);
    if keep.iter().all(|k| !*k) {
        return respond(&denied);
    }
    let mut edits = Vec::new();
    topics.span.keep_only(keep, &mut edits);
    Ok(Outcome::Forward(req.rewritten(edits), rewrite(denied)))
}

/// Why a request could not be enforced.
#[derive(Debug)]
pub(crate) enum Refusal {
    Malformed(Malformed),
    Encode(PlanError),
}

impl From<Malformed> for Refusal {
    fn from(e: Malformed) -> Self {
        Refusal::Malformed(e)
    }
}

type Enforcer = fn(&Request<'_>, &mut Checker<'_>) -> Result<Outcome, Refusal>;

enum Mapping {
    /// Authorized by this function, for versions from `min` up to `max` (None: the bound
    /// kafka-protocol knows).
    Enforced {
        enforce: Enforcer,
        min: Option<i16>,
        max: Option<i16>,
    },
    /// Never forwarded: why.
    Refused(&'static str),
}

const INTER_BROKER: &str =
    "an inter-broker or controller API (CLUSTER_ACTION); clients may not send it";
const SECURITY: &str = "a security API; Portcullis serves it locally or not at all";
const NOT_MAPPED: &str = "no authorization mapping yet; refused (fail closed)";

/// The map from every API key to its enforcement. Exhaustive on purpose: a new key in
/// kafka-protocol fails to compile until someone decides what Kafka checks for it.
fn mapping(key: ApiKey) -> Mapping {
    use ApiKey::*;
    let on = |enforce: Enforcer| Mapping::Enforced {
        enforce,
        min: None,
        max: None,
    };
    let upto = |enforce: Enforcer, max: i16| Mapping::Enforced {
        enforce,
        min: None,
        max: Some(max),
    };
    match key {
        // v13 names topics by id only.
        Produce => upto(produce::enforce, 12),
        // v13+ names topics by id only.
        Fetch => upto(fetch::enforce, 12),
        ListOffsets => on(offsets::list_offsets),
        OffsetForLeaderEpoch => on(offsets::offset_for_leader_epoch),
        // Before v4 the request cannot turn auto-creation off, so a principal without CREATE
        // could create topics through Portcullis' identity.
        Metadata => Mapping::Enforced {
            enforce: metadata::enforce,
            min: Some(4),
            max: None,
        },
        JoinGroup | SyncGroup | Heartbeat | LeaveGroup => on(groups::membership),
        // v10 names topics by id only.
        OffsetCommit => upto(groups::offset_commit, 9),
        OffsetFetch => upto(groups::offset_fetch, 9),
        DescribeGroups => on(groups::describe_groups),
        ListGroups => on(groups::list_groups),
        DeleteGroups => on(groups::delete_groups),
        FindCoordinator => on(groups::find_coordinator),
        OffsetDelete => on(groups::offset_delete),
        ConsumerGroupHeartbeat => on(groups::consumer_group_heartbeat),
        ConsumerGroupDescribe => on(groups::consumer_group_describe),
        ElectLeaders
        | AlterPartitionReassignments
        | ListPartitionReassignments
        | DescribeClientQuotas
        | AlterClientQuotas
        | DescribeLogDirs
        | AlterReplicaLogDirs
        | UpdateFeatures
        | DescribeQuorum
        | DescribeCluster => on(cluster::enforce),
        // Kafka checks nothing for these beyond authentication.
        GetTelemetrySubscriptions | PushTelemetry => on(cluster::unchecked),

        CreateTopics => on(topics::create_topics),
        DeleteTopics => on(topics::delete_topics),
        CreatePartitions => on(topics::create_partitions),
        DeleteRecords => on(topics::delete_records),
        DescribeConfigs | AlterConfigs | IncrementalAlterConfigs => on(topics::configs),

        // v6 adds two-phase commit (KIP-939), whose ACL operation is not modelled.
        InitProducerId => upto(txn::init_producer_id, 5),
        // v4+ are inter-broker (CLUSTER_ACTION).
        AddPartitionsToTxn => upto(txn::add_partitions_to_txn, 3),
        AddOffsetsToTxn => on(txn::add_offsets_to_txn),
        EndTxn => on(txn::end_txn),
        TxnOffsetCommit => on(txn::txn_offset_commit),
        DescribeProducers => on(txn::describe_producers),
        DescribeTransactions => on(txn::describe_transactions),
        ListTransactions => on(txn::list_transactions),

        DescribeTopicPartitions | ListConfigResources => Mapping::Refused(NOT_MAPPED),
        // Share groups (KIP-932): not mapped yet.
        ShareGroupHeartbeat
        | ShareGroupDescribe
        | ShareFetch
        | ShareAcknowledge
        | DescribeShareGroupOffsets
        | AlterShareGroupOffsets
        | DeleteShareGroupOffsets => Mapping::Refused(NOT_MAPPED),
        SaslHandshake
        | ApiVersions
        | SaslAuthenticate
        | DescribeAcls
        | CreateAcls
        | DeleteAcls
        | CreateDelegationToken
        | RenewDelegationToken
        | ExpireDelegationToken
        | DescribeDelegationToken
        | DescribeUserScramCredentials
        | AlterUserScramCredentials
        | Envelope => Mapping::Refused(SECURITY),
        WriteTxnMarkers
        | Vote
        | BeginQuorumEpoch
        | EndQuorumEpoch
        | AlterPartition
        | FetchSnapshot
        | BrokerRegistration
        | BrokerHeartbeat
        | UnregisterBroker
        | AllocateProducerIds
        | ControllerRegistration
        | AssignReplicasToDirs
        | AddRaftVoter
        | RemoveRaftVoter
        | UpdateRaftVoter
        | InitializeShareGroupState
        | ReadShareGroupState
        | WriteShareGroupState
        | DeleteShareGroupState
        | ReadShareGroupStateSummary => Mapping::Refused(INTER_BROKER),
    }
}

fn enforce_inner(
    checker: &mut Checker<'_>,
    header: &RequestHeader,
    frame: &Bytes,
    sessions: Option<&FetchSessions>,
) -> Result<Outcome, Refusal> {
    let Ok(key) = ApiKey::try_from(header.api_key) else {
        return Ok(Outcome::Close(
            HeaderError::UnknownApiKey(header.api_key).into(),
        ));
    };
    let Some((min, max)) = authorizable_versions(header.api_key) else {
        let why = match mapping(key) {
            Mapping::Refused(why) => why,
            Mapping::Enforced { .. } => "no authorizable version",
        };
        return Ok(Outcome::Close(RequestError::NotForwardable {
            api: key,
            why,
        }));
    };
    if header.api_version < min || header.api_version > max {
        return Ok(Outcome::Close(RequestError::VersionNotAuthorizable {
            api: key,
            version: header.api_version,
            min,
            max,
        }));
    }
    let Mapping::Enforced { enforce, .. } = mapping(key) else {
        return Ok(Outcome::Close(RequestError::NotForwardable {
            api: key,
            why: NOT_MAPPED,
        }));
    };
    let body = frame.get(header.header_len..).unwrap_or_default();
    let request = Request {
        key,
        header,
        frame,
        body,
        version: header.api_version,
        flexible: wire::flexible(key, header.api_version),
        fetch_sessions: sessions,
    };
    enforce(&request, checker)
}

/// What to do with the upstream response of a forwarded request. Data, not code: the host keeps
/// it with the pending request and calls [`ResponsePlan::apply`] on the response frame.
/// (One pointer wide: most requests need no rewrite.)
#[derive(Clone)]
pub struct ResponsePlan(Option<Arc<Planned>>);

/// A rewrite and what it needs to ask the authorizer.
struct Planned {
    rewrite: Rewrite,
    scope: Scope,
}

/// What `apply` needs to ask the authorizer again (response filtering, bitfields).
struct Scope {
    key: ApiKey,
    authorizer: Arc<dyn Authorizer>,
    context: RequestContext<'static>,
    api_version: i16,
    correlation_id: i32,
}

/// The response rewrites, one per API that needs one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rewrite {
    Unchanged,
    Produce(produce::Merge),
    Fetch(fetch::Merge),
    ListOffsets(offsets::Overwrite),
    OffsetForLeaderEpoch(offsets::Overwrite),
    Metadata(metadata::Plan),
    OffsetCommit(groups::OffsetCommitMerge),
    OffsetFetch(groups::OffsetFetchPlan),
    DescribeGroups(groups::DescribeGroupsMerge),
    ListGroups,
    DeleteGroups(groups::DeleteGroupsMerge),
    FindCoordinator(groups::FindCoordinatorMerge),
    ConsumerGroupDescribe(groups::DescribeGroupsMerge),
    DescribeCluster { include_operations: bool },
    Admin(topics::Merge),
    Txn(txn::Merge),
}

/// The response after [`ResponsePlan::apply`], with the decisions taken while rewriting it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Applied {
    /// The frame to queue for the client.
    pub frame: Bytes,
    /// Decisions taken while filtering (quiet ones; for the audit log).
    pub decisions: Vec<Checked>,
}

impl ResponsePlan {
    /// Pass the response through untouched.
    pub fn unchanged() -> Self {
        Self(None)
    }

    /// Whether [`ResponsePlan::apply`] returns its input unchanged (the host may skip calling it).
    pub fn is_unchanged(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|p| matches!(p.rewrite, Rewrite::Unchanged))
    }

    /// Rewrites the upstream response frame (header + body, no size prefix). An error means the
    /// upstream sent something that does not parse at the request's version: the host must not
    /// pass the unfiltered response on (close the client connection instead).
    pub fn apply(&self, response: Bytes) -> Result<Applied, PlanError> {
        let Some(Planned { rewrite, scope }) = self.0.as_deref() else {
            return Ok(Applied {
                frame: response,
                decisions: Vec::new(),
            });
        };
        let mut checker = Checker::new(scope.authorizer.as_ref(), &scope.context, true);
        let response = Response {
            frame: &response,
            version: scope.api_version,
            correlation_id: scope.correlation_id,
        };
        let frame = match rewrite {
            Rewrite::Unchanged => response.frame.clone(),
            Rewrite::Produce(m) => m.apply(&response)?,
            Rewrite::Fetch(m) => m.apply(&response)?,
            Rewrite::ListOffsets(m) => m.apply_list_offsets(&response)?,
            Rewrite::OffsetForLeaderEpoch(m) => m.apply_offset_for_leader_epoch(&response)?,
            Rewrite::Metadata(p) => p.apply(&response, &mut checker)?,
            Rewrite::OffsetCommit(m) => m.apply(&response)?,
            Rewrite::OffsetFetch(p) => p.apply(&response, &mut checker)?,
            Rewrite::DescribeGroups(m) => m.apply_describe_groups(&response, &mut checker)?,
            Rewrite::ListGroups => groups::filter_list_groups(&response, &mut checker)?,
            Rewrite::DeleteGroups(m) => m.apply(&response)?,
            Rewrite::FindCoordinator(m) => m.apply(&response)?,
            Rewrite::ConsumerGroupDescribe(m) => {
                m.apply_consumer_group_describe(&response, &mut checker)?
            }
            Rewrite::Admin(m) => m.apply(scope.key, &response, &mut checker)?,
            Rewrite::Txn(m) => m.apply(&response, &mut checker)?,
            Rewrite::DescribeCluster { include_operations } => {
                cluster::describe_cluster_response(&response, *include_operations, &mut checker)?
            }
        };
        Ok(Applied {
            frame,
            decisions: checker.decisions,
        })
    }
}

/// An upstream response being rewritten.
pub(crate) struct Response<'a> {
    pub(crate) frame: &'a Bytes,
    pub(crate) version: i16,
    pub(crate) correlation_id: i32,
}

impl Response<'_> {
    pub(crate) fn decode<T: kafka_protocol::protocol::Decodable>(
        &self,
        key: ApiKey,
    ) -> Result<T, PlanError> {
        wire::decode_response::<T>(key, self.version, self.frame).map(|(_, body)| body)
    }

    pub(crate) fn encode<T: kafka_protocol::protocol::Encodable>(
        &self,
        key: ApiKey,
        body: &T,
    ) -> Result<Bytes, PlanError> {
        wire::encode_response(key, self.version, self.correlation_id, body)
    }
}

impl std::fmt::Debug for ResponsePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponsePlan")
            .field("rewrite", &self.0.as_ref().map(|p| &p.rewrite))
            .finish_non_exhaustive()
    }
}

/// Two plans are equal when they rewrite the same way (the authorizer handle is not compared).
impl PartialEq for ResponsePlan {
    fn eq(&self, other: &Self) -> bool {
        let rewrite = |p: &Self| p.0.as_ref().map(|p| p.rewrite.clone());
        rewrite(self) == rewrite(other)
    }
}
impl Eq for ResponsePlan {}

#[cfg(test)]
mod tests;
