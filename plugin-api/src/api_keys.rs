//! Kafka API keys that plugins and Portcullis treat specially (a forwarding policy matches on
//! them), and which of them are security APIs.

/// Produce.
pub const PRODUCE: i16 = 0;
/// Fetch.
pub const FETCH: i16 = 1;
/// Metadata.
pub const METADATA: i16 = 3;
/// FindCoordinator.
pub const FIND_COORDINATOR: i16 = 10;
/// SaslHandshake.
pub const SASL_HANDSHAKE: i16 = 17;
/// ApiVersions.
pub const API_VERSIONS: i16 = 18;
/// DescribeAcls.
pub const DESCRIBE_ACLS: i16 = 29;
/// CreateAcls.
pub const CREATE_ACLS: i16 = 30;
/// DeleteAcls.
pub const DELETE_ACLS: i16 = 31;
/// SaslAuthenticate.
pub const SASL_AUTHENTICATE: i16 = 36;
/// CreateDelegationToken.
pub const CREATE_DELEGATION_TOKEN: i16 = 38;
/// RenewDelegationToken.
pub const RENEW_DELEGATION_TOKEN: i16 = 39;
/// ExpireDelegationToken.
pub const EXPIRE_DELEGATION_TOKEN: i16 = 40;
/// DescribeDelegationToken.
pub const DESCRIBE_DELEGATION_TOKEN: i16 = 41;
/// DescribeUserScramCredentials.
pub const DESCRIBE_USER_SCRAM_CREDENTIALS: i16 = 50;
/// AlterUserScramCredentials.
pub const ALTER_USER_SCRAM_CREDENTIALS: i16 = 51;
/// Envelope (KIP-590).
pub const ENVELOPE: i16 = 58;
/// DescribeCluster.
pub const DESCRIBE_CLUSTER: i16 = 60;

/// The APIs whose security meaning Portcullis owns: they are never forwarded with the service
/// identity, because that would let any client act with Portcullis' own upstream rights.
pub fn is_security_api(api_key: i16) -> bool {
    matches!(
        api_key,
        SASL_HANDSHAKE
            | API_VERSIONS
            | SASL_AUTHENTICATE
            | DESCRIBE_ACLS
            | CREATE_ACLS
            | DELETE_ACLS
            | CREATE_DELEGATION_TOKEN
            | RENEW_DELEGATION_TOKEN
            | EXPIRE_DELEGATION_TOKEN
            | DESCRIBE_DELEGATION_TOKEN
            | DESCRIBE_USER_SCRAM_CREDENTIALS
            | ALTER_USER_SCRAM_CREDENTIALS
            | ENVELOPE
    )
}
