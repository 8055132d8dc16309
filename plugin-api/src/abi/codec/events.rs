//! Gateway events, with the principals, addresses, credential ids and token claims they carry.

use std::net::IpAddr;

use crate::credentials::CredentialId;
use crate::events::Event;
use crate::principal::Principal;
use crate::sasl::TokenClaims;

use super::credentials::{scram_code, scram_from_code};
use super::wire::{CodecError, Reader, Writer};

const EVENT_SESSION_AUTHENTICATED: u32 = 1;
const EVENT_AUTHENTICATION_FAILED: u32 = 2;
const EVENT_SESSION_REAUTHENTICATED: u32 = 3;
const EVENT_SESSION_EXPIRED: u32 = 4;
const EVENT_CREDENTIAL_REFRESHED: u32 = 5;
const EVENT_CREDENTIAL_CHANGED: u32 = 6;
const EVENT_ACLS_CHANGED: u32 = 7;
const EVENT_TOKEN_CREATED: u32 = 8;
const EVENT_TOKEN_RENEWED: u32 = 9;
const EVENT_TOKEN_EXPIRED: u32 = 10;
const EVENT_CREDENTIAL_REVOKED: u32 = 11;

fn write_principal(w: &mut Writer, principal: &Principal) {
    w.str(&principal.kind).str(&principal.name);
}

fn read_principal(r: &mut Reader<'_>) -> Result<Principal, CodecError> {
    Ok(Principal {
        kind: r.string()?,
        name: r.string()?,
    })
}

fn write_address(w: &mut Writer, address: &IpAddr) {
    match address {
        IpAddr::V4(v4) => w.u8(4).bytes(&v4.octets()),
        IpAddr::V6(v6) => w.u8(6).bytes(&v6.octets()),
    };
}

fn read_address(r: &mut Reader<'_>) -> Result<IpAddr, CodecError> {
    let family = r.u8()?;
    let bytes = r.bytes()?;
    match family {
        4 => <[u8; 4]>::try_from(bytes)
            .map(IpAddr::from)
            .map_err(|_| CodecError::Truncated),
        _ => <[u8; 16]>::try_from(bytes)
            .map(IpAddr::from)
            .map_err(|_| CodecError::Truncated),
    }
}

fn write_credential_id(w: &mut Writer, id: &CredentialId) {
    match id {
        CredentialId::Scram { user, mechanism } => w.u8(1).str(user).u32(scram_code(*mechanism)),
        CredentialId::Token { token_id } => w.u8(2).str(token_id),
        CredentialId::Plugin { mechanism, key } => w.u8(3).str(mechanism).str(key),
    };
}

fn read_credential_id(r: &mut Reader<'_>) -> Result<CredentialId, CodecError> {
    Ok(match r.u8()? {
        1 => {
            let user = r.string()?;
            let code = r.u32()?;
            let mechanism = scram_from_code(code).ok_or(CodecError::UnknownCode(code))?;
            CredentialId::scram(user, mechanism)
        }
        2 => CredentialId::token(r.string()?),
        3 => CredentialId::plugin(r.string()?, r.string()?),
        other => return Err(CodecError::UnknownCode(u32::from(other))),
    })
}

/// A session event's token claims, appended after its older fields: a presence byte, then the
/// scopes, the groups (each a count and strings) and the optional `jti`. A subscriber built before
/// they were added stops reading before them (decoders ignore trailing bytes).
fn write_token_claims(w: &mut Writer, claims: Option<&TokenClaims>) {
    let Some(claims) = claims else {
        w.u8(0);
        return;
    };
    w.u8(1).count(claims.scopes.len());
    for scope in &claims.scopes {
        w.str(scope);
    }
    w.count(claims.groups.len());
    for group in &claims.groups {
        w.str(group);
    }
    w.opt_str(claims.jti.as_deref());
}

/// Reads [`write_token_claims`]; nothing left (an event from a host that predates the claims)
/// is `None`.
fn read_token_claims(r: &mut Reader<'_>) -> Result<Option<TokenClaims>, CodecError> {
    if r.is_empty() || r.u8()? == 0 {
        return Ok(None);
    }
    let strings = |r: &mut Reader<'_>| -> Result<Vec<String>, CodecError> {
        // Every string takes at least its 4-byte length.
        let count = r.count(4)?;
        (0..count).map(|_| r.string()).collect()
    };
    let scopes = strings(r)?;
    let groups = strings(r)?;
    let jti = r.opt_string()?;
    Ok(Some(TokenClaims::new(scopes, groups, jti)))
}

