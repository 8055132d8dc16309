//! The writer's transactional producer: the fence.
//!
//! Every node that becomes the writer opens a producer with the *same* `transactional.id`
//! (`portcullis-<cluster_id>`). `init_transactions` bumps the producer epoch on the cluster's
//! transaction coordinator, which aborts whatever transaction the previous writer left open and
//! makes the brokers refuse every later write of the previous epoch. A deposed writer that wakes
//! up (SIGSTOP, a long pause) and tries to write is refused with a fatal "fenced" error: it
//! writes nothing, and it steps down. Each append is one transaction, so a group of batches is
//! in the log entirely or not at all, and readers (`isolation.level=read_committed`) never see
//! an aborted one.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Message};

use crate::codec::{HEADER_CLUSTER, HEADER_NODE, HEADER_TERM};
use crate::connection::KafkaConnection;
use crate::credentials::Follower;
use crate::upstream::{Generation, Upstream};

/// One message to write: key, value (`None`: tombstone).
pub(crate) type Outgoing = (Vec<u8>, Option<Vec<u8>>);

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    /// The producer was fenced by a newer writer (or is otherwise unusable): nothing of this
    /// write is in the log, and this node must stop writing.
    #[error("fenced: {0}")]
    Fenced(TxnError),
    /// The transaction was aborted or could not be committed; nothing of it is visible to
    /// readers. The reason is for logs.
    #[error("{0}")]
    Failed(TxnError),
}

/// What went wrong in one transaction of the writer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TxnError {
    /// The transaction could not be started.
    #[error("cannot begin the transaction: {0}")]
    Begin(KafkaError),
    /// librdkafka refused a message (other than for a full local queue).
    #[error("cannot send a message: {0}")]
    Send(KafkaError),
    /// The brokers refused a message.
    #[error("a message was not written: {0}")]
    Delivery(KafkaError),
    /// Not every delivery report came within the operation timeout.
    #[error("the brokers did not acknowledge the write in time")]
    NotAcknowledged,
    /// A message got no delivery report at all.
    #[error("a message got no delivery report")]
    NoDeliveryReport,
    /// The commit failed.
    #[error("cannot commit the transaction: {0}")]
    Commit(KafkaError),
    /// The commit failed with a retriable error on every attempt.
    #[error("the transaction could not be committed")]
    CommitRetriesExhausted,
    /// The transaction failed, and aborting it failed too (the producer is unusable).
    #[error("{failure}; then the abort failed: {abort}")]
    AbortFailed {
        /// Why the transaction was aborted.
        failure: Box<TxnError>,
        /// Why the abort failed.
        abort: KafkaError,
    },
}

impl TxnError {
    /// The librdkafka error this failure carries, if it is one.
    fn kafka_error(&self) -> Option<&KafkaError> {
        match self {
            TxnError::Begin(e)
            | TxnError::Send(e)
            | TxnError::Delivery(e)
            | TxnError::Commit(e) => Some(e),
            TxnError::NotAcknowledged
            | TxnError::NoDeliveryReport
            | TxnError::CommitRetriesExhausted
            | TxnError::AbortFailed { .. } => None,
        }
    }
}

/// Why the writer's producer cannot be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriterStartError {
    /// librdkafka refused the producer's configuration.
    #[error("cannot create the writer's producer: {}", crate::connection::client_error_text(.0))]
    CreateProducer(KafkaError),
    /// `init_transactions` failed: the transaction coordinator cannot be reached, or refuses the
    /// `transactional.id`.
    #[error("cannot initialise the writer's transactions: {0}")]
    InitTransactions(KafkaError),
}

/// Collects delivery reports: the offset (or error) of each message, by its index.
struct Deliveries {
    reports: Mutex<Vec<Option<Result<i64, KafkaError>>>>,
}

impl ClientContext for Deliveries {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, line: &str) {
        crate::connection::log_client_line(level, facility, line);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        crate::connection::log_client_error(&error, reason);
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<usize>;

    fn delivery(&self, result: &DeliveryResult<'_>, index: Self::DeliveryOpaque) {
        let outcome = match result {
            Ok(message) => Ok(message.offset()),
            Err((error, _)) => Err(error.clone()),
        };
        let mut reports = self.reports.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = reports.get_mut(*index) {
            *slot = Some(outcome);
        }
    }
}

