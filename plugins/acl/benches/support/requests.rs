//! Realistic hot-path requests for `authorization::enforce` with the `acl` authorizer: a producer's
//! Produce and a consumer's Fetch as the Java client 4.4 sends them, against an ACL set shaped
//! like a shared cluster (many teams, literal and prefixed rules, a DENY). Shared by the
//! `enforce` criterion bench and the `allocations` test.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ProduceRequest, RequestHeader as WireHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use portcullis::acl::{
    AccessControlEntry, AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern,
    ResourceType,
};
use portcullis::authorization::{enforce_verdict, enforce_verdict_in, FetchSessions, Verdict};
use portcullis::authorizer::{Authorizer, RequestContext};
use portcullis::principal::Principal;
use portcullis::protocol::header::{self, RequestHeader};
use portcullis::store::{MetadataRecord, MetadataStore, Offset, StoreError};
use portcullis_plugin_acl::{AclAuthorizer, AclAuthorizerConfig};

/// The producer's and consumer's principal.
pub const USER: &str = "orders-service";

/// Versions the Java client 4.4 sends through Portcullis (the highest it advertises).
pub const PRODUCE_VERSION: i16 = 12;
pub const FETCH_VERSION: i16 = 12;

/// A store that hands its records to the authorizer's replay and drops appends.
struct VecStore(Mutex<Vec<MetadataRecord>>);

impl MetadataStore for VecStore {
    fn append(&self, _records: &[MetadataRecord]) -> Result<Offset, StoreError> {
        Ok(0)
    }
    fn snapshot(&self) -> Result<Vec<MetadataRecord>, StoreError> {
        Ok(std::mem::take(
            &mut *self.0.lock().unwrap_or_else(|p| p.into_inner()),
        ))
    }
}

fn binding(
    rt: ResourceType,
    pt: PatternType,
    name: &str,
    principal: &str,
    op: AclOperation,
    permission: PermissionType,
) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern::new(rt, name, pt),
        entry: AccessControlEntry {
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission,
        },
    }
}

/// 2,000 topics of 200 teams, each with a producer (WRITE) and a consumer (READ) principal;
/// team-wide prefixed DESCRIBE; the benchmark user writes and reads `orders-*` through literal
/// rules on its topics and a prefixed group rule; one DENY for another user on its prefix.
pub fn authorizer() -> Arc<dyn Authorizer> {
    use AclOperation::{Describe, Read, Write};
    use PatternType::{Literal, Prefixed};
    use PermissionType::{Allow, Deny};
    use ResourceType::{Group, Topic};
    let mut acls = Vec::new();
    for team in 0..200 {
        let producer = format!("User:team{team}-producer");
        let consumer = format!("User:team{team}-consumer");
        acls.push(binding(
            Topic,
            Prefixed,
            &format!("team{team}-"),
            &consumer,
            Describe,
            Allow,
        ));
        acls.push(binding(
            Group,
            Prefixed,
            &format!("team{team}-"),
            &consumer,
            Read,
            Allow,
        ));
        for topic in 0..10 {
            let name = format!("team{team}-topic{topic}");
            acls.push(binding(Topic, Literal, &name, &producer, Write, Allow));
            acls.push(binding(Topic, Literal, &name, &consumer, Read, Allow));
        }
    }
    let user = format!("User:{USER}");
    for topic in topics(20) {
        acls.push(binding(Topic, Literal, &topic, &user, Write, Allow));
        acls.push(binding(Topic, Literal, &topic, &user, Read, Allow));
    }
    acls.push(binding(Group, Prefixed, "orders-", &user, Read, Allow));
    acls.push(binding(
        Topic,
        Prefixed,
        "orders-",
        "User:intruder",
        Read,
        Deny,
    ));
    // What a member of the order teams may do through its token's groups alone.
    acls.push(binding(
        Topic,
        Prefixed,
        "orders-",
        "Group:orders-writers",
        Write,
        Allow,
    ));
    acls.push(binding(
        Topic,
        Prefixed,
        "orders-",
        "Group:orders-readers",
        Read,
        Allow,
    ));
    acls.push(binding(
        Group,
        Prefixed,
        "orders-",
        "Group:orders-readers",
        Read,
        Allow,
    ));
    let records = acls
        .into_iter()
        .map(|binding| MetadataRecord::Acl { binding })
        .collect();
    let store = Arc::new(VecStore(Mutex::new(records)));
    Arc::new(AclAuthorizer::open(&AclAuthorizerConfig::default(), store).expect("authorizer"))
}

/// `orders-0`, `orders-1`, …
pub fn topics(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("orders-{i}")).collect()
}

fn frame<T: Encodable>(key: ApiKey, version: i16, client_id: &'static str, body: &T) -> Bytes {
    let mut out = BytesMut::new();
    WireHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(4242)
        .with_client_id(Some(StrBytes::from_static_str(client_id)))
        .encode(&mut out, key.request_header_version(version))
        .expect("header");
    body.encode(&mut out, version).expect("body");
    out.freeze()
}

/// A magic-2 record batch of `len` bytes (header fields only; the broker's business).
fn batch(len: usize) -> Bytes {
    let mut b = vec![0u8; len.max(61)];
    let batch_length = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&batch_length.to_be_bytes());
    b[16] = 2; // magic
    Bytes::from(b)
}

