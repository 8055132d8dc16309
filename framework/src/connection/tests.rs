//! The state machine, driven frame by frame without sockets.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::*;
use crate::events::{Event, EventBus};
use crate::forwarding::{ForwardingPolicy, RequestInfo, Route, UpstreamIdentity};
use crate::principal::{DefaultPrincipalBuilder, Principal};
use crate::sasl::{AuthFailure, Authenticated, ExchangeContext, StepOutcome, TokenClaims};

/// A one-round mechanism for these tests: the token must be `user:password`.
struct Fixed;
#[derive(Default)]
struct FixedExchange {
    /// The part of the token before `:`, once a token was seen.
    user: Option<String>,
}

impl SaslMechanism for Fixed {
    fn name(&self) -> &str {
        "TEST"
    }
    fn start(&self, _: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(FixedExchange::default())
    }
}

impl SaslExchange for FixedExchange {
    fn claimed_user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    fn step(&mut self, token: &[u8]) -> StepOutcome {
        self.user = token
            .split(|b| *b == b':')
            .next()
            .map(|u| String::from_utf8_lossy(u).into_owned());
        match token {
            b"alice:pw" => {
                StepOutcome::Complete(Authenticated::new("alice").with_server_final(b"ok".to_vec()))
            }
            b"bob:pw" => StepOutcome::Complete(Authenticated::new("bob")),
            // A bearer token's claims, as OAUTHBEARER reports them (a duplicate and an empty
            // group included: the session keeps each group once, and no `Group:`).
            b"carol:first-token" => StepOutcome::Complete(
                Authenticated::new("carol").with_token_claims(TokenClaims::new(
                    vec!["kafka.read".into(), "kafka.write".into()],
                    vec![
                        "readers".into(),
                        "ops".into(),
                        "readers".into(),
                        String::new(),
                    ],
                    Some("jti-1".into()),
                )),
            ),
            b"carol:second-token" => StepOutcome::Complete(
                Authenticated::new("carol").with_token_claims(TokenClaims::new(
                    Vec::new(),
                    vec!["writers".into()],
                    None,
                )),
            ),
            b"expiring:pw" => StepOutcome::Complete(
                Authenticated::new("expiring").with_credential_expiry_ms(Some(61_000)),
            ),
            _ => StepOutcome::Fail(AuthFailure::Hidden("wrong".into())),
        }
    }
}

/// A second mechanism, for mechanism-change tests.
struct Other;
impl SaslMechanism for Other {
    fn name(&self) -> &str {
        "OTHER"
    }
    fn start(&self, _: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(FixedExchange::default())
    }
}

struct Upstream;
impl ForwardingPolicy for Upstream {
    fn name(&self) -> &str {
        "test"
    }
    fn route(&self, r: &RequestInfo<'_>) -> Route {
        if r.api_key == 20 {
            Route::Reject(crate::errors::ErrorCode::POLICY_VIOLATION)
        } else {
            Route::Upstream {
                identity: UpstreamIdentity::Service,
            }
        }
    }
}

fn config() -> (Arc<ConnectionConfig>, crate::events::Subscription) {
    let events = EventBus::new();
    let sub = events.subscribe(16);
    let upstream = ApiVersionTable::from_ranges([(0, 3, 11), (3, 0, 12), (20, 0, 6)]);
    let table = Arc::new(ArcSwap::from_pointee(ApiVersionTable::advertised(
        &upstream,
    )));
    let cfg = ConnectionConfig::new(
        "test",
        Arc::new(NodeServices::new(
            vec![Arc::new(Fixed), Arc::new(Other)],
            Arc::new(DefaultPrincipalBuilder),
            Arc::new(Upstream),
            events,
        )),
        table,
    )
    .with_max_reauth_ms(Some(3_600_000));
    (Arc::new(cfg), sub)
}

fn conn() -> (Connection, crate::events::Subscription) {
    let (cfg, sub) = config();
    (
        Connection::new(cfg, IpAddr::from([127, 0, 0, 1]), false),
        sub,
    )
}

fn request<T: Encodable>(key: ApiKey, version: i16, correlation_id: i32, body: &T) -> Bytes {
    let mut out = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("t")))
        .encode(&mut out, key.request_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    out.freeze()
}

fn response<T: Decodable>(key: ApiKey, version: i16, frame: &Bytes) -> (i32, T) {
    let mut buf = frame.clone();
    let header = ResponseHeader::decode(&mut buf, key.response_header_version(version)).unwrap();
    (header.correlation_id, T::decode(&mut buf, version).unwrap())
}

fn single_response(actions: Vec<Action>) -> Bytes {
    match actions.as_slice() {
        [Action::Respond(b)] => b.clone(),
        other => panic!("expected one response, got {other:?}"),
    }
}

fn handshake(c: &mut Connection, version: i16, mechanism: &str) -> Vec<Action> {
    let body =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into()));
    c.handle_frame(request(ApiKey::SaslHandshake, version, 2, &body), 0)
}

fn authenticate(c: &mut Connection, version: i16, token: &[u8], now: i64) -> Vec<Action> {
    let body = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token));
    c.handle_frame(request(ApiKey::SaslAuthenticate, version, 3, &body), now)
}

fn authenticated() -> Connection {
    let (mut c, _) = conn();
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    assert!(c.session().is_some());
    c
}

#[test]
fn api_versions_then_framed_scram_like_login() {
    let (mut c, events) = conn();
    let frame = request(ApiKey::ApiVersions, 3, 1, &ApiVersionsRequest::default());
    let (cid, versions): (_, ApiVersionsResponse) = response(
        ApiKey::ApiVersions,
        3,
        &single_response(c.handle_frame(frame, 0)),
    );
    assert_eq!(cid, 1);
    assert!(versions
        .api_keys
        .iter()
        .any(|k| k.api_key == 17 && k.max_version == 1));
    assert!(versions.api_keys.iter().any(|k| k.api_key == 3));
    assert_eq!(c.max_frame_size(), DEFAULT_MAX_PRE_AUTH_FRAME);

    let (_, hs): (_, SaslHandshakeResponse) = response(
        ApiKey::SaslHandshake,
        1,
        &single_response(handshake(&mut c, 1, "TEST")),
    );
    assert_eq!(hs.error_code, 0);
    assert_eq!(
        hs.mechanisms.first(),
        Some(&StrBytes::from_static_str("TEST"))
    );

    let (_, auth): (_, SaslAuthenticateResponse) = response(
        ApiKey::SaslAuthenticate,
        2,
        &single_response(authenticate(&mut c, 2, b"alice:pw", 1000)),
    );
    assert_eq!(auth.error_code, 0);
    assert_eq!(&auth.auth_bytes[..], b"ok");
    assert_eq!(auth.session_lifetime_ms, 3_600_000);
    let session = c.session().unwrap();
    assert_eq!(session.principal.to_string(), "User:alice");
    assert_eq!(c.max_frame_size(), DEFAULT_MAX_FRAME);
    assert!(matches!(
        events.try_recv(),
        Some(Event::SessionAuthenticated { .. })
    ));
}

