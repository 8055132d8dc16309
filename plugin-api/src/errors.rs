//! Kafka error codes Portcullis sends (`org.apache.kafka.common.protocol.Errors`).

/// A Kafka wire error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub i16);

impl ErrorCode {
    /// No error.
    pub const NONE: ErrorCode = ErrorCode(0);
    /// UNKNOWN_SERVER_ERROR.
    pub const UNKNOWN_SERVER_ERROR: ErrorCode = ErrorCode(-1);
    /// UNKNOWN_TOPIC_OR_PARTITION.
    pub const UNKNOWN_TOPIC_OR_PARTITION: ErrorCode = ErrorCode(3);
    /// TOPIC_AUTHORIZATION_FAILED.
    pub const TOPIC_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(29);
    /// GROUP_AUTHORIZATION_FAILED.
    pub const GROUP_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(30);
    /// CLUSTER_AUTHORIZATION_FAILED.
    pub const CLUSTER_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(31);
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(53);
    /// UNSUPPORTED_SASL_MECHANISM.
    pub const UNSUPPORTED_SASL_MECHANISM: ErrorCode = ErrorCode(33);
    /// ILLEGAL_SASL_STATE.
    pub const ILLEGAL_SASL_STATE: ErrorCode = ErrorCode(34);
    /// UNSUPPORTED_VERSION.
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(35);
    /// INVALID_REQUEST.
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(42);
    /// SECURITY_DISABLED.
    pub const SECURITY_DISABLED: ErrorCode = ErrorCode(54);
    /// SASL_AUTHENTICATION_FAILED.
    pub const SASL_AUTHENTICATION_FAILED: ErrorCode = ErrorCode(58);
    /// DELEGATION_TOKEN_AUTH_DISABLED.
    pub const DELEGATION_TOKEN_AUTH_DISABLED: ErrorCode = ErrorCode(61);
    /// DELEGATION_TOKEN_NOT_FOUND.
    pub const DELEGATION_TOKEN_NOT_FOUND: ErrorCode = ErrorCode(62);
    /// DELEGATION_TOKEN_OWNER_MISMATCH.
    pub const DELEGATION_TOKEN_OWNER_MISMATCH: ErrorCode = ErrorCode(63);
    /// DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.
    pub const DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: ErrorCode = ErrorCode(64);
    /// DELEGATION_TOKEN_AUTHORIZATION_FAILED.
    pub const DELEGATION_TOKEN_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(65);
    /// DELEGATION_TOKEN_EXPIRED.
    pub const DELEGATION_TOKEN_EXPIRED: ErrorCode = ErrorCode(66);
    /// INVALID_PRINCIPAL_TYPE.
    pub const INVALID_PRINCIPAL_TYPE: ErrorCode = ErrorCode(67);
    /// RESOURCE_NOT_FOUND.
    pub const RESOURCE_NOT_FOUND: ErrorCode = ErrorCode(91);
    /// DUPLICATE_RESOURCE.
    pub const DUPLICATE_RESOURCE: ErrorCode = ErrorCode(92);
    /// UNACCEPTABLE_CREDENTIAL.
    pub const UNACCEPTABLE_CREDENTIAL: ErrorCode = ErrorCode(93);
    /// POLICY_VIOLATION.
    pub const POLICY_VIOLATION: ErrorCode = ErrorCode(44);
    /// REQUEST_TIMED_OUT.
    pub const REQUEST_TIMED_OUT: ErrorCode = ErrorCode(7);
    /// NOT_CONTROLLER: this node is not the cluster's writer (KIP-590: the forwarder retries).
    pub const NOT_CONTROLLER: ErrorCode = ErrorCode(41);
    /// PRINCIPAL_DESERIALIZATION_FAILURE: an Envelope's principal could not be read.
    pub const PRINCIPAL_DESERIALIZATION_FAILURE: ErrorCode = ErrorCode(97);

    /// The Kafka name of the code, for logs and messages.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "NONE",
            -1 => "UNKNOWN_SERVER_ERROR",
            3 => "UNKNOWN_TOPIC_OR_PARTITION",
            7 => "REQUEST_TIMED_OUT",
            41 => "NOT_CONTROLLER",
            97 => "PRINCIPAL_DESERIALIZATION_FAILURE",
            29 => "TOPIC_AUTHORIZATION_FAILED",
            30 => "GROUP_AUTHORIZATION_FAILED",
            31 => "CLUSTER_AUTHORIZATION_FAILED",
            53 => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
            33 => "UNSUPPORTED_SASL_MECHANISM",
            34 => "ILLEGAL_SASL_STATE",
            35 => "UNSUPPORTED_VERSION",
            42 => "INVALID_REQUEST",
            44 => "POLICY_VIOLATION",
            54 => "SECURITY_DISABLED",
            58 => "SASL_AUTHENTICATION_FAILED",
            61 => "DELEGATION_TOKEN_AUTH_DISABLED",
            62 => "DELEGATION_TOKEN_NOT_FOUND",
            63 => "DELEGATION_TOKEN_OWNER_MISMATCH",
            64 => "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
            65 => "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
            66 => "DELEGATION_TOKEN_EXPIRED",
            67 => "INVALID_PRINCIPAL_TYPE",
            91 => "RESOURCE_NOT_FOUND",
            92 => "DUPLICATE_RESOURCE",
            93 => "UNACCEPTABLE_CREDENTIAL",
            _ => "OTHER",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}
