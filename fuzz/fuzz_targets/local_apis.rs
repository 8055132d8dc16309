//! The locally served security APIs (CreateAcls, DescribeAcls, DeleteAcls,
//! DescribeUserScramCredentials, AlterUserScramCredentials, and the four delegation-token APIs)
//! behind an authenticated connection: the first byte picks the API and version, the rest is the
//! request body. Writes are carried out on an in-memory store. Never panics; bad bodies close the
//! connection.
#![no_main]

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use bytes::{BufMut, Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use portcullis::authorizer::{Decision, FixedDecision};
use portcullis::connection::{Action, Connection, ConnectionConfig, NodeServices};
use portcullis::credentials::{ScramCredential, ScramMechanism};
use portcullis::events::EventBus;
use portcullis::forwarding::{ForwardingPolicy, RequestInfo, Route, UpstreamIdentity};
use portcullis::local::acls::AclApis;
use portcullis::local::delegation_tokens::DelegationTokenApis;
use portcullis::local::scram_credentials::{
    CredentialAdmin, CredentialChange, ScramCredentialsApi,
};
use portcullis::local::Effect;
use portcullis::local::LocalHandler;
use portcullis::principal::DefaultPrincipalBuilder;
use portcullis::protocol::api::is_security_api;
use portcullis::protocol::versions::ApiVersionTable;
use portcullis::sasl::{Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome};
use portcullis::secret::Secret;
use portcullis::store::memory::MemoryStore;
use portcullis::store::{MetadataRecord, MetadataStore};
use portcullis::tokens::{TokenConfig, TokenCrypto, TokenManager};

/// Authenticates anyone: the target is what comes after authentication.
struct Anyone;
struct AnyoneExchange;
impl SaslMechanism for Anyone {
    fn name(&self) -> &str {
        "FUZZ"
    }
    fn start(&self, _: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(AnyoneExchange)
    }
}
impl SaslExchange for AnyoneExchange {
    fn step(&mut self, _: &[u8]) -> StepOutcome {
        StepOutcome::Complete(Authenticated::new("admin"))
    }
}

struct SecurityLocal;
impl ForwardingPolicy for SecurityLocal {
    fn name(&self) -> &str {
        "fuzz"
    }
    fn route(&self, r: &RequestInfo<'_>) -> Route {
        if is_security_api(r.api_key) {
            Route::Local
        } else {
            Route::Upstream {
                identity: UpstreamIdentity::Service,
            }
        }
    }
}

#[derive(Default)]
struct Memory(Mutex<Vec<(String, ScramMechanism, u32)>>);
impl CredentialAdmin for Memory {
    fn list(&self) -> Vec<(String, ScramMechanism, u32)> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
    fn records(&self, changes: &[CredentialChange]) -> Vec<MetadataRecord> {
        let _ = changes.len();
        Vec::new()
    }
}

/// Ids from a counter; no PBKDF2 (the fuzzer wants speed, not keys).
struct Crypto;
impl TokenCrypto for Crypto {
    fn random_id_bytes(&self) -> [u8; 16] {
        [7; 16]
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

const APIS: [(i16, i16, i16); 9] = [
    (29, 1, 3),
    (30, 1, 3),
    (31, 1, 3),
    (50, 0, 0),
    (51, 0, 0),
    (38, 1, 3),
    (39, 1, 2),
    (40, 1, 2),
    (41, 1, 3),
];

fn frame(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(api_key);
    b.put_i16(version);
    b.put_i32(correlation_id);
    b.put_i16(-1);
    // Flexible versions carry a tagged-field section in the header.
    let flexible = matches!((api_key, version), (29..=31 | 38..=41, 2..) | (50 | 51, _));
    if flexible {
        b.put_u8(0);
    }
    b.put_slice(body);
    b.freeze()
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let Some(&(api_key, min, max)) = APIS.get(usize::from(selector) % APIS.len()) else {
        return;
    };
    let version = min + i16::from(selector >> 4) % (max - min + 1);
    let allow: Arc<dyn portcullis::authorizer::Authorizer> =
        Arc::new(FixedDecision(Decision::Allowed));
    let authorizer = if selector & 0x08 == 0 {
        None
    } else {
        Some(allow)
    };
    let mut handlers: Vec<Arc<dyn LocalHandler>> =
        AclApis::handlers(authorizer.clone()).into_iter().collect();
    handlers.extend(ScramCredentialsApi::handlers(
        Arc::new(Memory::default()),
        authorizer.clone(),
    ));
    let store = Arc::new(MemoryStore::new());
    let tokens = Arc::new(TokenManager::new(
        TokenConfig::new(Secret::new("fuzz")),
        Arc::new(Crypto),
        0,
    ));
    let follower = tokens.clone();
    let _ = store.subscribe(
        0,
        Box::new(move |records| {
            let _ = follower.apply(records, 0);
        }),
    );
    let enabled = if selector & 0x04 == 0 {
        Some(tokens)
    } else {
        None
    };
    handlers.extend(DelegationTokenApis::handlers(enabled, authorizer));
    let local = handlers
        .iter()
        .map(|h| (h.api_key(), h.versions().0, h.versions().1));
    let versions = ApiVersionTable::advertised_with(&ApiVersionTable::default(), local);
    let config = ConnectionConfig::new(
        "fuzz",
        Arc::new(
            NodeServices::new(
                vec![Arc::new(Anyone)],
                Arc::new(DefaultPrincipalBuilder),
                Arc::new(SecurityLocal),
                EventBus::new(),
            )
            .with_local_handlers(handlers),
        ),
        Arc::new(ArcSwap::from_pointee(versions)),
    );
    let mut conn = Connection::new(Arc::new(config), IpAddr::from([127, 0, 0, 1]), false);
    // SaslHandshake v1 "FUZZ", then one SaslAuthenticate v1 round.
    let _ = conn.handle_frame(frame(17, 1, 1, &[0, 4, b'F', b'U', b'Z', b'Z']), 0);
    let _ = conn.handle_frame(frame(36, 1, 2, &[0, 0, 0, 0]), 0);
    assert!(conn.session().is_some());
    for action in conn.handle_frame(frame(api_key, version, 3, body), 0) {
        if let Action::Persist(persist) = action {
            let _ = Effect::Persist(persist).resolve(store.as_ref(), 0);
        }
    }
});
