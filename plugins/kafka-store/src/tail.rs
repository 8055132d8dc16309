//! The tail: one consumer per node reads the log's partition from the beginning with
//! `isolation.level=read_committed` (aborted writes of a fenced writer are never seen), hands the
//! records to the subscribers in order, and keeps the view's bookkeeping (each key's latest live
//! offset, the latest writer announcement).
//!
//! Latency: the consumer's fetch waits at most `fetch.wait.max.ms` (50 ms) on the broker when
//! there is nothing new, and the broker answers a waiting fetch as soon as a committed record is
//! there, so a write on one node reaches the others' views in tens of milliseconds.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{Message, Offset as KafkaOffset, TopicPartitionList};

use portcullis::store::{StoredRecord, Subscriber};

use crate::codec::{self, Decoded, HEADER_CLUSTER};
use crate::connection::StoreContext;
use crate::credentials::Follower;
use crate::shared::{LeaderInfo, Shared, State};
use crate::tail_error::TailError;

/// Messages taken from the consumer before they are applied together.
const MAX_BATCH: usize = 4_096;

pub(crate) fn run(shared: Arc<Shared>) {
    let (mut consumer, mut credentials) = match open(&shared, KafkaOffset::Beginning) {
        Ok(c) => c,
        Err(e) => {
            fail(&shared, e);
            return;
        }
    };
    let mut last_error_log: Option<Instant> = None;
    let mut batch: Vec<Item> = Vec::new();
    while !shared.stop.load(Ordering::Acquire) {
        credentials.follow(&shared.upstream, consumer.client(), "tail");
        if credentials.must_remake(&shared.upstream) {
            // Between batches (the last one is applied): the new consumer starts where the
            // view is.
            let from = shared.state().next_offset;
            match open(&shared, KafkaOffset::Offset(from as i64)) {
                Ok((remade, follower)) => {
                    consumer = remade;
                    credentials = follower;
                    tracing::info!(
                        client = %"tail",
                        offset = from,
                        "the metadata store's client is made again with the reloaded upstream settings"
                    );
                }
                Err(error) => {
                    credentials.remake_failed();
                    tracing::error!(client = %"tail", %error, "the metadata store's client could not be made again with the reloaded upstream settings; it keeps the one it has and tries again in 5 s");
                }
            }
        }
        let mut end_reached = false;
        let mut wait = Duration::from_millis(100);
        while batch.len() < MAX_BATCH {
            match consumer.poll(wait) {
                None => break,
                Some(Ok(message)) => {
                    batch.push(item(&shared, &message));
                    // Take whatever else is already here without waiting.
                    wait = Duration::ZERO;
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    end_reached = true;
                    break;
                }
                Some(Err(error)) => {
                    // librdkafka reconnects by itself; say so now and then, not per retry.
                    if last_error_log.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                        tracing::warn!(%error, "reading the metadata log");
                        last_error_log = Some(Instant::now());
                    }
                    break;
                }
            }
        }
        if !batch.is_empty() || end_reached {
            if let Err(e) = apply(&shared, std::mem::take(&mut batch), end_reached) {
                fail(&shared, e);
                return;
            }
        }
    }
}

/// The tail's consumer, assigned the log's partition from `from`.
fn open(
    shared: &Shared,
    from: KafkaOffset,
) -> Result<(BaseConsumer<StoreContext>, Follower), TailError> {
    let settings = &shared.settings;
    let (generation, connection) = shared.connection();
    let consumer: BaseConsumer<StoreContext> = connection
        .client_config(&format!(
            "portcullis-{}-tail-{}",
            settings.cluster_id, settings.node_id
        ))
        .set(
            "group.id",
            format!("portcullis-{}-tail", settings.cluster_id),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "50")
        .set("auto.offset.reset", "earliest")
        .create_with_context(StoreContext)
        .map_err(TailError::CreateConsumer)?;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&shared.topics.metadata, 0, from)
        .map_err(TailError::Assign)?;
    consumer.assign(&assignment).map_err(TailError::Assign)?;
    Ok((consumer, Follower::at(generation)))
}

enum Item {
    Record(StoredRecord),
    Leader(LeaderInfo),
    /// Nothing to apply (an unknown control message), but the offset is passed.
    Skip(u64),
    /// A message of another cluster, or one that does not parse.
    Foreign(u64, TailError),
}