/// The writer's producer.
pub(crate) struct TxnWriter {
    producer: BaseProducer<Deliveries>,
    /// The upstream credentials the producer has (see [`crate::credentials`]).
    credentials_seen: Mutex<Follower>,
    topic: String,
    cluster_id: String,
    node_id: String,
    timeout: Duration,
}

impl TxnWriter {
    /// Opens the producer and fences every earlier writer of the cluster.
    ///
    /// # Errors
    /// The producer cannot be created or initialised (cluster unreachable, or refused).
    pub(crate) fn start(
        connection: &KafkaConnection,
        generation: Generation,
        topic: &str,
        cluster_id: &str,
        node_id: i32,
        timeout: Duration,
    ) -> Result<Self, WriterStartError> {
        let timeout_ms = timeout.as_millis().to_string();
        let producer: BaseProducer<Deliveries> = connection
            .client_config(&format!("portcullis-{cluster_id}-writer-{node_id}"))
            .set("transactional.id", transactional_id(cluster_id))
            .set("transaction.timeout.ms", &timeout_ms)
            .set("message.timeout.ms", &timeout_ms)
            .set("linger.ms", "0")
            // Back-to-back transactions: the coordinator answers the next transaction's
            // AddPartitionsToTxn with CONCURRENT_TRANSACTIONS while it finishes the previous one,
            // and librdkafka retries after `retry.backoff.ms` (100 ms by default), which would be
            // added to nearly every write. The Java producer retries that case after 20 ms.
            .set("retry.backoff.ms", "5")
            .set("retry.backoff.max.ms", "100")
            .create_with_context(Deliveries {
                reports: Mutex::new(Vec::new()),
            })
            .map_err(WriterStartError::CreateProducer)?;
        producer
            .init_transactions(timeout)
            .map_err(WriterStartError::InitTransactions)?;
        Ok(Self {
            producer,
            credentials_seen: Mutex::new(Follower::at(generation)),
            topic: topic.to_owned(),
            cluster_id: cluster_id.to_owned(),
            node_id: node_id.to_string(),
            timeout,
        })
    }

    /// Gives the producer the current upstream credentials if a reload replaced them.
    /// (A change that needs the producer made again reaches it through the election: the
    /// writer steps down and stands again, see [`crate::election`].)
    pub(crate) fn follow_credentials(&self, upstream: &Upstream) {
        self.credentials_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .follow(upstream, self.producer.client(), "writer");
    }