#[test]
fn session_lifetime_is_capped_by_the_credential_expiry() {
    let (mut c, _) = conn();
    let _ = handshake(&mut c, 1, "TEST");
    let (_, auth): (_, SaslAuthenticateResponse) = response(
        ApiKey::SaslAuthenticate,
        1,
        &single_response(authenticate(&mut c, 1, b"expiring:pw", 1_000)),
    );
    assert_eq!(auth.session_lifetime_ms, 60_000);
    assert_eq!(sasl_step::session_lifetime_ms(None, None, 5), None);
    assert_eq!(sasl_step::session_lifetime_ms(None, Some(1), 5), Some(0));
    assert_eq!(
        sasl_step::session_lifetime_ms(Some(10), Some(100), 5),
        Some(10)
    );
}

#[test]
fn handshake_may_come_first_and_v0_uses_raw_tokens() {
    let (mut c, _) = conn();
    let _ = single_response(handshake(&mut c, 0, "TEST"));
    let token = single_response(c.handle_frame(Bytes::from_static(b"alice:pw"), 0));
    assert_eq!(&token[..], b"ok");
    assert!(c.session().is_some());
}

#[test]
fn raw_token_failure_closes_after_the_delay_without_a_response() {
    let (mut c, _) = conn();
    let _ = handshake(&mut c, 0, "TEST");
    assert_eq!(
        c.handle_frame(Bytes::from_static(b"alice:nope"), 0),
        vec![Action::CloseAfter(DEFAULT_FAILED_AUTH_DELAY)]
    );
}

#[test]
fn wrong_credentials_get_the_generic_message_then_a_delayed_close() {
    let (mut c, events) = conn();
    let _ = handshake(&mut c, 1, "TEST");
    let actions = authenticate(&mut c, 2, b"alice:nope", 0);
    let [Action::Respond(frame), Action::CloseAfter(delay)] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    assert_eq!(*delay, DEFAULT_FAILED_AUTH_DELAY);
    let (_, auth): (_, SaslAuthenticateResponse) = response(ApiKey::SaslAuthenticate, 2, frame);
    assert_eq!(auth.error_code, 58);
    assert_eq!(
        auth.error_message.as_deref(),
        Some("Authentication failed during authentication due to invalid credentials with SASL mechanism TEST")
    );
    assert!(c.is_failed());
    assert!(matches!(
        events.try_recv(),
        Some(Event::AuthenticationFailed { .. })
    ));
}

/// A failed login on a fresh connection of `config` from `ip` as `token`; returns its delay.
fn failed_login_delay(config: &Arc<ConnectionConfig>, ip: [u8; 4], token: &[u8]) -> Duration {
    let mut c = Connection::new(Arc::clone(config), IpAddr::from(ip), false);
    let _ = handshake(&mut c, 1, "TEST");
    match authenticate(&mut c, 2, token, 0).as_slice() {
        [Action::Respond(_), Action::CloseAfter(delay)] => *delay,
        other => panic!("{other:?}"),
    }
}

#[test]
fn failed_logins_are_throttled_per_address_and_per_user_never_a_correct_one() {
    let (config, _events) = config();
    let policy = *config.failure_throttle.policy();
    // One address guessing many names: the delay grows past Kafka's fixed delay, to the cap.
    let from_one_address: Vec<Duration> = (0..12)
        .map(|i| failed_login_delay(&config, [10, 0, 0, 1], format!("u{i}:nope").as_bytes()))
        .collect();
    assert_eq!(from_one_address[0], DEFAULT_FAILED_AUTH_DELAY);
    assert!(
        from_one_address[4] > DEFAULT_FAILED_AUTH_DELAY,
        "{from_one_address:?}"
    );
    assert_eq!(from_one_address[11], policy.cap);
    // Many addresses guessing one name: the same growth, keyed by the claimed user name.
    let against_one_user: Vec<Duration> = (0..12)
        .map(|i| failed_login_delay(&config, [10, 1, 0, i], b"alice:nope"))
        .collect();
    assert_eq!(against_one_user[0], DEFAULT_FAILED_AUTH_DELAY);
    assert_eq!(against_one_user[11], policy.cap);
    // A correct password from the throttled address, for the throttled user, is answered at once
    // (a success carries no delay at all).
    let mut c = Connection::new(Arc::clone(&config), IpAddr::from([10, 0, 0, 1]), false);
    let _ = handshake(&mut c, 1, "TEST");
    let actions = authenticate(&mut c, 2, b"alice:pw", 0);
    assert!(
        matches!(actions.as_slice(), [Action::Respond(_)]),
        "{actions:?}"
    );
    assert!(c.is_authenticated());
    // Someone else, elsewhere, still gets Kafka's fixed delay.
    assert_eq!(
        failed_login_delay(&config, [10, 2, 0, 1], b"bob:nope"),
        DEFAULT_FAILED_AUTH_DELAY
    );
}

/// A mechanism that declares its steps cheap (as SCRAM does).
struct Cheap;
impl SaslMechanism for Cheap {
    fn name(&self) -> &str {
        "CHEAP"
    }
    fn start(&self, _: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(FixedExchange::default())
    }
    fn steps_are_cheap(&self) -> bool {
        true
    }
}

#[test]
fn only_steps_of_mechanisms_not_declared_cheap_may_block() {
    let (mut c, _) = conn();
    assert!(!c.next_step_may_block());
    let _ = handshake(&mut c, 1, "TEST");
    assert!(
        c.next_step_may_block(),
        "a mechanism's step may block by default"
    );
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    assert!(!c.next_step_may_block());

    let (config, _) = config();
    let mut cheap_config = ConnectionConfig::new(
        "test",
        Arc::new(NodeServices::new(
            vec![Arc::new(Cheap)],
            Arc::clone(&config.services.principal_builder),
            Arc::clone(&config.services.policy),
            EventBus::new(),
        )),
        Arc::clone(&config.api_versions),
    );
    cheap_config.max_reauth_ms = None;
    let mut c = Connection::new(Arc::new(cheap_config), IpAddr::from([127, 0, 0, 1]), false);
    let _ = handshake(&mut c, 1, "CHEAP");
    assert!(!c.next_step_may_block());
}

