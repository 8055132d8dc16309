//! The four delegation-token request bodies, read with the bounds-checked [`Reader`] (never with
//! kafka-protocol: these bytes come from clients).
//!
//! | API | versions | body |
//! |-----|----------|------|
//! | CreateDelegationToken (38) | 1–3, flexible from 2 | v3+: OwnerPrincipalType, OwnerPrincipalName (nullable); Renewers `[{PrincipalType, PrincipalName}]`; MaxLifetimeMs |
//! | RenewDelegationToken (39) | 1–2, flexible from 2 | Hmac; RenewPeriodMs |
//! | ExpireDelegationToken (40) | 1–2, flexible from 2 | Hmac; ExpiryTimePeriodMs |
//! | DescribeDelegationToken (41) | 1–3, flexible from 2 | Owners `[{PrincipalType, PrincipalName}]`, nullable |

use crate::protocol::reader::{Malformed, Reader};

/// A principal as the request names it (type and name, unvalidated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedPrincipal {
    /// The principal type.
    pub kind: String,
    /// The principal name.
    pub name: String,
}

/// CreateDelegationToken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateBody {
    /// The owner's type (v3+), nullable.
    pub owner_type: Option<String>,
    /// The owner's name (v3+), nullable.
    pub owner_name: Option<String>,
    /// The renewers.
    pub renewers: Vec<NamedPrincipal>,
    /// The requested maximum lifetime (-1: the server's).
    pub max_lifetime_ms: i64,
}

/// RenewDelegationToken and ExpireDelegationToken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HmacBody {
    /// The token's HMAC.
    pub hmac: Vec<u8>,
    /// RenewPeriodMs or ExpiryTimePeriodMs.
    pub period_ms: i64,
}

/// DescribeDelegationToken: `None` asks for every token.
pub type DescribeBody = Option<Vec<NamedPrincipal>>;

fn flexible(version: i16) -> bool {
    version >= 2
}

fn principals(
    r: &mut Reader<'_>,
    flex: bool,
    len: usize,
) -> Result<Vec<NamedPrincipal>, Malformed> {
    // The count is bounded by the bytes present (each entry takes at least two length fields), so
    // a forged count cannot size an allocation: `Reader` checks every read.
    let mut out = Vec::with_capacity(len.min(r.remaining() / 2 + 1));
    for _ in 0..len {
        let kind = r.any_string(flex)?;
        let name = r.any_string(flex)?;
        if flex {
            r.skip_tagged_fields()?;
        }
        out.push(NamedPrincipal { kind, name });
    }
    Ok(out)
}

fn finish(r: &mut Reader<'_>, flex: bool) -> Result<(), Malformed> {
    if flex {
        r.skip_tagged_fields()?;
    }
    r.end_of_request();
    Ok(())
}

/// Reads a CreateDelegationToken body of `version`.
pub fn create(body: &[u8], version: i16) -> Result<CreateBody, Malformed> {
    let flex = flexible(version);
    let mut r = Reader::new(body);
    let (owner_type, owner_name) = if version >= 3 {
        (r.any_nullable_string(flex)?, r.any_nullable_string(flex)?)
    } else {
        (None, None)
    };
    // Renewers is not nullable; a null array reads as empty, as Kafka's parser would refuse it
    // only later.
    let count = r.any_array_len(flex)?.unwrap_or(0);
    let renewers = principals(&mut r, flex, count)?;
    let max_lifetime_ms = r.i64()?;
    finish(&mut r, flex)?;
    Ok(CreateBody {
        owner_type,
        owner_name,
        renewers,
        max_lifetime_ms,
    })
}

/// Reads a RenewDelegationToken or ExpireDelegationToken body of `version`.
pub fn hmac_and_period(body: &[u8], version: i16) -> Result<HmacBody, Malformed> {
    let flex = flexible(version);
    let mut r = Reader::new(body);
    let hmac = if flex { r.compact_bytes()? } else { r.bytes()? }.to_vec();
    let period_ms = r.i64()?;
    finish(&mut r, flex)?;
    Ok(HmacBody { hmac, period_ms })
}

/// Reads a DescribeDelegationToken body of `version`.
pub fn describe(body: &[u8], version: i16) -> Result<DescribeBody, Malformed> {
    let flex = flexible(version);
    let mut r = Reader::new(body);
    let owners = match r.any_array_len(flex)? {
        None => None,
        Some(n) => Some(principals(&mut r, flex, n)?),
    };
    finish(&mut r, flex)?;
    Ok(owners)
}
