//! The byte encodings of the values that cross the ABI as one buffer (lists, maps, ACLs, events,
//! errors): little-endian integers, and strings and byte strings prefixed by a `u32` length.
//! Length-prefixed rather than separator-based, so any string survives; both directions live here
//! so that the two sides cannot disagree. Decoding never trusts a length: a buffer that runs out
//! is [`CodecError::Truncated`], never a panic.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::acl::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation,
    PatternType, PermissionType, ResourcePattern, ResourcePatternFilter, ResourceType,
};
use crate::authorizer::AclAdminError;
use crate::credentials::{CredentialId, ScramCredential, ScramMechanism, TokenCredential};
use crate::events::Event;
use crate::login::ExpiringCredential;
use crate::plugin::{ConfigError, PluginError};
use crate::principal::{Principal, PrincipalError};
use crate::sasl::TokenClaims;

/// Why bytes from the other side could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// A length prefix or the bytes it announces run past the end.
    #[error("the encoded value is truncated")]
    Truncated,
    /// A string is not UTF-8.
    #[error("an encoded string is not UTF-8")]
    NotUtf8,
    /// A kind code this side does not know.
    #[error("unknown code {0}")]
    UnknownCode(u32),
}

/// Builds an encoded buffer.
#[derive(Debug, Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }
    /// The bytes.
    pub fn finish(self) -> Vec<u8> {
        self.0
    }
    /// A `u8`.
    pub fn u8(&mut self, value: u8) -> &mut Self {
        self.0.push(value);
        self
    }
    /// A `u32`.
    pub fn u32(&mut self, value: u32) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    /// A `u64`.
    pub fn u64(&mut self, value: u64) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    /// An `i64`.
    pub fn i64(&mut self, value: i64) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    /// A length-prefixed byte string (cut at 4 GiB rather than wrapping the prefix).
    pub fn bytes(&mut self, value: &[u8]) -> &mut Self {
        let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
        self.u32(len);
        self.0
            .extend_from_slice(value.get(..len as usize).unwrap_or_default());
        self
    }
    /// A length-prefixed string.
    pub fn str(&mut self, value: &str) -> &mut Self {
        self.bytes(value.as_bytes())
    }
    /// An optional string: a presence byte, then the string.
    pub fn opt_str(&mut self, value: Option<&str>) -> &mut Self {
        match value {
            Some(value) => self.u8(1).str(value),
            None => self.u8(0),
        }
    }
    /// An optional `i64`.
    pub fn opt_i64(&mut self, value: Option<i64>) -> &mut Self {
        match value {
            Some(value) => self.u8(1).i64(value),
            None => self.u8(0),
        }
    }
    /// A count (lists).
    pub fn count(&mut self, count: usize) -> &mut Self {
        self.u32(u32::try_from(count).unwrap_or(u32::MAX))
    }
}

/// Reads an encoded buffer.
#[derive(Debug)]
pub struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// Reads `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self(bytes)
    }
    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn take<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(CodecError::Truncated)?;
        self.0 = rest;
        Ok(*head)
    }
    /// A `u8`.
    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take::<1>()?[0])
    }
    /// A `u32`.
    pub fn u32(&mut self) -> Result<u32, CodecError> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    /// A `u64`.
    pub fn u64(&mut self) -> Result<u64, CodecError> {
        self.take::<8>().map(u64::from_le_bytes)
    }
    /// An `i64`.
    pub fn i64(&mut self) -> Result<i64, CodecError> {
        self.take::<8>().map(i64::from_le_bytes)
    }
    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let len = usize::try_from(self.u32()?).map_err(|_| CodecError::Truncated)?;
        let (value, rest) = self.0.split_at_checked(len).ok_or(CodecError::Truncated)?;
        self.0 = rest;
        Ok(value)
    }
    /// A length-prefixed string.
    pub fn str(&mut self) -> Result<&'a str, CodecError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| CodecError::NotUtf8)
    }
    /// An owned string.
    pub fn string(&mut self) -> Result<String, CodecError> {
        self.str().map(str::to_owned)
    }
    /// An optional string.
    pub fn opt_string(&mut self) -> Result<Option<String>, CodecError> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.string().map(Some),
        }
    }
    /// An optional `i64`.
    pub fn opt_i64(&mut self) -> Result<Option<i64>, CodecError> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.i64().map(Some),
        }
    }
    /// A count, bounded by what the rest of the buffer could hold (each element takes at least
    /// `min_size` bytes), so a forged count cannot make the reader reserve memory.
    pub fn count(&mut self, min_size: usize) -> Result<usize, CodecError> {
        let count = usize::try_from(self.u32()?).map_err(|_| CodecError::Truncated)?;
        if count.saturating_mul(min_size.max(1)) > self.0.len() {
            return Err(CodecError::Truncated);
        }
        Ok(count)
    }
}

