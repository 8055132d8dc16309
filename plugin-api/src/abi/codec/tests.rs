//! Round trips and hostile input for every encoding.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::*;
use crate::acl::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, PatternType, PermissionType,
    ResourcePattern, ResourceType,
};
use crate::authorizer::AclAdminError;
use crate::credentials::{CredentialId, ScramMechanism};
use crate::events::Event;
use crate::login::ExpiringCredential;
use crate::plugin::{ConfigError, PluginError};
use crate::principal::{Principal, PrincipalError};
use crate::sasl::TokenClaims;

#[test]
fn maps_and_lists_round_trip() {
    let mut map = BTreeMap::new();
    map.insert("tokenauth".to_owned(), "true".to_owned());
    map.insert("a,b=c\0".to_owned(), String::new());
    assert_eq!(decode_string_map(&encode_string_map(&map)), Ok(map));
    assert_eq!(decode_string_map(&[]), Ok(BTreeMap::new()));
    let chain = vec![vec![1, 2, 3], Vec::new(), vec![0xff; 300]];
    assert_eq!(decode_byte_list(&encode_byte_list(&chain)), Ok(chain));
}

#[test]
fn truncated_and_forged_input_is_an_error_not_a_panic() {
    assert_eq!(decode_string_map(&[1, 0, 0]), Err(CodecError::Truncated));
    assert_eq!(
        decode_string_map(&[5, 0, 0, 0, b'a']),
        Err(CodecError::Truncated)
    );
    assert_eq!(
        decode_string_map(&[1, 0, 0, 0, 0xff, 0, 0, 0, 0]),
        Err(CodecError::NotUtf8)
    );
    // A count of 2^32-1 bindings in 4 bytes reserves nothing.
    assert_eq!(decode_bindings(&[0xff; 4]), Err(CodecError::Truncated));
    for len in 0..40 {
        let bytes = vec![7u8; len];
        let _ = decode_event(&bytes);
        let _ = decode_filters(&bytes);
        let _ = decode_delete_result(&bytes);
        let _ = decode_plugin_error(&bytes);
        let _ = decode_principal_error(&bytes);
    }
}

fn binding(name: &str) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern::new(ResourceType::Topic, name, PatternType::Prefixed),
        entry: AccessControlEntry {
            principal: "User:alice".into(),
            host: "*".into(),
            operation: AclOperation::Write,
            permission: PermissionType::Allow,
        },
    }
}

#[test]
fn acls_round_trip() {
    let bindings = vec![binding("a"), binding("é")];
    assert_eq!(
        decode_bindings(&encode_bindings(&bindings)),
        Ok(bindings.clone())
    );
    let filters = vec![AclBindingFilter::any(), {
        let mut f = AclBindingFilter::any();
        f.pattern.name = Some("x".into());
        f.entry.principal = Some("User:bob".into());
        f
    }];
    assert_eq!(decode_filters(&encode_filters(&filters)), Ok(filters));
    let results = vec![
        Ok(()),
        Err(AclAdminError::Invalid(crate::acl::InvalidAcl("bad".into()))),
        Err(AclAdminError::Store("disk".into())),
    ];
    assert_eq!(
        decode_create_results(&encode_create_results(&results)),
        Ok(results)
    );
    let deleted = Ok(vec![bindings.clone(), Vec::new()]);
    assert_eq!(
        decode_delete_result(&encode_delete_result(&deleted)),
        Ok(deleted)
    );
}

