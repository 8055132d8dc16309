//! Security APIs that Portcullis answers itself (never forwarded with its service identity).
//!
//! A handler decodes the body with the bounds-checked [`crate::protocol::reader::Reader`],
//! applies Kafka's rules against the node's views (which are derived from the metadata log) and
//! returns an [`Effect`]: answer now, or persist these records and then answer. It never does
//! I/O itself: the host appends the records off the request path (group-committed with other
//! connections' writes) and calls the continuation once they are durable — and, because the
//! views follow the log, already applied — so the rules stay testable here without files or
//! sockets.

pub mod acls;
pub mod delegation_tokens;
pub mod forwarded;
pub mod scram_credentials;

use std::net::IpAddr;

use bytes::Bytes;

use crate::connection::request_error::RequestError;
use crate::connection::session::Session;
use crate::protocol::header::RequestHeader;
use crate::store::{AppendBatch, MetadataStore, Offset, StoreError};

/// A request routed to a local handler.
#[derive(Debug)]
#[non_exhaustive]
pub struct LocalRequest<'a> {
    /// The parsed header.
    pub header: &'a RequestHeader,
    /// The body (after the header).
    pub body: &'a [u8],
    /// The authenticated session.
    pub session: &'a Session,
    /// The client's address.
    pub client_address: IpAddr,
    /// The listener's name.
    pub listener: &'a str,
    /// When the request arrived, ms since the epoch (handlers never read clocks).
    pub now_ms: i64,
}

/// What a handler wants done.
#[derive(Debug)]
#[must_use]
pub enum Effect {
    /// Answer with this response frame.
    Respond(Bytes),
    /// Make these records durable, then answer with what the continuation decides.
    Persist(Persist),
    /// The request cannot be parsed (or its answer encoded): close the connection (Kafka's
    /// behaviour for an unparseable request).
    Close(RequestError),
}

/// Answers with `body` encoded as the response to this request, or closes if it cannot be
/// encoded (a value out of range for the wire type).
pub(crate) fn encode<T: kafka_protocol::protocol::Encodable>(
    key: kafka_protocol::messages::ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &T,
) -> Effect {
    match crate::protocol::codec::encode_response(key, api_version, correlation_id, body) {
        Ok(bytes) => Effect::Respond(bytes),
        Err(e) => Effect::Close(e.into()),
    }
}

/// The historical name of [`Effect`].
pub type LocalResponse = Effect;

/// Why a persist did not happen.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PersistError {
    /// A condition of the batch no longer held: the view the decision was taken on has moved on
    /// (another writer changed the same thing first). Nothing was written.
    Conflict,
    /// The store failed; nothing is known to be written. The reason is for logs, not clients.
    Failed(String),
    /// This node is not (or no longer) its cluster's writer; nothing was written. The host runs
    /// the request again where the writer is (KIP-590) instead of completing the persist.
    NotLeader,
}

impl From<StoreError> for PersistError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict { .. } => PersistError::Conflict,
            StoreError::NotLeader(_) => PersistError::NotLeader,
            other => PersistError::Failed(other.to_string()),
        }
    }
}

/// The outcome of a persist: the offset of the first record, or why it did not happen.
pub type PersistOutcome = Result<Offset, PersistError>;

type Continuation = Box<dyn FnOnce(PersistOutcome, i64) -> Effect + Send>;

/// Records to make durable, and what to do once they are (or are not).
#[must_use]
pub struct Persist {
    batch: AppendBatch,
    then: Continuation,
    on_leader: Option<LeaderRequest>,
}

/// A security mutation to run where the cluster's writer is (KIP-590): the client's request as it
/// arrived and who sent it. On a node of a cluster sharing one log, the connection does not decide
/// such a request on its own views: the writer decides it on its up-to-date view (the node itself,
/// if it is the writer; otherwise it is forwarded in an Envelope) and the client gets that answer.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LeaderRequest {
    /// The client's frame: request header and body.
    pub frame: Bytes,
    /// The API key.
    pub api_key: i16,
    /// The API version.
    pub api_version: i16,
    /// The correlation id.
    pub correlation_id: i32,
    /// The session's principal, and whether it authenticated with a delegation token.
    pub principal: crate::envelope::ForwardedPrincipal,
    /// The client's address.
    pub client_address: IpAddr,
}

