//! Discovering the upstream cluster: its API versions and its brokers, asked of the first
//! bootstrap server that answers.

use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
use portcullis::protocol::versions::ApiVersionTable;

use super::upstream::{pick_version, UpstreamConnection, UpstreamError, UpstreamSettings};

/// The newest Metadata version the host asks for itself.
const METADATA_VERSION: i16 = 12;

/// What the bootstrap servers said about the cluster.
#[derive(Debug)]
pub struct Discovery {
    /// The upstream's API versions.
    pub versions: ApiVersionTable,
    /// Every broker: node id, real host and port.
    pub brokers: Vec<(i32, String, i32)>,
}

/// Asks the first bootstrap server that answers for its API versions and the cluster's brokers.
pub async fn discover(settings: &UpstreamSettings) -> Result<Discovery, UpstreamError> {
    let mut last = UpstreamError::NoAddress("the bootstrap servers".into());
    for address in &settings.bootstrap_servers {
        match discover_from(address, settings).await {
            Ok(discovery) => return Ok(discovery),
            Err(e) => {
                tracing::debug!(%address, error = %e, "discovery from this bootstrap server failed");
                last = e;
            }
        }
    }
    Err(last)
}

async fn discover_from(
    address: &str,
    settings: &UpstreamSettings,
) -> Result<Discovery, UpstreamError> {
    let software = ("portcullis", env!("CARGO_PKG_VERSION"));
    let (mut connection, versions) =
        UpstreamConnection::open(address, settings, Some(software)).await?;
    let versions = versions.unwrap_or_default();
    let version = pick_version(&versions, ApiKey::Metadata, METADATA_VERSION)
        .ok_or(UpstreamError::Unsupported("Metadata"))?;
    // An empty topic list (v1+) asks for brokers only.
    let request = MetadataRequest::default()
        .with_topics(Some(Vec::new()))
        .with_allow_auto_topic_creation(false);
    let response: MetadataResponse = tokio::time::timeout(
        settings.connect_timeout,
        connection.call(ApiKey::Metadata, version, &request),
    )
    .await
    .map_err(|_| UpstreamError::Timeout(address.to_owned()))??;
    let brokers = response
        .brokers
        .iter()
        .map(|b| (b.node_id.0, b.host.to_string(), b.port))
        .collect();
    Ok(Discovery { versions, brokers })
}