fn item(shared: &Shared, message: &BorrowedMessage<'_>) -> Item {
    let offset = message.offset().max(0) as u64;
    let cluster = message.headers().and_then(|headers| {
        headers
            .iter()
            .find(|h| h.key == HEADER_CLUSTER)
            .and_then(|h| h.value)
    });
    if cluster != Some(shared.settings.cluster_id.as_bytes()) {
        let found = cluster.map(String::from_utf8_lossy).unwrap_or_default();
        return Item::Foreign(
            offset,
            TailError::ForeignCluster {
                offset,
                topic: shared.topics.metadata.clone(),
                found: found.into_owned(),
                cluster: shared.settings.cluster_id.clone(),
            },
        );
    }
    match codec::decode(message.key(), message.payload()) {
        Ok(Decoded::Record(record)) => Item::Record(StoredRecord { offset, record }),
        Ok(Decoded::Leader(announcement)) => Item::Leader(LeaderInfo {
            term: offset,
            node_id: announcement.node_id,
            address: announcement.address,
        }),
        Ok(Decoded::UnknownControl) => Item::Skip(offset),
        Err(error) => Item::Foreign(offset, TailError::Undecodable { offset, error }),
    }
}

/// Applies a batch in log order; `end_reached` marks the replay complete.
fn apply(shared: &Shared, batch: Vec<Item>, end_reached: bool) -> Result<(), TailError> {
    let mut records: Vec<StoredRecord> = Vec::with_capacity(batch.len());
    let mut state = shared.state();
    for item in batch {
        match item {
            Item::Record(r) => {
                state.next_offset = r.offset + 1;
                track(&mut state, &r);
                records.push(r);
            }
            Item::Leader(leader) => {
                state.next_offset = leader.term + 1;
                tracing::info!(node = leader.node_id, address = %leader.address, term = leader.term, "metadata writer announced");
                state.leader = Some(leader);
            }
            Item::Skip(offset) => state.next_offset = offset + 1,
            Item::Foreign(offset, reason) => {
                // Refused at start (the node will not serve a state it cannot trust); once
                // running, the message is skipped and reported.
                if !state.replayed {
                    return Err(reason);
                }
                tracing::error!(%reason, "skipping a message of the metadata log");
                state.next_offset = offset + 1;
            }
        }
    }
    if !records.is_empty() {
        deliver(&mut state.subscribers, &records);
    }
    if end_reached && !state.replayed {
        state.replayed = true;
        tracing::info!(
            next_offset = state.next_offset,
            live = state.live.len(),
            "metadata log replayed"
        );
    }
    drop(state);
    shared.notify_applied();
    Ok(())
}

fn track(state: &mut State, stored: &StoredRecord) {
    let key = stored.record.key();
    let previous = if stored.record.is_tombstone() {
        state.live.remove(&key)
    } else {
        state.live.insert(key, stored.offset)
    };
    if let Some(cache) = &mut state.cache {
        if let Some(previous) = previous {
            cache.remove(&previous);
        }
        if !stored.record.is_tombstone() {
            cache.insert(stored.offset, stored.clone());
        }
    }
}

fn deliver(
    subscribers: &mut [(portcullis::store::SubscriptionId, Subscriber)],
    records: &[StoredRecord],
) {
    for (_, subscriber) in subscribers.iter_mut() {
        subscriber(records);
    }
}

fn fail(shared: &Shared, reason: TailError) {
    tracing::error!(%reason, "the metadata log cannot be followed");
    shared.state().failure = Some(Arc::new(reason));
    shared.notify_applied();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::DecodeError;

    #[test]
    fn a_foreign_or_undecodable_message_says_where_and_why() {
        let foreign = TailError::ForeignCluster {
            offset: 7,
            topic: "__portcullis_metadata".into(),
            found: "other".into(),
            cluster: "mine".into(),
        };
        assert_eq!(
            foreign.to_string(),
            "offset 7 of __portcullis_metadata belongs to cluster `other`, not `mine`: each \
             cluster needs its own topic"
        );
        let undecodable = TailError::Undecodable {
            offset: 3,
            error: DecodeError::NoKey,
        };
        assert_eq!(undecodable.to_string(), "offset 3: a message without a key");
    }
}