// ---- Maps and lists -----------------------------------------------------------------------------

/// Encodes a string map (SASL extensions): for each entry, key then value.
pub fn encode_string_map(map: &BTreeMap<String, String>) -> Vec<u8> {
    let mut w = Writer::new();
    for (key, value) in map {
        w.str(key).str(value);
    }
    w.finish()
}

/// Decodes [`encode_string_map`].
///
/// # Errors
/// Truncated input or non-UTF-8 strings.
pub fn decode_string_map(bytes: &[u8]) -> Result<BTreeMap<String, String>, CodecError> {
    let mut r = Reader::new(bytes);
    let mut map = BTreeMap::new();
    while !r.is_empty() {
        let key = r.string()?;
        let value = r.string()?;
        map.insert(key, value);
    }
    Ok(map)
}

/// Encodes a list of byte strings (a certificate chain).
pub fn encode_byte_list(list: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Writer::new();
    for item in list {
        w.bytes(item);
    }
    w.finish()
}

/// Decodes [`encode_byte_list`].
///
/// # Errors
/// Truncated input.
pub fn decode_byte_list(bytes: &[u8]) -> Result<Vec<Vec<u8>>, CodecError> {
    let mut r = Reader::new(bytes);
    let mut list = Vec::new();
    while !r.is_empty() {
        list.push(r.bytes()?.to_vec());
    }
    Ok(list)
}

// ---- Credentials --------------------------------------------------------------------------------

/// The wire code of a SCRAM mechanism across the ABI (Kafka's type byte).
pub fn scram_code(mechanism: ScramMechanism) -> u32 {
    mechanism.type_byte() as u32
}

/// The SCRAM mechanism for [`scram_code`].
pub fn scram_from_code(code: u32) -> Option<ScramMechanism> {
    i8::try_from(code)
        .ok()
        .and_then(ScramMechanism::from_type_byte)
}

fn write_scram(w: &mut Writer, credential: &ScramCredential) {
    w.u32(credential.iterations)
        .bytes(&credential.salt)
        .bytes(&credential.stored_key)
        .bytes(&credential.server_key);
}

fn read_scram(r: &mut Reader<'_>) -> Result<ScramCredential, CodecError> {
    Ok(ScramCredential {
        iterations: r.u32()?,
        salt: r.bytes()?.to_vec(),
        stored_key: r.bytes()?.to_vec(),
        server_key: r.bytes()?.to_vec(),
    })
}

/// Encodes a SCRAM credential.
pub fn encode_scram_credential(credential: &ScramCredential) -> Vec<u8> {
    let mut w = Writer::new();
    write_scram(&mut w, credential);
    w.finish()
}

/// Decodes [`encode_scram_credential`].
///
/// # Errors
/// Truncated input.
pub fn decode_scram_credential(bytes: &[u8]) -> Result<ScramCredential, CodecError> {
    read_scram(&mut Reader::new(bytes))
}

/// Encodes a delegation token's credential.
pub fn encode_token_credential(token: &TokenCredential) -> Vec<u8> {
    let mut w = Writer::new();
    w.str(&token.owner_name).i64(token.expiry_ms);
    write_scram(&mut w, &token.credential);
    w.finish()
}

