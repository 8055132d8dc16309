use std::net::IpAddr;
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::*;
use crate::authorizer::{AclAdmin, Action, Authorization, DecidingRule, Decision, RequestContext};
use crate::connection::Session;
use crate::principal::Principal;
use crate::protocol::header::RequestHeader;
use crate::reauth::ReauthScheduler;

/// ACLs in a Vec; only `User:admin` and members of `Group:admins` may administer them.
#[derive(Default)]
struct Memory(Mutex<Vec<AclBinding>>);

impl Authorizer for Memory {
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
    fn acl_admin(&self) -> Option<&dyn AclAdmin> {
        Some(self)
    }
}

impl AclAdmin for Memory {
    fn create_acls(&self, bindings: &[AclBinding]) -> Vec<Result<(), AclAdminError>> {
        let mut acls = self.0.lock().unwrap();
        bindings
            .iter()
            .map(|b| {
                crate::acl::validate_for_create(b)?;
                if !acls.contains(b) {
                    acls.push(b.clone());
                }
                Ok(())
            })
            .collect()
    }
    fn delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<Vec<AclBinding>>, AclAdminError> {
        let mut acls = self.0.lock().unwrap();
        let out = filters
            .iter()
            .map(|f| acls.iter().filter(|b| f.matches(b)).cloned().collect())
            .collect();
        acls.retain(|b| !filters.iter().any(|f| f.matches(b)));
        Ok(out)
    }
    fn describe_acls(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect()
    }
}

fn session(user: &str) -> Session {
    // `carol` authenticated with a bearer token whose groups claim holds `admins`.
    let groups = if user == "carol" {
        vec![Principal::group("admins")]
    } else {
        Vec::new()
    };
    let principal = Principal::user(user);
    let ticket = ReauthScheduler::new().register(
        crate::credentials::CredentialId::scram(
            "admin",
            crate::credentials::ScramMechanism::Sha512,
        ),
        None,
    );
    Session {
        principal,
        mechanism: "PLAIN".into(),
        authenticated_at_ms: 0,
        lifetime_ms: None,
        token_id: None,
        reauth_started_at_ms: None,
        groups,
        token_claims: None,
        ticket,
    }
}

fn call<T: Encodable, R: Decodable>(
    handler: &dyn LocalHandler,
    user: &str,
    version: i16,
    body: &T,
) -> R {
    let mut buf = BytesMut::new();
    body.encode(&mut buf, version).unwrap();
    let header = RequestHeader {
        api_key: handler.api_key(),
        api_version: version,
        correlation_id: 3,
        client_id: None,
        header_len: 0,
    };
    let session = session(user);
    let request = LocalRequest {
        header: &header,
        body: &buf,
        session: &session,
        client_address: IpAddr::from([127, 0, 0, 1]),
        listener: "test",
        now_ms: 0,
    };
    let Effect::Respond(frame) = handler.handle(&request) else {
        panic!("closed")
    };
    let mut frame: Bytes = frame;
    let key = ApiKey::try_from(handler.api_key()).unwrap();
    let _ = ResponseHeader::decode(&mut frame, key.response_header_version(version)).unwrap();
    R::decode(&mut frame, version).unwrap()
}

fn creation(
    rt: ResourceType,
    name: &str,
    pt: PatternType,
    principal: &str,
    op: AclOperation,
) -> AclCreation {
    AclCreation::default()
        .with_resource_type(rt.code())
        .with_resource_name(StrBytes::from_string(name.into()))
        .with_resource_pattern_type(pt.code())
        .with_principal(StrBytes::from_string(principal.into()))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(op.code())
        .with_permission_type(PermissionType::Allow.code())
}

fn match_filter(name: &str) -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_type_filter(ResourceType::Topic.code())
        .with_resource_name_filter(Some(StrBytes::from_string(name.into())))
        .with_pattern_type_filter(PatternType::Match.code())
        // kafka-protocol's default is an empty string, not null (which is what Java clients send).
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(AclOperation::Any.code())
        .with_permission_type(PermissionType::Any.code())
}

/// Kafka accepts any principal type in an ACL; `Group:<name>` is what a session's groups match.
/// A group's member is authorized as that group here too (ALTER on the cluster, asked of the
/// authorizer with the session's groups).
#[test]
fn group_principals_are_accepted_and_a_groups_member_may_administer() {
    let authorizer: Arc<dyn Authorizer> = Arc::new(Memory::default());
    let [describe, create, _] = AclApis::handlers(Some(authorizer));
    let request = CreateAclsRequest::default().with_creations(vec![creation(
        ResourceType::Topic,
        "orders",
        PatternType::Literal,
        "Group:readers",
        AclOperation::Read,
    )]);
    let refused: CreateAclsResponse = call(create.as_ref(), "dave", 3, &request);
    assert_eq!(refused.results[0].error_code, 31, "{refused:?}");
    let created: CreateAclsResponse = call(create.as_ref(), "carol", 3, &request);
    assert_eq!(created.results[0].error_code, 0, "{created:?}");
    let described: DescribeAclsResponse =
        call(describe.as_ref(), "carol", 3, &match_filter("orders"));
    assert_eq!(described.error_code, 0);
    assert_eq!(
        described.resources[0].acls[0].principal.to_string(),
        "Group:readers"
    );
}

