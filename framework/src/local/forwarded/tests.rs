use bytes::BytesMut;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, CreateAclsRequest, DeleteAclsRequest,
    ExpireDelegationTokenRequest, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::*;
use crate::acl::{AclOperation, ResourceType};
use crate::authorizer::{
    Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};
use crate::local::acls::AclApis;
use crate::principal::Principal;

fn frame<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Bytes {
    let mut out = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(42)
        .with_client_id(Some(StrBytes::from_static_str("test")))
        .encode(&mut out, key.request_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    out.freeze()
}

fn decode<T: Decodable>(key: ApiKey, version: i16, bytes: Bytes) -> T {
    let mut buf = bytes;
    let header = ResponseHeader::decode(&mut buf, key.response_header_version(version)).unwrap();
    assert_eq!(header.correlation_id, 42);
    T::decode(&mut buf, version).unwrap()
}

fn creation(name: &str) -> AclCreation {
    AclCreation::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_string(name.to_owned()))
        .with_resource_pattern_type(3)
        .with_principal(StrBytes::from_static_str("User:x"))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(3)
        .with_permission_type(3)
}

#[test]
fn error_responses_have_one_entry_per_item_of_the_request() {
    for version in 1..=3 {
        let request =
            CreateAclsRequest::default().with_creations(vec![creation("a"), creation("b")]);
        let f = frame(ApiKey::CreateAcls, version, &request);
        let response: CreateAclsResponse = decode(
            ApiKey::CreateAcls,
            version,
            error_response(&f, ErrorCode::UNKNOWN_SERVER_ERROR).unwrap(),
        );
        assert_eq!(response.results.len(), 2);
        assert!(response.results.iter().all(|r| r.error_code == -1));

        let request = DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1)]);
        let f = frame(ApiKey::DeleteAcls, version, &request);
        let response: DeleteAclsResponse = decode(
            ApiKey::DeleteAcls,
            version,
            error_response(&f, ErrorCode::REQUEST_TIMED_OUT).unwrap(),
        );
        assert_eq!(response.filter_results.len(), 1);
        assert_eq!(response.filter_results[0].error_code, 7);
    }
}

#[test]
fn scram_error_response_names_each_user_once() {
    let request = AlterUserScramCredentialsRequest::default()
        .with_deletions(vec![ScramCredentialDeletion::default()
            .with_name(StrBytes::from_static_str("alice"))
            .with_mechanism(1)])
        .with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(StrBytes::from_static_str("alice"))
                .with_mechanism(2)
                .with_iterations(4096)
                .with_salt(Bytes::from_static(b"salt"))
                .with_salted_password(Bytes::from_static(b"pw")),
            ScramCredentialUpsertion::default()
                .with_name(StrBytes::from_static_str("bob"))
                .with_mechanism(2)
                .with_iterations(4096)
                .with_salt(Bytes::from_static(b"salt"))
                .with_salted_password(Bytes::from_static(b"pw")),
        ]);
    let f = frame(ApiKey::AlterUserScramCredentials, 0, &request);
    let response: AlterUserScramCredentialsResponse = decode(
        ApiKey::AlterUserScramCredentials,
        0,
        error_response(&f, ErrorCode::UNKNOWN_SERVER_ERROR).unwrap(),
    );
    let users: Vec<&str> = response.results.iter().map(|r| r.user.as_str()).collect();
    assert_eq!(users, ["alice", "bob"]);
    assert!(response.results.iter().all(|r| r.error_code == -1));
}

#[test]
fn token_error_responses_carry_the_code_at_the_top() {
    let request = ExpireDelegationTokenRequest::default()
        .with_hmac(Bytes::from_static(b"h"))
        .with_expiry_time_period_ms(-1);
    let f = frame(ApiKey::ExpireDelegationToken, 2, &request);
    let response: ExpireDelegationTokenResponse = decode(
        ApiKey::ExpireDelegationToken,
        2,
        error_response(&f, ErrorCode::UNKNOWN_SERVER_ERROR).unwrap(),
    );
    assert_eq!(response.error_code, -1);
}

#[test]
fn unreadable_requests_get_no_error_response() {
    let request = CreateAclsRequest::default().with_creations(vec![creation("a")]);
    let f = frame(ApiKey::CreateAcls, 2, &request);
    for cut in 0..f.len() - 1 {
        // The tagged-field byte at the end may be missing (Kafka tolerates that too); anything
        // shorter is unreadable.
        let cut_frame = f.slice(..cut);
        assert!(
            error_response(&cut_frame, ErrorCode::UNKNOWN_SERVER_ERROR).is_none(),
            "cut at {cut}"
        );
    }
}

