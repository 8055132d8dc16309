//! Several nodes, one security state (`[store] kind = "kafka"`): where a security mutation runs.
//!
//! Every node's views follow the shared log (`portcullis-plugin-kafka-store`); one node, elected
//! by the upstream cluster, writes it. A client's CreateAcls, DeleteAcls,
//! AlterUserScramCredentials or Create/Renew/ExpireDelegationToken reaches the host as
//! [`Persist::on_leader`](portcullis::local::Persist::on_leader) ([`Cluster::run_mutation`]):
//!
//! - on the writer, the local handler decides it on the writer's view, as the client's principal
//!   and address, and the answer is sent once the writer's own view has applied the records;
//! - elsewhere, it is wrapped in an Envelope (KIP-590) with the client's principal
//!   (`DefaultPrincipalData`) and IP and sent to the writer's inter-node listener
//!   ([`listener`], mutual TLS); the writer's answer goes back to the client unchanged. A writer
//!   that moved (NOT_CONTROLLER, a dropped connection) is looked up again in the log and the
//!   request retried until `[cluster] forward_timeout_ms`; then REQUEST_TIMED_OUT. Other envelope
//!   errors become UNKNOWN_SERVER_ERROR, and UNSUPPORTED_VERSION closes the client's connection
//!   so that it negotiates versions again (kafka-security-semantics §7.2).
//!
//! Each mutation gets one request id for all its attempts, carried in the Envelope; the writer
//! applies a request id once and answers its retries with the first answer ([`idempotence`]):
//! a writer that dies after applying a mutation and before answering does not make the retry on
//! its successor apply it a second time.
//!
//! Reads (Describe*) are answered by every node from its own view.

pub mod forward;
mod frames;
pub mod idempotence;
pub mod listener;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use portcullis::authorizer::Authorizer;
use portcullis::connection::RequestError;
use portcullis::envelope::{self, ForwardedPrincipal};
use portcullis::errors::ErrorCode;
use portcullis::local::forwarded::error_response;
use portcullis::local::forwarded::writer::{run_once, Mutation, Ran, Writer};
use portcullis::local::forwarded::RequestId;
use portcullis::local::{LeaderRequest, LocalHandler};
use portcullis::principal::{
    AuthenticationContext, Principal, PrincipalBuilder, PrincipalError, TlsPeer,
};
use portcullis_plugin_kafka_store::KafkaMetadataStore;
use tokio::time::Instant;

use crate::append_queue::AppendQueue;
use crate::clock::now_ms;
use crate::config::ClusterConfig;

/// The listener name inside request contexts of mutations run on the writer.
pub const LISTENER_NAME: &str = "cluster";

/// [`Cluster::peer_principal`] with the builder given.
fn peer_principal(
    builder: &dyn PrincipalBuilder,
    tls: &TlsPeer,
    address: IpAddr,
) -> Result<Principal, PrincipalError> {
    if tls.subject.is_none() {
        return Err(PrincipalError::Unavailable {
            reason: "the peer's certificate has no readable subject".to_owned(),
        });
    }
    builder.build(&AuthenticationContext::tls_only(
        tls,
        address,
        LISTENER_NAME,
    ))
}

/// What the client of a mutation gets.
#[derive(Debug)]
pub enum Answer {
    /// This response, in the request's place.
    Respond(Bytes),
    /// Close the client's connection (the reason is logged).
    Close(RequestError),
}

/// What the cluster part decides with: the node's, replaced as a whole when a reload chooses
/// another authorizer or principal builder ([`Cluster::renew`]).
#[derive(Clone)]
pub struct Deciders {
    /// The local handlers (the writer runs mutations with them).
    pub handlers: Vec<Arc<dyn LocalHandler>>,
    /// The node's authorizer (ClusterAction of forwarding peers).
    pub authorizer: Option<Arc<dyn Authorizer>>,
    /// The node's principal builder: it names inter-node peers from their certificates, as it
    /// names clients on every other listener.
    pub principal_builder: Arc<dyn PrincipalBuilder>,
}