/// Decodes [`encode_token_credential`].
///
/// # Errors
/// Truncated input or a non-UTF-8 owner.
pub fn decode_token_credential(bytes: &[u8]) -> Result<TokenCredential, CodecError> {
    let mut r = Reader::new(bytes);
    let owner = r.string()?;
    let expiry = r.i64()?;
    let credential = read_scram(&mut r)?;
    Ok(TokenCredential::new(owner, credential, expiry))
}

/// Encodes a login module's credential facts.
pub fn encode_expiring_credential(credential: &ExpiringCredential) -> Vec<u8> {
    let mut w = Writer::new();
    w.str(&credential.principal_name)
        .opt_i64(credential.start_ms)
        .opt_i64(credential.expiry_ms)
        .opt_i64(credential.absolute_last_refresh_ms);
    w.finish()
}

/// Decodes [`encode_expiring_credential`].
///
/// # Errors
/// Truncated input or a non-UTF-8 name.
pub fn decode_expiring_credential(bytes: &[u8]) -> Result<ExpiringCredential, CodecError> {
    let mut r = Reader::new(bytes);
    let mut credential = ExpiringCredential::non_expiring(r.string()?);
    credential.start_ms = r.opt_i64()?;
    credential.expiry_ms = r.opt_i64()?;
    credential.absolute_last_refresh_ms = r.opt_i64()?;
    Ok(credential)
}

// ---- Errors -------------------------------------------------------------------------------------

const CREATE_CONFIG: u32 = 1;
const CREATE_INVALID_VALUE: u32 = 2;
const CREATE_STARTUP: u32 = 3;

/// Encodes a plugin's creation error.
pub fn encode_plugin_error(error: &PluginError) -> Vec<u8> {
    let mut w = Writer::new();
    match error {
        PluginError::Config(config) => {
            w.u32(CREATE_CONFIG).str(&config.message);
            match &config.span {
                Some(span) => w.u8(1).u64(span.start as u64).u64(span.end as u64),
                None => w.u8(0),
            };
        }
        PluginError::InvalidValue { key, message } => {
            w.u32(CREATE_INVALID_VALUE).str(key).str(message);
        }
        PluginError::Startup { message } => {
            w.u32(CREATE_STARTUP).str(message);
        }
    }
    w.finish()
}

/// Decodes [`encode_plugin_error`].
///
/// # Errors
/// Truncated input, non-UTF-8 text, or a kind this side does not know.
pub fn decode_plugin_error(bytes: &[u8]) -> Result<PluginError, CodecError> {
    let mut r = Reader::new(bytes);
    match r.u32()? {
        CREATE_CONFIG => {
            let message = r.string()?;
            let span = match r.u8()? {
                0 => None,
                _ => {
                    let start = usize::try_from(r.u64()?).map_err(|_| CodecError::Truncated)?;
                    let end = usize::try_from(r.u64()?).map_err(|_| CodecError::Truncated)?;
                    Some(start..end)
                }
            };
            Ok(PluginError::Config(ConfigError::new(message, span)))
        }
        CREATE_INVALID_VALUE => Ok(PluginError::InvalidValue {
            key: r.string()?,
            message: r.string()?,
        }),
        CREATE_STARTUP => Ok(PluginError::Startup {
            message: r.string()?,
        }),
        other => Err(CodecError::UnknownCode(other)),
    }
}

const PRINCIPAL_NO_RULE: u32 = 1;
const PRINCIPAL_UNAVAILABLE: u32 = 2;
const PRINCIPAL_FAILED: u32 = 3;

/// Encodes a principal builder's error.
pub fn encode_principal_error(error: &PrincipalError) -> Vec<u8> {
    let mut w = Writer::new();
    match error {
        PrincipalError::NoRuleApplies { name } => w.u32(PRINCIPAL_NO_RULE).str(name),
        PrincipalError::Unavailable { reason } => w.u32(PRINCIPAL_UNAVAILABLE).str(reason),
        PrincipalError::Failed { reason } => w.u32(PRINCIPAL_FAILED).str(reason),
    };
    w.finish()
}

