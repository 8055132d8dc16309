//! Broker address rewriting: clients must reach every broker through Portcullis, so each address
//! the upstream hands out (Metadata, FindCoordinator, DescribeCluster) is replaced by
//! `advertised_host:broker_port_base + node_id`, and the real address is remembered in the
//! [`BrokerMap`] for the broker listener that will forward to it.

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, DescribeClusterResponse, FindCoordinatorResponse, MetadataResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::brokers::{broker_port, BrokerMap, PortError};
use super::wire::{decode_response, encode_response, WireError};
use portcullis::protocol::api::{DESCRIBE_CLUSTER, FIND_COORDINATOR, METADATA};

/// DescribeCluster's `endpoint_type` for brokers (KIP-919); controllers (2) are not rewritten:
/// clients reach Portcullis' broker ports only.
const ENDPOINT_TYPE_BROKERS: i8 = 1;
/// The first FindCoordinator version with the `coordinators` list.
const FIND_COORDINATOR_BATCHED: i16 = 4;

/// Where clients are told to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advertised {
    /// `listener.advertised_host`.
    pub host: String,
    /// `listener.broker_port_base`.
    pub port_base: u16,
}

/// A response whose addresses could not be rewritten.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    /// The response does not parse.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A node id has no port.
    #[error(transparent)]
    Port(#[from] PortError),
}

/// A rewritten response and the brokers it names.
#[derive(Debug)]
pub struct Rewritten {
    /// The response frame to send to the client.
    pub frame: Bytes,
    /// The node ids whose advertised ports the client may now connect to.
    pub node_ids: Vec<i32>,
}

/// Whether responses of this API carry broker addresses.
pub fn carries_addresses(api_key: i16) -> bool {
    matches!(api_key, METADATA | FIND_COORDINATOR | DESCRIBE_CLUSTER)
}

/// Rewrites the addresses in a response frame of `api_key` at `version`; other responses are
/// returned unchanged.
pub fn rewrite(
    api_key: i16,
    version: i16,
    frame: Bytes,
    advertised: &Advertised,
    brokers: &BrokerMap,
) -> Result<Rewritten, RewriteError> {
    let mut rewriter = Rewriter {
        advertised,
        brokers,
        node_ids: Vec::new(),
    };
    let frame = match api_key {
        METADATA => {
            let (header, mut body) =
                decode_response::<MetadataResponse>(ApiKey::Metadata, version, frame)?;
            for broker in &mut body.brokers {
                (broker.host, broker.port) =
                    rewriter.address(broker.node_id.0, &broker.host, broker.port)?;
            }
            encode_response(ApiKey::Metadata, version, &header, &body)?
        }
        FIND_COORDINATOR => {
            let api = ApiKey::FindCoordinator;
            let (header, mut body) =
                decode_response::<FindCoordinatorResponse>(api, version, frame)?;
            // v0–3 answer one key in the top-level fields, v4+ a list of keys (KIP-699). The
            // fields a version does not carry must stay at their defaults to be encodable.
            if version < FIND_COORDINATOR_BATCHED && body.error_code == 0 && body.node_id.0 >= 0 {
                (body.host, body.port) = rewriter.address(body.node_id.0, &body.host, body.port)?;
            }
            for coordinator in &mut body.coordinators {
                if coordinator.error_code == 0 && coordinator.node_id.0 >= 0 {
                    (coordinator.host, coordinator.port) = rewriter.address(
                        coordinator.node_id.0,
                        &coordinator.host,
                        coordinator.port,
                    )?;
                }
            }
            encode_response(api, version, &header, &body)?
        }
        DESCRIBE_CLUSTER => {
            let api = ApiKey::DescribeCluster;
            let (header, mut body) =
                decode_response::<DescribeClusterResponse>(api, version, frame)?;
            if body.endpoint_type == ENDPOINT_TYPE_BROKERS {
                for broker in &mut body.brokers {
                    (broker.host, broker.port) =
                        rewriter.address(broker.broker_id.0, &broker.host, broker.port)?;
                }
            }
            encode_response(api, version, &header, &body)?
        }
        _ => frame,
    };
    Ok(Rewritten {
        frame,
        node_ids: rewriter.node_ids,
    })
}

struct Rewriter<'a> {
    advertised: &'a Advertised,
    brokers: &'a BrokerMap,
    node_ids: Vec<i32>,
}

