//! ACL administration (§6.5): validation, duplicates, filters, atomic delete, persistence.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

mod common;

use std::sync::Arc;

use common::{allow, deny, fixture};
use portcullis::acl::{
    AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation as Op, PatternType as Pt,
    PermissionType, ResourcePatternFilter, ResourceType as Rt,
};
use portcullis::authorizer::{AclAdmin, AclAdminError};
use portcullis::events::{Event, EventBus};
use portcullis::store::{MetadataRecord, MetadataStore};
use portcullis_plugin_acl::{AclAuthorizer, AclAuthorizerConfig, AclAuthorizerError};
use portcullis_plugin_stores::FileMetadataStore;

fn filter(rt: Rt, name: Option<&str>, pt: Pt) -> AclBindingFilter {
    AclBindingFilter {
        pattern: ResourcePatternFilter {
            resource_type: rt,
            name: name.map(str::to_owned),
            pattern_type: pt,
        },
        entry: AccessControlEntryFilter {
            principal: None,
            host: None,
            operation: Op::Any,
            permission: PermissionType::Any,
        },
    }
}

fn corpus() -> Vec<AclBinding> {
    vec![
        allow(Rt::Topic, Pt::Literal, "payments", "User:a", Op::Read),
        allow(Rt::Topic, Pt::Literal, "pay", "User:a", Op::Read),
        allow(Rt::Topic, Pt::Prefixed, "pay", "User:b", Op::Write),
        deny(Rt::Topic, Pt::Literal, "*", "User:c", Op::Read),
        allow(Rt::Group, Pt::Literal, "payments", "User:a", Op::Read),
        allow(Rt::Topic, Pt::Prefixed, "other", "User:b", Op::Write),
    ]
}

fn sorted(mut v: Vec<AclBinding>) -> Vec<AclBinding> {
    v.sort();
    v
}

#[test]
fn invalid_bindings_are_refused_valid_ones_stored() {
    let f = fixture(&[], false);
    let mut no_colon = allow(Rt::Topic, Pt::Literal, "t", "User:a", Op::Read);
    no_colon.entry.principal = "alice".into();
    let mut bad_cluster = allow(Rt::Cluster, Pt::Literal, "c", "User:a", Op::Alter);
    bad_cluster.pattern.name = "not-kafka-cluster".into();
    let match_pattern = allow(Rt::Topic, Pt::Match, "t", "User:a", Op::Read);
    let any_op = allow(Rt::Topic, Pt::Literal, "t", "User:a", Op::Any);
    let good = allow(Rt::Topic, Pt::Literal, "t", "User:a", Op::Read);
    let results =
        f.authorizer
            .create_acls(&[no_colon, bad_cluster, match_pattern, any_op, good.clone()]);
    assert!(matches!(results[0], Err(AclAdminError::Invalid(_))));
    assert!(matches!(results[1], Err(AclAdminError::Invalid(_))));
    assert!(matches!(results[2], Err(AclAdminError::Invalid(_))));
    assert!(matches!(results[3], Err(AclAdminError::Invalid(_))));
    assert!(results[4].is_ok());
    assert_eq!(
        f.authorizer.describe_acls(&AclBindingFilter::any()),
        vec![good]
    );
}

#[test]
fn duplicates_are_accepted_and_not_duplicated() {
    let bus = EventBus::new();
    let events = bus.subscribe(16);
    let f = fixture(&[], false);
    let dir = f.dir.path().to_owned();
    let authorizer = f.authorizer.with_events(bus);
    let b = allow(Rt::Topic, Pt::Literal, "t", "User:a", Op::Read);
    assert!(authorizer
        .create_acls(&[b.clone(), b.clone()])
        .iter()
        .all(Result::is_ok));
    assert!(authorizer
        .create_acls(std::slice::from_ref(&b))
        .iter()
        .all(Result::is_ok));
    assert_eq!(authorizer.describe_acls(&AclBindingFilter::any()), vec![b]);
    assert_eq!(
        events.try_recv(),
        Some(Event::AclsChanged {
            created: 1,
            deleted: 0
        })
    );
    assert_eq!(events.try_recv(), None);
    drop(authorizer);
    // Only one record was written.
    let store = FileMetadataStore::open(&dir).unwrap();
    assert_eq!(store.snapshot().unwrap().len(), 1);
}

