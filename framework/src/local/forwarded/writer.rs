//! A mutation run on the cluster's writer, at most once per request id ([`run_once`]).
//!
//! The host gives the appends (`persist`, its append queue) and the clock; everything else —
//! answering a retry from the table, adding the marker to the effect's batch, recording the
//! answer — is decided here, so that it is tested without a cluster.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;

use super::dedup::{fingerprint, response_batch, with_marker, Applied, ForwardedRequests, Lookup};
use super::recorded::{from_record, to_record, TokenHmac};
use super::{error_response, run_on_writer, RequestId};
use crate::envelope::ForwardedPrincipal;
use crate::errors::ErrorCode;
use crate::local::{Effect, LocalHandler, PersistError, PersistOutcome};
use crate::protocol::header;
use crate::store::AppendBatch;

/// A continuation may ask to persist again after a conflict; past this many rounds the request
/// fails rather than looping while other writers keep winning.
const MAX_ROUNDS: usize = 16;

/// What the writer answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Ran {
    /// The inner response (in an Envelope response with NONE, for a forwarded request).
    Answer(Bytes),
    /// This node is not (or stopped being) the writer; nothing was written: run it where the
    /// writer is.
    NotWriter,
    /// The envelope fails with this code.
    Envelope(ErrorCode),
}

/// One mutation for the writer: the client's frame, who sent it, and its request id (`None`
/// from a forwarder that sends none — an older node: then it runs without deduplication).
#[derive(Clone, Copy, Debug)]
pub struct Mutation<'a> {
    /// The client's request, header and body.
    pub frame: &'a Bytes,
    /// The client's principal.
    pub principal: &'a ForwardedPrincipal,
    /// The client's address.
    pub client_address: IpAddr,
    /// The listener name of the request context.
    pub listener: &'a str,
    /// The request id, the same for each retry.
    pub request_id: Option<&'a RequestId>,
}

/// What [`run_once`] works with besides the request.
#[derive(Clone, Copy)]
pub struct Writer<'a> {
    /// The local handlers.
    pub handlers: &'a [Arc<dyn LocalHandler>],
    /// The applied requests (fed from the log).
    pub applied: &'a ForwardedRequests,
    /// Recomputes a token's HMAC for the answer to a retried CreateDelegationToken.
    pub token_hmac: TokenHmac<'a>,
}

impl std::fmt::Debug for Writer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("applied", &self.applied.len())
            .finish_non_exhaustive()
    }
}

/// The answer to a request the table knows: its recorded response, or — applied, but the answer
/// never recorded, or not rebuildable — REQUEST_TIMED_OUT. That is what the client of a Kafka
/// broker gets when its forwarded request's controller goes away: the outcome is unknown to the
/// client (its effect is there, and it is never applied twice).
pub fn answer_known(frame: &Bytes, lookup: &Lookup, token_hmac: TokenHmac<'_>) -> Option<Ran> {
    let timed_out = || match error_response(frame, ErrorCode::REQUEST_TIMED_OUT) {
        Some(bytes) => Ran::Answer(bytes),
        None => Ran::Envelope(ErrorCode::UNKNOWN_SERVER_ERROR),
    };
    match lookup {
        Lookup::New => None,
        // Another request's id: refused (the forwarder's client gets UNKNOWN_SERVER_ERROR).
        Lookup::Mismatch => Some(Ran::Envelope(ErrorCode::INVALID_REQUEST)),
        Lookup::Answered(recorded) => Some(
            from_record(frame, recorded, token_hmac)
                .map(Ran::Answer)
                .unwrap_or_else(timed_out),
        ),
        Lookup::Unanswered => Some(timed_out()),
    }
}

