//! The election: every node of a cluster is a member of the consumer group
//! `portcullis-<cluster_id>` on the upstream's group coordinator, subscribed to the one-partition
//! election topic. The group assigns that partition to exactly one member at a time; that member
//! is the writer. The cooperative-sticky assignor keeps the partition where it is when nodes join
//! or leave, so a node starting does not move the writer.
//!
//! A member that stops heartbeating (killed, paused, cut off from the cluster) loses the
//! partition after `session.timeout.ms`; another member gets it, and its
//! [`Shared::activate`](crate::shared::Shared) fences the old writer through the transactional
//! producer. The old writer learns it lost the partition when it can talk to the coordinator
//! again (librdkafka also gives the partition up by itself when its session times out) — and if
//! it tries to write before that, the fence refuses the write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::ClientContext;

use crate::credentials::Follower;
use crate::shared::Shared;

/// Records whether this member holds the election partition after each rebalance.
struct ElectionContext {
    topic: String,
    assigned: AtomicBool,
}

impl ClientContext for ElectionContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, line: &str) {
        crate::connection::log_client_line(level, facility, line);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        crate::connection::log_client_error(&error, reason);
    }
}

impl ConsumerContext for ElectionContext {
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let holds = consumer.assignment().is_ok_and(|tpl| {
            tpl.elements()
                .iter()
                .any(|e| e.topic() == self.topic && e.partition() == 0)
        });
        tracing::debug!(?rebalance, holds, "election group rebalanced");
        self.assigned.store(holds, Ordering::Release);
    }
}

pub(crate) fn run(shared: Arc<Shared>) {
    let mut backoff_until: Option<Instant> = None;
    'member: while !shared.stop.load(Ordering::Acquire) {
        let (consumer, mut credentials) = match join(&shared) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot join the election group; retrying");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        while !shared.stop.load(Ordering::Acquire) {
            // Serves the group protocol's callbacks; nothing is ever consumed.
            let _ = consumer.poll(Duration::from_millis(100));
            credentials.follow(&shared.upstream, consumer.client(), "election");
            if credentials.must_remake(&shared.upstream) {
                // librdkafka fixes a client's mechanism and TLS files when it makes the client:
                // the member leaves and joins again with the reloaded ones. On the writer that
                // is a step down first; the group then hands the partition to a member (maybe
                // this node's new one again), which fences and announces as in any failover.
                shared.step_down("the upstream login changed: the election member is made again");
                tracing::info!(
                    client = %"election",
                    "the metadata store's client is made again with the reloaded upstream settings"
                );
                consumer.unsubscribe();
                drop(consumer);
                // The member just left: a rejoin asked for by a fence is done too.
                shared.rejoin.store(false, Ordering::Release);
                continue 'member;
            }
            if shared.rejoin.swap(false, Ordering::AcqRel) {
                // Fenced while the group still assigned us the partition: leave, so that the
                // group decides again (maybe for this node, which then fences afresh).
                drop(consumer);
                continue 'member;
            }
            let holds = consumer.context().assigned.load(Ordering::Acquire);
            let role = shared.role_view();
            match (holds, role) {
                (true, crate::shared::Role::Follower) => {
                    if shared.stop.load(Ordering::Acquire)
                        || backoff_until.is_some_and(|t| Instant::now() < t)
                    {
                        continue;
                    }
                    match shared.activate() {
                        // Fenced meanwhile: the next turn leaves the group (`rejoin`).
                        Ok(false) => {}
                        Ok(true) => backoff_until = None,
                        Err(e) => {
                            tracing::warn!(error = %e, "elected, but cannot take over as the metadata writer; retrying");
                            backoff_until = Some(Instant::now() + Duration::from_secs(1));
                        }
                    }
                }
                (false, crate::shared::Role::Writer { .. }) => {
                    shared.step_down("the election group moved the writer elsewhere");
                }
                _ => {}
            }
        }
        // Leaving the group at once (the consumer's close) lets a successor be elected without
        // waiting for the session timeout.
        shared.step_down("the node is stopping");
        consumer.unsubscribe();
        drop(consumer);
    }
}

/// Why this node cannot join the election group.
#[derive(Debug, thiserror::Error)]
enum ElectionError {
    /// librdkafka refused the consumer's configuration.
    #[error("cannot create the election consumer: {}", crate::connection::client_error_text(.0))]
    CreateConsumer(KafkaError),
    /// The subscription to the election topic failed.
    #[error("cannot subscribe to {topic}: {error}")]
    Subscribe {
        /// The election topic.
        topic: String,
        /// Why.
        error: KafkaError,
    },
}

fn join(shared: &Shared) -> Result<(BaseConsumer<ElectionContext>, Follower), ElectionError> {
    let settings = &shared.settings;
    let (generation, connection) = shared.connection();
    let session_ms = settings.session_timeout.as_millis().max(1);
    let heartbeat_ms = (session_ms / 6).max(100);
    let consumer: BaseConsumer<ElectionContext> = connection
        .client_config(&format!(
            "portcullis-{}-election-{}",
            settings.cluster_id, settings.node_id
        ))
        .set("group.id", format!("portcullis-{}", settings.cluster_id))
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", session_ms.to_string())
        .set("heartbeat.interval.ms", heartbeat_ms.to_string())
        .set("enable.auto.commit", "false")
        .create_with_context(ElectionContext {
            topic: shared.topics.election.clone(),
            assigned: AtomicBool::new(false),
        })
        .map_err(ElectionError::CreateConsumer)?;
    consumer
        .subscribe(&[&shared.topics.election])
        .map_err(|error| ElectionError::Subscribe {
            topic: shared.topics.election.clone(),
            error,
        })?;
    Ok((consumer, Follower::at(generation)))
}