impl Rewriter<'_> {
    /// Records the real address of `node_id` and returns the advertised one.
    fn address(
        &mut self,
        node_id: i32,
        host: &StrBytes,
        port: i32,
    ) -> Result<(StrBytes, i32), PortError> {
        let advertised_port = broker_port(self.advertised.port_base, node_id)?;
        self.brokers.record(node_id, host.as_str(), port);
        if !self.node_ids.contains(&node_id) {
            self.node_ids.push(node_id);
        }
        Ok((
            StrBytes::from_string(self.advertised.host.clone()),
            i32::from(advertised_port),
        ))
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
    use kafka_protocol::messages::{BrokerId, ResponseHeader};

    use super::*;

    fn advertised() -> Advertised {
        Advertised {
            host: "gw.example".into(),
            port_base: 9100,
        }
    }

    fn s(text: &str) -> StrBytes {
        StrBytes::from_string(text.to_owned())
    }

    #[test]
    fn metadata_brokers_point_at_portcullis() {
        let body = MetadataResponse::default().with_brokers(vec![
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(s("10.0.0.1"))
                .with_port(9092),
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(7))
                .with_host(s("10.0.0.7"))
                .with_port(9093),
        ]);
        let header = ResponseHeader::default().with_correlation_id(42);
        for version in [1, 9, 12] {
            let frame = encode_response(ApiKey::Metadata, version, &header, &body).unwrap();
            let brokers = BrokerMap::new();
            let out = rewrite(METADATA, version, frame, &advertised(), &brokers).unwrap();
            assert_eq!(out.node_ids, vec![1, 7]);
            let (h, decoded) =
                decode_response::<MetadataResponse>(ApiKey::Metadata, version, out.frame).unwrap();
            assert_eq!(h.correlation_id, 42);
            let got: Vec<_> = decoded
                .brokers
                .iter()
                .map(|b| (b.node_id.0, b.host.to_string(), b.port))
                .collect();
            assert_eq!(
                got,
                vec![
                    (1, "gw.example".into(), 9101),
                    (7, "gw.example".into(), 9107)
                ]
            );
            assert_eq!(brokers.address(7).as_deref(), Some("10.0.0.7:9093"));
        }
    }

    #[test]
    fn find_coordinator_single_and_list() {
        let brokers = BrokerMap::new();
        let header = ResponseHeader::default().with_correlation_id(3);
        let v3 = FindCoordinatorResponse::default()
            .with_node_id(BrokerId(2))
            .with_host(s("h2"))
            .with_port(1);
        let frame = encode_response(ApiKey::FindCoordinator, 3, &header, &v3).unwrap();
        let out = rewrite(FIND_COORDINATOR, 3, frame, &advertised(), &brokers).unwrap();
        let (_, d) =
            decode_response::<FindCoordinatorResponse>(ApiKey::FindCoordinator, 3, out.frame)
                .unwrap();
        assert_eq!((d.host.as_str(), d.port), ("gw.example", 9102));

        let v4 = FindCoordinatorResponse::default().with_coordinators(vec![
            Coordinator::default()
                .with_key(s("g"))
                .with_node_id(BrokerId(3))
                .with_host(s("h3"))
                .with_port(5),
            // A failed lookup keeps its error fields untouched.
            Coordinator::default()
                .with_key(s("x"))
                .with_node_id(BrokerId(-1))
                .with_host(s(""))
                .with_port(-1)
                .with_error_code(15),
        ]);
        let frame = encode_response(ApiKey::FindCoordinator, 4, &header, &v4).unwrap();
        let out = rewrite(FIND_COORDINATOR, 4, frame, &advertised(), &brokers).unwrap();
        assert_eq!(out.node_ids, vec![3]);
        let (_, d) =
            decode_response::<FindCoordinatorResponse>(ApiKey::FindCoordinator, 4, out.frame)
                .unwrap();
        let got: Vec<_> = d
            .coordinators
            .iter()
            .map(|c| (c.host.to_string(), c.port))
            .collect();
        assert_eq!(got, vec![("gw.example".into(), 9103), (String::new(), -1)]);
        assert_eq!(brokers.address(3).as_deref(), Some("h3:5"));
    }

    #[test]
    fn describe_cluster_brokers_only() {
        let brokers = BrokerMap::new();
        let header = ResponseHeader::default();
        let body = DescribeClusterResponse::default()
            .with_endpoint_type(1)
            .with_brokers(vec![DescribeClusterBroker::default()
                .with_broker_id(BrokerId(4))
                .with_host(s("h4"))
                .with_port(9)]);
        let frame = encode_response(ApiKey::DescribeCluster, 1, &header, &body).unwrap();
        let out = rewrite(DESCRIBE_CLUSTER, 1, frame, &advertised(), &brokers).unwrap();
        let (_, d) =
            decode_response::<DescribeClusterResponse>(ApiKey::DescribeCluster, 1, out.frame)
                .unwrap();
        assert_eq!(
            d.brokers.first().map(|b| (b.host.to_string(), b.port)),
            Some(("gw.example".into(), 9104))
        );
    }

    #[test]
    fn a_port_out_of_range_or_garbage_is_an_error_not_a_panic() {
        let brokers = BrokerMap::new();
        let body =
            MetadataResponse::default().with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(70_000))
                .with_host(s("h"))
                .with_port(1)]);
        let frame =
            encode_response(ApiKey::Metadata, 12, &ResponseHeader::default(), &body).unwrap();
        assert!(matches!(
            rewrite(METADATA, 12, frame, &advertised(), &brokers),
            Err(RewriteError::Port(_))
        ));
        for garbage in [
            &[][..],
            &[0, 0, 0, 1][..],
            &[0, 0, 0, 1, 0, 0, 0, 0, 0xff][..],
        ] {
            let r = rewrite(
                METADATA,
                12,
                Bytes::copy_from_slice(garbage),
                &advertised(),
                &brokers,
            );
            assert!(matches!(r, Err(RewriteError::Wire(_))), "{garbage:?}");
        }
    }
}
