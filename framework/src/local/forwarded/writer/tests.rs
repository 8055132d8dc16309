//! [`run_once`] with a store in memory and a stand-in token handler whose every effect is a new
//! token, so that a second effect would show as a second token.

use std::future::Future;
use std::net::IpAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, CreateDelegationTokenRequest, CreateDelegationTokenResponse, RequestHeader,
    ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::*;
use crate::local::forwarded::dedup::Lookup;
use crate::local::forwarded::RequestIds;
use crate::local::{LocalRequest, Persist};
use crate::principal::Principal;
use crate::protocol::api::CREATE_DELEGATION_TOKEN;
use crate::store::memory::MemoryStore;
use crate::store::{DelegationTokenRecord, MetadataRecord, MetadataStore};

const VERSION: i16 = 2;

/// CreateDelegationToken as a stand-in: each run creates token `t<n>`; its HMAC is `hmac(id)`.
#[derive(Default)]
struct Tokens {
    created: AtomicU32,
}

fn hmac(token_id: &str) -> Vec<u8> {
    token_id.bytes().rev().collect()
}

impl LocalHandler for Tokens {
    fn api_key(&self) -> i16 {
        CREATE_DELEGATION_TOKEN
    }
    fn versions(&self) -> (i16, i16) {
        (0, 3)
    }
    fn handle(&self, request: &LocalRequest<'_>) -> Effect {
        let n = self.created.fetch_add(1, Ordering::SeqCst);
        let token_id = format!("t{n}");
        let record = MetadataRecord::DelegationToken(DelegationTokenRecord {
            token_id: token_id.clone(),
            owner: "User:alice".into(),
            requester: "User:alice".into(),
            renewers: vec![],
            issue_timestamp_ms: 1,
            max_timestamp_ms: 3,
            expiry_timestamp_ms: 2,
        });
        let (version, correlation_id) = (request.header.api_version, request.header.correlation_id);
        Effect::Persist(Persist::new(
            crate::store::AppendBatch::new(vec![record]),
            move |outcome, _| {
                let response = match outcome {
                    Ok(_) => CreateDelegationTokenResponse::default()
                        .with_token_id(StrBytes::from_string(token_id.clone()))
                        .with_hmac(Bytes::from(hmac(&token_id))),
                    Err(_) => CreateDelegationTokenResponse::default().with_error_code(-1),
                };
                crate::local::encode(
                    ApiKey::CreateDelegationToken,
                    version,
                    correlation_id,
                    &response,
                )
            },
        ))
    }
}

fn frame() -> Bytes {
    let mut out = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(CREATE_DELEGATION_TOKEN)
        .with_request_api_version(VERSION)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("client-a")))
        .encode(
            &mut out,
            ApiKey::CreateDelegationToken.request_header_version(VERSION),
        )
        .unwrap();
    CreateDelegationTokenRequest::default()
        .encode(&mut out, VERSION)
        .unwrap();
    out.freeze()
}

fn token_of(response: &Bytes) -> CreateDelegationTokenResponse {
    let mut buf = response.clone();
    let header = ResponseHeader::decode(
        &mut buf,
        ApiKey::CreateDelegationToken.response_header_version(VERSION),
    )
    .unwrap();
    assert_eq!(header.correlation_id, 7);
    CreateDelegationTokenResponse::decode(&mut buf, VERSION).unwrap()
}

/// Polls a future whose every await is ready (the persists below are synchronous).
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
    }
}

/// A writer on a memory store whose table follows the store, as every node's does.
struct Node {
    store: Arc<MemoryStore>,
    applied: Arc<ForwardedRequests>,
    tokens: Arc<Tokens>,
    handlers: Vec<Arc<dyn LocalHandler>>,
}

impl Node {
    fn new() -> Self {
        let store = Arc::new(MemoryStore::new());
        let applied = Arc::new(ForwardedRequests::new());
        let table = Arc::clone(&applied);
        store
            .subscribe(0, Box::new(move |records| table.apply(records)))
            .unwrap();
        let tokens = Arc::new(Tokens::default());
        let handlers = vec![Arc::clone(&tokens) as Arc<dyn LocalHandler>];
        Self {
            store,
            applied,
            tokens,
            handlers,
        }
    }

