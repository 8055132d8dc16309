use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::*;
use crate::connection::Session;
use crate::principal::Principal;
use crate::protocol::header::RequestHeader;
use crate::reauth::ReauthScheduler;
use crate::store::memory::MemoryStore;
use crate::store::MetadataStore;

/// A credential view that follows a [`MemoryStore`], as the host's does the file store.
struct Memory {
    store: MemoryStore,
    map: Arc<Mutex<BTreeMap<(String, ScramMechanism), u32>>>,
}

impl Default for Memory {
    fn default() -> Self {
        let store = MemoryStore::new();
        let map: Arc<Mutex<BTreeMap<(String, ScramMechanism), u32>>> = Arc::default();
        let view = Arc::clone(&map);
        store
            .subscribe(
                0,
                Box::new(move |records| {
                    let mut map = view.lock().unwrap();
                    for r in records {
                        match &r.record {
                            MetadataRecord::ScramCredential {
                                user,
                                mechanism,
                                credential,
                            } => {
                                map.insert((user.clone(), *mechanism), credential.iterations);
                            }
                            MetadataRecord::RemoveScramCredential { user, mechanism } => {
                                map.remove(&(user.clone(), *mechanism));
                            }
                            _ => {}
                        }
                    }
                }),
            )
            .unwrap();
        Self { store, map }
    }
}

impl CredentialAdmin for Memory {
    fn list(&self) -> Vec<(String, ScramMechanism, u32)> {
        self.map
            .lock()
            .unwrap()
            .iter()
            .map(|((u, m), i)| (u.clone(), *m, *i))
            .collect()
    }
    fn records(&self, changes: &[CredentialChange]) -> Vec<MetadataRecord> {
        changes
            .iter()
            .map(|c| match c {
                CredentialChange::Upsert {
                    user,
                    mechanism,
                    iterations,
                    salt,
                    ..
                } => MetadataRecord::ScramCredential {
                    user: user.clone(),
                    mechanism: *mechanism,
                    credential: crate::credentials::ScramCredential {
                        salt: salt.clone(),
                        stored_key: vec![],
                        server_key: vec![],
                        iterations: *iterations,
                    },
                },
                CredentialChange::Delete { user, mechanism } => {
                    MetadataRecord::RemoveScramCredential {
                        user: user.clone(),
                        mechanism: *mechanism,
                    }
                }
            })
            .collect()
    }
}

fn session() -> Session {
    let principal = Principal::user("admin");
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
        groups: Vec::new(),
        token_claims: None,
        ticket,
    }
}

fn call<T: Encodable, R: Decodable>(handler: &dyn LocalHandler, admin: &Memory, body: &T) -> R {
    let mut buf = BytesMut::new();
    body.encode(&mut buf, 0).unwrap();
    let header = RequestHeader {
        api_key: handler.api_key(),
        api_version: 0,
        correlation_id: 7,
        client_id: None,
        header_len: 0,
    };
    let session = session();
    let request = LocalRequest {
        header: &header,
        body: &buf,
        session: &session,
        client_address: IpAddr::from([127, 0, 0, 1]),
        listener: "test",
        now_ms: 0,
    };
    let Effect::Respond(frame) = handler.handle(&request).resolve(&admin.store, 0) else {
        panic!("closed")
    };
    let mut frame: Bytes = frame;
    let h = ResponseHeader::decode(&mut frame, 1).unwrap();
    assert_eq!(h.correlation_id, 7);
    R::decode(&mut frame, 0).unwrap()
}

fn upsert(user: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
    ScramCredentialUpsertion::default()
        .with_name(StrBytes::from_string(user.into()))
        .with_mechanism(mechanism)
        .with_iterations(iterations)
        .with_salt(Bytes::from_static(b"salt"))
        .with_salted_password(Bytes::from_static(&[1; 64]))
}

fn delete(user: &str, mechanism: i8) -> ScramCredentialDeletion {
    ScramCredentialDeletion::default()
        .with_name(StrBytes::from_string(user.into()))
        .with_mechanism(mechanism)
}

fn codes(r: &AlterUserScramCredentialsResponse) -> Vec<(String, i16)> {
    r.results
        .iter()
        .map(|x| (x.user.to_string(), x.error_code))
        .collect()
}

