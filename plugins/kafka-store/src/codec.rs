//! Metadata records as Kafka messages.
//!
//! - key: [`RecordKey::encode`] (JSON, starts with `{`); value: the record as JSON, or no value
//!   (a tombstone) for a removal, which [`RecordKey::tombstone`] turns back into the removal;
//! - control messages of the store itself have keys starting with `!` (never a JSON object):
//!   `!leader`, the writer's announcement that it took over (compacted to the latest);
//! - a forwarded request's record ([`MetadataRecord::ForwardedRequest`], the writer's memory of
//!   the mutations it applied) has the key `!forwarded:<request id>` — a control key, so that a
//!   node of an older version, which knows no such record, skips it as an unknown control message
//!   instead of refusing the log (it only loses the deduplication of retries, which it never
//!   had); its value is the record as JSON, no value its tombstone;
//! - headers: the cluster id (a node refuses a topic holding another cluster's records), the
//!   writing node and the writer's term (the offset of its announcement), so that a reader can
//!   check that nothing a deposed writer sent landed after its successor's announcement.

use portcullis::local::forwarded::RequestId;
use portcullis::store::{MetadataRecord, RecordKey};

/// The key of the writer's announcement.
pub(crate) const LEADER_KEY: &[u8] = b"!leader";
/// The prefix of the key of a forwarded request's record; the request id follows.
pub(crate) const FORWARDED_PREFIX: &[u8] = b"!forwarded:";
/// Header: the cluster id.
pub const HEADER_CLUSTER: &str = "portcullis.cluster";
/// Header: the id of the node that wrote the message.
pub const HEADER_NODE: &str = "portcullis.node";
/// Header: the writer's term (the offset of its announcement), on records only.
pub const HEADER_TERM: &str = "portcullis.term";

/// The writer's announcement: who writes from now on, and where its inter-node listener is.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaderAnnouncement {
    /// The node id.
    pub node_id: i32,
    /// The address peers forward mutations to (its inter-node listener).
    pub address: String,
}

/// A decoded message.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// A metadata record.
    Record(MetadataRecord),
    /// A writer's announcement.
    Leader(LeaderAnnouncement),
    /// A control message this version does not know (from a newer node): skipped.
    UnknownControl,
}

/// The key and value (`None`: tombstone) of a record.
pub(crate) fn encode(record: &MetadataRecord) -> (Vec<u8>, Option<Vec<u8>>) {
    let key = match record.key() {
        RecordKey::ForwardedRequest { request_id } => {
            [FORWARDED_PREFIX, request_id.as_bytes()].concat()
        }
        key => key.encode(),
    };
    if record.is_tombstone() {
        return (key, None);
    }
    // Serializing these plain data types cannot fail.
    (key, Some(serde_json::to_vec(record).unwrap_or_default()))
}

/// The key and value of an announcement.
pub(crate) fn encode_leader(announcement: &LeaderAnnouncement) -> (Vec<u8>, Vec<u8>) {
    (
        LEADER_KEY.to_vec(),
        serde_json::to_vec(announcement).unwrap_or_default(),
    )
}

/// Why a message of the log is not one the store writes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    /// The message has no key.
    #[error("a message without a key")]
    NoKey,
    /// A writer announcement with no value (announcements are never removed).
    #[error("a writer announcement without a value")]
    AnnouncementWithoutValue,
    /// A writer announcement whose value is not a [`LeaderAnnouncement`].
    #[error("a writer announcement that does not parse: {0}")]
    Announcement(serde_json::Error),
    /// A key that is neither a control key nor a [`RecordKey`].
    #[error("a record key that does not parse: {0}")]
    RecordKey(serde_json::Error),
    /// A forwarded request's key whose id is not a request id.
    #[error("a forwarded request's key that does not parse: {0}")]
    RequestId(portcullis::local::forwarded::RequestIdError),
    /// A value that is not a [`MetadataRecord`].
    #[error("a record that does not parse: {0}")]
    Record(serde_json::Error),
    /// A record filed under another key than its own.
    #[error("a record whose key does not match its message key")]
    KeyMismatch,
}

