//! The I/O of the `delegated` forwarding policy: upstream delegation tokens owned by each client
//! principal (KIP-373), created, renewed and expired by Portcullis' service principal. The login
//! modules that open a principal's upstream connections with its token (SCRAM,
//! `tokenauth=true`) are the connection hook's (`delegated_hook`).
//!
//! The decisions (single-flight creation, when to renew or replace, idle expiry) are the
//! sans-I/O [`UpstreamTokens`]; this module carries them out:
//! - [`DelegatedUpstream::login_for`] (in `delegated_hook`) is the hook the connection driver
//!   calls before it opens an upstream connection for a request routed with
//!   [`UpstreamIdentity::Delegated`](portcullis::forwarding::UpstreamIdentity::Delegated). The
//!   first caller for a principal creates the token; concurrent callers wait for that one
//!   creation and share its outcome (token or error).
//! - [`run`] (a task) renews, replaces and expires tokens when they are due, and expires a
//!   principal's token when its credential is removed or changed ([`DelegatedUpstream::revoke`],
//!   fed from the event bus).
//! - [`DelegatedUpstream::shutdown`] expires every token when the node stops.
//!
//! Every token operation goes through one upstream connection authenticated as the service
//! principal (the node's `[upstream]` login), opened on first use and again after a failure
//! (`delegated_requests`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use portcullis::credentials::ScramMechanism;
use portcullis::principal::Principal;
use portcullis::refresh::RefreshConfig;
use portcullis_plugin_forwarding::delegated::tokens::{
    Acquire, RenewOutcome, TokenPolicy, UpstreamToken, UpstreamTokens, Work,
};
use portcullis_plugin_forwarding::delegated::DelegatedSettings;
use portcullis_plugin_login::ScramLogin;
use tokio::sync::{broadcast, mpsc, Notify};

use super::delegated_requests::TokenRequests;
use super::upstream::UpstreamSettings;

pub use super::delegated_error::DelegatedError;

type Creation = Result<Arc<UpstreamToken>, DelegatedError>;

struct Inner {
    cache: UpstreamTokens,
    /// One sender per creation in flight; waiters subscribe under the same lock.
    creating: HashMap<Principal, broadcast::Sender<Creation>>,
}

/// The node's upstream tokens and the service connection that manages them.
pub struct DelegatedUpstream {
    pub(super) settings: DelegatedSettings,
    pub(super) mechanism: ScramMechanism,
    inner: Mutex<Inner>,
    /// The token requests, on the service connection.
    requests: TokenRequests,
    /// Wakes [`run`] when the cache changed (a new token, a released lease).
    wake: Notify,
    /// Work handed out outside [`run`] (revocations), for it to carry out.
    work: mpsc::UnboundedSender<Work>,
    work_rx: Mutex<Option<mpsc::UnboundedReceiver<Work>>>,
    /// One SCRAM login per live token: its salted-password cache means the PBKDF2 of a token's
    /// password (4096 rounds of HMAC-SHA-512) runs once, not for every upstream connection.
    logins: Mutex<HashMap<String, ScramLogin>>,
}