    /// Runs the request; `record_answers: false` stands for a writer that dies after the
    /// effect's append and before the answer's.
    fn run(&self, id: Option<&RequestId>, record_answers: bool) -> Ran {
        self.run_as("alice", id, record_answers)
    }

    fn run_as(&self, user: &str, id: Option<&RequestId>, record_answers: bool) -> Ran {
        let principal = crate::envelope::ForwardedPrincipal {
            principal: Principal::user(user),
            token_authenticated: false,
            groups: vec![],
        };
        let frame = frame();
        let hmac_of = |id: &str| Some(hmac(id));
        let writer = Writer {
            handlers: &self.handlers,
            applied: &self.applied,
            token_hmac: &hmac_of,
        };
        let mutation = Mutation {
            frame: &frame,
            principal: &principal,
            client_address: IpAddr::from([10, 0, 0, 1]),
            listener: "cluster",
            request_id: id,
        };
        let store = Arc::clone(&self.store);
        block_on(run_once(
            writer,
            mutation,
            || 1_000,
            move |batch| {
                let answer = batch.records.iter().any(
                    |r| matches!(r, MetadataRecord::ForwardedRequest(f) if f.response.is_some()),
                );
                let outcome = if answer && !record_answers {
                    Err(PersistError::Failed("the writer died".into()))
                } else {
                    store.append_batch(&batch).map_err(PersistError::from)
                };
                async move { outcome }
            },
        ))
    }

    fn tokens_in_log(&self) -> usize {
        self.store
            .snapshot()
            .unwrap()
            .iter()
            .filter(|r| matches!(r, MetadataRecord::DelegationToken(_)))
            .count()
    }
}