/// Decodes a message.
///
/// # Errors
/// The message is not one the store writes ([`DecodeError`] says what is wrong, for the log).
pub(crate) fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Decoded, DecodeError> {
    let key = key.ok_or(DecodeError::NoKey)?;
    if key == LEADER_KEY {
        let value = value.ok_or(DecodeError::AnnouncementWithoutValue)?;
        return serde_json::from_slice(value)
            .map(Decoded::Leader)
            .map_err(DecodeError::Announcement);
    }
    let record_key = if let Some(id) = key.strip_prefix(FORWARDED_PREFIX) {
        let id = RequestId::parse(id).map_err(DecodeError::RequestId)?;
        RecordKey::ForwardedRequest {
            request_id: id.as_str().to_owned(),
        }
    } else if key.first() == Some(&b'!') {
        return Ok(Decoded::UnknownControl);
    } else {
        RecordKey::decode(key).map_err(DecodeError::RecordKey)?
    };
    let Some(value) = value else {
        return Ok(Decoded::Record(record_key.tombstone()));
    };
    let record: MetadataRecord = serde_json::from_slice(value).map_err(DecodeError::Record)?;
    if record.key() != record_key {
        return Err(DecodeError::KeyMismatch);
    }
    Ok(Decoded::Record(record))
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis::credentials::ScramMechanism;

    #[test]
    fn records_and_tombstones_round_trip() {
        let removal = MetadataRecord::RemoveScramCredential {
            user: "alice".into(),
            mechanism: ScramMechanism::Sha256,
        };
        let (key, value) = encode(&removal);
        assert!(value.is_none());
        match decode(Some(&key), None).unwrap() {
            Decoded::Record(r) => assert_eq!(r, removal),
            other => panic!("{other:?}"),
        }
        let token = MetadataRecord::RemoveDelegationToken {
            token_id: "t".into(),
        };
        let set = token.key().tombstone();
        assert_eq!(set, token);
    }

    #[test]
    fn forwarded_requests_have_control_keys_and_round_trip() {
        let record = MetadataRecord::ForwardedRequest(portcullis::store::ForwardedRequestRecord {
            request_id: "3-00ff-12".into(),
            client_id: "c".into(),
            applied_ms: 9,
            fingerprint: "f".into(),
            response: Some(vec![1, 2]),
        });
        let (key, value) = encode(&record);
        assert_eq!(key, b"!forwarded:3-00ff-12");
        match decode(Some(&key), value.as_deref()).unwrap() {
            Decoded::Record(r) => assert_eq!(r, record),
            other => panic!("{other:?}"),
        }
        let removal = record.key().tombstone();
        let (removal_key, none) = encode(&removal);
        assert_eq!((removal_key.as_slice(), none), (key.as_slice(), None));
        match decode(Some(&key), None).unwrap() {
            Decoded::Record(r) => assert_eq!(r, removal),
            other => panic!("{other:?}"),
        }
        // A bad id, a value under another id's key: errors.
        assert!(matches!(
            decode(Some(b"!forwarded:a b"), None),
            Err(DecodeError::RequestId(_))
        ));
        assert!(matches!(
            decode(Some(b"!forwarded:3-00ff-13"), value.as_deref()),
            Err(DecodeError::KeyMismatch)
        ));
    }

    #[test]
    fn announcements_and_unknown_controls() {
        let a = LeaderAnnouncement {
            node_id: 2,
            address: "127.0.0.1:9000".into(),
        };
        let (key, value) = encode_leader(&a);
        match decode(Some(&key), Some(&value)).unwrap() {
            Decoded::Leader(b) => assert_eq!(a, b),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode(Some(b"!future"), Some(b"x")).unwrap(),
            Decoded::UnknownControl
        ));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(decode(None, Some(b"x")), Err(DecodeError::NoKey)));
        assert!(matches!(
            decode(Some(b"{not json"), None),
            Err(DecodeError::RecordKey(_))
        ));
        assert!(matches!(
            decode(Some(b"!leader"), None),
            Err(DecodeError::AnnouncementWithoutValue)
        ));
        let error = decode(Some(b"!leader"), Some(b"{")).unwrap_err();
        assert!(matches!(error, DecodeError::Announcement(_)));
        assert!(
            error
                .to_string()
                .starts_with("a writer announcement that does not parse: "),
            "{error}"
        );
        // A value for a different key than the message's.
        let record = MetadataRecord::RemoveDelegationToken {
            token_id: "a".into(),
        };
        let other = RecordKey::DelegationToken {
            token_id: "b".into(),
        };
        let value = serde_json::to_vec(&record).unwrap();
        assert!(matches!(
            decode(Some(&other.encode()), Some(&value)),
            Err(DecodeError::KeyMismatch)
        ));
    }
}
