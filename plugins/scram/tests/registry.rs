//! Both SCRAM mechanisms reach the host through the built-in registry and authenticate.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use portcullis::credentials::{InMemoryCredentials, NoTokens, ScramMechanism};
use portcullis::login::SaslClientExchange;
use portcullis::registry::mechanisms;
use portcullis::sasl::{ExchangeContext, StepOutcome};
use portcullis::secret::Secret;
use portcullis_plugin_scram::{derive_credential, random_salt, ScramClient};

#[test]
fn both_mechanisms_are_registered_and_work() {
    let creds = Arc::new(InMemoryCredentials::new());
    for mechanism in ScramMechanism::ALL {
        creds.upsert(
            "alice",
            mechanism,
            derive_credential(mechanism, "pw", &random_salt(), 4096),
        );
    }
    let host = portcullis::Host::with_views(creds, Arc::new(NoTokens));
    let context = ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "test", 0);
    for mechanism in ScramMechanism::ALL {
        let factory = mechanisms()
            .find(|f| f.name == mechanism.mechanism_name())
            .unwrap_or_else(|| panic!("{mechanism} is not registered"));
        let server = (factory.build)("", &host).unwrap();
        assert_eq!(server.name(), mechanism.mechanism_name());
        let mut exchange = server.start(&context);
        let mut client = ScramClient::new(mechanism, "alice", Secret::new("pw"));
        let StepOutcome::Continue(server_first) = exchange.step(&client.initial().unwrap()) else {
            panic!("no server-first");
        };
        let client_final = client.step(&server_first).unwrap().unwrap();
        let StepOutcome::Complete(done) = exchange.step(&client_final) else {
            panic!("{mechanism}: not authenticated");
        };
        assert_eq!(done.authorization_id, "alice");
        assert_eq!(client.step(&done.server_final).unwrap(), None);
        assert!(client.is_complete());
    }
}