#[test]
fn unknown_mechanism_lists_the_enabled_ones() {
    let (mut c, _) = conn();
    let actions = handshake(&mut c, 1, "FOO");
    let [Action::Respond(frame), Action::CloseAfter(_)] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    let (_, hs): (_, SaslHandshakeResponse) = response(ApiKey::SaslHandshake, 1, frame);
    assert_eq!(hs.error_code, 33);
    assert_eq!(
        hs.mechanisms,
        vec![
            StrBytes::from_static_str("TEST"),
            StrBytes::from_static_str("OTHER")
        ]
    );
}

#[test]
fn other_requests_before_authentication_close_without_a_response() {
    let (mut c, _) = conn();
    let metadata = Bytes::from_static(&[0, 3, 0, 1, 0, 0, 0, 9, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        c.handle_frame(metadata, 0),
        vec![Action::CloseAfter(DEFAULT_FAILED_AUTH_DELAY)]
    );
    // Short garbage too.
    let (mut c, _) = conn();
    assert_eq!(
        c.handle_frame(Bytes::from_static(&[1]), 0),
        vec![Action::CloseAfter(DEFAULT_FAILED_AUTH_DELAY)]
    );
}

#[test]
fn a_second_api_versions_before_the_handshake_closes_at_once() {
    let (mut c, _) = conn();
    let frame = request(ApiKey::ApiVersions, 3, 1, &ApiVersionsRequest::default());
    let _ = c.handle_frame(frame.clone(), 0);
    assert!(matches!(
        c.handle_frame(frame, 0).as_slice(),
        [Action::Close(CloseReason::IllegalState(_))]
    ));
}

#[test]
fn unknown_api_versions_version_gets_unsupported_version_at_v0() {
    let (mut c, _) = conn();
    let frame = Bytes::from_static(&[0, 18, 0, 99, 0, 0, 0, 5, 0, 0]);
    let (cid, body): (_, ApiVersionsResponse) = response(
        ApiKey::ApiVersions,
        0,
        &single_response(c.handle_frame(frame, 0)),
    );
    assert_eq!(cid, 5);
    assert_eq!(body.error_code, 35);
    assert_eq!(
        body.api_keys.first().map(|k| (k.api_key, k.max_version)),
        Some((18, 4))
    );
}

#[test]
fn a_newer_api_versions_after_authentication_gets_unsupported_version() {
    let mut c = authenticated();
    let frame = Bytes::from_static(&[0, 18, 0, 99, 0, 0, 0, 6, 0, 0]);
    let (cid, body): (_, ApiVersionsResponse) = response(
        ApiKey::ApiVersions,
        0,
        &single_response(c.handle_frame(frame, 0)),
    );
    assert_eq!(cid, 6);
    assert_eq!(body.error_code, 35);
    assert!(
        c.session().is_some(),
        "the connection stays open for the retry"
    );
}

#[test]
fn a_non_authenticate_request_during_the_exchange_fails() {
    let (mut c, _) = conn();
    let _ = handshake(&mut c, 1, "TEST");
    let metadata = Bytes::from_static(&[0, 3, 0, 1, 0, 0, 0, 9, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        c.handle_frame(metadata, 0),
        vec![Action::CloseAfter(DEFAULT_FAILED_AUTH_DELAY)]
    );
}

#[test]
fn authenticated_requests_are_forwarded_unchanged() {
    let mut c = authenticated();
    let metadata =
        Bytes::from_static(&[0, 3, 0, 1, 0, 0, 0, 9, 0, 1, b'x', 0xff, 0xff, 0xff, 0xff]);
    let actions = c.handle_frame(metadata.clone(), 0);
    assert_eq!(
        actions,
        vec![Action::Forward(Forwarded {
            api_key: 3,
            api_version: 1,
            correlation_id: 9,
            expects_response: true,
            frame: metadata,
            plan: crate::authorization::ResponsePlan::unchanged(),
            identity: UpstreamIdentity::Service,
        })]
    );
}

#[test]
fn with_an_authorizer_upstream_requests_are_enforced() {
    use crate::acl::{AclOperation, ResourceType};
    use crate::authorization::testing::AllowList;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};

    let (cfg, _events) = config();
    let authz = AllowList::new()
        .allow(AclOperation::Write, ResourceType::Topic, "a")
        .arc();
    let services = NodeServices::new(
        cfg.services.mechanisms.clone(),
        Arc::clone(&cfg.services.principal_builder),
        Arc::clone(&cfg.services.policy),
        cfg.services.events.clone(),
    )
    .with_authorizer(Some(authz));
    let cfg = Arc::new(
        ConnectionConfig::new("test", Arc::new(services), Arc::clone(&cfg.api_versions))
            .with_max_reauth_ms(cfg.max_reauth_ms),
    );
    let mut c = Connection::new(cfg, IpAddr::from([127, 0, 0, 1]), false);
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    let produce = |topics: &[&str]| {
        ProduceRequest::default().with_acks(-1).with_topic_data(
            topics
                .iter()
                .map(|t| {
                    TopicProduceData::default()
                        .with_name(TopicName(StrBytes::from_string((*t).into())))
                        .with_partition_data(vec![PartitionProduceData::default()])
                })
                .collect(),
        )
    };
    // Partly denied: forwarded without "b", with a plan that puts "b" back.
    match c
        .handle_frame(request(ApiKey::Produce, 9, 4, &produce(&["a", "b"])), 0)
        .as_slice()
    {
        [Action::Forward(f)] => {
            assert!(!f.plan.is_unchanged());
            assert!(f.expects_response);
            let h = crate::protocol::header::parse(&f.frame).unwrap();
            let mut body = f.frame.slice(h.header_len..);
            let sent = ProduceRequest::decode(&mut body, 9).unwrap();
            assert_eq!(sent.topic_data.len(), 1);
        }
        other => panic!("expected a forward, got {other:?}"),
    }
    // Wholly denied: answered locally.
    let actions = c.handle_frame(request(ApiKey::Produce, 9, 5, &produce(&["b"])), 0);
    let (cid, r): (_, ProduceResponse) = response(ApiKey::Produce, 9, &single_response(actions));
    assert_eq!(cid, 5);
    assert_eq!(r.responses[0].partition_responses[0].error_code, 29);
    // A version that cannot be authorized (Metadata before v4 cannot turn auto-creation off)
    // closes instead of being forwarded unchecked.
    let metadata = request(
        ApiKey::Metadata,
        1,
        6,
        &kafka_protocol::messages::MetadataRequest::default(),
    );
    let actions = c.handle_frame(metadata, 0);
    assert!(
        matches!(
            actions.as_slice(),
            [Action::Close(CloseReason::InvalidRequest(_))]
        ),
        "{actions:?}"
    );
}

/// kafka-protocol 0.18.0 aborts the process decoding this Metadata v0 body
/// (`Vec::with_capacity(i32::MAX)`). Portcullis never decodes it: it is forwarded as bytes.
#[test]
fn metadata_v0_with_a_huge_array_length_is_never_decoded() {
    let mut c = authenticated();
    let frame = Bytes::from_static(&[0, 3, 0, 0, 0, 0, 0, 4, 0, 0, 0x7f, 0xff, 0xff, 0xff]);
    let actions = c.handle_frame(frame.clone(), 0);
    assert!(matches!(actions.as_slice(), [Action::Forward(f)] if f.frame == frame));
}

#[test]
fn produce_with_acks_zero_expects_no_response() {
    let mut c = authenticated();
    // Produce v3: null transactional id, acks 0, timeout, empty topic array.
    let frame = Bytes::from_static(&[
        0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0x75, 0x30, 0, 0, 0, 0,
    ]);
    assert!(
        matches!(c.handle_frame(frame, 0).as_slice(), [Action::Forward(f)] if !f.expects_response)
    );
}

#[test]
fn sasl_authenticate_after_authentication_gets_illegal_sasl_state() {
    let mut c = authenticated();
    let (_, auth): (_, SaslAuthenticateResponse) = response(
        ApiKey::SaslAuthenticate,
        2,
        &single_response(authenticate(&mut c, 2, b"x", 0)),
    );
    assert_eq!(auth.error_code, 34);
    assert!(c.session().is_some());
    // Kafka counts the one-second limit from the previous re-authentication only: the first one
    // may follow the login at once.
    let (_, hs): (_, SaslHandshakeResponse) = response(
        ApiKey::SaslHandshake,
        1,
        &single_response(handshake(&mut c, 1, "TEST")),
    );
    assert_eq!(hs.error_code, 0);
}

#[test]
fn unadvertised_apis_and_rejected_ones_close() {
    let mut c = authenticated();
    // CreateAcls is not advertised yet.
    let frame = Bytes::from_static(&[0, 30, 0, 3, 0, 0, 0, 4, 0, 0, 0]);
    assert!(matches!(
        c.handle_frame(frame, 0).as_slice(),
        [Action::Close(CloseReason::Unsupported { .. })]
    ));
}

/// A request the forwarding policy rejects (DeleteTopics in the test policy) is answered the way
/// Kafka answers a request whose every resource is denied.
#[test]
fn rejected_requests_get_kafkas_denial_response() {
    use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
    let mut c = authenticated();
    let body = DeleteTopicsRequest::default().with_topic_names(vec![
        TopicName(StrBytes::from_static_str("a")),
        TopicName(StrBytes::from_static_str("b")),
    ]);
    let (cid, response): (_, DeleteTopicsResponse) = response(
        ApiKey::DeleteTopics,
        4,
        &single_response(c.handle_frame(request(ApiKey::DeleteTopics, 4, 8, &body), 0)),
    );
    assert_eq!(cid, 8);
    let codes: Vec<(String, i16)> = response
        .responses
        .iter()
        .map(|r| {
            (
                r.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                r.error_code,
            )
        })
        .collect();
    assert_eq!(codes, vec![("a".into(), 29), ("b".into(), 29)]);
    assert!(c.session().is_some());
}

#[test]
fn oversized_frames_close() {
    let (mut c, _) = conn();
    assert!(matches!(
        c.frame_too_large(DEFAULT_MAX_PRE_AUTH_FRAME + 1).as_slice(),
        [Action::Close(CloseReason::FrameTooLarge { .. })]
    ));
}

// === re-authentication (KIP-368) ===

fn auth_response(actions: Vec<Action>) -> SaslAuthenticateResponse {
    response(ApiKey::SaslAuthenticate, 2, &single_response(actions)).1
}

#[test]
fn reauthentication_renews_the_session_and_keeps_the_ticket() {
    let (mut c, events) = conn();
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    let ticket = c.ticket().unwrap();
    assert_eq!(ticket.expires_at_ms(), Some(3_600_000));
    let _ = events.try_recv();

    // 2 s later: a handshake starts re-authentication.
    let (_, hs): (_, SaslHandshakeResponse) = response(
        ApiKey::SaslHandshake,
        1,
        &single_response(handshake_at(&mut c, "TEST", 2_000)),
    );
    assert_eq!(hs.error_code, 0);
    let auth = auth_response(authenticate(&mut c, 2, b"alice:pw", 2_500));
    assert_eq!(auth.error_code, 0);
    assert_eq!(auth.session_lifetime_ms, 3_600_000);
    assert_eq!(ticket.expires_at_ms(), Some(3_602_500));
    assert!(Arc::ptr_eq(&ticket, &c.ticket().unwrap()));
    assert!(matches!(
        events.try_recv(),
        Some(Event::SessionReauthenticated { .. })
    ));
    assert_eq!(
        c.config
            .services
            .metrics
            .snapshot()
            .successful_reauthentication,
        1
    );

    // A second handshake within a second of the last one is not a re-authentication.
    let (_, hs): (_, SaslHandshakeResponse) = response(
        ApiKey::SaslHandshake,
        1,
        &single_response(handshake_at(&mut c, "TEST", 2_900)),
    );
    assert_eq!(hs.error_code, 34);
    assert!(c.session().is_some());
}

fn handshake_at(c: &mut Connection, mechanism: &str, now: i64) -> Vec<Action> {
    let body =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into()));
    c.handle_frame(request(ApiKey::SaslHandshake, 1, 2, &body), now)
}

