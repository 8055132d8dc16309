//! The `delegated` policy's hook in a client connection: the upstream login of a session whose
//! requests go upstream as its own principal — a login with the principal's token (SCRAM,
//! `tokenauth=true`, always the newest token, so a re-authentication after a replacement uses the
//! new one) and the [`Lease`] that keeps the token while the connection lives. The tokens
//! themselves (creation, renewal, expiry) are [`DelegatedUpstream`]'s.

use std::sync::Arc;

use portcullis::credentials::ScramMechanism;
use portcullis::forwarding::UpstreamIdentity;
use portcullis::login::{ClientExchange, ExpiringCredential, LoginError, LoginModule};
use portcullis::principal::Principal;

use super::delegated::DelegatedUpstream;
use super::delegated_error::DelegatedError;
use super::upstream::UpstreamSettings;

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

impl DelegatedUpstream {
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
        login: Some(super::upstream::login_slot(login)),
        tls: Arc::clone(&upstream.tls),
        connect_timeout: upstream.connect_timeout,
        versions: arc_swap::ArcSwap::new(upstream.versions.load_full()),
    }
}
