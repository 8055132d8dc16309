//! The token APIs end to end in the framework: request bytes in, Kafka's answers out, records
//! through a real in-memory log that the token manager follows.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_delegation_token_request::CreatableRenewers;
use kafka_protocol::messages::describe_delegation_token_request::DescribeDelegationTokenOwner;
use kafka_protocol::messages::{
    CreateDelegationTokenRequest, DescribeDelegationTokenRequest, DescribeDelegationTokenResponse,
    ExpireDelegationTokenRequest, RenewDelegationTokenRequest, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::*;
use crate::acl::{AclOperation, ResourceType};
use crate::authorizer::{Action, Authorization, DecidingRule, Decision, RequestContext};
use crate::credentials::{CredentialId, ScramCredential, ScramMechanism};
use crate::local::Effect;
use crate::protocol::header::RequestHeader;
use crate::reauth::ReauthScheduler;
use crate::secret::Secret;
use crate::store::memory::MemoryStore;
use crate::store::MetadataStore;
use crate::tokens::{TokenConfig, TokenCrypto};

const T0: i64 = 1_700_000_000_000;
const DAY: i64 = 86_400_000;

struct Crypto(AtomicU64);
impl TokenCrypto for Crypto {
    fn random_id_bytes(&self) -> [u8; 16] {
        let n = self.0.fetch_add(1, Ordering::Relaxed);
        let mut out = [0x22u8; 16];
        out[8..].copy_from_slice(&n.to_be_bytes());
        out
    }
    fn scram_credential(&self, _: ScramMechanism, _: &str, iterations: u32) -> ScramCredential {
        ScramCredential {
            salt: vec![],
            stored_key: vec![],
            server_key: vec![],
            iterations,
        }
    }
}

/// Allows exactly the listed (principal, operation, resource type, name) actions.
#[derive(Default)]
struct Grants(Mutex<Vec<(String, AclOperation, ResourceType, String)>>);

impl Grants {
    fn allow(&self, principal: &str, op: AclOperation, rt: ResourceType, name: &str) {
        self.0
            .lock()
            .unwrap()
            .push((principal.into(), op, rt, name.into()));
    }
}

impl Authorizer for Grants {
    fn authorize(&self, context: &RequestContext, actions: &[Action]) -> Vec<Authorization> {
        let grants = self.0.lock().unwrap();
        actions
            .iter()
            .map(|a| {
                let allowed = grants.iter().any(|(p, op, rt, name)| {
                    *p == context.principal.to_string()
                        && *op == a.operation
                        && *rt == a.resource.resource_type
                        && *name == a.resource.name
                });
                Authorization {
                    decision: if allowed {
                        Decision::Allowed
                    } else {
                        Decision::Denied
                    },
                    rule: DecidingRule::DefaultDeny,
                }
            })
            .collect()
    }
    fn authorize_by_resource_type(
        &self,
        _: &RequestContext,
        _: AclOperation,
        _: ResourceType,
    ) -> Decision {
        Decision::Denied
    }
}

struct Node {
    store: MemoryStore,
    manager: Arc<TokenManager>,
    grants: Arc<Grants>,
    handlers: [Arc<dyn LocalHandler>; 4],
}

impl Node {
    fn new(enabled: bool) -> Self {
        let manager = Arc::new(TokenManager::new(
            TokenConfig::new(Secret::new("k")).with_times(7 * DAY, DAY, 3_600_000),
            Arc::new(Crypto(AtomicU64::new(0))),
            T0,
        ));
        let store = MemoryStore::new();
        let m = manager.clone();
        store
            .subscribe(
                0,
                Box::new(move |records| {
                    m.apply(records, T0);
                }),
            )
            .unwrap();
        let grants = Arc::new(Grants::default());
        let handlers = DelegationTokenApis::handlers(
            enabled.then(|| manager.clone()),
            Some(grants.clone() as Arc<dyn Authorizer>),
        );
        Self {
            store,
            manager,
            grants,
            handlers,
        }
    }

    fn handler(&self, key: i16) -> &dyn LocalHandler {
        self.handlers
            .iter()
            .find(|h| h.api_key() == key)
            .unwrap()
            .as_ref()
    }

    /// Sends `body` as `who` (a token session when `token` is set) and decodes the answer.
    fn call<Q: Encodable, R: Decodable>(
        &self,
        key: i16,
        version: i16,
        who: &str,
        token: Option<&str>,
        body: &Q,
    ) -> R {
        let mut buf = BytesMut::new();
        body.encode(&mut buf, version).unwrap();
        let effect = self.call_raw(key, version, who, token, &buf);
        let Effect::Respond(mut frame) = effect else {
            panic!("closed: {effect:?}")
        };
        let api = kafka_protocol::messages::ApiKey::try_from(key).unwrap();
        let _ = ResponseHeader::decode(&mut frame, api.response_header_version(version)).unwrap();
        let out = R::decode(&mut frame, version).unwrap();
        assert!(frame.is_empty(), "trailing bytes in the response");
        out
    }

    fn call_raw(
        &self,
        key: i16,
        version: i16,
        who: &str,
        token: Option<&str>,
        body: &[u8],
    ) -> Effect {
        let header = RequestHeader {
            api_key: key,
            api_version: version,
            correlation_id: 7,
            client_id: None,
            header_len: 0,
        };
        let principal = Principal::parse(who).unwrap();
        let credential = match token {
            Some(t) => CredentialId::token(t),
            None => CredentialId::scram(principal.name.clone(), ScramMechanism::Sha512),
        };
        let session = Session {
            ticket: ReauthScheduler::new().register(credential, None),
            principal,
            mechanism: "SCRAM-SHA-512".into(),
            authenticated_at_ms: T0,
            lifetime_ms: None,
            token_id: token.map(str::to_owned),
            reauth_started_at_ms: None,
            groups: Vec::new(),
            token_claims: None,
        };
        let request = LocalRequest {
            header: &header,
            body,
            session: &session,
            client_address: IpAddr::from([127, 0, 0, 1]),
            listener: "test",
            now_ms: T0,
        };
        self.handler(key).handle(&request).resolve(&self.store, T0)
    }

    fn create(
        &self,
        who: &str,
        owner: Option<&str>,
        renewers: &[&str],
        max: i64,
    ) -> CreateDelegationTokenResponse {
        let mut req = CreateDelegationTokenRequest::default()
            .with_max_lifetime_ms(max)
            .with_renewers(
                renewers
                    .iter()
                    .map(|r| {
                        let p = Principal::parse(r).unwrap();
                        CreatableRenewers::default()
                            .with_principal_type(text(&p.kind))
                            .with_principal_name(text(&p.name))
                    })
                    .collect(),
            );
        if let Some(owner) = owner {
            let p = Principal::parse(owner).unwrap();
            req = req
                .with_owner_principal_type(Some(text(&p.kind)))
                .with_owner_principal_name(Some(text(&p.name)));
        }
        self.call(CREATE_DELEGATION_TOKEN, 3, who, None, &req)
    }

    fn renew(&self, who: &str, hmac: &Bytes, period: i64) -> RenewDelegationTokenResponse {
        let req = RenewDelegationTokenRequest::default()
            .with_hmac(hmac.clone())
            .with_renew_period_ms(period);
        self.call(RENEW_DELEGATION_TOKEN, 2, who, None, &req)
    }

    fn expire(&self, who: &str, hmac: &Bytes, period: i64) -> ExpireDelegationTokenResponse {
        let req = ExpireDelegationTokenRequest::default()
            .with_hmac(hmac.clone())
            .with_expiry_time_period_ms(period);
        self.call(EXPIRE_DELEGATION_TOKEN, 2, who, None, &req)
    }

    fn describe(&self, who: &str, owners: Option<&[&str]>) -> DescribeDelegationTokenResponse {
        let req = DescribeDelegationTokenRequest::default().with_owners(owners.map(|o| {
            o.iter()
                .map(|p| {
                    let p = Principal::parse(p).unwrap();
                    DescribeDelegationTokenOwner::default()
                        .with_principal_type(text(&p.kind))
                        .with_principal_name(text(&p.name))
                })
                .collect()
        }));
        self.call(DESCRIBE_DELEGATION_TOKEN, 3, who, None, &req)
    }
}

fn ids(r: &DescribeDelegationTokenResponse) -> Vec<String> {
    let mut v: Vec<String> = r.tokens.iter().map(|t| t.token_id.to_string()).collect();
    v.sort();
    v
}

#[test]
fn create_answers_like_kafka_and_the_token_works_for_renew_and_expire() {
    let n = Node::new(true);
    let r = n.create("User:alice", None, &["User:bob"], -1);
    assert_eq!(r.error_code, 0);
    assert_eq!(
        (r.principal_type.as_str(), r.principal_name.as_str()),
        ("User", "alice")
    );
    assert_eq!(r.token_requester_principal_name.as_str(), "alice");
    assert_eq!(
        (
            r.issue_timestamp_ms,
            r.expiry_timestamp_ms,
            r.max_timestamp_ms
        ),
        (T0, T0 + DAY, T0 + 7 * DAY)
    );
    assert_eq!(r.hmac.len(), 64);
    assert_eq!(n.manager.len(), 1);
    let renewed = n.renew("User:bob", &r.hmac, 1_000);
    assert_eq!(
        (renewed.error_code, renewed.expiry_timestamp_ms),
        (0, T0 + 1_000)
    );
    assert_eq!(n.renew("User:carol", &r.hmac, 1_000).error_code, 63);
    let expired = n.expire("User:alice", &r.hmac, -1);
    assert_eq!((expired.error_code, expired.expiry_timestamp_ms), (0, T0));
    assert!(n.manager.is_empty());
    let gone = n.renew("User:alice", &r.hmac, 0);
    assert_eq!((gone.error_code, gone.expiry_timestamp_ms), (62, 0));
}

#[test]
fn every_version_encodes() {
    let n = Node::new(true);
    for version in 1..=3 {
        let req = CreateDelegationTokenRequest::default().with_max_lifetime_ms(-1);
        let r: CreateDelegationTokenResponse =
            n.call(CREATE_DELEGATION_TOKEN, version, "User:alice", None, &req);
        assert_eq!(r.error_code, 0, "create v{version}");
        let d: DescribeDelegationTokenResponse = n.call(
            DESCRIBE_DELEGATION_TOKEN,
            version,
            "User:alice",
            None,
            &DescribeDelegationTokenRequest::default().with_owners(None),
        );
        assert_eq!(d.tokens.len(), version as usize, "describe v{version}");
    }
    for version in 1..=2 {
        let token = n.create("User:alice", None, &[], -1);
        let req = RenewDelegationTokenRequest::default()
            .with_hmac(token.hmac.clone())
            .with_renew_period_ms(5);
        let r: RenewDelegationTokenResponse =
            n.call(RENEW_DELEGATION_TOKEN, version, "User:alice", None, &req);
        assert_eq!(r.error_code, 0);
        let req = ExpireDelegationTokenRequest::default()
            .with_hmac(token.hmac.clone())
            .with_expiry_time_period_ms(-1);
        let r: ExpireDelegationTokenResponse =
            n.call(EXPIRE_DELEGATION_TOKEN, version, "User:alice", None, &req);
        assert_eq!(r.error_code, 0);
    }
}

#[test]
fn a_token_session_may_not_use_any_token_api() {
    let n = Node::new(true);
    let token = n.create("User:alice", None, &[], -1);
    let id = token.token_id.to_string();
    let create: CreateDelegationTokenResponse = n.call(
        CREATE_DELEGATION_TOKEN,
        3,
        "User:alice",
        Some(&id),
        &CreateDelegationTokenRequest::default().with_max_lifetime_ms(-1),
    );
    assert_eq!((create.error_code, create.issue_timestamp_ms), (64, -1));
    let renew: RenewDelegationTokenResponse = n.call(
        RENEW_DELEGATION_TOKEN,
        2,
        "User:alice",
        Some(&id),
        &RenewDelegationTokenRequest::default().with_hmac(token.hmac.clone()),
    );
    assert_eq!((renew.error_code, renew.expiry_timestamp_ms), (64, -1));
    let describe: DescribeDelegationTokenResponse = n.call(
        DESCRIBE_DELEGATION_TOKEN,
        3,
        "User:alice",
        Some(&id),
        &DescribeDelegationTokenRequest::default().with_owners(None),
    );
    assert_eq!((describe.error_code, describe.tokens.len()), (64, 0));
}

#[test]
fn creating_for_another_owner_needs_create_tokens_on_that_user() {
    let n = Node::new(true);
    let denied = n.create("User:admin", Some("User:alice"), &[], -1);
    assert_eq!(denied.error_code, 65);
    assert_eq!(
        (
            denied.principal_name.as_str(),
            denied.token_requester_principal_name.as_str()
        ),
        ("alice", "admin")
    );
    assert_eq!(denied.max_timestamp_ms, -1);
    n.grants.allow(
        "User:admin",
        AclOperation::CreateTokens,
        ResourceType::User,
        "User:alice",
    );
    let ok = n.create("User:admin", Some("User:alice"), &[], -1);
    assert_eq!(ok.error_code, 0);
    // Naming oneself as owner needs nothing.
    assert_eq!(
        n.create("User:bob", Some("User:bob"), &[], -1).error_code,
        0
    );
    // The owner's type is not checked (Kafka's quirk); the grant is on its string form.
    n.grants.allow(
        "User:admin",
        AclOperation::CreateTokens,
        ResourceType::User,
        "Group:ops",
    );
    let odd = n.create("User:admin", Some("Group:ops"), &[], -1);
    assert_eq!((odd.error_code, odd.principal_type.as_str()), (0, "Group"));
}

#[test]
fn refusals_come_in_kafkas_order() {
    let n = Node::new(true);
    // Authorization before the renewers' type.
    let r = n.create("User:admin", Some("User:alice"), &["Group:g"], -1);
    assert_eq!(r.error_code, 65);
    let r = n.create("User:alice", None, &["Group:g"], -1);
    assert_eq!((r.error_code, r.expiry_timestamp_ms), (67, -1));
    // Disabled tokens: the broker's checks still come first, the controller's refusal has 0s.
    let off = Node::new(false);
    assert_eq!(
        off.create("User:alice", None, &["Group:g"], -1).error_code,
        67
    );
    let r = off.create("User:alice", None, &[], -1);
    assert_eq!(
        (
            r.error_code,
            r.issue_timestamp_ms,
            r.principal_name.as_str()
        ),
        (61, 0, "alice")
    );
    let r = off.renew("User:alice", &Bytes::from_static(&[0; 64]), 0);
    assert_eq!((r.error_code, r.expiry_timestamp_ms), (61, 0));
    assert_eq!(off.describe("User:alice", None).error_code, 61);
}

#[test]
fn describe_shows_what_kafka_shows_to_whom() {
    let n = Node::new(true);
    let alice = n
        .create("User:alice", None, &["User:bob"], -1)
        .token_id
        .to_string();
    let carol = n.create("User:carol", None, &[], -1).token_id.to_string();
    n.grants.allow(
        "User:admin",
        AclOperation::CreateTokens,
        ResourceType::User,
        "User:dave",
    );
    let dave = n
        .create("User:admin", Some("User:dave"), &[], -1)
        .token_id
        .to_string();
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    // Owner, renewer, requester.
    assert_eq!(ids(&n.describe("User:alice", None)), vec![alice.clone()]);
    assert_eq!(ids(&n.describe("User:bob", None)), vec![alice.clone()]);
    assert_eq!(ids(&n.describe("User:admin", None)), vec![dave.clone()]);
    // A stranger sees nothing.
    assert!(ids(&n.describe("User:eve", None)).is_empty());
    // DescribeTokens on User:carol, Describe on one token.
    n.grants.allow(
        "User:eve",
        AclOperation::DescribeTokens,
        ResourceType::User,
        "User:carol",
    );
    assert_eq!(ids(&n.describe("User:eve", None)), vec![carol.clone()]);
    n.grants.allow(
        "User:eve",
        AclOperation::Describe,
        ResourceType::DelegationToken,
        &dave,
    );
    assert_eq!(
        ids(&n.describe("User:eve", None)),
        sorted(vec![carol.clone(), dave.clone()])
    );
    // Owner filter: matches owner, requester or renewer; an empty list describes nothing.
    assert_eq!(
        ids(&n.describe("User:eve", Some(&["User:carol"]))),
        vec![carol.clone()]
    );
    assert!(ids(&n.describe("User:alice", Some(&[]))).is_empty());
    assert_eq!(
        ids(&n.describe("User:bob", Some(&["User:bob"]))),
        vec![alice.clone()]
    );
    // Describe returns the HMAC, like Kafka.
    let d = n.describe("User:alice", None);
    assert_eq!(d.tokens[0].hmac.as_ref(), n.manager.hmac(&alice).as_slice());
    assert_eq!(d.tokens[0].renewers[0].principal_name.as_str(), "bob");
    assert_eq!(d.tokens[0].token_requester_principal_name.as_str(), "alice");
}

#[test]
fn a_renew_that_loses_a_race_with_an_expire_is_decided_again() {
    let n = Node::new(true);
    let token = n.create("User:alice", None, &[], -1);
    // Decide the renewal, then let an expire land before it is written.
    let header = RequestHeader {
        api_key: RENEW_DELEGATION_TOKEN,
        api_version: 2,
        correlation_id: 1,
        client_id: None,
        header_len: 0,
    };
    let mut body = BytesMut::new();
    RenewDelegationTokenRequest::default()
        .with_hmac(token.hmac.clone())
        .encode(&mut body, 2)
        .unwrap();
    let session = Session {
        ticket: ReauthScheduler::new()
            .register(CredentialId::scram("alice", ScramMechanism::Sha512), None),
        principal: Principal::user("alice"),
        mechanism: "SCRAM-SHA-512".into(),
        authenticated_at_ms: T0,
        lifetime_ms: None,
        token_id: None,
        reauth_started_at_ms: None,
        groups: Vec::new(),
        token_claims: None,
    };
    let request = LocalRequest {
        header: &header,
        body: &body,
        session: &session,
        client_address: IpAddr::from([127, 0, 0, 1]),
        listener: "test",
        now_ms: T0,
    };
    let Effect::Persist(renewal) = n.handler(RENEW_DELEGATION_TOKEN).handle(&request) else {
        panic!("expected a persist")
    };
    assert_eq!(n.expire("User:alice", &token.hmac, -1).error_code, 0);
    let outcome = n
        .store
        .append_batch(renewal.batch())
        .map_err(PersistError::from);
    assert_eq!(outcome, Err(PersistError::Conflict));
    let Effect::Respond(mut frame) = renewal.complete(outcome, T0) else {
        panic!("expected an answer")
    };
    let _ = ResponseHeader::decode(&mut frame, 1).unwrap();
    let r = RenewDelegationTokenResponse::decode(&mut frame, 2).unwrap();
    assert_eq!(r.error_code, 62, "decided again: the token is gone");
    assert!(n.manager.is_empty(), "the renewal did not resurrect it");
}

#[test]
fn impossible_bodies_close_instead_of_allocating() {
    let n = Node::new(true);
    for (key, version) in [
        (38, 1),
        (38, 2),
        (38, 3),
        (39, 1),
        (39, 2),
        (40, 2),
        (41, 1),
        (41, 3),
    ] {
        for body in [
            &[0x7f, 0xff, 0xff, 0xff][..],
            &[0xff, 0xff, 0xff, 0xff, 0x0f],
            &[],
            &[5, 1, 1],
        ] {
            if (key, version, body.len()) == (41, 1, 5) {
                // A null owner list (-1) then a byte Kafka would ignore: a valid Describe.
                continue;
            }
            assert!(
                matches!(
                    n.call_raw(key, version, "User:alice", None, body),
                    Effect::Close(_)
                ),
                "api {key} v{version} {body:?}"
            );
        }
    }
}