/// Encodes an event. A subscriber built against an older API skips kinds it does not know
/// ([`decode_event`]), and fields appended to a kind it knows.
pub fn encode_event(event: &Event) -> Vec<u8> {
    let mut w = Writer::new();
    match event {
        Event::SessionAuthenticated {
            principal,
            mechanism,
            client_address,
            token_claims,
        } => {
            w.u32(EVENT_SESSION_AUTHENTICATED);
            write_principal(&mut w, principal);
            w.str(mechanism);
            write_address(&mut w, client_address);
            write_token_claims(&mut w, token_claims.as_ref());
        }
        Event::AuthenticationFailed {
            mechanism,
            client_address,
            reason,
        } => {
            w.u32(EVENT_AUTHENTICATION_FAILED)
                .opt_str(mechanism.as_deref());
            write_address(&mut w, client_address);
            w.str(reason);
        }
        Event::SessionReauthenticated {
            principal,
            mechanism,
            client_address,
            token_claims,
        } => {
            w.u32(EVENT_SESSION_REAUTHENTICATED);
            write_principal(&mut w, principal);
            w.str(mechanism);
            write_address(&mut w, client_address);
            write_token_claims(&mut w, token_claims.as_ref());
        }
        Event::SessionExpired {
            principal,
            client_address,
        } => {
            w.u32(EVENT_SESSION_EXPIRED);
            write_principal(&mut w, principal);
            write_address(&mut w, client_address);
        }
        Event::CredentialRefreshed {
            principal_name,
            expiry_ms,
        } => {
            w.u32(EVENT_CREDENTIAL_REFRESHED)
                .str(principal_name)
                .opt_i64(*expiry_ms);
        }
        Event::CredentialChanged { user, mechanism } => {
            w.u32(EVENT_CREDENTIAL_CHANGED).str(user).str(mechanism);
        }
        Event::AclsChanged { created, deleted } => {
            w.u32(EVENT_ACLS_CHANGED)
                .u64(*created as u64)
                .u64(*deleted as u64);
        }
        Event::TokenCreated {
            token_id,
            owner,
            requester,
            expiry_ms,
        } => {
            w.u32(EVENT_TOKEN_CREATED).str(token_id);
            write_principal(&mut w, owner);
            write_principal(&mut w, requester);
            w.i64(*expiry_ms);
        }
        Event::TokenRenewed {
            token_id,
            expiry_ms,
        } => {
            w.u32(EVENT_TOKEN_RENEWED).str(token_id).i64(*expiry_ms);
        }
        Event::TokenExpired {
            token_id,
            owner,
            removed,
        } => {
            w.u32(EVENT_TOKEN_EXPIRED).str(token_id);
            write_principal(&mut w, owner);
            w.u8(u8::from(*removed));
        }
        Event::CredentialRevoked { credential } => {
            w.u32(EVENT_CREDENTIAL_REVOKED);
            write_credential_id(&mut w, credential);
        }
    }
    w.finish()
}

/// Decodes [`encode_event`].
///
/// # Errors
/// [`CodecError::UnknownCode`] for an event kind this copy of the API does not know (a newer
/// host: the subscriber skips it), or malformed bytes.
pub fn decode_event(bytes: &[u8]) -> Result<Event, CodecError> {
    let mut r = Reader::new(bytes);
    let size = |value: u64| usize::try_from(value).unwrap_or(usize::MAX);
    Ok(match r.u32()? {
        EVENT_SESSION_AUTHENTICATED => Event::SessionAuthenticated {
            principal: read_principal(&mut r)?,
            mechanism: r.string()?,
            client_address: read_address(&mut r)?,
            token_claims: read_token_claims(&mut r)?,
        },
        EVENT_AUTHENTICATION_FAILED => Event::AuthenticationFailed {
            mechanism: r.opt_string()?,
            client_address: read_address(&mut r)?,
            reason: r.string()?,
        },
        EVENT_SESSION_REAUTHENTICATED => Event::SessionReauthenticated {
            principal: read_principal(&mut r)?,
            mechanism: r.string()?,
            client_address: read_address(&mut r)?,
            token_claims: read_token_claims(&mut r)?,
        },
        EVENT_SESSION_EXPIRED => Event::SessionExpired {
            principal: read_principal(&mut r)?,
            client_address: read_address(&mut r)?,
        },
        EVENT_CREDENTIAL_REFRESHED => Event::CredentialRefreshed {
            principal_name: r.string()?,
            expiry_ms: r.opt_i64()?,
        },
        EVENT_CREDENTIAL_CHANGED => Event::CredentialChanged {
            user: r.string()?,
            mechanism: r.string()?,
        },
        EVENT_ACLS_CHANGED => Event::AclsChanged {
            created: size(r.u64()?),
            deleted: size(r.u64()?),
        },
        EVENT_TOKEN_CREATED => Event::TokenCreated {
            token_id: r.string()?,
            owner: read_principal(&mut r)?,
            requester: read_principal(&mut r)?,
            expiry_ms: r.i64()?,
        },
        EVENT_TOKEN_RENEWED => Event::TokenRenewed {
            token_id: r.string()?,
            expiry_ms: r.i64()?,
        },
        EVENT_TOKEN_EXPIRED => Event::TokenExpired {
            token_id: r.string()?,
            owner: read_principal(&mut r)?,
            removed: r.u8()? != 0,
        },
        EVENT_CREDENTIAL_REVOKED => Event::CredentialRevoked {
            credential: read_credential_id(&mut r)?,
        },
        other => return Err(CodecError::UnknownCode(other)),
    })
}
