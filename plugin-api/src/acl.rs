//! Kafka's ACL model with its wire codes (kafka-security-semantics §6.1): resource types,
//! pattern types, operations, permissions, bindings and filters, with Kafka's filter semantics.

use std::fmt;

use crate::principal::Principal;

macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $code:expr => $text:expr),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in wire-code order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire code.
            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code),+ }
            }

            /// The value for a wire code; unknown codes map to `Unknown` (Kafka's `fromCode`).
            pub fn from_code(code: i8) -> Self {
                match code { $($code => $name::$variant,)+ _ => $name::Unknown }
            }

            /// Kafka's upper-case name (as `kafka-acls` prints it).
            pub fn kafka_name(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parses Kafka's name, case-insensitively and ignoring `_`.
            pub fn parse(text: &str) -> Option<Self> {
                let wanted: String = text.chars().filter(|c| *c != '_').collect::<String>().to_ascii_uppercase();
                Self::ALL.iter().copied().find(|v| v.kafka_name().replace('_', "") == wanted)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.kafka_name())
            }
        }
    };
}

wire_enum!(
    /// `ResourceType`.
    ResourceType {
        /// UNKNOWN.
        Unknown = 0 => "UNKNOWN",
        /// ANY (filters only).
        Any = 1 => "ANY",
        /// TOPIC.
        Topic = 2 => "TOPIC",
        /// GROUP.
        Group = 3 => "GROUP",
        /// CLUSTER (always named `kafka-cluster`).
        Cluster = 4 => "CLUSTER",
        /// TRANSACTIONAL_ID.
        TransactionalId = 5 => "TRANSACTIONAL_ID",
        /// DELEGATION_TOKEN.
        DelegationToken = 6 => "DELEGATION_TOKEN",
        /// USER (KIP-373), named by principal string such as `User:alice`.
        User = 7 => "USER",
    }
);

wire_enum!(
    /// `PatternType`.
    PatternType {
        /// UNKNOWN.
        Unknown = 0 => "UNKNOWN",
        /// ANY (filters only): any stored pattern type with an exact name.
        Any = 1 => "ANY",
        /// MATCH (filters only): every ACL that applies to the named resource.
        Match = 2 => "MATCH",
        /// LITERAL: the exact name, or `*` for every resource.
        Literal = 3 => "LITERAL",
        /// PREFIXED: every resource whose name starts with the name.
        Prefixed = 4 => "PREFIXED",
    }
);

wire_enum!(
    /// `AclOperation`.
    AclOperation {
        /// UNKNOWN.
        Unknown = 0 => "UNKNOWN",
        /// ANY (filters only).
        Any = 1 => "ANY",
        /// ALL: matches every operation.
        All = 2 => "ALL",
        /// READ.
        Read = 3 => "READ",
        /// WRITE.
        Write = 4 => "WRITE",
        /// CREATE.
        Create = 5 => "CREATE",
        /// DELETE.
        Delete = 6 => "DELETE",
        /// ALTER.
        Alter = 7 => "ALTER",
        /// DESCRIBE.
        Describe = 8 => "DESCRIBE",
        /// CLUSTER_ACTION.
        ClusterAction = 9 => "CLUSTER_ACTION",
        /// DESCRIBE_CONFIGS.
        DescribeConfigs = 10 => "DESCRIBE_CONFIGS",
        /// ALTER_CONFIGS.
        AlterConfigs = 11 => "ALTER_CONFIGS",
        /// IDEMPOTENT_WRITE.
        IdempotentWrite = 12 => "IDEMPOTENT_WRITE",
        /// CREATE_TOKENS (KIP-373).
        CreateTokens = 13 => "CREATE_TOKENS",
        /// DESCRIBE_TOKENS (KIP-373).
        DescribeTokens = 14 => "DESCRIBE_TOKENS",
    }
);

wire_enum!(
    /// `AclPermissionType`.
    PermissionType {
        /// UNKNOWN.
        Unknown = 0 => "UNKNOWN",
        /// ANY (filters only).
        Any = 1 => "ANY",
        /// DENY.
        Deny = 2 => "DENY",
        /// ALLOW.
        Allow = 3 => "ALLOW",
    }
);

