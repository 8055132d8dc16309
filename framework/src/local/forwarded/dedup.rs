//! The forwarded requests the cluster's writer has applied ([`ForwardedRequests`]), rebuilt by
//! every node from the shared log, so that a writer elected after a failover knows what its
//! predecessor applied.
//!
//! A mutation that had an effect leaves a [`MetadataRecord::ForwardedRequest`] in the log, written
//! in the same atomic batch as the effect's records (both exist or neither does); its response is
//! recorded afterwards in a second record of the same key. A retry of the request (same
//! [`RequestId`]) is answered from the table and never applied again: with the recorded response,
//! or, when the writer died between the two appends, with REQUEST_TIMED_OUT (see
//! [`super::writer`]). The writer tombstones the records once no retry can arrive any more
//! ([`ForwardedRequests::expired`]), so the compacted log does not grow with them.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

use super::RequestId;
use crate::store::{
    AppendBatch, Condition, ForwardedRequestRecord, MetadataRecord, RecordKey, StoredRecord,
};

/// The longest client id kept in a record (it is for diagnosis only).
const CLIENT_ID_CHARS: usize = 64;

/// What the table knows of a request id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Never applied (or its record has been tombstoned): run it.
    New,
    /// Applied, and this (recorded, HMAC-less for CreateDelegationToken) response was the answer.
    Answered(Bytes),
    /// Applied, but its answer was never recorded (the writer stopped in between).
    Unanswered,
    /// The id was applied for another request (another principal or other bytes): a forged or
    /// colliding id, never answered with that request's answer.
    Mismatch,
}

#[derive(Debug)]
struct Entry {
    applied_ms: i64,
    fingerprint: String,
    response: Option<Bytes>,
}

/// The applied forwarded requests, as the log says (see the module documentation).
#[derive(Debug, Default)]
pub struct ForwardedRequests {
    entries: Mutex<HashMap<String, Entry>>,
}

impl ForwardedRequests {
    /// An empty table (feed it the log with [`apply`](Self::apply)).
    pub fn new() -> Self {
        Self::default()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies records of the log (other records are ignored).
    pub fn apply(&self, records: &[StoredRecord]) {
        let mut entries = self.entries();
        for stored in records {
            match &stored.record {
                MetadataRecord::ForwardedRequest(record) => {
                    let response = record.response.clone().map(Bytes::from);
                    let entry = entries.entry(record.request_id.clone()).or_insert(Entry {
                        applied_ms: record.applied_ms,
                        fingerprint: record.fingerprint.clone(),
                        response: None,
                    });
                    // A recorded answer is never forgotten by a later record of the key.
                    if response.is_some() {
                        entry.response = response;
                    }
                }
                MetadataRecord::RemoveForwardedRequest { request_id } => {
                    entries.remove(request_id);
                }
                _ => {}
            }
        }
    }

    /// What the table knows of `id`, for the request with this [`fingerprint`].
    pub fn lookup(&self, id: &RequestId, fingerprint: &str) -> Lookup {
        match self.entries().get(id.as_str()) {
            None => Lookup::New,
            Some(entry) if entry.fingerprint != fingerprint => Lookup::Mismatch,
            Some(Entry {
                response: Some(bytes),
                ..
            }) => Lookup::Answered(bytes.clone()),
            Some(_) => Lookup::Unanswered,
        }
    }

    /// Whether `id` was applied but its answer is not recorded (yet).
    pub fn unanswered(&self, id: &RequestId) -> bool {
        self.entries()
            .get(id.as_str())
            .is_some_and(|e| e.response.is_none())
    }

    /// How many requests the table holds.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tombstones the writer appends now: the records applied more than `retention_ms` ago
    /// (no forwarder retries that long), then the oldest while more than `max_entries` remain (a
    /// bound on memory whatever the request rate); at most `limit` per batch, oldest first.
    pub fn expired(
        &self,
        now_ms: i64,
        retention_ms: i64,
        max_entries: usize,
        limit: usize,
    ) -> Option<AppendBatch> {
        let entries = self.entries();
        let mut by_age: Vec<(i64, &String)> = entries
            .iter()
            .map(|(id, entry)| (entry.applied_ms, id))
            .collect();
        by_age.sort_unstable();
        let excess = entries.len().saturating_sub(max_entries);
        let records: Vec<MetadataRecord> = by_age
            .iter()
            .enumerate()
            .take_while(|(i, (applied_ms, _))| {
                *i < excess || now_ms.saturating_sub(*applied_ms) > retention_ms
            })
            .take(limit)
            .map(|(_, (_, id))| MetadataRecord::RemoveForwardedRequest {
                request_id: (*id).clone(),
            })
            .collect();
        (!records.is_empty()).then(|| AppendBatch::new(records))
    }
}

/// `batch` with the request's marker added: written with the effect's records in one atomic
/// append, and only if no record of the id exists (a concurrent attempt of the same request on
/// this writer that got there first makes this one conflict instead of applying twice).
pub fn with_marker(batch: &AppendBatch, id: &Applied<'_>, now_ms: i64) -> AppendBatch {
    let mut batch = batch.clone();
    let record = record(id, now_ms, None);
    batch.conditions.push(Condition::Latest {
        key: record.key(),
        offset: None,
    });
    batch.records.push(record);
    batch
}

/// The batch that records the answer of an applied request.
pub fn response_batch(id: &Applied<'_>, now_ms: i64, response: Vec<u8>) -> AppendBatch {
    AppendBatch::new(vec![record(id, now_ms, Some(response))])
}

/// What a request's records say about it besides the answer.
#[derive(Clone, Copy, Debug)]
pub struct Applied<'a> {
    /// The request id.
    pub id: &'a RequestId,
    /// The client's client id.
    pub client_id: &'a str,
    /// The request's [`fingerprint`].
    pub fingerprint: &'a str,
}

/// SHA-256 (hex) of the forwarded principal (its Envelope bytes) and the client's request frame:
/// what every attempt of one request has in common.
pub fn fingerprint(principal: &crate::envelope::ForwardedPrincipal, frame: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let principal = crate::envelope::serialize_principal(principal);
    let mut hash = Sha256::new();
    hash.update((principal.len() as u64).to_be_bytes());
    hash.update(&principal);
    hash.update(frame);
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The key of a request's record.
pub fn key(id: &RequestId) -> RecordKey {
    RecordKey::ForwardedRequest {
        request_id: id.as_str().to_owned(),
    }
}

fn record(applied: &Applied<'_>, applied_ms: i64, response: Option<Vec<u8>>) -> MetadataRecord {
    MetadataRecord::ForwardedRequest(ForwardedRequestRecord {
        request_id: applied.id.as_str().to_owned(),
        client_id: applied.client_id.chars().take(CLIENT_ID_CHARS).collect(),
        applied_ms,
        fingerprint: applied.fingerprint.to_owned(),
        response,
    })
}
