//! Plugin creation errors and principal builder errors.

use crate::plugin::{ConfigError, PluginError};
use crate::principal::PrincipalError;

use super::wire::{CodecError, Reader, Writer};

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
