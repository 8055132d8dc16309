//! Carrying out a local handler's [`Persist`] effect: the records go to the store writer (off the
//! request path, group-committed), and the continuation decides what the client gets.

use bytes::Bytes;
use portcullis::connection::RequestError;
use portcullis::local::{Effect, Persist, PersistError};

use crate::store_writer::StoreWriter;

/// A continuation may ask to persist again (after a conflict it re-checks the request against
/// the views and tries once more); past this many rounds the request is closed rather than
/// looping while other writers keep winning.
const MAX_ROUNDS: usize = 16;

/// What the client gets once the persist has run its course.
#[derive(Debug)]
pub(super) enum Finished {
    /// This response, in the request's place.
    Respond(Bytes),
    /// Close the connection (the reason is logged).
    Close(RequestError),
}

/// Runs `persist` (and any persist its continuation asks for) to an answer.
pub(super) async fn run(writer: Option<&StoreWriter>, persist: Persist) -> Finished {
    // A mutation of a node that shares its store with a cluster runs where the writer is.
    if let Some(request) = persist.leader_request() {
        return match writer.and_then(StoreWriter::cluster) {
            Some(cluster) => match cluster.run_mutation(request).await {
                crate::cluster::Answer::Respond(bytes) => Finished::Respond(bytes),
                crate::cluster::Answer::Close(reason) => Finished::Close(reason),
            },
            None => Finished::Close(RequestError::NotInCluster),
        };
    }
    let mut effect = Effect::Persist(persist);
    for _ in 0..MAX_ROUNDS {
        match effect {
            Effect::Respond(frame) => return Finished::Respond(frame),
            Effect::Close(reason) => return Finished::Close(reason),
            Effect::Persist(persist) => {
                let outcome = match writer {
                    Some(writer) => writer.persist(persist.batch().clone()).await,
                    None => Err(PersistError::Failed(
                        "this node has no metadata store".to_owned(),
                    )),
                };
                effect = persist.complete(outcome, now_ms());
            }
        }
    }
    Finished::Close(RequestError::PersistContended { rounds: MAX_ROUNDS })
}

fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}
