//! One full SCRAM server exchange (client-first → server-first → client-final → server-final)
//! per iteration, for SCRAM-SHA-512 and SCRAM-SHA-256.
//!
//! The client's PBKDF2 runs once, before timing, and is then served from a
//! [`SaltedPasswordCache`]; the timed loop holds the server's work (nonce, parsing, lookup,
//! three HMACs and a hash) plus the client's few HMACs on the other side of the wire.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use portcullis::credentials::{InMemoryCredentials, NoTokens, ScramMechanism};
use portcullis::login::SaslClientExchange;
use portcullis::sasl::{ExchangeContext, SaslExchange, StepOutcome};
use portcullis::secret::Secret;
use portcullis_plugin_scram::{
    derive_credential, random_salt, SaltedPasswordCache, ScramClient, ScramServer,
};

fn exchange(
    server: &ScramServer,
    mechanism: ScramMechanism,
    cache: &Arc<SaltedPasswordCache>,
    context: &ExchangeContext,
) -> bool {
    let mut client = ScramClient::new(mechanism, "bench-user", Secret::new("bench-password"))
        .with_cache(Arc::clone(cache));
    let mut exchange = server.start_exchange(context);
    let Ok(first) = client.initial() else {
        return false;
    };
    let StepOutcome::Continue(server_first) = exchange.step(&first) else {
        return false;
    };
    let Ok(Some(client_final)) = client.step(&server_first) else {
        return false;
    };
    match exchange.step(&client_final) {
        StepOutcome::Complete(done) => client.step(&done.server_final).is_ok(),
        _ => false,
    }
}

fn scram_exchange(c: &mut Criterion) {
    let context = ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "bench", 0);
    for mechanism in [ScramMechanism::Sha512, ScramMechanism::Sha256] {
        let credentials = InMemoryCredentials::new();
        credentials.upsert(
            "bench-user",
            mechanism,
            derive_credential(mechanism, "bench-password", &random_salt(), 4096),
        );
        let server = ScramServer::new(mechanism, Arc::new(credentials), Arc::new(NoTokens));
        let cache = Arc::new(SaltedPasswordCache::new());
        // Fills the cache: PBKDF2 happens here, not in the timed loop.
        assert!(exchange(&server, mechanism, &cache, &context));
        c.bench_function(&format!("{mechanism} server exchange"), |b| {
            b.iter(|| assert!(black_box(exchange(&server, mechanism, &cache, &context))))
        });
    }
}

criterion_group!(benches, scram_exchange);
criterion_main!(benches);
