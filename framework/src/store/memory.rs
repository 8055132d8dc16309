//! [`MemoryStore`]: a [`MetadataStore`] in memory, with conditions and subscriptions, for tests,
//! fuzz targets and tools. Nothing is durable.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{
    AppendBatch, MetadataRecord, MetadataStore, Offset, RecordKey, StoreError, StoredRecord,
    Subscriber, SubscriptionId,
};

/// A metadata store that keeps everything in memory (see the module documentation).
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    records: Vec<StoredRecord>,
    live: HashMap<RecordKey, Offset>,
    subscribers: Vec<(SubscriptionId, Subscriber)>,
    next_subscription: u64,
    appends: u64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many batches were appended.
    pub fn appends(&self) -> u64 {
        self.lock().appends
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("records", &self.lock().records.len())
            .finish_non_exhaustive()
    }
}

impl MetadataStore for MemoryStore {
    fn append(&self, records: &[MetadataRecord]) -> Result<Offset, StoreError> {
        self.append_batch(&AppendBatch::new(records.to_vec()))
    }

    fn snapshot(&self) -> Result<Vec<MetadataRecord>, StoreError> {
        Ok(self
            .lock()
            .records
            .iter()
            .map(|r| r.record.clone())
            .collect())
    }

    fn append_batch(&self, batch: &AppendBatch) -> Result<Offset, StoreError> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        for condition in &batch.conditions {
            let key = condition.key();
            if !condition.holds(inner.live.get(key).copied()) {
                return Err(StoreError::Conflict { key: key.clone() });
            }
        }
        let first = inner.records.len() as Offset;
        let stored: Vec<StoredRecord> = batch
            .records
            .iter()
            .enumerate()
            .map(|(i, record)| StoredRecord {
                offset: first + i as Offset,
                record: record.clone(),
            })
            .collect();
        for r in &stored {
            if r.record.is_tombstone() {
                inner.live.remove(&r.record.key());
            } else {
                inner.live.insert(r.record.key(), r.offset);
            }
        }
        inner.records.extend(stored.iter().cloned());
        inner.appends += 1;
        for (_, subscriber) in &mut inner.subscribers {
            subscriber(&stored);
        }
        Ok(first)
    }

    fn subscribe(
        &self,
        from: Offset,
        mut subscriber: Subscriber,
    ) -> Result<SubscriptionId, StoreError> {
        let mut inner = self.lock();
        let start = inner.records.partition_point(|r| r.offset < from);
        subscriber(inner.records.get(start..).unwrap_or_default());
        let id = SubscriptionId(inner.next_subscription);
        inner.next_subscription += 1;
        inner.subscribers.push((id, subscriber));
        Ok(id)
    }

    fn unsubscribe(&self, id: SubscriptionId) {
        self.lock().subscribers.retain(|(s, _)| *s != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Condition;

    fn removal() -> MetadataRecord {
        MetadataRecord::RemoveDelegationToken {
            token_id: "t".into(),
        }
    }

    fn token() -> MetadataRecord {
        MetadataRecord::DelegationToken(crate::store::DelegationTokenRecord {
            token_id: "t".into(),
            owner: "User:a".into(),
            requester: "User:a".into(),
            renewers: vec![],
            issue_timestamp_ms: 1,
            max_timestamp_ms: 3,
            expiry_timestamp_ms: 2,
        })
    }

    /// `Live`: only the first of two removals decided on the same view is written.
    #[test]
    fn live_condition_holds_once() {
        let store = MemoryStore::new();
        let live = Condition::Live { key: token().key() };
        assert!(matches!(
            store.append_batch(
                &AppendBatch::new(vec![removal()]).with_conditions(vec![live.clone()])
            ),
            Err(StoreError::Conflict { .. })
        ));
        store.append(&[token()]).unwrap();
        let batch = AppendBatch::new(vec![removal()]).with_conditions(vec![live]);
        assert!(store.append_batch(&batch).is_ok());
        assert!(matches!(
            store.append_batch(&batch),
            Err(StoreError::Conflict { .. })
        ));
    }
}
