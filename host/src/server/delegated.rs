//! The I/O of the `delegated` forwarding policy: upstream delegation tokens owned by each client
//! principal (KIP-373), created, renewed and expired by Portcullis' service principal, and the
//! login modules that open a principal's upstream connections with its token (SCRAM,
//! `tokenauth=true`).
//!
//! The decisions (single-flight creation, when to renew or replace, idle expiry) are the
//! sans-I/O [`UpstreamTokens`]; this module carries them out:
//! - [`DelegatedUpstream::login_for`] is the hook the connection driver calls before it opens
//!   an upstream connection for a request routed with [`UpstreamIdentity::Delegated`]. The
//!   first caller for a principal creates the token; concurrent callers wait for that one
//!   creation and share its outcome (token or error).
//! - [`run`] (a task) renews, replaces and expires tokens when they are due, and expires a
//!   principal's token when its credential is removed or changed ([`DelegatedUpstream::revoke`],
//!   fed from the event bus).
//! - [`DelegatedUpstream::shutdown`] expires every token when the node stops.
//!
//! Every token operation goes through one upstream connection authenticated as the service
//! principal (the node's `[upstream]` login), opened on first use and again after a failure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kafka_protocol::messages::create_delegation_token_request::CreatableRenewers;
use kafka_protocol::messages::describe_delegation_token_request::DescribeDelegationTokenOwner;
use kafka_protocol::messages::{
    ApiKey, CreateDelegationTokenRequest, CreateDelegationTokenResponse,
    DescribeDelegationTokenRequest, DescribeDelegationTokenResponse, ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse, RenewDelegationTokenRequest, RenewDelegationTokenResponse,
};
use kafka_protocol::protocol::StrBytes;
use portcullis::credentials::ScramMechanism;
use portcullis::errors::ErrorCode;
use portcullis::forwarding::UpstreamIdentity;
use portcullis::login::{ClientExchange, ExpiringCredential, LoginError, LoginModule};
use portcullis::principal::Principal;
use portcullis::refresh::RefreshConfig;
use portcullis_plugin_forwarding::delegated::tokens::{
    Acquire, ExpireReason, RenewOutcome, TokenPolicy, UpstreamToken, UpstreamTokens, Work,
};
use portcullis_plugin_forwarding::delegated::DelegatedSettings;
use portcullis_plugin_login::ScramLogin;
use tokio::sync::{broadcast, mpsc, Notify};

use super::upstream::{pick_version, UpstreamConnection, UpstreamError, UpstreamSettings};

/// Why a principal's upstream token could not be had. Never carries a secret.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DelegatedError {
    /// The upstream refused to create the token.
    #[error("the upstream refused to create a delegation token owned by {owner}: {code}{hint}")]
    Refused {
        /// The owner asked for.
        owner: String,
        /// Kafka's error code.
        code: ErrorCode,
        /// What to fix.
        hint: String,
    },
    /// The service connection failed.
    #[error("cannot reach the upstream for token operations: {0}")]
    Upstream(String),
    /// The upstream is too old for tokens owned by another principal.
    #[error("the upstream does not support CreateDelegationToken v3 (tokens owned by another principal, KIP-373)")]
    Unsupported,
    /// The policy routed the request as the client's principal, but the node is not configured
    /// for it (fail closed: never the service identity instead).
    #[error("a request was routed upstream as the client's principal, but [forwarding] policy is not \"delegated\"")]
    NotConfigured,
}

impl DelegatedError {
    /// What the client is told when its authentication fails for this (SaslAuthenticate's error
    /// message, shown by every client): the missing upstream permission, without the service
    /// principal's name or the operator's fix, which only the log carries.
    pub fn client_message(&self) -> String {
        let reason = match self {
            DelegatedError::Refused { owner, code, .. } => {
                let needs = match code.0 {
                    65 => format!(
                        ": Portcullis' upstream service principal needs CreateTokens on {owner}"
                    ),
                    61 => ": delegation tokens are disabled on the upstream cluster".to_owned(),
                    _ => String::new(),
                };
                format!(
                    "the upstream refused to create a delegation token owned by {owner} ({}){needs}",
                    code.name()
                )
            }
            DelegatedError::Upstream(_) => "the upstream cannot be reached".to_owned(),
            other => other.to_string(),
        };
        format!("Portcullis cannot act as the client upstream (forwarding policy \"delegated\"): {reason}")
    }
}

