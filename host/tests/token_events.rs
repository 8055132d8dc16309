//! A small in-tree subscriber on a real node: token changes written through the store writer come
//! back as events (what a plugin subscribing to the event bus sees), the re-authentication
//! scheduler closes a token's sessions when it expires, and a renewal reaches the next
//! authentication's lifetime.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis::credentials::{CredentialId, ScramMechanism, TokenView};
use portcullis::events::Event;
use portcullis::principal::Principal;
use portcullis::tokens::CreateRequest;
use portcullis_host::config;
use portcullis_host::node::Node;

fn node(dir: &tempfile::TempDir) -> Node {
    let path = dir.path().join("portcullis.toml");
    let text = format!(
        r#"[node]
id = 1
data_dir = "{}"

[listener]
address = "127.0.0.1:0"
advertised_host = "localhost"
broker_port_base = 9100
sasl_mechanisms = ["SCRAM-SHA-512"]

[upstream]
bootstrap_servers = ["127.0.0.1:19092"]

[delegation_tokens]
secret = "events-test-secret"
"#,
        dir.path().join("data").display()
    );
    std::fs::write(&path, text).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    Node::build(config::load(&path).unwrap()).unwrap()
}

/// Opens the node again once the previous one's writer thread has let go of the directory lock.
fn reopen(dir: &tempfile::TempDir) -> Node {
    let path = dir.path().join("portcullis.toml");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Node::build(config::load(&path).unwrap()) {
            Ok(node) => return node,
            Err(e) if Instant::now() < deadline && format!("{:?}", e).contains("Locked") => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

fn now_ms() -> i64 {
    portcullis_host::services::now_ms()
}

/// The next token event, skipping others, within a deadline.
fn next_token_event(subscription: &portcullis::events::Subscription) -> Event {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match subscription.try_recv() {
            Some(
                e @ (Event::TokenCreated { .. }
                | Event::TokenRenewed { .. }
                | Event::TokenExpired { .. }),
            ) => return e,
            Some(_) => {}
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    panic!("no token event within 5 s");
}

#[test]
fn a_subscriber_sees_token_events_and_sessions_end_with_their_token() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir);
    let tokens = node.tokens.clone().expect("tokens are enabled");
    let plugin = node.services.events.subscribe(64);

    let owner = Principal::user("alice");
    let created = tokens
        .create(
            &CreateRequest {
                requester: owner.clone(),
                owner: owner.clone(),
                renewers: vec![],
                max_lifetime_ms: -1,
            },
            now_ms(),
        )
        .unwrap();
    node.writer.persist_blocking(created.batch.clone()).unwrap();
    let id = created.info.token_id.clone();
    assert!(matches!(
        next_token_event(&plugin),
        Event::TokenCreated { token_id, owner: o, .. } if token_id == id && o == owner
    ));

    // A live session authenticated with the token (idle: it sends nothing).
    let first_expiry = tokens.token(&id, ScramMechanism::Sha512).unwrap().expiry_ms;
    let session = node
        .services
        .sessions
        .register(CredentialId::token(id.clone()), Some(first_expiry));

    // A renewal: the event, and the next authentication gets the new expiry.
    let renewal = tokens
        .renew(&owner, &created.hmac, 60_000, now_ms())
        .unwrap();
    node.writer.persist_blocking(renewal.batch).unwrap();
    assert!(matches!(
        next_token_event(&plugin),
        Event::TokenRenewed { token_id, expiry_ms } if token_id == id && expiry_ms == renewal.expiry_ms
    ));
    assert_eq!(
        tokens.token(&id, ScramMechanism::Sha512).unwrap().expiry_ms,
        renewal.expiry_ms
    );
    assert!(!session.is_revoked());

    // Expired by request: removed, the event, and the idle session is revoked at once.
    let removal = tokens.expire(&owner, &created.hmac, -1, now_ms()).unwrap();
    node.writer.persist_blocking(removal.batch).unwrap();
    assert!(matches!(
        next_token_event(&plugin),
        Event::TokenExpired { token_id, removed: true, .. } if token_id == id
    ));
    let deadline = Instant::now() + Duration::from_secs(1);
    while !session.is_revoked() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        session.is_revoked(),
        "the token's session was not closed within 1 s"
    );
    assert!(tokens.token(&id, ScramMechanism::Sha512).is_none());
    drop(Arc::clone(&tokens));
}

#[test]
fn tokens_survive_a_restart_of_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let node = node(&dir);
        let tokens = node.tokens.clone().unwrap();
        let created = tokens
            .create(
                &CreateRequest {
                    requester: Principal::user("bob"),
                    owner: Principal::user("bob"),
                    renewers: vec![Principal::user("carol")],
                    max_lifetime_ms: -1,
                },
                now_ms(),
            )
            .unwrap();
        node.writer.persist_blocking(created.batch).unwrap();
        created.info.token_id
    };
    // The stopped node's store writer thread releases the data directory as it ends.
    let node = reopen(&dir);
    let info = node
        .tokens
        .as_ref()
        .unwrap()
        .get(&id)
        .expect("the token is back");
    assert_eq!(info.renewers, vec![Principal::user("carol")]);
}