#[test]
fn events_and_errors_round_trip() {
    let events = [
        Event::SessionAuthenticated {
            principal: Principal::user("alice"),
            mechanism: "PLAIN".into(),
            client_address: IpAddr::from([127, 0, 0, 1]),
            token_claims: None,
        },
        Event::SessionAuthenticated {
            principal: Principal::user("alice"),
            mechanism: "OAUTHBEARER".into(),
            client_address: IpAddr::from([127, 0, 0, 1]),
            token_claims: Some(TokenClaims::new(
                vec!["kafka.read".into(), "é".into()],
                vec!["readers".into(), "".into(), "a:b".into()],
                Some("jti-1".into()),
            )),
        },
        Event::SessionReauthenticated {
            principal: Principal::user("alice"),
            mechanism: "OAUTHBEARER".into(),
            client_address: "::1".parse().unwrap(),
            token_claims: Some(TokenClaims::new(Vec::new(), vec!["g".into()], None)),
        },
        Event::SessionReauthenticated {
            principal: Principal::user("bob"),
            mechanism: "PLAIN".into(),
            client_address: "::1".parse().unwrap(),
            token_claims: None,
        },
        Event::AuthenticationFailed {
            mechanism: None,
            client_address: "::1".parse().unwrap(),
            reason: "bad".into(),
        },
        Event::AclsChanged {
            created: 2,
            deleted: 1,
        },
        Event::TokenExpired {
            token_id: "t".into(),
            owner: Principal::user("o"),
            removed: true,
        },
        Event::CredentialRevoked {
            credential: CredentialId::scram("u", ScramMechanism::Sha512),
        },
        Event::CredentialRefreshed {
            principal_name: "svc".into(),
            expiry_ms: Some(5),
        },
    ];
    for event in events {
        assert_eq!(decode_event(&encode_event(&event)), Ok(event));
    }
    assert_eq!(
        decode_event(&[99, 0, 0, 0]),
        Err(CodecError::UnknownCode(99))
    );

    let error = PluginError::Config(ConfigError::new("unknown field `x`", Some(3..4)));
    assert!(matches!(
        decode_plugin_error(&encode_plugin_error(&error)),
        Ok(PluginError::Config(c)) if c.span == Some(3..4) && c.message == "unknown field `x`"
    ));
    let error = PrincipalError::NoRuleApplies {
        name: "CN=x".into(),
    };
    assert_eq!(
        decode_principal_error(&encode_principal_error(&error)),
        error
    );
    let credential = ExpiringCredential::expiring("svc", 1, 2);
    assert_eq!(
        decode_expiring_credential(&encode_expiring_credential(&credential)),
        Ok(credential)
    );
}

/// The token claims were appended to the session events: an event without them encodes as
/// before plus one byte, an older host's bytes (which end before them) decode as `None`, and
/// the bytes an older subscriber reads (the prefix) are those of the same event without
/// claims, so it decodes the event it always did.
#[test]
fn session_events_grew_by_appending_their_token_claims() {
    let claims = TokenClaims::new(
        vec!["s".into()],
        vec!["readers".into(), "writers".into()],
        Some("id".into()),
    );
    for (with, without) in [
        (
            Event::SessionAuthenticated {
                principal: Principal::user("alice"),
                mechanism: "OAUTHBEARER".into(),
                client_address: IpAddr::from([10, 0, 0, 1]),
                token_claims: Some(claims.clone()),
            },
            Event::SessionAuthenticated {
                principal: Principal::user("alice"),
                mechanism: "OAUTHBEARER".into(),
                client_address: IpAddr::from([10, 0, 0, 1]),
                token_claims: None,
            },
        ),
        (
            Event::SessionReauthenticated {
                principal: Principal::user("alice"),
                mechanism: "OAUTHBEARER".into(),
                client_address: IpAddr::from([10, 0, 0, 1]),
                token_claims: Some(claims.clone()),
            },
            Event::SessionReauthenticated {
                principal: Principal::user("alice"),
                mechanism: "OAUTHBEARER".into(),
                client_address: IpAddr::from([10, 0, 0, 1]),
                token_claims: None,
            },
        ),
    ] {
        let new = encode_event(&with);
        let none = encode_event(&without);
        // What a host before the claims wrote: everything but the trailing presence byte.
        let old = &none[..none.len() - 1];
        assert_eq!(none.last(), Some(&0));
        assert_eq!(decode_event(old), Ok(without.clone()));
        assert!(
            new.starts_with(old),
            "the older fields come first, unchanged"
        );
        assert_eq!(decode_event(&new), Ok(with));
        // Cut inside the claims: an error, not a panic and not a silent `None`.
        for cut in old.len() + 1..new.len() {
            assert!(decode_event(&new[..cut]).is_err(), "cut at {cut}");
        }
    }
}