/// A session's upstream connection settings, obtained when it authenticated: its token's login,
/// and the lease that keeps the token for as long as the client connection lives.
pub struct Admitted {
    /// The settings to open the session's upstream connection with.
    pub settings: UpstreamSettings,
    /// Held by the client connection.
    pub lease: Lease,
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// What a principal's upstream connection authenticates with.
pub enum UpstreamLogin {
    /// The node's own `[upstream]` login (the service identity).
    Service,
    /// The principal's token; dropping the lease tells the cache the connection closed.
    Delegated {
        /// The login module (always the principal's newest token, for re-authentication too).
        login: Arc<dyn LoginModule>,
        /// Held while the connection is open.
        lease: Lease,
    },
}

type Creation = Result<Arc<UpstreamToken>, DelegatedError>;

struct Inner {
    cache: UpstreamTokens,
    /// One sender per creation in flight; waiters subscribe under the same lock.
    creating: HashMap<Principal, broadcast::Sender<Creation>>,
}

/// The node's upstream tokens and the service connection that manages them.
pub struct DelegatedUpstream {
    settings: DelegatedSettings,
    mechanism: ScramMechanism,
    /// The service principal (for the hints in errors).
    service_principal: String,
    inner: Mutex<Inner>,
    service: tokio::sync::Mutex<Option<UpstreamConnection>>,
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
        Arc::new(Self {
            settings,
            mechanism,
            service_principal,
            inner: Mutex::new(Inner {
                cache: UpstreamTokens::new(policy),
                creating: HashMap::new(),
            }),
            service: tokio::sync::Mutex::new(None),
            wake: Notify::new(),
            work,
            work_rx: Mutex::new(Some(work_rx)),
            logins: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a new session of `principal` (the framework's `Action::Admit`): when the policy
    /// sends its requests upstream as the principal itself, the principal's token is obtained
    /// now (created if it has none) and leased for the connection's life. `None`: the principal
    /// goes upstream as the service identity, or not at all (the policy refuses its requests).
    ///
    /// Why here and not at the first upstream request: a refusal (the service principal lacks
    /// CreateTokens, tokens disabled upstream) can then fail the authentication with a message
    /// every client shows and treats as final. At a later request it could only close the
    /// connection (what a client retries, silently) or answer an error code that carries no
    /// message and would blame the client's own permissions.
    pub async fn admit(
        self: &Arc<Self>,
        principal: &Principal,
        upstream: &UpstreamSettings,
    ) -> Result<Option<Admitted>, DelegatedError> {
        if self.settings.identity(principal) != Some(UpstreamIdentity::Delegated) {
            return Ok(None);
        }
        match self
            .login_for(&UpstreamIdentity::Delegated, principal, upstream)
            .await?
        {
            UpstreamLogin::Service => Ok(None),
            UpstreamLogin::Delegated { login, lease } => Ok(Some(Admitted {
                settings: token_settings(upstream, login),
                lease,
            })),
        }
    }

    /// How the upstream connection of a request routed with `identity` for `principal`
    /// authenticates: the service login, or the principal's token (created on first use, shared
    /// by every connection of the principal).
    pub async fn login_for(
        self: &Arc<Self>,
        identity: &UpstreamIdentity,
        principal: &Principal,
        upstream: &UpstreamSettings,
    ) -> Result<UpstreamLogin, DelegatedError> {
        match identity {
            UpstreamIdentity::Delegated => {}
            _ => return Ok(UpstreamLogin::Service),
        }
        // Takes a lease on the principal's token (created now if it has none); the `Lease`
        // below gives it back when the connection closes.
        self.acquire(principal, upstream).await?;
        Ok(UpstreamLogin::Delegated {
            login: Arc::new(TokenLogin {
                upstream: Arc::clone(self),
                principal: principal.clone(),
                mechanism: self.mechanism,
            }),
            lease: Lease {
                upstream: Arc::clone(self),
                principal: principal.clone(),
            },
        })
    }

    /// The principal's token, with a lease taken.
    async fn acquire(
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
                    let outcome = self.create(principal, upstream).await;
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

    /// CreateDelegationToken v3 owned by `principal`, requested by the service principal, which
    /// is the token's renewer (so it may renew and expire it).
    async fn create(
        &self,
        principal: &Principal,
        upstream: &UpstreamSettings,
    ) -> Result<Arc<UpstreamToken>, DelegatedError> {
        let versions = upstream.versions.load();
        let version = pick_version(&versions, ApiKey::CreateDelegationToken, 3)
            .filter(|v| *v >= 3)
            .ok_or(DelegatedError::Unsupported)?;
        let service = portcullis::principal::Principal::user(self.service_principal.clone());
        let request = CreateDelegationTokenRequest::default()
            .with_owner_principal_type(Some(StrBytes::from_string(principal.kind.clone())))
            .with_owner_principal_name(Some(StrBytes::from_string(principal.name.clone())))
            .with_renewers(vec![CreatableRenewers::default()
                .with_principal_type(StrBytes::from_string(service.kind.clone()))
                .with_principal_name(StrBytes::from_string(service.name.clone()))])
            .with_max_lifetime_ms(self.settings.token_lifetime_ms);
        let response: CreateDelegationTokenResponse = self
            .call(upstream, ApiKey::CreateDelegationToken, version, &request)
            .await?;
        let code = ErrorCode(response.error_code);
        if code != ErrorCode::NONE {
            let error = DelegatedError::Refused {
                owner: principal.to_string(),
                code,
                hint: self.hint(code, principal),
            };
            tracing::warn!(principal = %principal, error = %error, "cannot act as the client upstream; its authentication fails");
            return Err(error);
        }
        let token = UpstreamToken {
            token_id: response.token_id.to_string(),
            hmac: response.hmac.to_vec(),
            issued_ms: response.issue_timestamp_ms,
            expiry_ms: response.expiry_timestamp_ms,
            max_ms: response.max_timestamp_ms,
        };
        self.wait_until_known(upstream, principal, &token.token_id)
            .await;
        tracing::info!(principal = %principal, token_id = %token.token_id, expiry_ms = token.expiry_ms, max_ms = token.max_ms, "upstream delegation token created");
        Ok(Arc::new(token))
    }

    /// Waits until the broker has the new token in its cache. The controller answers the creation
    /// once the token is committed, but each broker applies it to the cache its SCRAM
    /// authenticator reads a little later; a login with the token before that fails as "invalid
    /// credentials". DescribeDelegationToken is served from that same cache, so the token showing
    /// up there means connections can log in with it. Bounded by the connect timeout; on timeout
    /// the connections try anyway (and fail visibly if the token never arrives).
    async fn wait_until_known(
        &self,
        upstream: &UpstreamSettings,
        owner: &Principal,
        token_id: &str,
    ) {
        let Some(version) = pick_version(
            &upstream.versions.load(),
            ApiKey::DescribeDelegationToken,
            3,
        ) else {
            return;
        };
        let request = DescribeDelegationTokenRequest::default().with_owners(Some(vec![
            DescribeDelegationTokenOwner::default()
                .with_principal_type(StrBytes::from_string(owner.kind.clone()))
                .with_principal_name(StrBytes::from_string(owner.name.clone())),
        ]));
        let deadline = tokio::time::Instant::now() + upstream.connect_timeout;
        let mut pause = Duration::from_millis(5);
        while tokio::time::Instant::now() < deadline {
            match self
                .call::<_, DescribeDelegationTokenResponse>(
                    upstream,
                    ApiKey::DescribeDelegationToken,
                    version,
                    &request,
                )
                .await
            {
                Ok(r) if r.tokens.iter().any(|t| t.token_id.as_str() == token_id) => return,
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "cannot describe the new upstream token");
                    return;
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
        tracing::warn!(owner = %owner, token_id, "the upstream broker did not show the new delegation token in time");
    }

    /// What the operator must change for `code`.
    fn hint(&self, code: ErrorCode, owner: &Principal) -> String {
        let service = &self.service_principal;
        match code.0 {
            65 => format!(
                "; the upstream service principal User:{service} lacks CreateTokens on the User \
                 resource named '{owner}' (grant it: kafka-acls --bootstrap-server <upstream> --add \
                 --allow-principal User:{service} --operation CreateTokens --operation \
                 DescribeTokens --user-principal '{owner}', or '*' for every user)"
            ),
            61 => "; delegation tokens are disabled upstream (set delegation.token.secret.key on \
                   every broker and controller)"
                .to_owned(),
            64 => "; the upstream allows token requests only on SASL or mutual-TLS connections \
                   authenticated without a token ([upstream] security_protocol)"
                .to_owned(),
            _ => String::new(),
        }
    }

    /// Sends one token request on the service connection (opened, or reopened once after a
    /// failure). Each attempt is bounded by `connect_timeout_ms`, like every other round trip of
    /// Portcullis' own: an upstream that stops answering must not hold a login (and every other
    /// principal's token work, queued behind the service connection) forever.
    async fn call<Req, Resp>(
        &self,
        upstream: &UpstreamSettings,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, DelegatedError>
    where
        Req: kafka_protocol::protocol::Encodable,
        Resp: kafka_protocol::protocol::Decodable,
    {
        let mut service = self.service.lock().await;
        for attempt in 0..2 {
            if service.is_none() {
                let opened =
                    UpstreamConnection::open_any(&upstream.bootstrap_servers, upstream).await;
                *service = Some(opened.map_err(|e| DelegatedError::Upstream(e.to_string()))?);
            }
            let Some(connection) = service.as_mut() else {
                continue;
            };
            let address = connection.address().to_owned();
            let exchange = async {
                connection.reauthenticate_if_due().await?;
                connection.call(api, version, request).await
            };
            // On a timeout the connection is dropped below: a late answer would otherwise be
            // read as the answer to the next request.
            let result: Result<Resp, UpstreamError> =
                tokio::time::timeout(upstream.connect_timeout, exchange)
                    .await
                    .unwrap_or_else(|_| Err(UpstreamError::NoAnswer(address)));
            match result {
                Ok(response) => return Ok(response),
                Err(e) => {
                    *service = None;
                    if attempt == 1 {
                        return Err(DelegatedError::Upstream(e.to_string()));
                    }
                }
            }
        }
        Err(DelegatedError::Upstream("no service connection".into()))
    }

    async fn renew(&self, upstream: &UpstreamSettings, token: &UpstreamToken) -> RenewOutcome {
        let version =
            pick_version(&upstream.versions.load(), ApiKey::RenewDelegationToken, 2).unwrap_or(1);
        let request = RenewDelegationTokenRequest::default()
            .with_hmac(token.hmac.clone().into())
            .with_renew_period_ms(self.settings.token_lifetime_ms);
        match self
            .call::<_, RenewDelegationTokenResponse>(
                upstream,
                ApiKey::RenewDelegationToken,
                version,
                &request,
            )
            .await
        {
            Ok(r) if r.error_code == 0 => RenewOutcome::Renewed {
                expiry_ms: r.expiry_timestamp_ms,
            },
            // NOT_FOUND, EXPIRED: create a new token.
            Ok(r) if r.error_code == 62 || r.error_code == 66 => RenewOutcome::Gone,
            Ok(r) => {
                tracing::warn!(token_id = %token.token_id, code = %ErrorCode(r.error_code), "upstream refused to renew a delegation token; retrying");
                RenewOutcome::Failed
            }
            Err(e) => {
                tracing::warn!(token_id = %token.token_id, error = %e, "cannot renew an upstream delegation token; retrying");
                RenewOutcome::Failed
            }
        }
    }

    /// ExpireDelegationToken with a negative period: the upstream removes the token at once.
    async fn expire(
        &self,
        upstream: &UpstreamSettings,
        principal: &Principal,
        token: &UpstreamToken,
        reason: ExpireReason,
    ) {
        let version =
            pick_version(&upstream.versions.load(), ApiKey::ExpireDelegationToken, 2).unwrap_or(1);
        let request = ExpireDelegationTokenRequest::default()
            .with_hmac(token.hmac.clone().into())
            .with_expiry_time_period_ms(-1);
        match self
            .call::<_, ExpireDelegationTokenResponse>(
                upstream,
                ApiKey::ExpireDelegationToken,
                version,
                &request,
            )
            .await
        {
            Ok(r) if r.error_code == 0 || r.error_code == 62 => {
                tracing::info!(principal = %principal, token_id = %token.token_id, ?reason, "upstream delegation token expired");
            }
            Ok(r) => {
                tracing::warn!(principal = %principal, token_id = %token.token_id, ?reason, code = %ErrorCode(r.error_code), "upstream refused to expire a delegation token");
            }
            Err(e) => {
                tracing::warn!(principal = %principal, token_id = %token.token_id, ?reason, error = %e, "cannot expire an upstream delegation token");
            }
        }
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
                let outcome = self.create(&principal, upstream).await;
                self.finish_creation(&principal, outcome);
            }
            Work::Renew { principal, token } => {
                let outcome = self.renew(upstream, &token).await;
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
                self.expire(upstream, &principal, &token, reason).await;
            }
        }
    }

    fn release(&self, principal: &Principal) {
        self.lock().cache.release(principal, now_ms());
        self.wake.notify_one();
    }

    fn current(&self, principal: &Principal) -> Option<Arc<UpstreamToken>> {
        self.lock().cache.current(principal)
    }

    /// The SCRAM login for `token` (shared by every connection using it).
    fn login_for_token(&self, token: &UpstreamToken) -> ScramLogin {
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

/// Held by each upstream connection opened with a principal's token; dropping it tells the cache
/// (idle expiry counts from the last release).
pub struct Lease {
    upstream: Arc<DelegatedUpstream>,
    principal: Principal,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.upstream.release(&self.principal);
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("principal", &self.principal)
            .finish()
    }
}

/// Logs in upstream with the principal's newest token (SCRAM, `tokenauth=true`), so a
/// re-authentication after a replacement uses the new token.
struct TokenLogin {
    upstream: Arc<DelegatedUpstream>,
    principal: Principal,
    mechanism: ScramMechanism,
}

impl LoginModule for TokenLogin {
    fn mechanism(&self) -> &str {
        self.mechanism.mechanism_name()
    }

    fn credential(&self) -> ExpiringCredential {
        ExpiringCredential::non_expiring(self.principal.name.clone())
    }

    fn start(&self) -> Result<ClientExchange, LoginError> {
        let token = self.upstream.current(&self.principal).ok_or_else(|| {
            LoginError(format!(
                "no upstream delegation token for {} (expired or revoked)",
                self.principal
            ))
        })?;
        self.upstream.login_for_token(&token).start()
    }
}

fn now_ms() -> i64 {
    crate::services::now_ms()
}

/// The hook of the connection driver: the settings to open the upstream connection of a request
/// routed with `identity` for `principal` with — `None` for the node's own (the service
/// identity) — and the lease to hold while that connection is open.
pub(super) async fn connection_settings(
    delegated: Option<&Arc<DelegatedUpstream>>,
    upstream: &UpstreamSettings,
    identity: &UpstreamIdentity,
    principal: Option<&Principal>,
) -> Result<(Option<UpstreamSettings>, Option<Lease>), DelegatedError> {
    if *identity != UpstreamIdentity::Delegated {
        return Ok((None, None));
    }
    let (Some(delegated), Some(principal)) = (delegated, principal) else {
        return Err(DelegatedError::NotConfigured);
    };
    match delegated.login_for(identity, principal, upstream).await? {
        UpstreamLogin::Service => Ok((None, None)),
        UpstreamLogin::Delegated { login, lease } => {
            Ok((Some(token_settings(upstream, login)), Some(lease)))
        }
    }
}

/// The node's upstream settings with a token's login instead of the service login.
fn token_settings(upstream: &UpstreamSettings, login: Arc<dyn LoginModule>) -> UpstreamSettings {
    UpstreamSettings {
        bootstrap_servers: upstream.bootstrap_servers.clone(),
        login: Some(login),
        tls: upstream.tls.clone(),
        connect_timeout: upstream.connect_timeout,
        versions: arc_swap::ArcSwap::new(upstream.versions.load_full()),
    }
}