#[test]
fn describe_filter_semantics() {
    let f = fixture(&[], false);
    f.add(&corpus());
    let d = |fl: AclBindingFilter| f.authorizer.describe_acls(&fl);
    // Every result is exactly what the framework's filter accepts.
    for fl in [
        filter(Rt::Any, None, Pt::Any),
        filter(Rt::Topic, Some("pay"), Pt::Any),
        filter(Rt::Topic, Some("pay"), Pt::Literal),
        filter(Rt::Topic, Some("pay"), Pt::Prefixed),
        filter(Rt::Topic, Some("payments"), Pt::Match),
        filter(Rt::Any, Some("payments"), Pt::Match),
        filter(Rt::Topic, None, Pt::Prefixed),
        filter(Rt::Topic, Some("*"), Pt::Match),
        filter(Rt::Topic, Some("x"), Pt::Unknown),
    ] {
        let expected: Vec<AclBinding> =
            sorted(corpus().into_iter().filter(|b| fl.matches(b)).collect());
        assert_eq!(d(fl.clone()), expected, "{fl:?}");
    }
    // ANY: exact name, any pattern type.
    assert_eq!(d(filter(Rt::Topic, Some("pay"), Pt::Any)).len(), 2);
    // MATCH: literal equal + `*` + prefixes.
    assert_eq!(
        d(filter(Rt::Topic, Some("payments"), Pt::Match)),
        sorted(vec![
            allow(Rt::Topic, Pt::Literal, "payments", "User:a", Op::Read),
            allow(Rt::Topic, Pt::Prefixed, "pay", "User:b", Op::Write),
            deny(Rt::Topic, Pt::Literal, "*", "User:c", Op::Read),
        ])
    );
    // Entry filter.
    let mut by_principal = filter(Rt::Any, None, Pt::Any);
    by_principal.entry.principal = Some("User:b".into());
    by_principal.entry.operation = Op::Write;
    assert_eq!(d(by_principal).len(), 2);
}

#[test]
fn delete_is_atomic_and_reports_per_filter() {
    let f = fixture(&[], false);
    let dir = f.dir.path().to_owned();
    f.add(&corpus());
    let before = FileMetadataStore::open_count(&dir);
    let result = f
        .authorizer
        .delete_acls(&[
            filter(Rt::Topic, Some("pay"), Pt::Prefixed),
            filter(Rt::Any, Some("payments"), Pt::Any),
            filter(Rt::Topic, Some("payments"), Pt::Literal),
            filter(Rt::Topic, Some("nothing"), Pt::Literal),
        ])
        .unwrap();
    assert_eq!(
        result[0],
        vec![allow(Rt::Topic, Pt::Prefixed, "pay", "User:b", Op::Write)]
    );
    assert_eq!(result[1].len(), 2);
    // A binding matched by two filters is reported by both and deleted once.
    assert_eq!(
        result[2],
        vec![allow(
            Rt::Topic,
            Pt::Literal,
            "payments",
            "User:a",
            Op::Read
        )]
    );
    assert!(result[3].is_empty());
    assert_eq!(f.authorizer.acl_count(), 3);
    drop(f.authorizer);
    // Three RemoveAcl records, written by one append.
    assert_eq!(FileMetadataStore::open_count(&dir), before + 3);
    let store = FileMetadataStore::open(&dir).unwrap();
    let removes = store
        .snapshot()
        .unwrap()
        .into_iter()
        .filter(|r| matches!(r, MetadataRecord::RemoveAcl { .. }))
        .count();
    assert_eq!(removes, 3);
}

/// Counts records (the store frames one append per batch, records are what matter here).
trait OpenCount {
    fn open_count(dir: &std::path::Path) -> usize;
}

