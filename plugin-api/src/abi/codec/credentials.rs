//! SCRAM, token and expiring (login module) credentials.

use crate::credentials::{ScramCredential, ScramMechanism, TokenCredential};
use crate::login::ExpiringCredential;

use super::wire::{CodecError, Reader, Writer};

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