/// The only valid name of the CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The LITERAL name that matches every resource of its type.
pub const WILDCARD_RESOURCE: &str = "*";
/// The host that matches every client address.
pub const WILDCARD_HOST: &str = "*";
/// The only wildcard principal (`Group:*` is not a wildcard).
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// A resource pattern of a stored ACL.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct ResourcePattern {
    /// The resource type (never ANY or UNKNOWN in a stored ACL).
    pub resource_type: ResourceType,
    /// The name, `*`, or a prefix.
    pub name: String,
    /// LITERAL or PREFIXED in a stored ACL.
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    /// Creates a pattern.
    pub fn new(
        resource_type: ResourceType,
        name: impl Into<String>,
        pattern_type: PatternType,
    ) -> Self {
        Self {
            resource_type,
            name: name.into(),
            pattern_type,
        }
    }
    /// A LITERAL pattern.
    pub fn literal(resource_type: ResourceType, name: impl Into<String>) -> Self {
        Self::new(resource_type, name, PatternType::Literal)
    }
}

impl fmt::Display for ResourcePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.resource_type, self.pattern_type, self.name
        )
    }
}

/// The entry part of an ACL: who, from where, what, allow or deny.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct AccessControlEntry {
    /// The principal string, `type:name` (validated on create).
    pub principal: String,
    /// `*` or an exact client IP string.
    pub host: String,
    /// The operation (never ANY or UNKNOWN in a stored ACL).
    pub operation: AclOperation,
    /// ALLOW or DENY in a stored ACL.
    pub permission: PermissionType,
}

/// A stored ACL.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct AclBinding {
    /// The resource pattern.
    pub pattern: ResourcePattern,
    /// The entry.
    pub entry: AccessControlEntry,
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(pattern={}, principal={}, host={}, operation={}, permission={})",
            self.pattern,
            self.entry.principal,
            self.entry.host,
            self.entry.operation,
            self.entry.permission
        )
    }
}

/// A filter over resource patterns (Kafka's `ResourcePatternFilter`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourcePatternFilter {
    /// ANY matches every type.
    pub resource_type: ResourceType,
    /// `None` matches every name.
    pub name: Option<String>,
    /// ANY, MATCH, LITERAL or PREFIXED.
    pub pattern_type: PatternType,
}

impl ResourcePatternFilter {
    /// Whether the filter matches a stored pattern (§6.5 "Filter semantics").
    pub fn matches(&self, pattern: &ResourcePattern) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != pattern.resource_type {
            return false;
        }
        match self.pattern_type {
            PatternType::Any => self.name.as_ref().is_none_or(|n| *n == pattern.name),
            PatternType::Literal | PatternType::Prefixed => {
                self.pattern_type == pattern.pattern_type
                    && self.name.as_ref().is_none_or(|n| *n == pattern.name)
            }
            PatternType::Match => match &self.name {
                None => true,
                Some(name) => match pattern.pattern_type {
                    PatternType::Literal => {
                        pattern.name == *name || pattern.name == WILDCARD_RESOURCE
                    }
                    PatternType::Prefixed => name.starts_with(&pattern.name),
                    _ => false,
                },
            },
            PatternType::Unknown => false,
        }
    }
}

/// A filter over entries (Kafka's `AccessControlEntryFilter`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessControlEntryFilter {
    /// `None` matches every principal.
    pub principal: Option<String>,
    /// `None` matches every host.
    pub host: Option<String>,
    /// ANY matches every operation.
    pub operation: AclOperation,
    /// ANY matches every permission.
    pub permission: PermissionType,
}

impl AccessControlEntryFilter {
    /// Whether the filter matches a stored entry.
    pub fn matches(&self, entry: &AccessControlEntry) -> bool {
        self.principal
            .as_ref()
            .is_none_or(|p| *p == entry.principal)
            && self.host.as_ref().is_none_or(|h| *h == entry.host)
            && (self.operation == AclOperation::Any || self.operation == entry.operation)
            && (self.permission == PermissionType::Any || self.permission == entry.permission)
    }
}

/// A filter over ACLs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclBindingFilter {
    /// The pattern part.
    pub pattern: ResourcePatternFilter,
    /// The entry part.
    pub entry: AccessControlEntryFilter,
}

impl AclBindingFilter {
    /// Whether the filter matches a stored ACL.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.pattern.matches(&binding.pattern) && self.entry.matches(&binding.entry)
    }

    /// The filter that matches every ACL.
    pub fn any() -> Self {
        Self {
            pattern: ResourcePatternFilter {
                resource_type: ResourceType::Any,
                name: None,
                pattern_type: PatternType::Any,
            },
            entry: AccessControlEntryFilter {
                principal: None,
                host: None,
                operation: AclOperation::Any,
                permission: PermissionType::Any,
            },
        }
    }
}

/// Why an ACL cannot be created (Kafka answers INVALID_REQUEST with this message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidAcl(pub String);