impl OpenCount for FileMetadataStore {
    #[allow(
        clippy::disallowed_methods,
        reason = "test helper: copies the locked log file to count its records"
    )]
    fn open_count(dir: &std::path::Path) -> usize {
        // The log is locked by the live authorizer's store: read it without the lock.
        FileMetadataStore::read_only(dir).unwrap().records.len()
    }
}

#[test]
fn acls_survive_reopen_and_changes_apply_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = AclAuthorizerConfig::new(vec![], false);
    let ctx = common::ctx("User:b", "127.0.0.1");
    let action = portcullis::authorizer::Action::new(Op::Write, Rt::Topic, "payments");
    {
        let store = Arc::new(FileMetadataStore::open(dir.path()).unwrap());
        let authorizer = AclAuthorizer::open(&config, store).unwrap();
        assert_eq!(
            authorizer.decide(&ctx, &action),
            portcullis::authorizer::Decision::Denied
        );
        assert!(authorizer.create_acls(&corpus()).iter().all(Result::is_ok));
        // Live: no reconnect, no reload.
        assert_eq!(
            authorizer.decide(&ctx, &action),
            portcullis::authorizer::Decision::Allowed
        );
        authorizer
            .delete_acls(&[filter(Rt::Topic, Some("other"), Pt::Prefixed)])
            .unwrap();
    }
    let store = Arc::new(FileMetadataStore::open(dir.path()).unwrap());
    let authorizer = AclAuthorizer::open(&config, store).unwrap();
    let expected: Vec<AclBinding> = sorted(
        corpus()
            .into_iter()
            .filter(|b| b.pattern.name != "other")
            .collect(),
    );
    assert_eq!(authorizer.describe_acls(&AclBindingFilter::any()), expected);
    assert_eq!(
        authorizer.decide(&ctx, &action),
        portcullis::authorizer::Decision::Allowed
    );
}

#[test]
fn a_stored_acl_without_type_name_principal_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = FileMetadataStore::open(dir.path()).unwrap();
        let mut bad = allow(Rt::Topic, Pt::Literal, "t", "User:a", Op::Read);
        bad.entry.principal = "alice".into();
        store
            .append(&[MetadataRecord::Acl { binding: bad }])
            .unwrap();
    }
    let store = Arc::new(FileMetadataStore::open(dir.path()).unwrap());
    let result = AclAuthorizer::open(&AclAuthorizerConfig::default(), store);
    assert!(matches!(
        result,
        Err(AclAuthorizerError::InvalidStoredAcl { .. })
    ));
}

#[test]
fn registered_as_acl() {
    let factory = portcullis::registry::authorizers()
        .find(|f| f.name == "acl")
        .expect("the acl authorizer is registered");
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MetadataStore> = Arc::new(FileMetadataStore::open(dir.path()).unwrap());
    let settings = portcullis::registry::AuthorizerSettings::new(vec!["User:admin".into()], false);
    let host = portcullis::Host::detached();
    let input = |config, settings| {
        portcullis::registry::AuthorizerInput::new(config, &host, settings, Arc::clone(&store))
    };
    let authorizer = (factory.build)(&input("", &settings)).unwrap();
    assert!(authorizer.acl_admin().is_some());
    let bad = portcullis::registry::AuthorizerSettings::new(vec!["admin".into()], false);
    assert!((factory.build)(&input("", &bad)).is_err());
    // Its own table takes no keys: a typo is refused, naming the key.
    let Err(typo) = (factory.build)(&input("super_users = []", &settings)) else {
        panic!("a key in the acl plugin's own table must be refused")
    };
    assert!(
        typo.to_string().contains("unknown field `super_users`"),
        "{typo}"
    );
}