#[test]
fn create_describe_delete_round_trip_at_every_version() {
    for version in 1..=3 {
        let authorizer: Arc<dyn Authorizer> = Arc::new(Memory::default());
        let [describe, create, delete] = AclApis::handlers(Some(authorizer));
        let request = CreateAclsRequest::default().with_creations(vec![
            creation(
                ResourceType::Topic,
                "payments",
                PatternType::Literal,
                "User:alice",
                AclOperation::Read,
            ),
            creation(
                ResourceType::Topic,
                "pay",
                PatternType::Prefixed,
                "User:bob",
                AclOperation::Write,
            ),
            creation(
                ResourceType::User,
                "User:carol",
                PatternType::Literal,
                "User:alice",
                AclOperation::CreateTokens,
            ),
            creation(
                ResourceType::Topic,
                "x",
                PatternType::Literal,
                "alice",
                AclOperation::Read,
            ),
            creation(
                ResourceType::Cluster,
                "other",
                PatternType::Literal,
                "User:alice",
                AclOperation::Alter,
            ),
        ]);
        let created: CreateAclsResponse = call(create.as_ref(), "admin", version, &request);
        let codes: Vec<i16> = created.results.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, vec![0, 0, 0, 42, 42], "v{version}");

        let described: DescribeAclsResponse = call(
            describe.as_ref(),
            "admin",
            version,
            &match_filter("payments"),
        );
        assert_eq!(described.error_code, 0, "{described:?}");
        let names: Vec<(String, i8)> = described
            .resources
            .iter()
            .map(|r| (r.resource_name.to_string(), r.pattern_type))
            .collect();
        assert_eq!(names, vec![("pay".into(), 4), ("payments".into(), 3)]);

        let filter = DeleteAclsFilter::default()
            .with_resource_type_filter(ResourceType::Any.code())
            .with_pattern_type_filter(PatternType::Any.code())
            .with_principal_filter(Some(StrBytes::from_static_str("User:alice")))
            .with_resource_name_filter(None)
            .with_host_filter(None)
            .with_operation(AclOperation::Any.code())
            .with_permission_type(PermissionType::Any.code());
        let deleted: DeleteAclsResponse = call(
            delete.as_ref(),
            "admin",
            version,
            &DeleteAclsRequest::default().with_filters(vec![filter]),
        );
        assert_eq!(deleted.filter_results[0].matching_acls.len(), 2);
        let left: DescribeAclsResponse = call(
            describe.as_ref(),
            "admin",
            version,
            &match_filter("payments"),
        );
        assert_eq!(left.resources.len(), 1);
    }
}

#[test]
fn non_admins_get_cluster_authorization_failed() {
    let authorizer: Arc<dyn Authorizer> = Arc::new(Memory::default());
    let [describe, create, _] = AclApis::handlers(Some(authorizer));
    let described: DescribeAclsResponse = call(describe.as_ref(), "mallory", 3, &match_filter("t"));
    assert_eq!(described.error_code, 31);
    let request = CreateAclsRequest::default().with_creations(vec![creation(
        ResourceType::Topic,
        "t",
        PatternType::Literal,
        "User:mallory",
        AclOperation::All,
    )]);
    let created: CreateAclsResponse = call(create.as_ref(), "mallory", 3, &request);
    assert_eq!(created.results[0].error_code, 31);
}

#[test]
fn without_an_authorizer_the_apis_answer_security_disabled() {
    let [describe, create, _] = AclApis::handlers(None);
    let described: DescribeAclsResponse = call(describe.as_ref(), "admin", 3, &match_filter("t"));
    assert_eq!(described.error_code, 54);
    assert_eq!(described.error_message.as_deref(), Some(NO_AUTHORIZER));
    let request = CreateAclsRequest::default().with_creations(vec![creation(
        ResourceType::Topic,
        "t",
        PatternType::Literal,
        "User:a",
        AclOperation::Read,
    )]);
    let created: CreateAclsResponse = call(create.as_ref(), "admin", 3, &request);
    assert_eq!(created.results[0].error_code, 54);
}

#[test]
fn unknown_elements_and_garbage() {
    let authorizer: Arc<dyn Authorizer> = Arc::new(Memory::default());
    let [describe, create, _] = AclApis::handlers(Some(authorizer));
    let described: DescribeAclsResponse = call(
        describe.as_ref(),
        "admin",
        3,
        &match_filter("t").with_operation(AclOperation::Unknown.code()),
    );
    assert_eq!(described.error_code, 42);
    let header = RequestHeader {
        api_key: 30,
        api_version: 3,
        correlation_id: 1,
        client_id: None,
        header_len: 0,
    };
    let session = session("admin");
    for body in [
        &[0xff, 0xff, 0xff, 0x0f][..],
        &[0x7f, 0xff, 0xff, 0xff],
        &[2, 2],
    ] {
        let request = LocalRequest {
            header: &header,
            body,
            session: &session,
            client_address: IpAddr::from([127, 0, 0, 1]),
            listener: "test",
            now_ms: 0,
        };
        assert!(matches!(create.handle(&request), Effect::Close(_)));
    }
}