/// Kafka's per-binding validation on create (§6.5), plus the `type:name` principal check that
/// makes KAFKA-18051 impossible.
pub fn validate_for_create(binding: &AclBinding) -> Result<(), InvalidAcl> {
    let p = &binding.pattern;
    if matches!(p.resource_type, ResourceType::Unknown | ResourceType::Any) {
        return Err(InvalidAcl("Invalid resource type".into()));
    }
    if !matches!(p.pattern_type, PatternType::Literal | PatternType::Prefixed) {
        return Err(InvalidAcl("Invalid pattern type".into()));
    }
    if p.name.is_empty() {
        return Err(InvalidAcl("Resource name should not be empty".into()));
    }
    if p.resource_type == ResourceType::Cluster && p.name != CLUSTER_NAME {
        return Err(InvalidAcl(
            "The only valid name for the CLUSTER resource is kafka-cluster".into(),
        ));
    }
    let e = &binding.entry;
    if matches!(e.operation, AclOperation::Unknown | AclOperation::Any) {
        return Err(InvalidAcl("Invalid operation type".into()));
    }
    if !matches!(e.permission, PermissionType::Allow | PermissionType::Deny) {
        return Err(InvalidAcl("Invalid permission type".into()));
    }
    Principal::parse(&e.principal).map_err(|err| InvalidAcl(err.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(rt: ResourceType, name: &str, pt: PatternType) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern::new(rt, name, pt),
            entry: AccessControlEntry {
                principal: "User:alice".into(),
                host: "*".into(),
                operation: AclOperation::Read,
                permission: PermissionType::Allow,
            },
        }
    }

    #[test]
    fn wire_codes_match_kafka() {
        assert_eq!(ResourceType::User.code(), 7);
        assert_eq!(ResourceType::DelegationToken.code(), 6);
        assert_eq!(AclOperation::CreateTokens.code(), 13);
        assert_eq!(AclOperation::DescribeTokens.code(), 14);
        assert_eq!(PatternType::Prefixed.code(), 4);
        assert_eq!(PermissionType::Allow.code(), 3);
        assert_eq!(AclOperation::from_code(99), AclOperation::Unknown);
        assert_eq!(
            AclOperation::parse("CreateTokens"),
            Some(AclOperation::CreateTokens)
        );
        assert_eq!(
            AclOperation::parse("describe_configs"),
            Some(AclOperation::DescribeConfigs)
        );
    }

    #[test]
    fn match_filter_finds_every_applicable_acl() {
        let filter = ResourcePatternFilter {
            resource_type: ResourceType::Topic,
            name: Some("payments-eu".into()),
            pattern_type: PatternType::Match,
        };
        assert!(filter
            .matches(&binding(ResourceType::Topic, "payments-eu", PatternType::Literal).pattern));
        assert!(filter.matches(&binding(ResourceType::Topic, "*", PatternType::Literal).pattern));
        assert!(filter.matches(&binding(ResourceType::Topic, "pay", PatternType::Prefixed).pattern));
        assert!(!filter.matches(&binding(ResourceType::Topic, "pay", PatternType::Literal).pattern));
        assert!(!filter
            .matches(&binding(ResourceType::Group, "payments-eu", PatternType::Literal).pattern));
    }

    #[test]
    fn any_filter_needs_an_exact_name() {
        let filter = ResourcePatternFilter {
            resource_type: ResourceType::Any,
            name: Some("pay".into()),
            pattern_type: PatternType::Any,
        };
        assert!(filter.matches(&binding(ResourceType::Topic, "pay", PatternType::Prefixed).pattern));
        assert!(!filter
            .matches(&binding(ResourceType::Topic, "payments", PatternType::Literal).pattern));
    }

    #[test]
    fn create_validation() {
        assert!(
            validate_for_create(&binding(ResourceType::Topic, "t", PatternType::Literal)).is_ok()
        );
        assert!(validate_for_create(&binding(
            ResourceType::User,
            "User:bob",
            PatternType::Prefixed
        ))
        .is_ok());
        assert!(validate_for_create(&binding(
            ResourceType::Cluster,
            "other",
            PatternType::Literal
        ))
        .is_err());
        assert!(
            validate_for_create(&binding(ResourceType::Topic, "", PatternType::Literal)).is_err()
        );
        assert!(
            validate_for_create(&binding(ResourceType::Topic, "t", PatternType::Match)).is_err()
        );
        let mut b = binding(ResourceType::Topic, "t", PatternType::Literal);
        b.entry.principal = "alice".into();
        assert!(validate_for_create(&b).is_err());
    }
}