#[test]
fn alter_validates_like_kafka_and_applies_the_valid_part() {
    let admin = Arc::new(Memory::default());
    let [describe, alter] = ScramCredentialsApi::handlers(admin.clone(), None);
    let request = AlterUserScramCredentialsRequest::default()
        .with_deletions(vec![delete("ghost", 2), delete("dup", 2)])
        .with_upsertions(vec![
            upsert("alice", 2, 8192),
            upsert("dup", 1, 4096),
            upsert("", 1, 4096),
            upsert("weak", 1, 4095),
            upsert("strong", 1, 16385),
            upsert("odd", 9, 4096),
        ]);
    let response: AlterUserScramCredentialsResponse = call(alter.as_ref(), &admin, &request);
    assert_eq!(
        codes(&response),
        vec![
            ("ghost".into(), 91),
            ("dup".into(), 92),
            ("alice".into(), 0),
            ("dup".into(), 92),
            ("".into(), 93),
            ("weak".into(), 93),
            ("strong".into(), 93),
            ("odd".into(), 33),
        ]
    );
    assert_eq!(
        admin.list(),
        vec![("alice".into(), ScramMechanism::Sha512, 8192)]
    );

    let all: DescribeUserScramCredentialsResponse = call(
        describe.as_ref(),
        &admin,
        &DescribeUserScramCredentialsRequest::default(),
    );
    assert_eq!(all.results.len(), 1);
    assert_eq!(all.results[0].credential_infos[0].mechanism, 2);
    assert_eq!(all.results[0].credential_infos[0].iterations, 8192);

    let named = DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
        UserName::default().with_name(StrBytes::from_static_str("alice")),
        UserName::default().with_name(StrBytes::from_static_str("nobody")),
        UserName::default().with_name(StrBytes::from_static_str("twice")),
        UserName::default().with_name(StrBytes::from_static_str("twice")),
    ]));
    let some: DescribeUserScramCredentialsResponse = call(describe.as_ref(), &admin, &named);
    let got: Vec<(String, i16)> = some
        .results
        .iter()
        .map(|r| (r.user.to_string(), r.error_code))
        .collect();
    assert_eq!(
        got,
        vec![
            ("alice".into(), 0),
            ("nobody".into(), 91),
            ("twice".into(), 92)
        ]
    );

    let response: AlterUserScramCredentialsResponse = call(
        alter.as_ref(),
        &admin,
        &AlterUserScramCredentialsRequest::default().with_deletions(vec![delete("alice", 2)]),
    );
    assert_eq!(codes(&response), vec![("alice".into(), 0)]);
    assert!(admin.list().is_empty());
}

#[test]
fn bodies_with_impossible_lengths_close_instead_of_allocating() {
    let admin = Arc::new(Memory::default());
    let [_, alter] = ScramCredentialsApi::handlers(admin, None);
    let header = RequestHeader {
        api_key: 51,
        api_version: 0,
        correlation_id: 1,
        client_id: None,
        header_len: 0,
    };
    let session = session();
    for body in [
        &[0xff, 0xff, 0xff, 0xff, 0x0f][..],
        &[0x7f, 0xff, 0xff, 0xff],
        &[],
        &[1, 2],
    ] {
        let request = LocalRequest {
            header: &header,
            body,
            session: &session,
            client_address: IpAddr::from([127, 0, 0, 1]),
            listener: "test",
            now_ms: 0,
        };
        assert!(
            matches!(alter.handle(&request), Effect::Close(_)),
            "{body:?}"
        );
    }
}

#[test]
fn token_shaped_names_are_refused_only_when_reserved() {
    let shaped = "AAAAAAAAQACAAAAAAAAAAA";
    assert!(crate::tokens::id::has_token_id_shape(shaped));
    let request =
        AlterUserScramCredentialsRequest::default().with_upsertions(vec![upsert(shaped, 2, 4096)]);
    let admin = Arc::new(Memory::default());
    let [_, alter] = ScramCredentialsApi::handlers_reserving_token_ids(admin.clone(), None, true);
    let response: AlterUserScramCredentialsResponse = call(alter.as_ref(), &admin, &request);
    assert_eq!(codes(&response), vec![(shaped.into(), 93)]);
    assert!(admin.list().is_empty());
    let admin = Arc::new(Memory::default());
    let [_, alter] = ScramCredentialsApi::handlers(admin.clone(), None);
    let response: AlterUserScramCredentialsResponse = call(alter.as_ref(), &admin, &request);
    assert_eq!(codes(&response), vec![(shaped.into(), 0)]);
}