/// Allows everything to `User:admin` and the members of `Group:admins` only.
struct AdminOnly;

impl Authorizer for AdminOnly {
    fn authorize(&self, context: &RequestContext, actions: &[Action]) -> Vec<Authorization> {
        let decision = if context.principal.name == "admin"
            || context.groups.contains(&Principal::group("admins"))
        {
            Decision::Allowed
        } else {
            Decision::Denied
        };
        actions
            .iter()
            .map(|_| Authorization {
                decision,
                rule: DecidingRule::DefaultDeny,
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

fn forwarded(name: &str) -> ForwardedPrincipal {
    ForwardedPrincipal {
        principal: Principal::user(name),
        token_authenticated: false,
        groups: Vec::new(),
    }
}

fn respond(effect: Result<Effect, ErrorCode>) -> Bytes {
    match effect {
        Ok(Effect::Respond(bytes)) => bytes,
        other => panic!("expected a response, got {other:?}"),
    }
}

#[test]
fn the_writer_authorizes_the_original_principal() {
    let handlers: Vec<Arc<dyn LocalHandler>> = AclApis::handlers(Some(Arc::new(AdminOnly)))
        .into_iter()
        .collect();
    let request = CreateAclsRequest::default().with_creations(vec![creation("a")]);
    let f = frame(ApiKey::CreateAcls, 2, &request);
    let ip = "10.0.0.1".parse().unwrap();
    let denied: CreateAclsResponse = decode(
        ApiKey::CreateAcls,
        2,
        respond(run_on_writer(
            &handlers,
            &f,
            &forwarded("bob"),
            ip,
            "cluster",
            0,
        )),
    );
    assert_eq!(
        denied.results[0].error_code,
        ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0
    );
    // The admin passes the check; this authorizer keeps no ACLs, so Kafka's answer without an
    // ACL store follows.
    let allowed: CreateAclsResponse = decode(
        ApiKey::CreateAcls,
        2,
        respond(run_on_writer(
            &handlers,
            &f,
            &forwarded("admin"),
            ip,
            "cluster",
            0,
        )),
    );
    assert_eq!(
        allowed.results[0].error_code,
        ErrorCode::SECURITY_DISABLED.0
    );
    // A member of `Group:admins` (a bearer token's group, carried in the envelope's principal)
    // passes it too.
    let member = ForwardedPrincipal {
        groups: vec![Principal::group("admins")],
        ..forwarded("carol")
    };
    let bytes = crate::envelope::serialize_principal(&member);
    let member = crate::envelope::deserialize_principal(&bytes).unwrap();
    let allowed: CreateAclsResponse = decode(
        ApiKey::CreateAcls,
        2,
        respond(run_on_writer(&handlers, &f, &member, ip, "cluster", 0)),
    );
    assert_eq!(
        allowed.results[0].error_code,
        ErrorCode::SECURITY_DISABLED.0
    );
}

#[test]
fn the_writer_refuses_what_kafkas_controller_refuses() {
    let handlers: Vec<Arc<dyn LocalHandler>> = AclApis::handlers(Some(Arc::new(AdminOnly)))
        .into_iter()
        .collect();
    let ip = "10.0.0.1".parse().unwrap();
    let admin = forwarded("admin");
    // Not forwardable: DescribeAcls, and an Envelope inside an Envelope.
    let describe = frame(
        ApiKey::DescribeAcls,
        2,
        &kafka_protocol::messages::DescribeAclsRequest::default(),
    );
    assert_eq!(
        run_on_writer(&handlers, &describe, &admin, ip, "cluster", 0).err(),
        Some(ErrorCode::INVALID_REQUEST)
    );
    let nested = crate::envelope::encode_request(1, "x", &describe, &[], ip);
    assert_eq!(
        run_on_writer(&handlers, &nested, &admin, ip, "cluster", 0).err(),
        Some(ErrorCode::INVALID_REQUEST)
    );
    // An unparseable inner header, and a version no handler serves (CreateAcls v0, removed in
    // Kafka 4): UNSUPPORTED_VERSION.
    assert_eq!(
        run_on_writer(
            &handlers,
            &Bytes::from_static(&[0, 30]),
            &admin,
            ip,
            "cluster",
            0
        )
        .err(),
        Some(ErrorCode::UNSUPPORTED_VERSION)
    );
    let v0 = Bytes::from_static(&[0, 30, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        run_on_writer(&handlers, &v0, &admin, ip, "cluster", 0).err(),
        Some(ErrorCode::UNSUPPORTED_VERSION)
    );
}
