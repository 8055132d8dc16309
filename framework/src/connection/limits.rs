//! The connection's default limits: Kafka's defaults for frame sizes and the failed-authentication
//! delay, at the bottom so the throttle and the listener settings can both name them.

use std::time::Duration;

/// Kafka's `sasl.server.max.receive.size`: the largest frame accepted before authentication.
pub const DEFAULT_MAX_PRE_AUTH_FRAME: usize = 512 * 1024;
/// Kafka's `socket.request.max.bytes`.
pub const DEFAULT_MAX_FRAME: usize = 100 * 1024 * 1024;
/// Kafka's `connection.failed.authentication.delay.ms`.
pub const DEFAULT_FAILED_AUTH_DELAY: Duration = Duration::from_millis(100);
