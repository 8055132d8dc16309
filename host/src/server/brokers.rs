//! The upstream brokers: where each really is (the [`BrokerMap`], shared by every connection),
//! and which Portcullis port stands for it. Brokers are learned at discovery and from every
//! response whose addresses are rewritten.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

/// Node id → real `host:port` of every upstream broker seen in a response.
#[derive(Debug, Default)]
pub struct BrokerMap {
    real: RwLock<HashMap<i32, String>>,
}

impl BrokerMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Remembers where broker `node_id` really is.
    pub fn record(&self, node_id: i32, host: &str, port: i32) {
        let address = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let mut real = self.real.write().unwrap_or_else(PoisonError::into_inner);
        if real.get(&node_id) != Some(&address) {
            tracing::debug!(node_id, %address, "upstream broker address");
            real.insert(node_id, address);
        }
    }

    /// Where broker `node_id` really is, if known.
    pub fn address(&self, node_id: i32) -> Option<String> {
        self.real
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&node_id)
            .cloned()
    }
}

/// A node id whose port would fall outside `1..=65535`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("broker {node_id} has no port: broker_port_base {base} + {node_id} is not a valid port")]
pub struct PortError {
    /// `listener.broker_port_base`.
    pub base: u16,
    /// The node id.
    pub node_id: i32,
}

/// The Portcullis port that stands for upstream broker `node_id` (Kafka node ids are never
/// negative).
pub fn broker_port(base: u16, node_id: i32) -> Result<u16, PortError> {
    if node_id < 0 {
        return Err(PortError { base, node_id });
    }
    u16::try_from(i64::from(base) + i64::from(node_id))
        .ok()
        .filter(|port| *port != 0)
        .ok_or(PortError { base, node_id })
}

/// Which upstream a listener's connections are forwarded to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The bootstrap listener: any upstream bootstrap server.
    Bootstrap,
    /// The listener of upstream broker N.
    Broker(i32),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_follow_the_base() {
        assert_eq!(broker_port(9100, 1), Ok(9101));
        assert_eq!(broker_port(9100, 0), Ok(9100));
        assert_eq!(broker_port(65535, 0), Ok(65535));
        assert!(broker_port(65535, 1).is_err());
        assert!(broker_port(10, -1).is_err());
        assert!(broker_port(10, i32::MAX).is_err());
        assert!(broker_port(10, i32::MIN).is_err());
    }

    #[test]
    fn records_addresses_with_ipv6_brackets() {
        let map = BrokerMap::new();
        map.record(1, "10.0.0.1", 9092);
        map.record(2, "::1", 9093);
        assert_eq!(map.address(1).as_deref(), Some("10.0.0.1:9092"));
        assert_eq!(map.address(2).as_deref(), Some("[::1]:9093"));
        assert_eq!(map.address(3), None);
        map.record(1, "10.0.0.9", 9092);
        assert_eq!(map.address(1).as_deref(), Some("10.0.0.9:9092"));
    }
}
