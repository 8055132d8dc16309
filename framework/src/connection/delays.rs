//! How long a failed authentication waits before it is answered: Kafka's fixed delay for a
//! protocol violation, the throttle's growing one for a failed credential check.

use std::time::Duration;

use super::Connection;

/// The delay of a failure that is no credential check (a protocol violation, an unsupported or
/// changed mechanism): Kafka's fixed delay. It is not counted by the throttle, which is there
/// for password guessing.
pub(super) fn protocol_failure_delay(conn: &Connection) -> Duration {
    conn.config.failure_throttle.policy().base
}

/// Counts a failed credential check and returns how long to wait before answering it (Kafka's
/// delay, growing with the recent failures of this address and of the claimed user name).
pub(super) fn failure_delay(conn: &Connection, user: Option<&str>, now_ms: i64) -> Duration {
    conn.config
        .failure_throttle
        .record_failure(conn.client_address, user, now_ms)
}
