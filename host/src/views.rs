//! The node's views of the metadata log: one subscription, replayed at start and then followed,
//! feeds every in-memory view and publishes what changed on the event bus. A write becomes
//! visible to the node when its record is applied here, whoever wrote it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use portcullis::credentials::InMemoryCredentials;
use portcullis::events::{Event, EventBus};
use portcullis::store::{MetadataRecord, MetadataStore, StoreError, StoredRecord};
use portcullis::tokens::TokenManager;
use portcullis_plugin_stores::apply_records;

/// Subscribes the node's views to `store` from offset 0. Events are published only for records
/// appended after the replay (the replay is the state the node starts with, not a change).
///
/// # Errors
/// The log could not be read.
pub fn follow(
    store: &dyn MetadataStore,
    credentials: Arc<InMemoryCredentials>,
    tokens: Option<Arc<TokenManager>>,
    events: EventBus,
) -> Result<(), StoreError> {
    let replaying = Arc::new(AtomicBool::new(true));
    let replay_flag = Arc::clone(&replaying);
    store.subscribe(
        0,
        Box::new(move |records: &[StoredRecord]| {
            apply_records(&credentials, records.iter().map(|r| &r.record));
            if replay_flag.load(Ordering::Acquire) {
                if let Some(tokens) = &tokens {
                    tokens.replay(records, now_ms());
                }
                return;
            }
            let token_events = match &tokens {
                Some(tokens) => tokens.apply(records, now_ms()),
                None => Vec::new(),
            };
            for stored in records {
                if let Some(event) = change_event(&stored.record) {
                    events.publish(event);
                }
            }
            for event in token_events {
                events.publish(event);
            }
        }),
    )?;
    replaying.store(false, Ordering::Release);
    Ok(())
}

/// The event a record stands for, if any.
fn change_event(record: &MetadataRecord) -> Option<Event> {
    match record {
        MetadataRecord::ScramCredential {
            user, mechanism, ..
        }
        | MetadataRecord::RemoveScramCredential { user, mechanism } => {
            Some(Event::CredentialChanged {
                user: user.clone(),
                mechanism: mechanism.mechanism_name().to_owned(),
            })
        }
        _ => None,
    }
}

fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}
