//! Security counters (Kafka's per-listener authentication metrics), read by the host's exporter.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters shared by every connection of a node.
#[derive(Debug, Default)]
pub struct SecurityMetrics {
    successful_authentication: AtomicU64,
    failed_authentication: AtomicU64,
    successful_reauthentication: AtomicU64,
    failed_reauthentication: AtomicU64,
    expired_connections_killed: AtomicU64,
    revoked_connections_closed: AtomicU64,
}

/// A point-in-time copy of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// `successful-authentication-total`.
    pub successful_authentication: u64,
    /// `failed-authentication-total`.
    pub failed_authentication: u64,
    /// `successful-reauthentication-total`.
    pub successful_reauthentication: u64,
    /// `failed-reauthentication-total`.
    pub failed_reauthentication: u64,
    /// `expired-connections-killed-count`.
    pub expired_connections_killed: u64,
    /// Connections closed because their credential was removed or changed.
    pub revoked_connections_closed: u64,
}

macro_rules! counter {
    ($($name:ident),+) => {
        impl SecurityMetrics {
            $(
                #[doc = concat!("Counts one `", stringify!($name), "`.")]
                pub fn $name(&self) {
                    self.$name.fetch_add(1, Ordering::Relaxed);
                }
            )+

            /// Reads every counter.
            pub fn snapshot(&self) -> MetricsSnapshot {
                MetricsSnapshot { $($name: self.$name.load(Ordering::Relaxed)),+ }
            }
        }
    };
}

counter!(
    successful_authentication,
    failed_authentication,
    successful_reauthentication,
    failed_reauthentication,
    expired_connections_killed,
    revoked_connections_closed
);
