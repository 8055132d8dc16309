//! The writer's in-memory state behind the store's lock ([`Inner`]): the open log and commit
//! files, the index of live keys, the subscribers, and whether the store may still write.

use std::collections::HashMap;
use std::fs::File;

use portcullis::store::{Offset, RecordKey, StoredRecord, Subscriber, SubscriptionId};

use crate::commit::Commit;

/// Everything appends change, behind one lock so that appends are serialized.
pub(crate) struct Inner {
    pub(crate) file: File,
    pub(crate) commit_file: File,
    pub(crate) commit: Commit,
    pub(crate) generation: u64,
    /// The end of the acknowledged log, where the next frame goes.
    pub(crate) end: u64,
    pub(crate) next_offset: Offset,
    /// The offset of the latest record of every key whose latest record is not a tombstone.
    pub(crate) live: HashMap<RecordKey, Offset>,
    /// Records in the current file, live or dead.
    pub(crate) records_in_file: u64,
    pub(crate) health: Health,
    pub(crate) subscribers: Vec<(SubscriptionId, Subscriber)>,
    pub(crate) next_subscription: u64,
    /// The records read at open, kept to replay start-up subscriptions without reading the file
    /// again; see `release_startup_cache` on [`FileMetadataStore`](crate::FileMetadataStore).
    pub(crate) cache: Option<Vec<StoredRecord>>,
}

/// Whether the store may still write.
pub(crate) enum Health {
    Writable,
    /// An earlier write failed in a way that leaves the file's contents unknown (a failed fsync
    /// may have dropped dirty pages; a failed write could not be undone). Every later append fails;
    /// reopening the store re-reads and re-verifies the log.
    Failed {
        reason: String,
    },
}

/// The writer's state for a log file holding `records` up to `end`.
pub(crate) fn new_inner(
    file: File,
    commit_file: File,
    commit: Commit,
    generation: u64,
    end: u64,
    records: Vec<StoredRecord>,
) -> Inner {
    // Sized up front: growing a map of a million keys rehashes every key several times.
    let mut live = HashMap::with_capacity(records.len());
    let mut next_offset = 0;
    for r in &records {
        if r.record.is_tombstone() {
            live.remove(&r.record.key());
        } else {
            live.insert(r.record.key(), r.offset);
        }
        next_offset = r.offset + 1;
    }
    Inner {
        file,
        commit_file,
        commit,
        generation,
        end,
        next_offset,
        live,
        records_in_file: records.len() as u64,
        health: Health::Writable,
        subscribers: Vec::new(),
        next_subscription: 0,
        cache: Some(records),
    }
}
