//! The ACL index: an immutable snapshot built for `authorize()` and `authorize_by_resource_type()`.
//!
//! Layout, per resource type (each an `Arc`, so a change copies only the type it touches):
//! - `literal` / `prefixed`: name → the ACLs of that resource pattern ([`ResourceAcls`]).
//!   A PREFIXED lookup probes the name's prefixes of the byte lengths that some PREFIXED
//!   pattern of this type has (`prefix_lengths`), so it costs one hash probe per distinct
//!   prefix length not longer than the name, whatever the number of ACLs.
//! - `wildcard`: the LITERAL `*` pattern.
//! - `buckets`: for `authorize_by_resource_type`, the names an ACL allows or denies, keyed by
//!   (principal, host, operation) exactly as Kafka's default algorithm filters them.
//!
//! Inside a [`ResourceAcls`], entries are sorted by a key (principal id, host id), where ids
//! come from tables interned at index time (`User:*` is principal 0, `*` is host 0). A lookup
//! is then at most four binary searches over integers (two more per group of the session that
//! some ACL names), and an operation bitmask rejects a resource without looking at any entry.
//! Nothing on the read path allocates (up to six ACL-named groups per session).

mod buckets;
mod ids;
mod resource;
mod snapshot;
mod update;

pub(crate) use resource::{Client, Outcome};
pub(crate) use snapshot::Index;
