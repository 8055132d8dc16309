//! Security events, and the subscriber plugin kind that receives them.
//!
//! The host publishes events on its event bus (sessions authenticated, failed, re-authenticated,
//! expired; credentials, ACLs and delegation tokens changed) and delivers them to each
//! [`EventSubscriber`] on a thread of its own, off the request path, through a bounded queue: a
//! subscriber that falls behind loses events (counted), it never slows authentication down.

use std::net::IpAddr;

use crate::credentials::CredentialId;
use crate::principal::Principal;
use crate::sasl::TokenClaims;

/// A security event.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A client authenticated.
    SessionAuthenticated {
        /// The session's principal.
        principal: Principal,
        /// The mechanism used.
        mechanism: String,
        /// The client's address.
        client_address: IpAddr,
        /// What the client's bearer token said (scopes, groups, `jti`; OAUTHBEARER), `None`
        /// for a mechanism without tokens. Never the token itself.
        token_claims: Option<TokenClaims>,
    },
    /// A client failed to authenticate. Never carries the secret or the reason's details.
    AuthenticationFailed {
        /// The mechanism tried, if the handshake got that far.
        mechanism: Option<String>,
        /// The client's address.
        client_address: IpAddr,
        /// The reason, safe to log.
        reason: String,
    },
    /// A client re-authenticated (KIP-368).
    SessionReauthenticated {
        /// The session's principal.
        principal: Principal,
        /// The mechanism used.
        mechanism: String,
        /// The client's address.
        client_address: IpAddr,
        /// What the new bearer token said (its groups apply to the session from now on), `None`
        /// for a mechanism without tokens.
        token_claims: Option<TokenClaims>,
    },
    /// A session sent a request after its lifetime ended and was closed (KIP-368).
    SessionExpired {
        /// The session's principal.
        principal: Principal,
        /// The client's address.
        client_address: IpAddr,
    },
    /// A login module refreshed Portcullis' own upstream credential (KIP-368 client side).
    CredentialRefreshed {
        /// The principal name of the credential.
        principal_name: String,
        /// Its new expiry, if any.
        expiry_ms: Option<i64>,
    },
    /// A SCRAM credential was added, changed or removed.
    CredentialChanged {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: String,
    },
    /// ACLs were created or deleted; the change is durable and already applies to every
    /// connection. Counts only: the bindings themselves are read with `AclAdmin::describe_acls`.
    AclsChanged {
        /// How many ACLs were created (duplicates of existing ACLs are not counted).
        created: usize,
        /// How many ACLs were deleted.
        deleted: usize,
    },
    /// A delegation token was created (KIP-48). Never carries the HMAC.
    TokenCreated {
        /// The token id.
        token_id: String,
        /// Its owner.
        owner: Principal,
        /// Who asked for it (KIP-373).
        requester: Principal,
        /// When it expires unless renewed (ms since the epoch).
        expiry_ms: i64,
    },
    /// A delegation token's expiry changed and it is still valid: renewed (or shortened by an
    /// expire request with a positive period). Sessions authenticated with it get the new expiry
    /// at their next re-authentication; a shortened one also ends their current session sooner.
    TokenRenewed {
        /// The token id.
        token_id: String,
        /// The new expiry (ms since the epoch).
        expiry_ms: i64,
    },
    /// A delegation token can no longer be used: expired by a request, swept after its expiry,
    /// or removed. Every live session authenticated with it is closed at once.
    TokenExpired {
        /// The token id.
        token_id: String,
        /// Its owner.
        owner: Principal,
        /// Whether the token is gone from the store (removed by a request with a negative
        /// period, or swept); `false` when a request moved its expiry to now or earlier and the
        /// sweep has yet to remove it.
        removed: bool,
    },
    /// A credential was revoked by whoever owns it (a plugin mechanism, for example): every live
    /// session it authenticated is closed at once.
    CredentialRevoked {
        /// The credential.
        credential: CredentialId,
    },
}

impl Event {
    /// A short, stable name of the event's kind (`SessionAuthenticated`, `TokenCreated`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Event::SessionAuthenticated { .. } => "SessionAuthenticated",
            Event::AuthenticationFailed { .. } => "AuthenticationFailed",
            Event::SessionReauthenticated { .. } => "SessionReauthenticated",
            Event::SessionExpired { .. } => "SessionExpired",
            Event::CredentialRefreshed { .. } => "CredentialRefreshed",
            Event::CredentialChanged { .. } => "CredentialChanged",
            Event::AclsChanged { .. } => "AclsChanged",
            Event::TokenCreated { .. } => "TokenCreated",
            Event::TokenRenewed { .. } => "TokenRenewed",
            Event::TokenExpired { .. } => "TokenExpired",
            Event::CredentialRevoked { .. } => "CredentialRevoked",
        }
    }
}

/// Receives the host's events.
///
/// Called on a thread dedicated to this subscriber, one event at a time, in publication order.
/// It may block (write a file, call a service): only its own queue fills up, and events that do
/// not fit are dropped and counted by the host.
pub trait EventSubscriber: Send + Sync {
    /// Handles one event.
    fn on_event(&self, event: &Event);
}