impl LeaderRequest {
    /// A request to run on the writer.
    pub fn new(
        frame: Bytes,
        header: &RequestHeader,
        principal: crate::envelope::ForwardedPrincipal,
        client_address: IpAddr,
    ) -> Self {
        Self {
            frame,
            api_key: header.api_key,
            api_version: header.api_version,
            correlation_id: header.correlation_id,
            principal,
            client_address,
        }
    }
}

impl Persist {
    /// Persist `batch`, then call `then` with the outcome and the time it completed (ms since the
    /// epoch). `then` may answer, close, or persist again (for example after a conflict, once it
    /// has re-checked the request against the views).
    pub fn new(
        batch: AppendBatch,
        then: impl FnOnce(PersistOutcome, i64) -> Effect + Send + 'static,
    ) -> Self {
        Self {
            batch,
            then: Box::new(then),
            on_leader: None,
        }
    }

    /// A mutation for the cluster's writer: nothing to append here; the host runs `request` on
    /// the writer and answers with its response (see [`LeaderRequest`]). Its continuation, if a
    /// host without a cluster completes it anyway, closes the connection: such a host never
    /// builds one.
    pub fn on_leader(request: LeaderRequest) -> Self {
        Self {
            batch: AppendBatch::default(),
            then: Box::new(|_, _| Effect::Close(RequestError::NotInCluster)),
            on_leader: Some(request),
        }
    }

    /// The mutation to run on the cluster's writer, for a persist made by
    /// [`Persist::on_leader`].
    pub fn leader_request(&self) -> Option<&LeaderRequest> {
        self.on_leader.as_ref()
    }

    /// The records and their conditions.
    pub fn batch(&self) -> &AppendBatch {
        &self.batch
    }

    /// Runs the continuation with the outcome of the append.
    pub fn complete(self, outcome: PersistOutcome, now_ms: i64) -> Effect {
        (self.then)(outcome, now_ms)
    }
}

impl std::fmt::Debug for Persist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persist")
            .field("records", &self.batch.records.len())
            .field("conditions", &self.batch.conditions.len())
            .field("on_leader", &self.on_leader.as_ref().map(|r| r.api_key))
            .finish_non_exhaustive()
    }
}

impl Effect {
    /// Carries out every persist synchronously on `store` until the effect answers or closes:
    /// for tests, tools and fuzz targets (a node appends off the request path instead).
    pub fn resolve(self, store: &dyn MetadataStore, now_ms: i64) -> Effect {
        let mut effect = self;
        loop {
            match effect {
                Effect::Persist(persist) => {
                    let outcome = store
                        .append_batch(persist.batch())
                        .map_err(PersistError::from);
                    effect = persist.complete(outcome, now_ms);
                }
                done => return done,
            }
        }
    }
}

/// Whether the session may perform `operation` on the CLUSTER resource (what the ACL and
/// credential APIs require).
pub(crate) fn cluster_allowed(
    authorizer: &dyn crate::authorizer::Authorizer,
    request: &LocalRequest<'_>,
    operation: crate::acl::AclOperation,
) -> bool {
    allowed(
        authorizer,
        request,
        operation,
        crate::acl::ResourceType::Cluster,
        crate::acl::CLUSTER_NAME,
    )
}

/// Whether the session may perform `operation` on the LITERAL resource `resource_type:name`.
pub(crate) fn allowed(
    authorizer: &dyn crate::authorizer::Authorizer,
    request: &LocalRequest<'_>,
    operation: crate::acl::AclOperation,
    resource_type: crate::acl::ResourceType,
    name: &str,
) -> bool {
    use crate::authorizer::{Action, Decision};
    // The session's groups count here too: a group's ACL may allow (or deny) an ACL change.
    let context = request.session.request_context(
        request.client_address,
        request.listener,
        request.header.api_key,
        request.header.api_version,
        request.header.correlation_id,
    );
    let action = Action::new(operation, resource_type, name);
    authorizer
        .authorize(&context, &[action])
        .first()
        .is_some_and(|a| a.decision == Decision::Allowed)
}

/// A locally served API.
pub trait LocalHandler: Send + Sync {
    /// The API key.
    fn api_key(&self) -> i16;
    /// The versions served, `(min, max)`.
    fn versions(&self) -> (i16, i16);
    /// Answers one request.
    fn handle(&self, request: &LocalRequest<'_>) -> Effect;
}