/// Decodes [`encode_principal_error`]; anything undecodable is a [`PrincipalError::Failed`].
pub fn decode_principal_error(bytes: &[u8]) -> PrincipalError {
    let mut r = Reader::new(bytes);
    let decoded = (|| -> Result<PrincipalError, CodecError> {
        Ok(match r.u32()? {
            PRINCIPAL_NO_RULE => PrincipalError::NoRuleApplies { name: r.string()? },
            PRINCIPAL_UNAVAILABLE => PrincipalError::Unavailable {
                reason: r.string()?,
            },
            PRINCIPAL_FAILED => PrincipalError::Failed {
                reason: r.string()?,
            },
            other => return Err(CodecError::UnknownCode(other)),
        })
    })();
    decoded.unwrap_or_else(|e| PrincipalError::Failed {
        reason: format!("the plugin's error could not be read: {e}"),
    })
}

// ---- ACLs ---------------------------------------------------------------------------------------

fn code<T: Into<i8>>(value: T) -> u8 {
    value.into().to_le_bytes()[0]
}

fn write_binding(w: &mut Writer, binding: &AclBinding) {
    w.u8(code(binding.pattern.resource_type.code()))
        .str(&binding.pattern.name)
        .u8(code(binding.pattern.pattern_type.code()))
        .str(&binding.entry.principal)
        .str(&binding.entry.host)
        .u8(code(binding.entry.operation.code()))
        .u8(code(binding.entry.permission.code()));
}

fn signed(byte: u8) -> i8 {
    i8::from_le_bytes([byte])
}

fn read_binding(r: &mut Reader<'_>) -> Result<AclBinding, CodecError> {
    let resource_type = ResourceType::from_code(signed(r.u8()?));
    let name = r.string()?;
    let pattern_type = PatternType::from_code(signed(r.u8()?));
    Ok(AclBinding {
        pattern: ResourcePattern::new(resource_type, name, pattern_type),
        entry: AccessControlEntry {
            principal: r.string()?,
            host: r.string()?,
            operation: AclOperation::from_code(signed(r.u8()?)),
            permission: PermissionType::from_code(signed(r.u8()?)),
        },
    })
}

fn write_filter(w: &mut Writer, filter: &AclBindingFilter) {
    w.u8(code(filter.pattern.resource_type.code()))
        .opt_str(filter.pattern.name.as_deref())
        .u8(code(filter.pattern.pattern_type.code()))
        .opt_str(filter.entry.principal.as_deref())
        .opt_str(filter.entry.host.as_deref())
        .u8(code(filter.entry.operation.code()))
        .u8(code(filter.entry.permission.code()));
}

fn read_filter(r: &mut Reader<'_>) -> Result<AclBindingFilter, CodecError> {
    let resource_type = ResourceType::from_code(signed(r.u8()?));
    let name = r.opt_string()?;
    let pattern_type = PatternType::from_code(signed(r.u8()?));
    Ok(AclBindingFilter {
        pattern: ResourcePatternFilter {
            resource_type,
            name,
            pattern_type,
        },
        entry: AccessControlEntryFilter {
            principal: r.opt_string()?,
            host: r.opt_string()?,
            operation: AclOperation::from_code(signed(r.u8()?)),
            permission: PermissionType::from_code(signed(r.u8()?)),
        },
    })
}

/// The smallest encoded binding: 4 codes and 3 empty strings.
const MIN_BINDING: usize = 4 + 3 * 4;
/// The smallest encoded filter: 4 codes and 3 absent strings.
const MIN_FILTER: usize = 4 + 3;

/// Encodes a list of bindings.
pub fn encode_bindings(bindings: &[AclBinding]) -> Vec<u8> {
    let mut w = Writer::new();
    w.count(bindings.len());
    for binding in bindings {
        write_binding(&mut w, binding);
    }
    w.finish()
}