/// Runs `mutation` on this node, the writer: answered from the table if its request id was
/// applied already; otherwise decided by its handler, its records appended (through `persist`)
/// with the marker of its request id in the same batch, and its answer recorded.
pub async fn run_once<P, F>(
    writer: Writer<'_>,
    mutation: Mutation<'_>,
    now_ms: impl Fn() -> i64,
    mut persist: P,
) -> Ran
where
    P: FnMut(AppendBatch) -> F,
    F: Future<Output = PersistOutcome>,
{
    let fingerprint = fingerprint(mutation.principal, mutation.frame);
    let known = |id: &RequestId| {
        answer_known(
            mutation.frame,
            &writer.applied.lookup(id, &fingerprint),
            writer.token_hmac,
        )
    };
    if let Some(ran) = mutation.request_id.and_then(known) {
        return ran;
    }
    let mut effect = match run_on_writer(
        writer.handlers,
        mutation.frame,
        mutation.principal,
        mutation.client_address,
        mutation.listener,
        now_ms(),
    ) {
        Ok(effect) => effect,
        Err(code) => return Ran::Envelope(code),
    };
    let client_id = header::parse(mutation.frame)
        .ok()
        .and_then(|h| h.client_id)
        .map(|id| id.to_string())
        .unwrap_or_default();
    // Set once the marker is in the log: the request had its effect.
    let mut marked = false;
    for _ in 0..MAX_ROUNDS {
        match effect {
            Effect::Respond(bytes) => {
                if let (true, Some(id)) = (marked, mutation.request_id) {
                    let applied = Applied {
                        id,
                        client_id: &client_id,
                        fingerprint: &fingerprint,
                    };
                    record_answer(mutation.frame, &applied, &bytes, &now_ms, &mut persist).await;
                }
                return Ran::Answer(bytes);
            }
            // The inner body does not parse: Kafka's controller answers UNSUPPORTED_VERSION.
            Effect::Close(reason) => {
                tracing::debug!(%reason, "a mutation for the writer does not parse");
                return Ran::Envelope(ErrorCode::UNSUPPORTED_VERSION);
            }
            Effect::Persist(pending) => {
                let marking = match mutation.request_id {
                    Some(id) if !marked && !pending.batch().records.is_empty() => Some(id),
                    _ => None,
                };
                let batch = match marking {
                    Some(id) => {
                        let applied = Applied {
                            id,
                            client_id: &client_id,
                            fingerprint: &fingerprint,
                        };
                        with_marker(pending.batch(), &applied, now_ms())
                    }
                    None => pending.batch().clone(),
                };
                let outcome = persist(batch).await;
                match (&outcome, marking) {
                    (Err(PersistError::NotLeader), _) => return Ran::NotWriter,
                    // The marker's condition failed: another attempt of this request got there
                    // first (on this writer, while this one was decided).
                    (Err(PersistError::Conflict), Some(id)) => {
                        if let Some(ran) = known(id) {
                            return ran;
                        }
                    }
                    (Ok(_), Some(_)) => marked = true,
                    _ => {}
                }
                effect = pending.complete(outcome, now_ms());
            }
        }
    }
    Ran::Envelope(ErrorCode::UNKNOWN_SERVER_ERROR)
}

/// Records the answer of an applied request. A failure is logged and otherwise ignored: the
/// client gets its answer; a retry of it would get REQUEST_TIMED_OUT, never a second effect.
async fn record_answer<P, F>(
    frame: &Bytes,
    applied: &Applied<'_>,
    response: &Bytes,
    now_ms: &impl Fn() -> i64,
    persist: &mut P,
) where
    P: FnMut(AppendBatch) -> F,
    F: Future<Output = PersistOutcome>,
{
    let id = applied.id;
    let Some(recorded) = to_record(frame, response) else {
        tracing::warn!(request_id = %id, "a forwarded mutation's answer cannot be recorded");
        return;
    };
    if let Err(error) = persist(response_batch(applied, now_ms(), recorded)).await {
        tracing::warn!(request_id = %id, ?error, "a forwarded mutation's answer was not recorded");
    }
}

#[cfg(test)]
mod tests;
