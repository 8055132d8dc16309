//! The PLAIN server parses one unauthenticated message and checks a password.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use portcullis::credentials::{InMemoryCredentials, ScramMechanism};
use portcullis::sasl::{AuthFailure, ExchangeContext, SaslExchange, StepOutcome};
use portcullis_plugin_plain::PlainServer;
use portcullis_plugin_scram::derive_credential;

fn server() -> &'static PlainServer {
    static SERVER: OnceLock<PlainServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let creds = InMemoryCredentials::new();
        creds.upsert(
            "alice",
            ScramMechanism::Sha256,
            derive_credential(ScramMechanism::Sha256, "pw", b"fuzz-salt", 4096),
        );
        PlainServer::new(Arc::new(creds))
    })
}

fuzz_target!(|data: &[u8]| {
    let context = ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "fuzz", 0);
    let mut exchange = server().start_exchange(&context);
    match exchange.step(data) {
        // The only way in is alice's password, with an empty or matching authzid.
        StepOutcome::Complete(done) => {
            assert_eq!(done.authorization_id, "alice");
            assert!(data == b"\0alice\0pw" || data == b"alice\0alice\0pw");
        }
        StepOutcome::Continue(_) => panic!("PLAIN has no second message"),
        // Every PLAIN failure is reported to the client, as Kafka does.
        StepOutcome::Fail(failure) => assert!(matches!(failure, AuthFailure::Visible(_))),
        other => panic!("unknown outcome {other:?}"),
    }
    assert!(matches!(exchange.step(data), StepOutcome::Fail(_)));
});
