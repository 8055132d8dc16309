//! ACL bindings, binding filters, and the results of creating and deleting ACLs.

use crate::acl::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation,
    PatternType, PermissionType, ResourcePattern, ResourcePatternFilter, ResourceType,
};
use crate::authorizer::AclAdminError;

use super::wire::{CodecError, Reader, Writer};

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