impl Deciders {
    /// The principal of an inter-node peer, from the certificate it presented: the node's
    /// `PrincipalBuilder` on a TLS-only context (the default builder gives `User:` + the
    /// subject's RFC 2253 name, as Kafka's `DefaultKafkaPrincipalBuilder` does for an SSL peer).
    ///
    /// # Errors
    /// The builder's refusal; a peer without a certificate subject is refused before it is asked
    /// (the listener requires a client certificate, so a missing subject means one that cannot be
    /// read, and an anonymous peer must never stand for a node).
    pub fn peer_principal(
        &self,
        tls: &TlsPeer,
        address: IpAddr,
    ) -> Result<Principal, PrincipalError> {
        peer_principal(self.principal_builder.as_ref(), tls, address)
    }

    /// Whether `principal` (a peer, by its certificate) may forward mutations: Kafka's check of
    /// ClusterAction on the Cluster resource for an Envelope. Without an authorizer, every peer
    /// whose certificate chains to `[cluster] ca_file` may (as every principal may do everything
    /// on a Kafka broker without one).
    pub(crate) fn peer_may_forward(&self, principal: &Principal, address: IpAddr) -> bool {
        use portcullis::acl::{AclOperation, ResourceType, CLUSTER_NAME};
        use portcullis::authorizer::{Action, Decision, RequestContext};
        let Some(authorizer) = &self.authorizer else {
            return true;
        };
        let context = RequestContext::new(
            principal.clone(),
            address,
            LISTENER_NAME,
            portcullis::protocol::api::ENVELOPE,
            0,
            0,
        );
        let action = Action::new(
            AclOperation::ClusterAction,
            ResourceType::Cluster,
            CLUSTER_NAME,
        );
        authorizer
            .authorize(&context, &[action])
            .first()
            .is_some_and(|a| a.decision == Decision::Allowed)
    }
}

/// The node's part in its cluster.
pub struct Cluster {
    store: Arc<KafkaMetadataStore>,
    /// The node's append queue, not its `StoreWriter`: the store writer carries this cluster, so
    /// the cluster appends beneath it.
    writer: AppendQueue,
    /// One snapshot per mutation and per peer connection: a reload swaps in the next, and what
    /// runs keeps the one it took.
    deciders: ArcSwap<Deciders>,
    peers: forward::Peers,
    node_id: i32,
    forward_timeout: Duration,
    idempotence: idempotence::Idempotence,
}

/// What a node's cluster part is made of.
pub struct Parts {
    /// The shared store.
    pub store: Arc<KafkaMetadataStore>,
    /// The node's append queue.
    pub writer: AppendQueue,
    /// What it decides with, until a reload renews it.
    pub deciders: Deciders,
    /// The request ids and the table of applied requests.
    pub idempotence: idempotence::Idempotence,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node_id", &self.node_id)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// The cluster part of a node.
    ///
    /// # Errors
    /// The TLS material of `[cluster]` cannot be read.
    pub fn new(config: &ClusterConfig, node_id: i32, parts: Parts) -> anyhow::Result<Self> {
        Ok(Self {
            store: parts.store,
            writer: parts.writer,
            deciders: ArcSwap::from_pointee(parts.deciders),
            peers: forward::Peers::new(config, node_id)?,
            node_id,
            forward_timeout: Duration::from_millis(config.forward_timeout_ms),
            idempotence: parts.idempotence,
        })
    }

    /// What a reload chose: mutations that start from now on (a client's here, or each Envelope
    /// a peer sends, named, admitted and run with one snapshot) use it; those under way finish
    /// with what they took.
    pub fn renew(&self, deciders: Deciders) {
        self.deciders.store(Arc::new(deciders));
    }

    /// What the cluster part decides with now.
    pub fn deciders(&self) -> Arc<Deciders> {
        self.deciders.load_full()
    }

    /// The shared store.
    pub fn store(&self) -> &Arc<KafkaMetadataStore> {
        &self.store
    }

