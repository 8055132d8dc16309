//! Writes from tools (`portcullis scram add` with the kafka store).

use portcullis::store::{MetadataRecord, Offset, StoreError};

use crate::codec;
use crate::settings::KafkaStoreSettings;
use crate::topics::{self, Topics};
use crate::writer::{TxnWriter, WriteError};

/// Appends `records` as the cluster's writer would, in one transaction, with the cluster's
/// `transactional.id`: a running writer is fenced by it, steps down and is elected again (its
/// writes in flight fail and are retried by their clients). Meant for setting up a cluster
/// before its nodes start; returns the offset of the first record.
///
/// # Errors
/// [`StoreError::Unavailable`] when the cluster cannot be reached or refuses the write.
pub fn write_offline(
    settings: &KafkaStoreSettings,
    records: &[MetadataRecord],
) -> Result<Offset, StoreError> {
    settings
        .connection
        .validate()
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
    let topics = Topics::for_log(&settings.topic);
    topics::ensure(&settings.connection, &topics, settings.operation_timeout)
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
    let writer = TxnWriter::start(
        &settings.connection,
        crate::upstream::Generation::default(),
        &topics.metadata,
        &settings.cluster_id,
        settings.node_id,
        settings.operation_timeout,
    )
    .map_err(|e| StoreError::Unavailable(e.to_string()))?;
    let messages: Vec<_> = records.iter().map(codec::encode).collect();
    match writer.write(&messages, None) {
        Ok(offsets) => Ok(offsets.first().copied().unwrap_or(0).max(0) as u64),
        // Starting this producer fenced the cluster's writer; a running node then takes the
        // role back, fencing this one before it commits. Say so: the tool is for set-up.
        Err(WriteError::Fenced(e)) => Err(StoreError::Unavailable(format!(
            "a running node of cluster {} took the writer role back before this write committed \
             ({e}); nothing was written. This tool is for setting a cluster up before its nodes \
             start: on a running cluster, change SCRAM credentials with AlterUserScramCredentials \
             (kafka-configs --alter --entity-type users) through Portcullis",
            settings.cluster_id
        ))),
        Err(WriteError::Failed(e)) => Err(StoreError::Unavailable(e.to_string())),
    }
}