/// Decodes [`encode_bindings`].
///
/// # Errors
/// Truncated input or non-UTF-8 strings.
pub fn decode_bindings(bytes: &[u8]) -> Result<Vec<AclBinding>, CodecError> {
    let mut r = Reader::new(bytes);
    read_bindings(&mut r)
}

fn read_bindings(r: &mut Reader<'_>) -> Result<Vec<AclBinding>, CodecError> {
    let count = r.count(MIN_BINDING)?;
    (0..count).map(|_| read_binding(r)).collect()
}

/// Encodes a list of filters.
pub fn encode_filters(filters: &[AclBindingFilter]) -> Vec<u8> {
    let mut w = Writer::new();
    w.count(filters.len());
    for filter in filters {
        write_filter(&mut w, filter);
    }
    w.finish()
}

/// Decodes [`encode_filters`].
///
/// # Errors
/// Truncated input or non-UTF-8 strings.
pub fn decode_filters(bytes: &[u8]) -> Result<Vec<AclBindingFilter>, CodecError> {
    let mut r = Reader::new(bytes);
    let count = r.count(MIN_FILTER)?;
    (0..count).map(|_| read_filter(&mut r)).collect()
}

const ACL_OK: u8 = 0;
const ACL_INVALID: u8 = 1;
const ACL_STORE: u8 = 2;

fn write_acl_error(w: &mut Writer, error: &AclAdminError) {
    match error {
        AclAdminError::Invalid(invalid) => w.u8(ACL_INVALID).str(&invalid.0),
        AclAdminError::Store(message) => w.u8(ACL_STORE).str(message),
    };
}

fn read_acl_result(r: &mut Reader<'_>) -> Result<Result<(), AclAdminError>, CodecError> {
    Ok(match r.u8()? {
        ACL_OK => Ok(()),
        ACL_INVALID => Err(AclAdminError::Invalid(crate::acl::InvalidAcl(r.string()?))),
        _ => Err(AclAdminError::Store(r.string()?)),
    })
}

/// Encodes `create_acls` results.
pub fn encode_create_results(results: &[Result<(), AclAdminError>]) -> Vec<u8> {
    let mut w = Writer::new();
    w.count(results.len());
    for result in results {
        match result {
            Ok(()) => {
                w.u8(ACL_OK);
            }
            Err(error) => write_acl_error(&mut w, error),
        }
    }
    w.finish()
}

/// Decodes [`encode_create_results`].
///
/// # Errors
/// Truncated input or non-UTF-8 messages.
pub fn decode_create_results(bytes: &[u8]) -> Result<Vec<Result<(), AclAdminError>>, CodecError> {
    let mut r = Reader::new(bytes);
    let count = r.count(1)?;
    (0..count).map(|_| read_acl_result(&mut r)).collect()
}

/// Encodes `delete_acls`' result.
pub fn encode_delete_result(result: &Result<Vec<Vec<AclBinding>>, AclAdminError>) -> Vec<u8> {
    let mut w = Writer::new();
    match result {
        Ok(per_filter) => {
            w.u8(ACL_OK).count(per_filter.len());
            for bindings in per_filter {
                w.count(bindings.len());
                for binding in bindings {
                    write_binding(&mut w, binding);
                }
            }
        }
        Err(error) => write_acl_error(&mut w, error),
    }
    w.finish()
}

/// Decodes [`encode_delete_result`].
///
/// # Errors
/// Truncated input or non-UTF-8 strings.
pub fn decode_delete_result(
    bytes: &[u8],
) -> Result<Result<Vec<Vec<AclBinding>>, AclAdminError>, CodecError> {
    let mut r = Reader::new(bytes);
    match r.u8()? {
        ACL_OK => {
            let count = r.count(4)?;
            let per_filter = (0..count)
                .map(|_| read_bindings(&mut r))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Ok(per_filter))
        }
        ACL_INVALID => Ok(Err(AclAdminError::Invalid(crate::acl::InvalidAcl(
            r.string()?,
        )))),
        _ => Ok(Err(AclAdminError::Store(r.string()?))),
    }
}