    /// Runs a client's mutation where the writer is (see the module documentation).
    pub async fn run_mutation(&self, request: &LeaderRequest) -> Answer {
        let deadline = Instant::now() + self.forward_timeout;
        let mut backoff = Duration::from_millis(20);
        // One id for every attempt: whichever writer applied the mutation answers the others.
        let id = self.idempotence.next_id();
        loop {
            let attempt = if self.store.is_writer() {
                self.run_here(
                    &self.deciders(),
                    &request.frame,
                    &request.principal,
                    request.client_address,
                    Some(&id),
                )
                .await
            } else {
                self.forward(request, &id).await
            };
            match attempt {
                Ok(bytes) => return Answer::Respond(bytes),
                // The writer moved, or none is known yet: look it up again and retry.
                Err(Failure::Retry(reason)) => {
                    tracing::debug!(%reason, "retrying a mutation on the cluster's writer");
                }
                Err(Failure::Envelope(ErrorCode::UNSUPPORTED_VERSION)) => {
                    return Answer::Close(RequestError::WriterUnsupportedVersion)
                }
                Err(Failure::Envelope(code)) => {
                    tracing::warn!(error = %code, api_key = request.api_key, "the cluster's writer refused a forwarded mutation");
                    return error_answer(&request.frame, ErrorCode::UNKNOWN_SERVER_ERROR);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    api_key = request.api_key,
                    timeout_ms = self.forward_timeout.as_millis() as u64,
                    "no writer answered a mutation in time"
                );
                return error_answer(&request.frame, ErrorCode::REQUEST_TIMED_OUT);
            }
            tokio::time::sleep(backoff.min(deadline - now)).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    async fn forward(&self, request: &LeaderRequest, id: &RequestId) -> Result<Bytes, Failure> {
        let Some(leader) = self.store.leader() else {
            return Err(Failure::Retry(RetryReason::NoWriterKnown));
        };
        if leader.node_id == self.node_id {
            // The log still names this node, which is no longer (or not yet) the writer.
            return Err(Failure::Retry(RetryReason::NamedButNotWriter));
        }
        let principal = envelope::serialize_principal(&request.principal);
        let response = self
            .peers
            .send(
                &leader.address,
                &request.frame,
                &principal,
                request.client_address,
                id,
            )
            .await
            .map_err(|error| {
                Failure::Retry(RetryReason::Unreachable {
                    address: leader.address.clone(),
                    error,
                })
            })?;
        match (response.error, response.response_data) {
            (ErrorCode::NONE, Some(data)) => Ok(data),
            (ErrorCode::NONE, None) => Err(Failure::Envelope(ErrorCode::UNKNOWN_SERVER_ERROR)),
            (ErrorCode::NOT_CONTROLLER, _) => Err(Failure::Retry(RetryReason::WriterMoved {
                node_id: leader.node_id,
            })),
            (code, _) => Err(Failure::Envelope(code)),
        }
    }

    /// Runs a mutation on this node as the writer: the client's (or a peer's forwarded) request,
    /// as `principal` from `client_address`, at most once per `request_id` (see
    /// [`run_once`]). Errors are envelope errors: NOT_CONTROLLER when this node is not (or
    /// stopped being) the writer, nothing having been written.
    pub(crate) async fn run_here(
        &self,
        deciders: &Deciders,
        frame: &Bytes,
        principal: &ForwardedPrincipal,
        client_address: IpAddr,
        request_id: Option<&RequestId>,
    ) -> Result<Bytes, Failure> {
        if !self.store.is_writer() {
            return Err(Failure::Retry(RetryReason::NotWriter));
        }
        if let Some(id) = request_id {
            self.idempotence.wait_for_answer(id).await;
        }
        let token_hmac = |token_id: &str| self.idempotence.token_hmac(token_id);
        let writer = Writer {
            handlers: &deciders.handlers,
            applied: &self.idempotence.applied,
            token_hmac: &token_hmac,
        };
        let mutation = Mutation {
            frame,
            principal,
            client_address,
            listener: LISTENER_NAME,
            request_id,
        };
        match run_once(writer, mutation, now_ms, |batch| self.writer.persist(batch)).await {
            Ran::Answer(bytes) => Ok(bytes),
            Ran::NotWriter => Err(Failure::Retry(RetryReason::StoppedBeingWriter)),
            Ran::Envelope(code) => Err(Failure::Envelope(code)),
        }
    }
}

/// Why a mutation is tried again (logged at debug on each retry).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RetryReason {
    /// The log names no writer yet.
    #[error("no writer is known yet")]
    NoWriterKnown,
    /// The log still names this node, which is no longer (or not yet) the writer.
    #[error("this node was the writer and is not any more")]
    NamedButNotWriter,
    /// This node is not the writer (a peer forwarded to it, or it lost the election).
    #[error("this node is not the writer")]
    NotWriter,
    /// This node lost the writer role while persisting; nothing was written.
    #[error("this node stopped being the writer")]
    StoppedBeingWriter,
    /// The writer answered NOT_CONTROLLER.
    #[error("node {node_id} is not the writer any more")]
    WriterMoved {
        /// The node the log named.
        node_id: i32,
    },
    /// The writer could not be reached, or gave no answer.
    #[error("writer {address}: {error}")]
    Unreachable {
        /// Its inter-node address.
        address: String,
        /// What went wrong.
        error: forward::ForwardError,
    },
}

/// Why a mutation was not answered.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Nothing was done; the writer is elsewhere or unknown: try again where it is.
    Retry(RetryReason),
    /// The envelope failed with this code.
    Envelope(ErrorCode),
}