    /// Writes `messages` to partition 0 in one transaction; returns each message's offset.
    /// `term` goes into every message's header (`None` for the announcement, which starts one).
    ///
    /// # Errors
    /// [`WriteError`]; after `Fenced` this producer must not be used again.
    pub(crate) fn write(
        &self,
        messages: &[Outgoing],
        term: Option<u64>,
    ) -> Result<Vec<i64>, WriteError> {
        self.producer
            .begin_transaction()
            .map_err(|e| classify(TxnError::Begin(e)))?;
        *self.reports() = vec![None; messages.len()];
        let term_text = term.map(|t| t.to_string());
        for (index, (key, value)) in messages.iter().enumerate() {
            let mut headers = OwnedHeaders::new_with_capacity(3)
                .insert(Header {
                    key: HEADER_CLUSTER,
                    value: Some(self.cluster_id.as_bytes()),
                })
                .insert(Header {
                    key: HEADER_NODE,
                    value: Some(self.node_id.as_bytes()),
                });
            if let Some(term) = &term_text {
                headers = headers.insert(Header {
                    key: HEADER_TERM,
                    value: Some(term.as_bytes()),
                });
            }
            let mut record: BaseRecord<'_, Vec<u8>, Vec<u8>, Box<usize>> =
                BaseRecord::with_opaque_to(&self.topic, Box::new(index))
                    .partition(0)
                    .key(key)
                    .headers(headers);
            if let Some(value) = value {
                record = record.payload(value);
            }
            // The local queue is large; when it is full, serve delivery reports and try again.
            let mut pending = record;
            loop {
                match self.producer.send(pending) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        self.producer.poll(Duration::from_millis(10));
                        pending = back;
                    }
                    Err((error, _)) => return Err(self.abort(classify(TxnError::Send(error)))),
                }
            }
        }
        let sent = std::time::Instant::now();
        // Waits for the delivery reports. Not `flush`: rdkafka's flush polls in 100 ms steps that
        // a delivery report does not cut short, which added 100 ms to every write. Polling in
        // 1 ms steps returns as soon as the reports are in.
        let deadline = sent + self.timeout;
        while self.reports().iter().any(Option::is_none) {
            if std::time::Instant::now() >= deadline {
                return Err(self.abort(WriteError::Failed(TxnError::NotAcknowledged)));
            }
            self.producer.poll(Duration::from_millis(1));
        }
        let reports = std::mem::take(&mut *self.reports());
        let mut offsets = Vec::with_capacity(reports.len());
        for report in reports {
            match report {
                Some(Ok(offset)) => offsets.push(offset),
                Some(Err(error)) => return Err(self.abort(classify(TxnError::Delivery(error)))),
                None => return Err(self.abort(WriteError::Failed(TxnError::NoDeliveryReport))),
            }
        }
        let flushed = sent.elapsed();
        self.commit()?;
        tracing::debug!(
            flush_us = flushed.as_micros() as u64,
            commit_us = (sent.elapsed() - flushed).as_micros() as u64,
            "transaction committed"
        );
        Ok(offsets)
    }

    fn commit(&self) -> Result<(), WriteError> {
        // A retriable failure (a coordinator moving) may be retried; anything else aborts.
        for _ in 0..3 {
            match self.producer.commit_transaction(self.timeout) {
                Ok(()) => return Ok(()),
                Err(KafkaError::Transaction(e)) if e.is_retriable() => continue,
                Err(error) => return Err(self.abort(classify(TxnError::Commit(error)))),
            }
        }
        Err(self.abort(WriteError::Failed(TxnError::CommitRetriesExhausted)))
    }

    /// Aborts the open transaction after `error` (a fenced producer has nothing to abort).
    fn abort(&self, error: WriteError) -> WriteError {
        match error {
            WriteError::Failed(failure) => match self.producer.abort_transaction(self.timeout) {
                Ok(()) => WriteError::Failed(failure),
                // An abort that fails leaves the producer unusable: treat it as fenced, so the
                // node stops writing and a writer (maybe this node again) starts afresh.
                Err(abort) => WriteError::Fenced(TxnError::AbortFailed {
                    failure: Box::new(failure),
                    abort,
                }),
            },
            fenced @ WriteError::Fenced(_) => fenced,
        }
    }

    fn reports(&self) -> std::sync::MutexGuard<'_, Vec<Option<Result<i64, KafkaError>>>> {
        self.producer
            .context()
            .reports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `transactional.id` shared by every writer of a cluster.
pub fn transactional_id(cluster_id: &str) -> String {
    format!("portcullis-{cluster_id}")
}

/// Whether `error` leaves the producer fenced (or otherwise unusable), or only failed this
/// transaction.
fn classify(error: TxnError) -> WriteError {
    let fenced_code = |code: RDKafkaErrorCode| {
        matches!(
            code,
            RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
                | RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::TransactionalIdAuthorizationFailed
        )
    };
    let fenced = match error.kafka_error() {
        Some(KafkaError::Transaction(e)) if e.is_fatal() || fenced_code(e.code()) => true,
        Some(other) => other.rdkafka_error_code().is_some_and(fenced_code),
        None => false,
    };
    if fenced {
        WriteError::Fenced(error)
    } else {
        WriteError::Failed(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_errors_are_told_from_failed_transactions() {
        let fenced = classify(TxnError::Send(KafkaError::MessageProduction(
            RDKafkaErrorCode::InvalidProducerEpoch,
        )));
        assert!(
            matches!(fenced, WriteError::Fenced(TxnError::Send(_))),
            "{fenced:?}"
        );
        assert!(
            fenced
                .to_string()
                .starts_with("fenced: cannot send a message: "),
            "{fenced}"
        );
        let failed = classify(TxnError::Delivery(KafkaError::MessageProduction(
            RDKafkaErrorCode::NotEnoughReplicas,
        )));
        assert!(
            matches!(failed, WriteError::Failed(TxnError::Delivery(_))),
            "{failed:?}"
        );
        assert!(
            failed
                .to_string()
                .starts_with("a message was not written: "),
            "{failed}"
        );
    }

    #[test]
    fn a_failed_abort_says_both_why() {
        let error = TxnError::AbortFailed {
            failure: Box::new(TxnError::NotAcknowledged),
            abort: KafkaError::Canceled,
        };
        assert!(
            error.to_string().starts_with(
                "the brokers did not acknowledge the write in time; then the abort failed: "
            ),
            "{error}"
        );
    }
}
