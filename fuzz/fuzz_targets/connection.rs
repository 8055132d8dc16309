//! The connection state machine fed a sequence of arbitrary frames, with the real SCRAM and
//! PLAIN mechanisms behind it. The first byte of each chunk picks a frame length.
#![no_main]

use std::net::IpAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use libfuzzer_sys::fuzz_target;
use portcullis::connection::{Connection, ConnectionConfig};
use portcullis::credentials::{InMemoryCredentials, NoTokens, ScramMechanism};
use portcullis::events::EventBus;
use portcullis::forwarding::{ForwardingPolicy, RequestInfo, Route, UpstreamIdentity};
use portcullis::principal::DefaultPrincipalBuilder;
use portcullis::protocol::versions::ApiVersionTable;
use portcullis::sasl::SaslMechanism;
use portcullis_plugin_plain::PlainServer;
use portcullis_plugin_scram::ScramServer;

struct Upstream;
impl ForwardingPolicy for Upstream {
    fn name(&self) -> &str {
        "fuzz"
    }
    fn route(&self, _: &RequestInfo<'_>) -> Route {
        Route::Upstream {
            identity: UpstreamIdentity::Service,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let credentials = Arc::new(InMemoryCredentials::new());
    let host = portcullis::Host::with_views(credentials.clone(), Arc::new(NoTokens));
    let mechanisms: Vec<Arc<dyn SaslMechanism>> = vec![
        Arc::new(ScramServer::from_host(ScramMechanism::Sha512, &host)),
        Arc::new(ScramServer::from_host(ScramMechanism::Sha256, &host)),
        Arc::new(PlainServer::new(credentials)),
    ];
    let upstream = ApiVersionTable::from_ranges([(0, 3, 11), (3, 0, 12), (10, 0, 6)]);
    let versions = Arc::new(ArcSwap::from_pointee(ApiVersionTable::advertised(
        &upstream,
    )));
    let config = ConnectionConfig::new(
        "fuzz",
        mechanisms,
        Arc::new(DefaultPrincipalBuilder),
        Arc::new(Upstream),
        versions,
        EventBus::new(),
    );
    let mut conn = Connection::new(Arc::new(config), IpAddr::from([127, 0, 0, 1]), false);
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        let (frame, next) = tail.split_at(len);
        let _ = conn.handle_frame(bytes::Bytes::copy_from_slice(frame), 0);
        if conn.is_failed() {
            break;
        }
        rest = next;
    }
});
