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
    Acquire, CreationId, RenewOutcome, TokenPolicy, UpstreamToken, UpstreamTokens, Work,
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
    /// The principal's creation in flight and its sender; waiters subscribe under the same lock.
    creating: HashMap<Principal, (CreationId, broadcast::Sender<Creation>)>,
    /// Tokens whose creation finished after the shutdown drained the cache, for
    /// [`DelegatedUpstream::shutdown`] to expire ([`run`] has stopped by then).
    late: Vec<Work>,
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
                late: Vec::new(),
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
            Create(CreationId),
            Retry,
        }
        loop {
            let next = {
                let mut inner = self.lock();
                match inner.cache.acquire(principal) {
                    Acquire::Ready(token) => return Ok(token),
                    Acquire::Closed => return Err(DelegatedError::Stopping),
                    Acquire::Wait => match inner.creating.get(principal) {
                        Some((_, sender)) => Next::Wait(sender.subscribe()),
                        None => Next::Retry,
                    },
                    Acquire::Create(id) => {
                        let (sender, _) = broadcast::channel(1);
                        inner.creating.insert(principal.clone(), (id, sender));
                        Next::Create(id)
                    }
                }
            };
            match next {
                Next::Wait(mut waiting) => match waiting.recv().await {
                    Ok(Ok(_)) | Err(_) => {}
                    Ok(Err(e)) => return Err(e),
                },
                Next::Create(id) => {
                    let mut pending = PendingCreation {
                        owner: self,
                        principal,
                        id,
                        reported: false,
                    };
                    let outcome = self.requests.create(principal, upstream).await;
                    pending.reported = true;
                    self.finish_creation(principal, id, outcome.clone());
                    outcome?;
                }
                // Cannot happen (a creation in flight always has a sender); do not spin.
                Next::Retry => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// Installs creation `id`'s outcome in the cache and tells its waiters.
    fn finish_creation(&self, principal: &Principal, id: CreationId, outcome: Creation) {
        let to_expire = {
            let mut inner = self.lock();
            let to_expire = inner.cache.created(
                principal,
                id,
                outcome
                    .as_ref()
                    .map(|t| UpstreamToken::clone(t))
                    .map_err(|_| ()),
                now_ms(),
                rand::random(),
            );
            if inner
                .creating
                .get(principal)
                .is_some_and(|(current, _)| *current == id)
            {
                if let Some((_, sender)) = inner.creating.remove(principal) {
                    let _ = sender.send(outcome);
                }
            }
            match to_expire {
                // `run` has stopped: the shutdown expires it.
                Some(work) if inner.cache.is_closed() => {
                    inner.late.push(work);
                    None
                }
                other => other,
            }
        };
        if let Some(work) = to_expire {
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

    /// Expires every token upstream (the node is stopping), within `deadline`: the cached ones,
    /// then those of creations still in flight, once they arrive.
    pub async fn shutdown(&self, upstream: &UpstreamSettings, deadline: Duration) {
        let (work, in_flight) = {
            let mut inner = self.lock();
            let work = inner.cache.drain();
            let in_flight: Vec<_> = inner
                .creating
                .values()
                .map(|(_, sender)| sender.subscribe())
                .collect();
            (work, in_flight)
        };
        self.logins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        if work.is_empty() && in_flight.is_empty() {
            return;
        }
        let count = work.len() + in_flight.len();
        let expiring = async {
            for item in work {
                self.carry_out(upstream, item).await;
            }
            for mut creation in in_flight {
                let _ = creation.recv().await;
            }
            let late = std::mem::take(&mut self.lock().late);
            for item in late {
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
            Work::Create { principal, id } => {
                // A replacement: connections keep the current token meanwhile (`acquire` answers
                // Ready), so nobody waits on this sender; it is there for the shutdown.
                let (sender, _) = broadcast::channel(1);
                self.lock().creating.insert(principal.clone(), (id, sender));
                let outcome = self.requests.create(&principal, upstream).await;
                self.finish_creation(&principal, id, outcome);
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

/// A creation a connection is making; reported as failed if the connection's task is dropped
/// before the upstream answered, so that its waiters and the cache do not wait for it forever.
struct PendingCreation<'a> {
    owner: &'a DelegatedUpstream,
    principal: &'a Principal,
    id: CreationId,
    reported: bool,
}

impl Drop for PendingCreation<'_> {
    fn drop(&mut self) {
        if !self.reported {
            self.owner.finish_creation(
                self.principal,
                self.id,
                Err(DelegatedError::Upstream(
                    "the connection creating the token closed before the upstream answered"
                        .to_owned(),
                )),
            );
        }
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
