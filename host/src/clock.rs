//! The host's clock: milliseconds since the epoch, the time the host passes to the framework.

/// Milliseconds since the epoch: the time the host passes to the framework.
pub fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}
