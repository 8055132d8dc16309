//! The SCRAM server sees two unauthenticated client messages: fuzz both, for both hash variants,
//! for users, unknown users and delegation tokens. Input: `selector byte, client-first, NUL,
//! client-final` (neither message may contain NUL, so the split loses nothing reachable).
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use portcullis::credentials::{InMemoryCredentials, ScramMechanism, TokenCredential, TokenView};
use portcullis::sasl::{ExchangeContext, SaslExchange, StepOutcome};
use portcullis_plugin_scram::{derive_credential, ScramServer};

struct OneToken(TokenCredential);

impl TokenView for OneToken {
    fn token(&self, id: &str, _mechanism: ScramMechanism) -> Option<TokenCredential> {
        (id == "tok").then(|| self.0.clone())
    }
}

fn servers() -> &'static [ScramServer; 2] {
    static SERVERS: OnceLock<[ScramServer; 2]> = OnceLock::new();
    SERVERS.get_or_init(|| {
        ScramMechanism::ALL.map(|mechanism| {
            let creds = InMemoryCredentials::new();
            // A fixed salt keeps runs reproducible; PBKDF2 runs once, here.
            creds.upsert(
                "alice",
                mechanism,
                derive_credential(mechanism, "pw", b"fuzz-salt", 4096),
            );
            let token = TokenCredential::new(
                "owner",
                derive_credential(mechanism, "token-hmac", b"fuzz-salt", 4096),
                i64::MAX,
            );
            ScramServer::new(mechanism, Arc::new(creds), Arc::new(OneToken(token)))
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((selector, rest)) = data.split_first() else {
        return;
    };
    let Some(server) = servers().get(usize::from(selector & 1)) else {
        return;
    };
    let mut parts = rest.splitn(2, |&b| b == 0);
    let first = parts.next().unwrap_or_default();
    let last = parts.next().unwrap_or_default();
    let context = ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "fuzz", 0);
    let mut exchange = server.start_exchange(&context);
    match exchange.step(first) {
        StepOutcome::Continue(server_first) => {
            assert!(server_first.starts_with(b"r="));
            match exchange.step(last) {
                // Forging a proof would mean breaking HMAC: a success here is a bug.
                StepOutcome::Complete(done) => {
                    panic!("fuzzer authenticated as {}", done.authorization_id)
                }
                StepOutcome::Continue(_) => panic!("SCRAM has no third server message"),
                StepOutcome::Fail(_) => {}
                other => panic!("unknown outcome {other:?}"),
            }
        }
        StepOutcome::Complete(_) => panic!("completed after one message"),
        StepOutcome::Fail(_) => {}
        other => panic!("unknown outcome {other:?}"),
    }
    // A finished exchange stays finished.
    assert!(matches!(exchange.step(last), StepOutcome::Fail(_)));
});
