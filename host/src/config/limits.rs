//! `[limits]` and `[shutdown]`: what one node accepts, and how it stops.

use super::*;

/// `[limits]`: what a client, or a flood of them, may cost. Kafka's names where Kafka has them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Connections open at once, all listeners together (Kafka `max.connections`). When reached,
    /// the listeners stop accepting until a connection closes.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Connections open at once from one client address (Kafka `max.connections.per.ip`);
    /// absent means no limit, Kafka's default. A connection beyond it is closed at once.
    pub max_connections_per_ip: Option<u32>,
    /// An authenticated connection with nothing outstanding and no traffic for this long is
    /// closed (Kafka `connections.max.idle.ms`).
    #[serde(default = "default_connections_max_idle_ms")]
    pub connections_max_idle_ms: u64,
    /// A client must finish authenticating this long after it connected, or it is closed.
    #[serde(default = "default_authentication_timeout_ms")]
    pub authentication_timeout_ms: u64,
    /// Bytes that unauthenticated connections may buffer together for SASL frames larger than
    /// 8 KiB; a frame the budget cannot cover closes its connection.
    #[serde(default = "default_max_pre_auth_buffer_bytes")]
    pub max_pre_auth_buffer_bytes: usize,
    /// The least time between the last answer written to a client and the end of its connection
    /// (the FIN). Some clients (kafka-python 2.x) throw away answers that arrive together with
    /// the end of the connection, and resend a Produce that was already written.
    #[serde(default = "default_close_pause_ms")]
    pub close_pause_ms: u64,
    /// How failed authentications are delayed beyond `listener.failed_authentication_delay_ms`.
    #[serde(default)]
    pub failed_authentication: FailedAuthenticationLimits,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: default_max_connections(),
            max_connections_per_ip: None,
            connections_max_idle_ms: default_connections_max_idle_ms(),
            authentication_timeout_ms: default_authentication_timeout_ms(),
            max_pre_auth_buffer_bytes: default_max_pre_auth_buffer_bytes(),
            close_pause_ms: default_close_pause_ms(),
            failed_authentication: FailedAuthenticationLimits::default(),
        }
    }
}

/// `[limits.failed_authentication]`: the delay of a failed authentication grows with the recent
/// failures of the client's address and of the user name it claimed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailedAuthenticationLimits {
    /// Failures (per address and per user name) answered after the base delay alone.
    #[serde(default = "default_free_failures")]
    pub free_failures: u32,
    /// The longest delay; each failure past `free_failures` doubles the delay up to it.
    #[serde(default = "default_failed_auth_max_delay_ms")]
    pub max_delay_ms: u64,
    /// Failures are forgotten gradually: their count halves every `half_life_ms`.
    #[serde(default = "default_failed_auth_half_life_ms")]
    pub half_life_ms: u64,
}

impl Default for FailedAuthenticationLimits {
    fn default() -> Self {
        Self {
            free_failures: default_free_failures(),
            max_delay_ms: default_failed_auth_max_delay_ms(),
            half_life_ms: default_failed_auth_half_life_ms(),
        }
    }
}

/// `[shutdown]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// On SIGTERM or Ctrl-C Portcullis stops accepting, answers every request it already
    /// forwarded, closes each connection, and exits; at the latest after this long.
    #[serde(default = "default_shutdown_grace_ms")]
    pub grace_ms: u64,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self {
            grace_ms: default_shutdown_grace_ms(),
        }
    }
}

fn default_max_connections() -> usize {
    10_000
}
fn default_connections_max_idle_ms() -> u64 {
    600_000
}
fn default_authentication_timeout_ms() -> u64 {
    10_000
}
fn default_max_pre_auth_buffer_bytes() -> usize {
    64 * 1024 * 1024
}
fn default_close_pause_ms() -> u64 {
    1_000
}
fn default_free_failures() -> u32 {
    3
}
fn default_failed_auth_max_delay_ms() -> u64 {
    5_000
}
fn default_failed_auth_half_life_ms() -> u64 {
    60_000
}
fn default_shutdown_grace_ms() -> u64 {
    8_000
}

impl LimitsConfig {
    pub(crate) fn validate(&self, base_failure_delay_ms: u64) -> Result<(), ConfigError> {
        if self.max_connections == 0 {
            return Err(invalid("limits.max_connections", "must be at least 1"));
        }
        if self.max_connections_per_ip == Some(0) {
            return Err(invalid(
                "limits.max_connections_per_ip",
                "must be at least 1 (leave it out for no limit)",
            ));
        }
        for (key, value) in [
            (
                "limits.connections_max_idle_ms",
                self.connections_max_idle_ms,
            ),
            (
                "limits.authentication_timeout_ms",
                self.authentication_timeout_ms,
            ),
            (
                "limits.failed_authentication.half_life_ms",
                self.failed_authentication.half_life_ms,
            ),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be more than 0"));
            }
        }
        if self.failed_authentication.max_delay_ms < base_failure_delay_ms {
            return Err(invalid(
                "limits.failed_authentication.max_delay_ms",
                format!(
                    "must be at least listener.failed_authentication_delay_ms \
                     ({base_failure_delay_ms})"
                ),
            ));
        }
        Ok(())
    }
}