#[test]
fn reauthentication_as_another_principal_fails_and_closes() {
    let (mut c, _) = conn();
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    let _ = handshake_at(&mut c, "TEST", 5_000);
    let actions = authenticate(&mut c, 2, b"bob:pw", 5_000);
    let [Action::Respond(frame), Action::CloseAfter(_)] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    let (_, auth): (_, SaslAuthenticateResponse) = response(ApiKey::SaslAuthenticate, 2, frame);
    assert_eq!(auth.error_code, 58);
    assert_eq!(
        auth.error_message.as_deref(),
        Some("Cannot change principals during re-authentication from User.alice: User.bob")
    );
    assert!(c.is_failed());
    assert_eq!(
        c.config.services.metrics.snapshot().failed_reauthentication,
        1
    );
}

#[test]
fn reauthentication_with_another_mechanism_fails_at_the_next_token() {
    let (mut c, _) = conn();
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    // Kafka's quirk: the handshake succeeds…
    let (_, hs): (_, SaslHandshakeResponse) = response(
        ApiKey::SaslHandshake,
        1,
        &single_response(handshake_at(&mut c, "OTHER", 5_000)),
    );
    assert_eq!(hs.error_code, 0);
    // …and the next token closes the connection without a SaslAuthenticate response.
    assert_eq!(
        authenticate(&mut c, 2, b"alice:pw", 5_000),
        vec![Action::CloseAfter(DEFAULT_FAILED_AUTH_DELAY)]
    );
}