// ---- Events -------------------------------------------------------------------------------------

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_and_lists_round_trip() {
        let mut map = BTreeMap::new();
        map.insert("tokenauth".to_owned(), "true".to_owned());
        map.insert("a,b=c\0".to_owned(), String::new());
        assert_eq!(decode_string_map(&encode_string_map(&map)), Ok(map));
        assert_eq!(decode_string_map(&[]), Ok(BTreeMap::new()));
        let chain = vec![vec![1, 2, 3], Vec::new(), vec![0xff; 300]];
        assert_eq!(decode_byte_list(&encode_byte_list(&chain)), Ok(chain));
    }

    #[test]
    fn truncated_and_forged_input_is_an_error_not_a_panic() {
        assert_eq!(decode_string_map(&[1, 0, 0]), Err(CodecError::Truncated));
        assert_eq!(
            decode_string_map(&[5, 0, 0, 0, b'a']),
            Err(CodecError::Truncated)
        );
        assert_eq!(
            decode_string_map(&[1, 0, 0, 0, 0xff, 0, 0, 0, 0]),
            Err(CodecError::NotUtf8)
        );
        // A count of 2^32-1 bindings in 4 bytes reserves nothing.
        assert_eq!(decode_bindings(&[0xff; 4]), Err(CodecError::Truncated));
        for len in 0..40 {
            let bytes = vec![7u8; len];
            let _ = decode_event(&bytes);
            let _ = decode_filters(&bytes);
            let _ = decode_delete_result(&bytes);
            let _ = decode_plugin_error(&bytes);
            let _ = decode_principal_error(&bytes);
        }
    }

    fn binding(name: &str) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern::new(ResourceType::Topic, name, PatternType::Prefixed),
            entry: AccessControlEntry {
                principal: "User:alice".into(),
                host: "*".into(),
                operation: AclOperation::Write,
                permission: PermissionType::Allow,
            },
        }
    }

    #[test]
    fn acls_round_trip() {
        let bindings = vec![binding("a"), binding("é")];
        assert_eq!(
            decode_bindings(&encode_bindings(&bindings)),
            Ok(bindings.clone())
        );
        let filters = vec![AclBindingFilter::any(), {
            let mut f = AclBindingFilter::any();
            f.pattern.name = Some("x".into());
            f.entry.principal = Some("User:bob".into());
            f
        }];
        assert_eq!(decode_filters(&encode_filters(&filters)), Ok(filters));
        let results = vec![
            Ok(()),
            Err(AclAdminError::Invalid(crate::acl::InvalidAcl("bad".into()))),
            Err(AclAdminError::Store("disk".into())),
        ];
        assert_eq!(
            decode_create_results(&encode_create_results(&results)),
            Ok(results)
        );
        let deleted = Ok(vec![bindings.clone(), Vec::new()]);
        assert_eq!(
            decode_delete_result(&encode_delete_result(&deleted)),
            Ok(deleted)
        );
    }

    #[test]
    fn events_and_errors_round_trip() {
        let events = [
            Event::SessionAuthenticated {
                principal: Principal::user("alice"),
                mechanism: "PLAIN".into(),
                client_address: IpAddr::from([127, 0, 0, 1]),
                token_claims: None,
            },
            Event::SessionAuthenticated {
                principal: Principal::user("alice"),
                mechanism: "OAUTHBEARER".into(),
                client_address: IpAddr::from([127, 0, 0, 1]),
                token_claims: Some(TokenClaims::new(
                    vec!["kafka.read".into(), "é".into()],
                    vec!["readers".into(), "".into(), "a:b".into()],
                    Some("jti-1".into()),
                )),
            },
            Event::SessionReauthenticated {
                principal: Principal::user("alice"),
                mechanism: "OAUTHBEARER".into(),
                client_address: "::1".parse().unwrap(),
                token_claims: Some(TokenClaims::new(Vec::new(), vec!["g".into()], None)),
            },
            Event::SessionReauthenticated {
                principal: Principal::user("bob"),
                mechanism: "PLAIN".into(),
                client_address: "::1".parse().unwrap(),
                token_claims: None,
            },
            Event::AuthenticationFailed {
                mechanism: None,
                client_address: "::1".parse().unwrap(),
                reason: "bad".into(),
            },
            Event::AclsChanged {
                created: 2,
                deleted: 1,
            },
            Event::TokenExpired {
                token_id: "t".into(),
                owner: Principal::user("o"),
                removed: true,
            },
            Event::CredentialRevoked {
                credential: CredentialId::scram("u", ScramMechanism::Sha512),
            },
            Event::CredentialRefreshed {
                principal_name: "svc".into(),
                expiry_ms: Some(5),
            },
        ];
        for event in events {
            assert_eq!(decode_event(&encode_event(&event)), Ok(event));
        }
        assert_eq!(
            decode_event(&[99, 0, 0, 0]),
            Err(CodecError::UnknownCode(99))
        );

        let error = PluginError::Config(ConfigError::new("unknown field `x`", Some(3..4)));
        assert!(matches!(
            decode_plugin_error(&encode_plugin_error(&error)),
            Ok(PluginError::Config(c)) if c.span == Some(3..4) && c.message == "unknown field `x`"
        ));
        let error = PrincipalError::NoRuleApplies {
            name: "CN=x".into(),
        };
        assert_eq!(
            decode_principal_error(&encode_principal_error(&error)),
            error
        );
        let credential = ExpiringCredential::expiring("svc", 1, 2);
        assert_eq!(
            decode_expiring_credential(&encode_expiring_credential(&credential)),
            Ok(credential)
        );
    }

    /// The token claims were appended to the session events: an event without them encodes as
    /// before plus one byte, an older host's bytes (which end before them) decode as `None`, and
    /// the bytes an older subscriber reads (the prefix) are those of the same event without
    /// claims, so it decodes the event it always did.
    #[test]
    fn session_events_grew_by_appending_their_token_claims() {
        let claims = TokenClaims::new(
            vec!["s".into()],
            vec!["readers".into(), "writers".into()],
            Some("id".into()),
        );
        for (with, without) in [
            (
                Event::SessionAuthenticated {
                    principal: Principal::user("alice"),
                    mechanism: "OAUTHBEARER".into(),
                    client_address: IpAddr::from([10, 0, 0, 1]),
                    token_claims: Some(claims.clone()),
                },
                Event::SessionAuthenticated {
                    principal: Principal::user("alice"),
                    mechanism: "OAUTHBEARER".into(),
                    client_address: IpAddr::from([10, 0, 0, 1]),
                    token_claims: None,
                },
            ),
            (
                Event::SessionReauthenticated {
                    principal: Principal::user("alice"),
                    mechanism: "OAUTHBEARER".into(),
                    client_address: IpAddr::from([10, 0, 0, 1]),
                    token_claims: Some(claims.clone()),
                },
                Event::SessionReauthenticated {
                    principal: Principal::user("alice"),
                    mechanism: "OAUTHBEARER".into(),
                    client_address: IpAddr::from([10, 0, 0, 1]),
                    token_claims: None,
                },
            ),
        ] {
            let new = encode_event(&with);
            let none = encode_event(&without);
            // What a host before the claims wrote: everything but the trailing presence byte.
            let old = &none[..none.len() - 1];
            assert_eq!(none.last(), Some(&0));
            assert_eq!(decode_event(old), Ok(without.clone()));
            assert!(
                new.starts_with(old),
                "the older fields come first, unchanged"
            );
            assert_eq!(decode_event(&new), Ok(with));
            // Cut inside the claims: an error, not a panic and not a silent `None`.
            for cut in old.len() + 1..new.len() {
                assert!(decode_event(&new[..cut]).is_err(), "cut at {cut}");
            }
        }
    }
}
