//! What the in-process telemetry tests share: an in-process gateway in front of the real broker
//! named by `PORTCULLIS_TEST_KAFKA`, and a raw Kafka client that speaks SASL/SCRAM.
#![allow(
    dead_code,
    reason = "each test binary that includes this module uses a part of it"
)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, ResponseHeader, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use portcullis::acl::{
    AccessControlEntry, AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern,
    ResourceType,
};
use portcullis::credentials::ScramMechanism;
use portcullis::login::SaslClientExchange;
use portcullis::secret::Secret;
use portcullis::store::MetadataRecord;
use portcullis_host::config::Config;
use portcullis_host::node::Node;
use portcullis_host::server::{Server, ServerParts};
use portcullis_plugin_scram::{derive_credential, random_salt, ScramClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any one step may take before the test fails (generous: the machine is shared).
pub const WAIT: Duration = Duration::from_secs(30);

pub fn upstream_bootstrap() -> String {
    match std::env::var("PORTCULLIS_TEST_KAFKA") {
        Ok(v) if !v.is_empty() => v,
        _ => panic!("PORTCULLIS_TEST_KAFKA must name the upstream Kafka (host:port); run by scripts/test.sh"),
    }
}

/// A SCRAM-SHA-512 credential for `user`.
pub fn scram_user(user: &str, password: &str) -> MetadataRecord {
    MetadataRecord::ScramCredential {
        user: user.into(),
        mechanism: ScramMechanism::Sha512,
        credential: derive_credential(ScramMechanism::Sha512, password, &random_salt(), 4096),
    }
}

/// An ALLOW ACL for `User:<user>` on the literal topic `topic`.
pub fn allow(user: &str, operation: AclOperation, topic: &str) -> MetadataRecord {
    MetadataRecord::Acl {
        binding: AclBinding {
            pattern: ResourcePattern::new(ResourceType::Topic, topic, PatternType::Literal),
            entry: AccessControlEntry {
                principal: format!("User:{user}"),
                host: "*".into(),
                operation,
                permission: PermissionType::Allow,
            },
        },
    }
}

/// A gateway serving on a free loopback port, SCRAM-SHA-512, ACL authorizer, tokens enabled.
pub struct Gateway {
    pub node: Arc<Node>,
    pub address: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// Starts it with `listener_extra` appended to `[listener]` and `records` in its store.
    pub async fn start(listener_extra: &str, records: &[MetadataRecord]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            r#"
[node]
id = 1
data_dir = "{data}"

[listener]
address = "127.0.0.1:0"
advertised_host = "127.0.0.1"
broker_port_base = {port_base}
sasl_mechanisms = ["SCRAM-SHA-512"]
failed_authentication_delay_ms = 10
{listener_extra}

[upstream]
bootstrap_servers = ["{upstream}"]
connect_timeout_ms = 10000

[authorizer]
plugin = "acl"

[delegation_tokens]
secret = "telemetry-token-secret"
"#,
            data = dir.path().join("data").display(),
            upstream = upstream_bootstrap(),
            // Broker listeners at base + node id: a port free now, well below the ephemeral
            // range's top.
            port_base = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
                - 100,
        );
        let config: Config = toml::from_str(&text).unwrap();
        let node = Node::build(config).unwrap();
        node.store.shared().append(records).unwrap();
        let node = Arc::new(node);
        let server = Server::bind(ServerParts::from_node(&node)).await.unwrap();
        let address = server.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        let deadline = tokio::time::Instant::now() + WAIT;
        while TcpStream::connect(address).await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "server not listening"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self {
            node,
            address,
            stop,
            task,
            _dir: dir,
        }
    }

    /// Stops serving and waits until the server ended.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}

pub struct Client {
    stream: TcpStream,
    next_id: i32,
}

impl Client {
    pub async fn connect(address: std::net::SocketAddr) -> Self {
        let stream = tokio::time::timeout(WAIT, TcpStream::connect(address))
            .await
            .unwrap()
            .unwrap();
        Self { stream, next_id: 1 }
    }

    /// Sends one request; its correlation id and the response.
    pub async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &Req,
    ) -> (i32, Resp) {
        let correlation_id = self.next_id;
        self.next_id += 1;
        let frame =
            super::wire_common::request_frame(api, version, correlation_id, "telemetry-test", body);
        self.stream.write_all(&frame).await.unwrap();
        let read = async {
            let mut size = [0u8; 4];
            self.stream.read_exact(&mut size).await.unwrap();
            let mut payload = vec![0u8; usize::try_from(i32::from_be_bytes(size)).unwrap()];
            self.stream.read_exact(&mut payload).await.unwrap();
            Bytes::from(payload)
        };
        let mut response = tokio::time::timeout(WAIT, read).await.expect("no response");
        let header =
            ResponseHeader::decode(&mut response, api.response_header_version(version)).unwrap();
        assert_eq!(header.correlation_id, correlation_id);
        (
            correlation_id,
            Resp::decode(&mut response, version).unwrap(),
        )
    }

    /// ApiVersions, then a SCRAM-SHA-512 exchange; the last error code.
    pub async fn scram_login(&mut self, user: &str, password: &str) -> i16 {
        let versions = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("telemetry-test"))
            .with_client_software_version(StrBytes::from_static_str("1"));
        let (_, _): (_, ApiVersionsResponse) = self.call(ApiKey::ApiVersions, 3, &versions).await;
        self.scram_exchange(user, password).await
    }

    /// SaslHandshake v1 and the SaslAuthenticate rounds (on an authenticated connection: a
    /// KIP-368 re-authentication); the last error code.
    pub async fn scram_exchange(&mut self, user: &str, password: &str) -> i16 {
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str("SCRAM-SHA-512"));
        let (_, hs): (_, SaslHandshakeResponse) =
            self.call(ApiKey::SaslHandshake, 1, &handshake).await;
        assert_eq!(hs.error_code, 0);
        let mut client = ScramClient::new(
            ScramMechanism::Sha512,
            user,
            Secret::new(password.to_owned()),
        );
        let mut token = client.initial().unwrap();
        loop {
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
            let (_, response): (_, SaslAuthenticateResponse) =
                self.call(ApiKey::SaslAuthenticate, 2, &request).await;
            if response.error_code != 0 {
                return response.error_code;
            }
            match client.step(&response.auth_bytes).unwrap() {
                Some(next) => token = next,
                None => return 0,
            }
        }
    }

    /// Waits until the server closed the connection.
    pub async fn closed(mut self) {
        let mut byte = [0u8; 1];
        let _ = tokio::time::timeout(WAIT, self.stream.read(&mut byte)).await;
    }
}