fn error_answer(frame: &Bytes, code: ErrorCode) -> Answer {
    match error_response(frame, code) {
        Some(bytes) => Answer::Respond(bytes),
        None => Answer::Close(RequestError::NoErrorResponse { code }),
    }
}

#[cfg(test)]
mod tests {
    use portcullis::principal::DefaultPrincipalBuilder;

    use super::*;

    /// Maps node certificates as a `[principal]` plugin would: `Node:<CN>` on the cluster listener.
    struct NodeMapping;

    impl PrincipalBuilder for NodeMapping {
        fn build(&self, context: &AuthenticationContext<'_>) -> Result<Principal, PrincipalError> {
            assert_eq!(context.listener, LISTENER_NAME);
            assert!(context.sasl.is_none());
            let subject = context.certificate_subject().unwrap_or_default();
            match subject.strip_prefix("CN=") {
                Some(cn) => Ok(Principal {
                    kind: "Node".into(),
                    name: cn.split(',').next().unwrap_or_default().to_owned(),
                }),
                None => Err(PrincipalError::NoRuleApplies {
                    name: subject.to_owned(),
                }),
            }
        }
    }

    /// The inter-node peer's principal is the node's principal builder's answer for its
    /// certificate: the default builder's `User:<subject>`, or a mapping plugin's; a certificate
    /// without a readable subject, or a builder's refusal, is no principal.
    #[test]
    fn the_peer_principal_comes_from_the_principal_builder() {
        let address = IpAddr::from([127, 0, 0, 1]);
        let peer = TlsPeer::new(vec![vec![0x30]], Some("CN=node-2,O=edge".into()));
        assert_eq!(
            peer_principal(&DefaultPrincipalBuilder, &peer, address).unwrap(),
            Principal::user("CN=node-2,O=edge")
        );
        assert_eq!(
            peer_principal(&NodeMapping, &peer, address)
                .unwrap()
                .to_string(),
            "Node:node-2"
        );
        let unmapped = TlsPeer::new(vec![vec![0x30]], Some("O=edge".into()));
        assert!(peer_principal(&NodeMapping, &unmapped, address).is_err());
        // Never User:ANONYMOUS for a certificate whose subject could not be read.
        let unreadable = TlsPeer::new(vec![vec![0x30]], None);
        assert!(peer_principal(&DefaultPrincipalBuilder, &unreadable, address).is_err());
    }
}
