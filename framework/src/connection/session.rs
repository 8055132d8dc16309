//! [`Session`]: an authenticated session, the value the local handlers and the authorization of
//! each request read.

use std::net::IpAddr;
use std::sync::Arc;

use crate::authorizer::RequestContext;
use crate::principal::Principal;
use crate::reauth::{ReauthScheduler, SessionTicket};
use crate::sasl::TokenClaims;

/// The mechanism name of a [`Session::forwarded`] session: the client authenticated with SASL on
/// the node that forwarded its request (Portcullis' client listeners always require SASL).
pub const FORWARDED_MECHANISM: &str = "(forwarded)";

/// An authenticated session.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Session {
    /// The principal.
    pub principal: Principal,
    /// The mechanism used.
    pub mechanism: String,
    /// When authentication completed (ms since the epoch).
    pub authenticated_at_ms: i64,
    /// The session lifetime sent to the client, if any (KIP-368).
    pub lifetime_ms: Option<i64>,
    /// The delegation token used, if any.
    pub token_id: Option<String>,
    /// When the latest re-authentication started (ms), for the one-per-second limit.
    pub reauth_started_at_ms: Option<i64>,
    /// The session's registration with the node's [`ReauthScheduler`].
    pub ticket: Arc<SessionTicket>,
    /// The session's group principals: `Group:<name>` for each group of the client's bearer
    /// token ([`TokenClaims::groups`], in order, without duplicates or empty names). Every
    /// request is authorized as `principal` and these ([`RequestContext::groups`]); empty for a
    /// session without a token. A re-authentication replaces them with the new token's.
    pub groups: Vec<Principal>,
    /// What the client's bearer token said (scopes, groups, `jti`), from the latest
    /// (re-)authentication; `None` for a mechanism without tokens.
    pub token_claims: Option<TokenClaims>,
}

impl Session {
    /// The session a request forwarded by another node of the cluster runs in on the writer
    /// (KIP-590): the original principal, token-authenticated or not, with a ticket of its own
    /// that no scheduler tracks (the request is answered at once; it has no connection to close).
    pub fn forwarded(principal: &crate::envelope::ForwardedPrincipal, now_ms: i64) -> Self {
        // The writer knows that the principal used a token, not which one; the token APIs only
        // ask whether one was used (Kafka's `allowTokenRequests`).
        let token_id = principal.token_authenticated.then(String::new);
        let ticket = ReauthScheduler::new().register(
            crate::credentials::CredentialId::Plugin {
                mechanism: FORWARDED_MECHANISM.to_owned(),
                key: principal.principal.to_string(),
            },
            None,
        );
        Self {
            principal: principal.principal.clone(),
            mechanism: FORWARDED_MECHANISM.to_owned(),
            authenticated_at_ms: now_ms,
            lifetime_ms: None,
            token_id,
            reauth_started_at_ms: None,
            ticket,
            // The writer decides with the groups the forwarding node's session had.
            groups: principal.groups.clone(),
            token_claims: None,
        }
    }

    /// The request context of one of the session's requests: its principal, its groups and its
    /// token's scopes and id, all borrowed from the session (nothing is allocated).
    pub fn request_context<'s>(
        &'s self,
        client_address: IpAddr,
        listener: &'s str,
        api_key: i16,
        api_version: i16,
        correlation_id: i32,
    ) -> RequestContext<'s> {
        let context = RequestContext::new(
            &self.principal,
            client_address,
            listener,
            api_key,
            api_version,
            correlation_id,
        )
        .with_groups(self.groups.as_slice());
        match &self.token_claims {
            Some(claims) => context
                .with_scopes(claims.scopes.as_slice())
                .with_jti(claims.jti.as_deref()),
            None => context,
        }
    }

    /// The principal as an Envelope carries it.
    pub fn forwarded_principal(&self) -> crate::envelope::ForwardedPrincipal {
        crate::envelope::ForwardedPrincipal {
            principal: self.principal.clone(),
            token_authenticated: self.token_id.is_some(),
            groups: self.groups.clone(),
        }
    }

    /// When the session expires, if it does.
    pub fn expires_at_ms(&self) -> Option<i64> {
        self.ticket.expires_at_ms()
    }
}

/// The group principals of a token's claims: `Group:<name>` per group, in order, without
/// duplicates or empty names (an ACL cannot name `Group:`).
pub(crate) fn group_principals(claims: Option<&TokenClaims>) -> Vec<Principal> {
    let names = claims.map_or(&[][..], |c| c.groups.as_slice());
    let mut seen = std::collections::HashSet::with_capacity(names.len());
    names
        .iter()
        .filter(|name| !name.is_empty() && seen.insert(name.as_str()))
        .map(|name| Principal::group(name.as_str()))
        .collect()
}
