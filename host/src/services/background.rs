//! The node's timed background tasks: the upstream credential refresh and the delegation-token
//! sweep.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::now_ms;

/// Refreshes the upstream login module's credential on Kafka's schedule (KIP-368 client side:
/// window factor 0.8, jitter 0.05, minimum period 60 s, buffer 300 s, 10 s retry). Credentials
/// that never expire (the built-in password login) schedule nothing. A refresh runs on the
/// blocking pool (a module may read a file or call a token endpoint); upstream connections use
/// the new credential from their next authentication or re-authentication on.
///
/// Only `login`'s module is kept here, not `login` itself: once a reload replaced it and the
/// last upstream connection that logged in with it is gone, nothing can use its credential any
/// more, and the refresh stops (a module of a removed token endpoint would fail for ever).
pub fn spawn_credential_refresh(
    login: &Arc<crate::server::upstream::ActiveLogin>,
    events: portcullis::events::EventBus,
    runtime: &tokio::runtime::Handle,
) {
    use portcullis::refresh::{RefreshConfig, RefreshScheduler};
    let mut scheduler = RefreshScheduler::new(RefreshConfig::default(), events);
    scheduler.add(Arc::clone(&login.module), now_ms(), rand::random());
    if scheduler.poll_timeout().is_none() {
        tracing::debug!("the upstream credential never expires; nothing to refresh");
        return;
    }
    let in_use = Arc::downgrade(login);
    runtime.spawn(async move {
        while let Some(due) = scheduler.poll_timeout() {
            let wait = u64::try_from(due.saturating_sub(now_ms())).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            // Checked when the next refresh is due, not sooner: a replaced module is kept up
            // to one credential lifetime after its last connection closed, which costs nothing.
            if in_use.strong_count() == 0 {
                tracing::info!("the upstream login module a reload replaced is no longer used; its credential refresh stops");
                return;
            }
            let ran = tokio::task::spawn_blocking(move || {
                let refreshed = scheduler.on_timeout(now_ms(), rand::random);
                (scheduler, refreshed)
            })
            .await;
            match ran {
                Ok((returned, refreshed)) => {
                    scheduler = returned;
                    if refreshed > 0 {
                        tracing::info!(next_ms = ?scheduler.poll_timeout(), "upstream credential refreshed");
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "the credential refresh failed; no further refreshes");
                    return;
                }
            }
        }
    });
}

/// Runs the delegation-token sweep: once at start (tokens that expired while the node was down
/// go at once), then whenever [`TokenManager::poll_timeout`](portcullis::tokens::TokenManager)
/// says. Removals go through the store writer; a removal that loses a race with a renewal is
/// dropped (the next sweep decides again).
pub fn spawn_token_sweep(
    manager: Arc<portcullis::tokens::TokenManager>,
    writer: crate::store_writer::StoreWriter,
) {
    tokio::spawn(async move {
        let mut batches = manager.expired(now_ms());
        loop {
            for batch in batches {
                match writer.persist(batch).await {
                    // NotLeader: in a cluster, the writer sweeps (every node sees the removal).
                    Ok(_)
                    | Err(portcullis::local::PersistError::Conflict)
                    | Err(portcullis::local::PersistError::NotLeader) => {}
                    Err(e) => {
                        tracing::warn!(error = ?e, "sweeping an expired delegation token failed")
                    }
                }
            }
            let due = manager.poll_timeout();
            let wait = u64::try_from(due.saturating_sub(now_ms())).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            batches = manager.on_timeout(now_ms());
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use portcullis::login::{ClientExchange, ExpiringCredential, LoginError, LoginModule};

    use super::spawn_credential_refresh;
    use crate::clock::now_ms;
    use crate::server::upstream::ActiveLogin;

    /// A credential that lives one second, renewed by each refresh: due about every 0.8 s.
    struct OneSecond {
        refreshes: Arc<AtomicUsize>,
    }

    impl LoginModule for OneSecond {
        fn mechanism(&self) -> &str {
            "OAUTHBEARER"
        }
        fn credential(&self) -> ExpiringCredential {
            ExpiringCredential::expiring("svc", now_ms(), now_ms() + 1_000)
        }
        fn start(&self) -> Result<ClientExchange, LoginError> {
            Err(LoginError("not used by the refresh".into()))
        }
        fn refresh(&self) -> Result<ExpiringCredential, LoginError> {
            self.refreshes.fetch_add(1, Ordering::SeqCst);
            Ok(self.credential())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replaced_login_stops_refreshing_once_its_last_user_is_gone() {
        let refreshes = Arc::new(AtomicUsize::new(0));
        let login = Arc::new(ActiveLogin {
            module: Arc::new(OneSecond {
                refreshes: Arc::clone(&refreshes),
            }),
        });
        spawn_credential_refresh(
            &login,
            portcullis::events::EventBus::new(),
            &tokio::runtime::Handle::current(),
        );
        // In use (a connection holds the login): refreshed on schedule, about every 0.8 s.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while refreshes.load(Ordering::SeqCst) < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "not refreshed twice in 20 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let while_used = refreshes.load(Ordering::SeqCst);
        // Replaced and its last connection gone: the next due refresh finds nobody and stops.
        drop(login);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let settled = refreshes.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        assert_eq!(
            refreshes.load(Ordering::SeqCst),
            settled,
            "refreshed after its last user was gone"
        );
        assert!(
            settled <= while_used + 1,
            "{settled} refreshes, {while_used} while used"
        );
    }
}