#[test]
fn a_failed_reauthentication_uses_the_reauthentication_message() {
    let (mut c, _) = conn();
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    let _ = handshake_at(&mut c, "TEST", 5_000);
    let actions = authenticate(&mut c, 2, b"alice:wrong", 5_000);
    let [Action::Respond(frame), Action::CloseAfter(_)] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    let (_, auth): (_, SaslAuthenticateResponse) = response(ApiKey::SaslAuthenticate, 2, frame);
    assert_eq!(
        auth.error_message.as_deref(),
        Some("Authentication failed during re-authentication due to invalid credentials with SASL mechanism TEST")
    );
}

#[test]
fn requests_on_an_expired_session_close_it_but_a_handshake_may_still_reauthenticate() {
    let (mut c, events) = conn();
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    let metadata = Bytes::from_static(&[0, 3, 0, 1, 0, 0, 0, 9, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    // At the deadline the session is still valid.
    assert!(matches!(
        c.handle_frame(metadata.clone(), 3_600_000).as_slice(),
        [Action::Forward(_)]
    ));
    // After it, a handshake re-authenticates…
    let _ = single_response(handshake_at(&mut c, "TEST", 3_700_000));
    assert_eq!(
        auth_response(authenticate(&mut c, 2, b"alice:pw", 3_700_000)).error_code,
        0
    );
    assert!(matches!(
        c.handle_frame(metadata.clone(), 3_700_001).as_slice(),
        [Action::Forward(_)]
    ));
    // …and any other request after expiry closes the connection silently.
    let _ = events.try_recv();
    assert_eq!(
        c.handle_frame(metadata, 9_000_000),
        vec![Action::CloseAfterInFlight(CloseReason::SessionExpired)]
    );
    assert_eq!(
        c.config
            .services
            .metrics
            .snapshot()
            .expired_connections_killed,
        1
    );
    let mut saw_expired = false;
    while let Some(e) = events.try_recv() {
        saw_expired |= matches!(e, Event::SessionExpired { .. });
    }
    assert!(saw_expired);
}

#[test]
fn a_revoked_session_is_closed_at_its_next_request() {
    let (mut c, _) = conn();
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    // The test mechanism reports no credential: the session belongs to its mechanism and
    // authorization id, and a same-named SCRAM credential has nothing to do with it.
    let n = c
        .config
        .services
        .sessions
        .handle_event(&Event::CredentialChanged {
            user: "alice".into(),
            mechanism: "SCRAM-SHA-512".into(),
        });
    assert_eq!(n, 0);
    let n = c
        .config
        .services
        .sessions
        .handle_event(&Event::CredentialRevoked {
            credential: crate::credentials::CredentialId::plugin("TEST", "alice"),
        });
    assert_eq!(n, 1);
    let metadata = Bytes::from_static(&[0, 3, 0, 1, 0, 0, 0, 9, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        c.handle_frame(metadata, 1),
        vec![Action::Close(CloseReason::CredentialRevoked)]
    );
}

#[test]
fn per_mechanism_reauth_overrides_apply() {
    let events = EventBus::new();
    let table = Arc::new(ArcSwap::from_pointee(ApiVersionTable::default()));
    let mut overrides = std::collections::BTreeMap::new();
    overrides.insert("TEST".to_owned(), 5_000);
    let cfg = ConnectionConfig::new(
        "t",
        Arc::new(NodeServices::new(
            vec![Arc::new(Fixed)],
            Arc::new(DefaultPrincipalBuilder),
            Arc::new(Upstream),
            events,
        )),
        table,
    )
    .with_max_reauth_ms(Some(60_000))
    .with_max_reauth_ms_by_mechanism(overrides);
    let mut c = Connection::new(Arc::new(cfg), IpAddr::from([127, 0, 0, 1]), false);
    let _ = handshake(&mut c, 1, "TEST");
    assert_eq!(
        auth_response(authenticate(&mut c, 2, b"alice:pw", 0)).session_lifetime_ms,
        5_000
    );
}

#[test]
fn sessions_without_expiry_never_reauthenticate() {
    let events = EventBus::new();
    let table = Arc::new(ArcSwap::from_pointee(ApiVersionTable::default()));
    let cfg = ConnectionConfig::new(
        "t",
        Arc::new(NodeServices::new(
            vec![Arc::new(Fixed)],
            Arc::new(DefaultPrincipalBuilder),
            Arc::new(Upstream),
            events,
        )),
        table,
    );
    let mut c = Connection::new(Arc::new(cfg), IpAddr::from([127, 0, 0, 1]), false);
    let _ = handshake(&mut c, 1, "TEST");
    assert_eq!(
        auth_response(authenticate(&mut c, 2, b"alice:pw", 0)).session_lifetime_ms,
        0
    );
    let (_, hs): (_, SaslHandshakeResponse) = response(
        ApiKey::SaslHandshake,
        1,
        &single_response(handshake_at(&mut c, "TEST", 1_000_000)),
    );
    assert_eq!(hs.error_code, 34);
}

/// Routes the security APIs locally, like the passthrough policy.
struct LocalSecurity;
impl ForwardingPolicy for LocalSecurity {
    fn name(&self) -> &str {
        "local-security"
    }
    fn route(&self, r: &RequestInfo<'_>) -> Route {
        if crate::protocol::api::is_security_api(r.api_key) {
            Route::Local
        } else {
            Route::Upstream {
                identity: UpstreamIdentity::Service,
            }
        }
    }
}

fn cluster_connection(on_leader: bool) -> Connection {
    let table = ApiVersionTable::from_ranges([(29, 1, 3), (30, 1, 3), (31, 1, 3)]);
    let cfg = ConnectionConfig::new(
        "test",
        Arc::new(
            NodeServices::new(
                vec![Arc::new(Fixed)],
                Arc::new(DefaultPrincipalBuilder),
                Arc::new(LocalSecurity),
                EventBus::new(),
            )
            .with_local_handlers(
                crate::local::acls::AclApis::handlers(None)
                    .into_iter()
                    .collect(),
            ),
        ),
        Arc::new(ArcSwap::from_pointee(table)),
    )
    .with_mutations_on_leader(on_leader);
    let mut c = Connection::new(Arc::new(cfg), IpAddr::from([10, 9, 8, 7]), false);
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    assert!(c.session().is_some());
    c
}

/// On a node of a cluster, a security mutation is not decided on the node's own views: the whole
/// request, the principal and the client's address go to the host for the cluster's writer.
/// Reads are still answered locally.
#[test]
fn in_a_cluster_mutations_go_to_the_writer_and_reads_stay_local() {
    let body = kafka_protocol::messages::CreateAclsRequest::default();
    let frame = request(ApiKey::CreateAcls, 2, 9, &body);
    let mut c = cluster_connection(true);
    match c.handle_frame(frame.clone(), 0).as_slice() {
        [Action::Persist(persist)] => {
            let r = persist.leader_request().expect("a request for the writer");
            assert_eq!(r.frame, frame);
            assert_eq!((r.api_key, r.api_version, r.correlation_id), (30, 2, 9));
            assert_eq!(r.principal.principal, Principal::user("alice"));
            assert!(!r.principal.token_authenticated);
            assert_eq!(r.client_address, IpAddr::from([10, 9, 8, 7]));
        }
        other => panic!("expected a persist for the writer, got {other:?}"),
    }
    let describe = kafka_protocol::messages::DescribeAclsRequest::default()
        .with_resource_type_filter(1)
        .with_pattern_type_filter(1)
        .with_operation(1)
        .with_permission_type(1);
    let actions = c.handle_frame(request(ApiKey::DescribeAcls, 2, 10, &describe), 0);
    assert!(matches!(actions.as_slice(), [Action::Respond(_)]));

    // A single node decides the mutation itself (here: no authorizer, SECURITY_DISABLED).
    let mut single = cluster_connection(false);
    let actions = single.handle_frame(frame, 0);
    assert!(matches!(actions.as_slice(), [Action::Respond(_)]));
}

/// KIP-590's Envelope is for the inter-node listener only: a client that sends one is closed,
/// as a KRaft broker closes it (the API is not advertised to clients).
#[test]
fn an_envelope_from_a_client_closes_the_connection() {
    for on_leader in [false, true] {
        let mut c = cluster_connection(on_leader);
        let inner = request(
            ApiKey::CreateAcls,
            2,
            1,
            &kafka_protocol::messages::CreateAclsRequest::default(),
        );
        let principal =
            crate::envelope::serialize_principal(&crate::envelope::ForwardedPrincipal {
                principal: Principal::user("admin"),
                token_authenticated: false,
                groups: Vec::new(),
            });
        let envelope = crate::envelope::encode_request(
            5,
            "forged",
            &inner,
            &principal,
            IpAddr::from([127, 0, 0, 1]),
        );
        assert!(matches!(
            c.handle_frame(envelope, 0).as_slice(),
            [Action::Close(CloseReason::Unsupported { .. })]
        ));
    }
}

/// Maps `bob` to nothing (an error) and otherwise names the principal after the client
/// certificate when there is one: what the principal builder sees of the connection.
struct CertificateBuilder;

impl crate::principal::PrincipalBuilder for CertificateBuilder {
    fn build(
        &self,
        context: &crate::principal::AuthenticationContext<'_>,
    ) -> Result<Principal, crate::principal::PrincipalError> {
        let sasl = context.sasl.expect("a SASL login");
        if sasl.authorization_id == "bob" {
            return Err(crate::principal::PrincipalError::NoRuleApplies { name: "bob".into() });
        }
        let name = match (context.tls, context.certificate_subject()) {
            (Some(_), Some(subject)) => format!("{subject}/{}", context.mechanism.unwrap()),
            (Some(_), None) => "tls-without-certificate".to_owned(),
            (None, _) => "plaintext".to_owned(),
        };
        Ok(Principal {
            kind: "Cert".into(),
            name,
        })
    }
}

fn builder_config() -> (Arc<ConnectionConfig>, crate::events::Subscription) {
    let events = EventBus::new();
    let sub = events.subscribe(16);
    let table = Arc::new(ArcSwap::from_pointee(ApiVersionTable::advertised(
        &ApiVersionTable::from_ranges([(3, 0, 12)]),
    )));
    let cfg = ConnectionConfig::new(
        "test",
        Arc::new(NodeServices::new(
            vec![Arc::new(Fixed)],
            Arc::new(CertificateBuilder),
            Arc::new(Upstream),
            events,
        )),
        table,
    );
    (Arc::new(cfg), sub)
}

#[test]
fn the_principal_builder_sees_the_tls_peer_of_the_connection() {
    let (cfg, _) = builder_config();
    let address = IpAddr::from([127, 0, 0, 1]);
    let peer = Arc::new(crate::principal::TlsPeer::new(
        vec![vec![0x30]],
        Some("CN=svc,O=x".into()),
    ));
    let cases = [
        (
            Connection::new(Arc::clone(&cfg), address, false),
            "plaintext",
        ),
        (
            Connection::new(Arc::clone(&cfg), address, true),
            "tls-without-certificate",
        ),
        (
            Connection::new(Arc::clone(&cfg), address, true).with_tls_peer(Arc::clone(&peer)),
            "CN=svc,O=x/TEST",
        ),
        // A peer handed to a plaintext connection is ignored.
        (
            Connection::new(Arc::clone(&cfg), address, false).with_tls_peer(Arc::clone(&peer)),
            "plaintext",
        ),
    ];
    for (mut c, expected) in cases {
        let _ = handshake(&mut c, 1, "TEST");
        let _ = authenticate(&mut c, 2, b"alice:pw", 0);
        let session = c.session().expect("authenticated");
        assert_eq!(session.principal.to_string(), format!("Cert:{expected}"));
    }
}

#[test]
fn a_principal_builder_error_fails_the_authentication_with_the_generic_message() {
    let (cfg, events) = builder_config();
    let mut c = Connection::new(cfg, IpAddr::from([127, 0, 0, 1]), false);
    let _ = handshake(&mut c, 1, "TEST");
    let actions = authenticate(&mut c, 2, b"bob:pw", 0);
    let [Action::Respond(frame), Action::CloseAfter(_)] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    let (_, auth): (_, SaslAuthenticateResponse) = response(ApiKey::SaslAuthenticate, 2, frame);
    assert_eq!(auth.error_code, 58);
    assert_eq!(
        auth.error_message.as_deref(),
        Some("Authentication failed during authentication due to invalid credentials with SASL mechanism TEST")
    );
    assert!(c.is_failed() && c.session().is_none());
    match events.try_recv() {
        Some(Event::AuthenticationFailed { reason, .. }) => {
            assert!(reason.contains("no rule maps \"bob\""), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

fn admitting_conn() -> (Connection, crate::events::Subscription) {
    let (cfg, sub) = config();
    let cfg = Arc::try_unwrap(cfg)
        .unwrap_or_else(|_| unreachable!())
        .with_session_admission(true);
    (
        Connection::new(Arc::new(cfg), IpAddr::from([127, 0, 0, 1]), false),
        sub,
    )
}

fn successful_logins(c: &Connection) -> u64 {
    c.config
        .services
        .metrics
        .snapshot()
        .successful_authentication
}

#[test]
fn with_admission_the_success_answer_waits_for_the_hosts_verdict() {
    let (mut c, events) = admitting_conn();
    let _ = handshake(&mut c, 1, "TEST");
    let actions = authenticate(&mut c, 2, b"alice:pw", 1_000);
    assert_eq!(actions, vec![Action::Admit(Principal::user("alice"))]);
    assert!(!c.is_authenticated(), "not in before the verdict");
    assert_eq!(successful_logins(&c), 0, "not counted before the verdict");
    let (_, auth): (_, SaslAuthenticateResponse) = response(
        ApiKey::SaslAuthenticate,
        2,
        &single_response(c.admitted(Ok(()))),
    );
    assert_eq!(auth.error_code, 0);
    assert_eq!(&auth.auth_bytes[..], b"ok");
    assert_eq!(c.session().unwrap().principal, Principal::user("alice"));
    assert_eq!(successful_logins(&c), 1);
    assert!(matches!(
        events.try_recv(),
        Some(Event::SessionAuthenticated { .. })
    ));
    // A verdict nobody asked for changes nothing.
    assert!(c.admitted(Err(AdmissionRefused::new("late"))).is_empty());
    assert!(c.is_authenticated());
}

#[test]
fn a_refused_session_fails_the_authentication_with_the_hosts_message() {
    let (mut c, events) = admitting_conn();
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 1_000);
    let message = "the upstream refused: needs CreateTokens on User:alice";
    let actions = c.admitted(Err(AdmissionRefused::new(message)));
    let [Action::Respond(frame), Action::CloseAfter(delay)] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    assert_eq!(*delay, DEFAULT_FAILED_AUTH_DELAY);
    let (cid, auth): (_, SaslAuthenticateResponse) = response(ApiKey::SaslAuthenticate, 2, frame);
    assert_eq!(cid, 3);
    assert_eq!(auth.error_code, 58);
    assert_eq!(auth.error_message.as_deref(), Some(message));
    assert!(c.is_failed() && c.session().is_none());
    // One event and one count, the failure: the exchange's success is never announced.
    assert!(matches!(
        events.try_recv(),
        Some(Event::AuthenticationFailed { reason, .. }) if reason == message
    ));
    assert!(events.try_recv().is_none());
    let counted = c.config.services.metrics.snapshot();
    assert_eq!(
        (
            counted.successful_authentication,
            counted.failed_authentication
        ),
        (0, 1)
    );
    assert_eq!(
        c.config.services.sessions.len(),
        0,
        "the refused session is unregistered"
    );
}

#[test]
fn admission_covers_raw_tokens_and_never_reauthentication() {
    let (mut c, _) = admitting_conn();
    let _ = handshake(&mut c, 0, "TEST");
    assert_eq!(
        c.handle_frame(Bytes::from_static(b"alice:pw"), 0),
        vec![Action::Admit(Principal::user("alice"))]
    );
    // A frame before the verdict is a host defect: closed.
    assert!(matches!(
        c.handle_frame(Bytes::from_static(b"x"), 0).as_slice(),
        [Action::Close(CloseReason::IllegalState(
            IllegalState::AwaitingAdmission
        ))]
    ));
    let (mut c, _) = admitting_conn();
    let _ = handshake(&mut c, 0, "TEST");
    let _ = c.handle_frame(Bytes::from_static(b"alice:pw"), 0);
    assert_eq!(
        c.admitted(Err(AdmissionRefused::new("no"))),
        vec![Action::CloseAfter(DEFAULT_FAILED_AUTH_DELAY)]
    );

    let (mut c, _) = admitting_conn();
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    let _ = c.admitted(Ok(()));
    let _ = handshake_at(&mut c, "TEST", 2_000);
    let actions = authenticate(&mut c, 2, b"alice:pw", 2_000);
    assert_eq!(
        auth_response(actions).error_code,
        0,
        "re-authenticated at once"
    );
}

// === bearer token claims: groups as principals ===

/// What an authorizer was asked with: the groups, scopes and token id of each request.
type SeenContext = (Vec<Principal>, Vec<String>, Option<String>);

#[derive(Default)]
struct SeenContexts(std::sync::Mutex<Vec<SeenContext>>);

impl crate::authorizer::Authorizer for SeenContexts {
    fn authorize(
        &self,
        context: &crate::authorizer::RequestContext<'_>,
        actions: &[crate::authorizer::Action<'_>],
    ) -> Vec<crate::authorizer::Authorization> {
        self.0.lock().unwrap().push((
            context.groups.to_vec(),
            context.scopes.to_vec(),
            context.jti.as_deref().map(str::to_owned),
        ));
        actions
            .iter()
            .map(|_| {
                crate::authorizer::Authorization::allowed(
                    crate::authorizer::DecidingRule::DefaultAllow,
                )
            })
            .collect()
    }
    fn authorize_by_resource_type(
        &self,
        _: &crate::authorizer::RequestContext<'_>,
        _: crate::acl::AclOperation,
        _: crate::acl::ResourceType,
    ) -> crate::authorizer::Decision {
        crate::authorizer::Decision::Allowed
    }
}

fn with_authorizer(
    authorizer: Arc<dyn crate::authorizer::Authorizer>,
) -> (Connection, crate::events::Subscription) {
    let (cfg, events) = config();
    let services = NodeServices::new(
        cfg.services.mechanisms.clone(),
        Arc::clone(&cfg.services.principal_builder),
        Arc::clone(&cfg.services.policy),
        cfg.services.events.clone(),
    )
    .with_authorizer(Some(authorizer));
    let cfg = Arc::new(
        ConnectionConfig::new("test", Arc::new(services), Arc::clone(&cfg.api_versions))
            .with_max_reauth_ms(cfg.max_reauth_ms),
    );
    (
        Connection::new(cfg, IpAddr::from([127, 0, 0, 1]), false),
        events,
    )
}

fn produce_to(topic: &str, correlation_id: i32) -> Bytes {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, TopicName};
    let body = ProduceRequest::default()
        .with_acks(-1)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![PartitionProduceData::default()])]);
    request(ApiKey::Produce, 9, correlation_id, &body)
}

#[test]
fn a_tokens_groups_reach_the_authorizer_as_group_principals_and_the_events_carry_the_claims() {
    let seen = Arc::new(SeenContexts::default());
    let (mut c, events) =
        with_authorizer(Arc::clone(&seen) as Arc<dyn crate::authorizer::Authorizer>);
    let _ = handshake(&mut c, 1, "TEST");
    let auth = auth_response(authenticate(&mut c, 2, b"carol:first-token", 0));
    assert_eq!(auth.error_code, 0);
    let first = TokenClaims::new(
        vec!["kafka.read".into(), "kafka.write".into()],
        vec![
            "readers".into(),
            "ops".into(),
            "readers".into(),
            String::new(),
        ],
        Some("jti-1".into()),
    );
    let session = c.session().unwrap();
    assert_eq!(session.principal, Principal::user("carol"));
    assert_eq!(
        session.groups,
        [Principal::group("readers"), Principal::group("ops")]
    );
    assert_eq!(session.token_claims.as_ref(), Some(&first));
    assert_eq!(
        events.try_recv(),
        Some(Event::SessionAuthenticated {
            principal: Principal::user("carol"),
            mechanism: "TEST".into(),
            client_address: IpAddr::from([127, 0, 0, 1]),
            token_claims: Some(first),
        })
    );

    assert!(matches!(
        c.handle_frame(produce_to("orders", 4), 10).as_slice(),
        [Action::Forward(_)]
    ));
    assert_eq!(
        seen.0.lock().unwrap().last().cloned(),
        Some((
            vec![Principal::group("readers"), Principal::group("ops")],
            vec!["kafka.read".to_owned(), "kafka.write".to_owned()],
            Some("jti-1".to_owned()),
        ))
    );

    // A re-authentication with a new token of the same principal: its groups replace the old.
    let _ = handshake_at(&mut c, "TEST", 2_000);
    let auth = auth_response(authenticate(&mut c, 2, b"carol:second-token", 2_100));
    assert_eq!(auth.error_code, 0);
    let second = TokenClaims::new(Vec::new(), vec!["writers".into()], None);
    assert_eq!(
        events.try_recv(),
        Some(Event::SessionReauthenticated {
            principal: Principal::user("carol"),
            mechanism: "TEST".into(),
            client_address: IpAddr::from([127, 0, 0, 1]),
            token_claims: Some(second),
        })
    );
    assert!(matches!(
        c.handle_frame(produce_to("orders", 5), 2_200).as_slice(),
        [Action::Forward(_)]
    ));
    assert_eq!(
        seen.0.lock().unwrap().last().cloned(),
        Some((vec![Principal::group("writers")], Vec::new(), None))
    );
}

#[test]
fn a_session_without_a_token_has_no_groups() {
    let seen = Arc::new(SeenContexts::default());
    let (mut c, events) =
        with_authorizer(Arc::clone(&seen) as Arc<dyn crate::authorizer::Authorizer>);
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    assert!(c.session().unwrap().groups.is_empty());
    assert!(matches!(
        events.try_recv(),
        Some(Event::SessionAuthenticated {
            token_claims: None,
            ..
        })
    ));
    let _ = c.handle_frame(produce_to("orders", 4), 10);
    assert_eq!(
        seen.0.lock().unwrap().as_slice(),
        [(Vec::new(), Vec::new(), None)]
    );
}

/// A host that reloads its configuration: the connection takes the new one at a
/// re-authentication, never before.
struct Swappable(ArcSwap<ConnectionConfig>);
impl super::ConfigSource for Swappable {
    fn current(&self) -> Arc<ConnectionConfig> {
        self.0.load_full()
    }
}

fn reloaded(
    cfg: &ConnectionConfig,
    mechanisms: Vec<Arc<dyn SaslMechanism>>,
    reauth_ms: i64,
) -> Arc<ConnectionConfig> {
    Arc::new(
        ConnectionConfig::new(
            cfg.listener.clone(),
            Arc::new(cfg.services.with_enabled_mechanisms(mechanisms)),
            Arc::clone(&cfg.api_versions),
        )
        .with_max_reauth_ms(Some(reauth_ms)),
    )
}

#[test]
fn a_reloaded_configuration_applies_at_the_next_reauthentication_only() {
    let (cfg, _events) = config();
    let source = Arc::new(Swappable(ArcSwap::new(Arc::clone(&cfg))));
    let mut c = Connection::new(Arc::clone(&cfg), IpAddr::from([127, 0, 0, 1]), false)
        .with_config_source(source.clone());
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    // The reload keeps TEST and lowers the session lifetime.
    source.0.store(reloaded(
        &cfg,
        vec![Arc::new(Fixed), Arc::new(Other)],
        10_000,
    ));
    // Until the client re-authenticates, the connection keeps its snapshot.
    assert_eq!(c.config().max_reauth_ms, Some(3_600_000));
    let _ = handshake_at(&mut c, "TEST", 2_000);
    let auth = auth_response(authenticate(&mut c, 2, b"alice:pw", 2_000));
    assert_eq!(auth.error_code, 0);
    assert_eq!(auth.session_lifetime_ms, 10_000);
    assert_eq!(c.ticket().unwrap().expires_at_ms(), Some(12_000));
}

#[test]
fn a_mechanism_removed_by_a_reload_is_refused_at_the_next_reauthentication() {
    let (cfg, _events) = config();
    let source = Arc::new(Swappable(ArcSwap::new(Arc::clone(&cfg))));
    let mut c = Connection::new(Arc::clone(&cfg), IpAddr::from([127, 0, 0, 1]), false)
        .with_config_source(source.clone());
    let _ = handshake(&mut c, 1, "TEST");
    let _ = authenticate(&mut c, 2, b"alice:pw", 0);
    source
        .0
        .store(reloaded(&cfg, vec![Arc::new(Other)], 3_600_000));
    // The session still serves requests: nothing is closed by the reload itself.
    assert!(c.session().is_some());
    let actions = handshake_at(&mut c, "TEST", 2_000);
    let [Action::Respond(frame), Action::CloseAfter(_)] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    let (_, hs): (_, SaslHandshakeResponse) = response(ApiKey::SaslHandshake, 1, frame);
    assert_eq!(hs.error_code, 33);
    let enabled: Vec<&str> = hs.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(enabled, ["OTHER"]);
    assert!(c.is_failed());
}