/// An idempotent producer's Produce (acks=all): `topics` × `partitions`, one batch of
/// `batch_bytes` each.
pub fn produce(topics: &[String], partitions: i32, batch_bytes: usize) -> Bytes {
    let data = topics
        .iter()
        .map(|t| {
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(t.clone())))
                .with_partition_data(
                    (0..partitions)
                        .map(|p| {
                            PartitionProduceData::default()
                                .with_index(p)
                                .with_records(Some(batch(batch_bytes)))
                        })
                        .collect(),
                )
        })
        .collect();
    let body = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(data);
    frame(ApiKey::Produce, PRODUCE_VERSION, "producer-1", &body)
}

/// A consumer's Fetch opening a session: `topics` × `partitions` (the sessionless
/// `enforce_verdict` makes it sessionless).
pub fn fetch(topics: &[String], partitions: i32) -> Bytes {
    fetch_in(topics, partitions, 0, 0)
}

/// The id the broker gives the consumer's fetch session in [`fetch_session`].
pub const SESSION_ID: i32 = 1_234_567;

/// A consumer's incremental fetch in session `session_id` at `epoch`, listing `topics` ×
/// `partitions` (the Java client lists every partition whose fetch offset moved).
pub fn fetch_in(topics: &[String], partitions: i32, session_id: i32, epoch: i32) -> Bytes {
    let data = topics
        .iter()
        .map(|t| {
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(t.clone())))
                .with_partitions(
                    (0..partitions)
                        .map(|p| {
                            FetchPartition::default()
                                .with_partition(p)
                                .with_current_leader_epoch(0)
                                .with_fetch_offset(123_456)
                                .with_log_start_offset(-1)
                                .with_partition_max_bytes(1 << 20)
                        })
                        .collect(),
                )
        })
        .collect();
    let body = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(50 << 20)
        .with_session_id(session_id)
        .with_session_epoch(epoch)
        .with_topics(data)
        .with_rack_id(StrBytes::from_static_str(""));
    frame(ApiKey::Fetch, FETCH_VERSION, "consumer-1", &body)
}

/// What the connection holds for the whole session.
pub struct Session {
    pub principal: Principal,
    /// The group principals of the session's bearer token (none for SCRAM or PLAIN).
    pub groups: Vec<Principal>,
    pub client_address: IpAddr,
    pub listener: String,
}

pub fn session() -> Session {
    Session {
        principal: Principal::user(USER),
        groups: Vec::new(),
        client_address: IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
        listener: "SASL_PLAINTEXT".to_owned(),
    }
}

/// A token-authenticated member of the order teams, allowed only through its groups (one of
/// which no ACL names, one a team's).
pub fn group_session() -> Session {
    Session {
        principal: Principal::user("orders-member"),
        groups: ["orders-writers", "all-staff", "orders-readers", "team7"]
            .into_iter()
            .map(Principal::group)
            .collect(),
        ..session()
    }
}

/// What `framework/src/connection/authenticated.rs` does per upstream-bound request once the
/// header is parsed: build the request context and enforce.
pub fn authorize(
    authorizer: &Arc<dyn Authorizer>,
    session: &Session,
    header: &RequestHeader,
    frame: &Bytes,
) -> Verdict {
    let context = RequestContext::new(
        &session.principal,
        session.client_address,
        session.listener.as_str(),
        header.api_key,
        header.api_version,
        header.correlation_id,
    )
    .with_client_id(header.client_id.as_deref())
    .with_groups(session.groups.as_slice());
    enforce_verdict(authorizer, &context, header, frame)
}

/// The parsed header of a frame built here.
pub fn parse(frame: &Bytes) -> RequestHeader {
    header::parse(frame).expect("header")
}

/// A connection's fetch-session table with the consumer's session on `topics` × `partitions`
/// open (the opening fetch authorized with `authorizer`, its response naming [`SESSION_ID`]):
/// the next incremental fetch carries epoch 1.
pub fn fetch_session(
    authorizer: &Arc<dyn Authorizer>,
    session: &Session,
    topics: &[String],
    partitions: i32,
) -> FetchSessions {
    let sessions = FetchSessions::new();
    let opening = fetch(topics, partitions);
    let header = parse(&opening);
    let Verdict::Forward { plan, .. } =
        authorize_in(authorizer, session, &header, &opening, &sessions)
    else {
        panic!("the opening fetch is not forwarded");
    };
    let mut response = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(header.correlation_id)
        .encode(
            &mut response,
            ApiKey::Fetch.response_header_version(FETCH_VERSION),
        )
        .expect("header");
    FetchResponse::default()
        .with_session_id(SESSION_ID)
        .encode(&mut response, FETCH_VERSION)
        .expect("body");
    plan.apply(response.freeze())
        .expect("the opening's response");
    assert_eq!(sessions.established(), 1, "the session is open");
    sessions
}

/// [`authorize`] on a connection with fetch sessions (what the connection calls).
pub fn authorize_in(
    authorizer: &Arc<dyn Authorizer>,
    session: &Session,
    header: &RequestHeader,
    frame: &Bytes,
    sessions: &FetchSessions,
) -> Verdict {
    let context = RequestContext::new(
        &session.principal,
        session.client_address,
        session.listener.as_str(),
        header.api_key,
        header.api_version,
        header.correlation_id,
    )
    .with_client_id(header.client_id.as_deref())
    .with_groups(session.groups.as_slice());
    enforce_verdict_in(authorizer, &context, header, frame, sessions)
}