/// Two DeleteAcls decided on the same view (two connections, or two nodes' requests on the
/// writer) must not both report the same ACL as deleted: Kafka serialises them on its controller.
/// Each removal is conditional on the binding still being live, so the second is decided again on
/// the new view and finds nothing. Concurrent creations of one binding store it once.
#[test]
fn concurrent_deletes_report_an_acl_once_and_creates_store_it_once() {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    use kafka_protocol::messages::{
        ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
        RequestHeader, ResponseHeader,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use portcullis::envelope::ForwardedPrincipal;
    use portcullis::local::acls::AclApis;
    use portcullis::local::forwarded::run_on_writer;
    use portcullis::local::{Effect, LocalHandler};
    use portcullis::principal::Principal;

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileMetadataStore::open(dir.path()).unwrap());
    let config = AclAuthorizerConfig::new(vec!["User:admin".into()], false);
    let authorizer = Arc::new(AclAuthorizer::open(&config, store.clone()).unwrap());
    let handlers: Vec<Arc<dyn LocalHandler>> = AclApis::handlers(Some(authorizer.clone()))
        .into_iter()
        .collect();
    let admin = ForwardedPrincipal {
        principal: Principal::user("admin"),
        token_authenticated: false,
        groups: Vec::new(),
    };
    let frame = |key: ApiKey, body: &dyn Fn(&mut BytesMut)| -> Bytes {
        let mut out = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(2)
            .with_correlation_id(1)
            .encode(&mut out, 2)
            .unwrap();
        body(&mut out);
        out.freeze()
    };
    // Run as the cluster's writer runs every mutation (its own clients' and forwarded ones).
    let handle = |frame: &Bytes| -> Effect {
        run_on_writer(
            &handlers,
            frame,
            &admin,
            "127.0.0.1".parse().unwrap(),
            "test",
            0,
        )
        .unwrap()
    };
    let answer = |effect: Effect| -> Bytes {
        match effect.resolve(store.as_ref(), 0) {
            Effect::Respond(bytes) => bytes,
            other => panic!("expected an answer, got {other:?}"),
        }
    };
    let body_of = |bytes: Bytes| -> Bytes {
        let mut buf = bytes;
        ResponseHeader::decode(&mut buf, 1).unwrap();
        buf
    };

    let create = frame(ApiKey::CreateAcls, &|out| {
        CreateAclsRequest::default()
            .with_creations(vec![AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("t"))
                .with_resource_pattern_type(3)
                .with_principal(StrBytes::from_static_str("User:x"))
                .with_host(StrBytes::from_static_str("*"))
                .with_operation(3)
                .with_permission_type(3)])
            .encode(out, 2)
            .unwrap()
    });
    let (first, second) = (handle(&create), handle(&create));
    assert!(matches!(first, Effect::Persist(_)) && matches!(second, Effect::Persist(_)));
    for effect in [first, second] {
        let response = CreateAclsResponse::decode(&mut body_of(answer(effect)), 2).unwrap();
        assert_eq!(response.results[0].error_code, 0);
    }
    let acl_records = |store: &FileMetadataStore| {
        store
            .snapshot()
            .unwrap()
            .into_iter()
            .filter(|r| matches!(r, MetadataRecord::Acl { .. }))
            .count()
    };
    assert_eq!(acl_records(&store), 1, "the binding was stored twice");

    let delete = frame(ApiKey::DeleteAcls, &|out| {
        DeleteAclsRequest::default()
            .with_filters(vec![DeleteAclsFilter::default()
                .with_resource_type_filter(2)
                .with_resource_name_filter(None)
                .with_pattern_type_filter(1)
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1)])
            .encode(out, 2)
            .unwrap()
    });
    // Both decided before either is written.
    let (first, second) = (handle(&delete), handle(&delete));
    let reported: Vec<usize> = [first, second]
        .into_iter()
        .map(|effect| {
            let response = DeleteAclsResponse::decode(&mut body_of(answer(effect)), 2).unwrap();
            response.filter_results[0].matching_acls.len()
        })
        .collect();
    assert_eq!(reported, [1, 0], "both deletions reported the ACL");
    assert!(authorizer
        .describe_acls(&filter(Rt::Any, None, Pt::Any))
        .is_empty());
}