fn answer(ran: Ran) -> CreateDelegationTokenResponse {
    match ran {
        Ran::Answer(bytes) => token_of(&bytes),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_retried_request_gets_the_first_answer_and_no_second_effect() {
    let node = Node::new();
    let ids = RequestIds::new(2, 9);
    let id = ids.next();
    let first = answer(node.run(Some(&id), true));
    assert_eq!(first.error_code, 0);
    assert_eq!(first.token_id.as_str(), "t0");
    assert_eq!(first.hmac, Bytes::from(hmac("t0")));
    for _ in 0..3 {
        assert_eq!(answer(node.run(Some(&id), true)), first);
    }
    assert_eq!(node.tokens.created.load(Ordering::SeqCst), 1);
    assert_eq!(node.tokens_in_log(), 1);
    // The log never holds the HMAC: the recorded answer has it empty.
    let Lookup::Answered(recorded) = node.applied.lookup(&id, &alices()) else {
        panic!("no answer recorded")
    };
    assert!(token_of(&recorded).hmac.is_empty());
    // A writer elected later, replaying the same log, answers the same.
    let successor = Node::new();
    let log = node.store.snapshot().unwrap();
    successor.store.append(&log).unwrap();
    assert_eq!(answer(successor.run(Some(&id), true)), first);
    assert_eq!(successor.tokens.created.load(Ordering::SeqCst), 0);
    // Another request id is another mutation.
    let other = answer(node.run(Some(&ids.next()), true));
    assert_eq!(other.token_id.as_str(), "t1");
}

#[test]
fn an_applied_request_without_an_answer_times_out_and_is_not_applied_again() {
    let node = Node::new();
    let id = RequestIds::new(1, 1).next();
    // The client's answer was computed, but the writer died before recording it (and before
    // the forwarder heard it).
    assert_eq!(answer(node.run(Some(&id), false)).error_code, 0);
    assert_eq!(node.applied.lookup(&id, &alices()), Lookup::Unanswered);
    for _ in 0..2 {
        let retried = answer(node.run(Some(&id), true));
        assert_eq!(retried.error_code, ErrorCode::REQUEST_TIMED_OUT.0);
        assert!(retried.hmac.is_empty());
    }
    assert_eq!(node.tokens.created.load(Ordering::SeqCst), 1);
    assert_eq!(node.tokens_in_log(), 1);
}

/// The fingerprint of alice's request made by [`frame`].
fn alices() -> String {
    let principal = crate::envelope::ForwardedPrincipal {
        principal: Principal::user("alice"),
        token_authenticated: false,
        groups: vec![],
    };
    crate::local::forwarded::dedup::fingerprint(&principal, &frame())
}

#[test]
fn an_id_reused_for_another_request_is_refused() {
    let node = Node::new();
    let id = RequestIds::new(1, 1).next();
    let first = answer(node.run(Some(&id), true));
    assert_eq!(first.error_code, 0);
    // Another principal with the same id: neither the first answer (its HMAC) nor an effect.
    assert_eq!(
        node.run_as("mallory", Some(&id), true),
        Ran::Envelope(ErrorCode::INVALID_REQUEST)
    );
    assert_eq!(node.tokens_in_log(), 1);
}

#[test]
fn without_a_request_id_every_run_applies() {
    // What an older forwarder's envelopes get (and why the ids exist).
    let node = Node::new();
    answer(node.run(None, true));
    answer(node.run(None, true));
    assert_eq!(node.tokens_in_log(), 2);
    assert!(node.applied.is_empty());
}

#[test]
fn records_are_tombstoned_after_the_retention_or_beyond_the_bound() {
    let node = Node::new();
    let ids = RequestIds::new(1, 1);
    let (old, new) = (ids.next(), ids.next());
    node.run(Some(&old), true);
    // The stand-in clock says 1 000 for both; age them by hand through the log.
    let aged = |id: &RequestId, applied_ms| {
        MetadataRecord::ForwardedRequest(crate::store::ForwardedRequestRecord {
            request_id: id.as_str().to_owned(),
            client_id: String::new(),
            applied_ms,
            fingerprint: alices(),
            response: None,
        })
    };
    let table = ForwardedRequests::new();
    let stored = |record, offset| crate::store::StoredRecord { offset, record };
    table.apply(&[stored(aged(&old, 1_000), 0), stored(aged(&new, 5_000), 1)]);
    assert_eq!(table.expired(5_500, 10_000, 100, 10), None);
    let batch = table.expired(12_000, 10_000, 100, 10).unwrap();
    assert_eq!(
        batch.records,
        vec![MetadataRecord::RemoveForwardedRequest {
            request_id: old.as_str().to_owned()
        }]
    );
    assert!(batch.records.iter().all(MetadataRecord::is_tombstone));
    // Over the bound, the oldest go whatever their age.
    assert_eq!(
        table.expired(5_500, 10_000, 1, 10).unwrap().records.len(),
        1
    );
    assert_eq!(table.expired(5_500, 10_000, 0, 1).unwrap().records.len(), 1);
    // Applied, a tombstone forgets the request: a much later request with its id would run.
    node.store.append_batch(&batch).unwrap();
    assert_eq!(node.applied.lookup(&old, &alices()), Lookup::New);
}

#[test]
fn a_refused_request_leaves_no_record() {
    struct Refuse;
    impl LocalHandler for Refuse {
        fn api_key(&self) -> i16 {
            CREATE_DELEGATION_TOKEN
        }
        fn versions(&self) -> (i16, i16) {
            (0, 3)
        }
        fn handle(&self, request: &LocalRequest<'_>) -> Effect {
            let response = CreateDelegationTokenResponse::default()
                .with_error_code(ErrorCode::DELEGATION_TOKEN_AUTHORIZATION_FAILED.0);
            crate::local::encode(
                ApiKey::CreateDelegationToken,
                request.header.api_version,
                request.header.correlation_id,
                &response,
            )
        }
    }
    let mut node = Node::new();
    node.handlers = vec![Arc::new(Refuse)];
    let id = RequestIds::new(1, 1).next();
    assert_ne!(answer(node.run(Some(&id), true)).error_code, 0);
    assert_eq!(node.applied.lookup(&id, &alices()), Lookup::New);
    assert!(node.store.snapshot().unwrap().is_empty());
}

#[test]
fn the_marker_condition_stops_a_second_effect_even_when_the_table_lags() {
    // Two attempts of one request decided on the same writer at once: the second one's table
    // lookup ran before the first one's records were applied. Its append carries the marker's
    // condition, conflicts, and writes nothing.
    let node = Node::new();
    let id = RequestIds::new(1, 1).next();
    answer(node.run(Some(&id), true));
    let lagging = Node {
        store: Arc::clone(&node.store),
        applied: Arc::new(ForwardedRequests::new()),
        tokens: Arc::clone(&node.tokens),
        handlers: node.handlers.clone(),
    };
    let second = answer(lagging.run(Some(&id), true));
    assert_ne!(second.error_code, 0);
    assert_eq!(node.tokens_in_log(), 1);
}