impl std::fmt::Debug for DelegatedUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegatedUpstream")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl DelegatedUpstream {
    /// The upstream tokens of a node with `settings`, managed as `service_principal` (the name
    /// of the `[upstream]` login).
    pub fn new(settings: DelegatedSettings, service_principal: String) -> Arc<Self> {
        let mechanism = ScramMechanism::from_mechanism_name(&settings.token_mechanism)
            .unwrap_or(ScramMechanism::Sha512);
        let policy = TokenPolicy {
            idle_expire_ms: settings.idle_expire_ms,
            refresh: RefreshConfig::default(),
        };
        let (work, work_rx) = mpsc::unbounded_channel();
        let requests = TokenRequests::new(service_principal, settings.token_lifetime_ms);
        Arc::new(Self {
            settings,
            mechanism,
            inner: Mutex::new(Inner {
                cache: UpstreamTokens::new(policy),
                creating: HashMap::new(),
            }),
            requests,
            wake: Notify::new(),
            work,
            work_rx: Mutex::new(Some(work_rx)),
            logins: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The principal's token, with a lease taken.
    pub(super) async fn acquire(
        &self,
        principal: &Principal,
        upstream: &UpstreamSettings,
    ) -> Result<Arc<UpstreamToken>, DelegatedError> {
        enum Next {
            Wait(broadcast::Receiver<Creation>),
            Create,
            Retry,
        }
        loop {
            let next = {
                let mut inner = self.lock();
                match inner.cache.acquire(principal) {
                    Acquire::Ready(token) => return Ok(token),
                    Acquire::Wait => match inner.creating.get(principal) {
                        Some(sender) => Next::Wait(sender.subscribe()),
                        None => Next::Retry,
                    },
                    Acquire::Create => {
                        let (sender, _) = broadcast::channel(1);
                        inner.creating.insert(principal.clone(), sender);
                        Next::Create
                    }
                }
            };
            match next {
                Next::Wait(mut waiting) => match waiting.recv().await {
                    Ok(Ok(_)) | Err(_) => {}
                    Ok(Err(e)) => return Err(e),
                },
                Next::Create => {
                    let outcome = self.requests.create(principal, upstream).await;
                    self.finish_creation(principal, outcome.clone());
                    outcome?;
                }
                // Cannot happen (a creation in flight always has a sender); do not spin.
                Next::Retry => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// Installs a creation's outcome in the cache and tells the waiters.
    fn finish_creation(&self, principal: &Principal, outcome: Creation) {
        let replaced = {
            let mut inner = self.lock();
            let replaced = inner.cache.created(
                principal,
                outcome
                    .as_ref()
                    .map(|t| UpstreamToken::clone(t))
                    .map_err(|_| ()),
                now_ms(),
                rand::random(),
            );
            if let Some(sender) = inner.creating.remove(principal) {
                let _ = sender.send(outcome);
            }
            replaced
        };
        if let Some(work) = replaced {
            let _ = self.work.send(work);
        }
        self.wake.notify_one();
    }

    /// The principal's credential was removed or changed: its upstream token is expired now.
    pub fn revoke(&self, principal: &Principal) {
        let work = self.lock().cache.revoke(principal);
        if let Some(work) = work {
            let _ = self.work.send(work);
        }
    }

    /// Expires every token upstream (the node is stopping), within `deadline`.
    pub async fn shutdown(&self, upstream: &UpstreamSettings, deadline: Duration) {
        let work = self.lock().cache.drain();
        self.logins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        if work.is_empty() {
            return;
        }
        let count = work.len();
        let expiring = async {
            for item in work {
                self.carry_out(upstream, item).await;
            }
        };
        if tokio::time::timeout(deadline, expiring).await.is_err() {
            tracing::warn!(
                tokens = count,
                "stopping before every upstream delegation token was expired"
            );
        }
    }

    async fn carry_out(&self, upstream: &UpstreamSettings, work: Work) {
        match work {
            Work::Create { principal } => {
                {
                    let mut inner = self.lock();
                    if inner.creating.contains_key(&principal) {
                        return;
                    }
                    let (sender, _) = broadcast::channel(1);
                    inner.creating.insert(principal.clone(), sender);
                }
                let outcome = self.requests.create(&principal, upstream).await;
                self.finish_creation(&principal, outcome);
            }
            Work::Renew { principal, token } => {
                let outcome = self.requests.renew(upstream, &token).await;
                if let RenewOutcome::Renewed { expiry_ms } = outcome {
                    tracing::info!(principal = %principal, token_id = %token.token_id, expiry_ms, "upstream delegation token renewed");
                }
                self.lock().cache.renewed(
                    &principal,
                    &token.token_id,
                    outcome,
                    now_ms(),
                    rand::random(),
                );
            }
            Work::Expire {
                principal,
                token,
                reason,
            } => {
                self.forget_login(&token.token_id);
                self.requests
                    .expire(upstream, &principal, &token, reason)
                    .await;
            }
        }
    }

    pub(super) fn release(&self, principal: &Principal) {
        self.lock().cache.release(principal, now_ms());
        self.wake.notify_one();
    }

    pub(super) fn current(&self, principal: &Principal) -> Option<Arc<UpstreamToken>> {
        self.lock().cache.current(principal)
    }

    /// The SCRAM login for `token` (shared by every connection using it).
    pub(super) fn login_for_token(&self, token: &UpstreamToken) -> ScramLogin {
        self.logins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(token.token_id.clone())
            .or_insert_with(|| {
                ScramLogin::delegation_token(
                    self.mechanism,
                    token.token_id.clone(),
                    token.scram_password(),
                )
            })
            .clone()
    }

    fn forget_login(&self, token_id: &str) {
        self.logins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(token_id);
    }
}

/// Renews, replaces and expires tokens when due, and carries out revocations, until `stop`.
pub async fn run(
    delegated: Arc<DelegatedUpstream>,
    upstream: impl std::ops::Deref<Target = UpstreamSettings>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Some(mut revoked) = delegated
        .work_rx
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    else {
        return;
    };
    loop {
        let now = now_ms();
        let due = delegated.lock().cache.poll(now);
        for work in due {
            delegated.carry_out(&upstream, work).await;
        }
        let next = delegated.lock().cache.next_deadline();
        let sleep = match next {
            Some(at) => Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0).max(1)),
            None => Duration::from_secs(3600),
        };
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(sleep) => {}
            () = delegated.wake.notified() => {}
            work = revoked.recv() => match work {
                Some(work) => delegated.carry_out(&upstream, work).await,
                None => return,
            },
        }
    }
}

fn now_ms() -> i64 {
    crate::services::now_ms()
}
