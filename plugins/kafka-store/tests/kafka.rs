//! The kafka store against a real Apache Kafka (`PORTCULLIS_TEST_KAFKA`: its PLAINTEXT
//! `host:port`): election, replay and tail, conditional appends on the writer, and the fence.
//!
//! `#[ignore]`d in the default workspace run because they need a broker; `scripts/test.sh` starts
//! one and runs them with `--ignored`. By hand:
//! `PORTCULLIS_TEST_KAFKA=127.0.0.1:9092 cargo test -p portcullis-plugin-kafka-store --test kafka -- --ignored`.
//! Without the variable they fail: a test that silently passes without its broker proves nothing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portcullis::credentials::ScramMechanism;
use portcullis::store::{
    AppendBatch, Condition, MetadataRecord, MetadataStore, StoreError, StoredRecord,
};
use portcullis_plugin_kafka_store::{
    write_offline, KafkaConnection, KafkaMetadataStore, KafkaStoreSettings, Role,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

fn bootstrap() -> String {
    std::env::var("PORTCULLIS_TEST_KAFKA")
        .expect("PORTCULLIS_TEST_KAFKA must name the test broker (scripts/test.sh sets it)")
}

fn connection() -> KafkaConnection {
    KafkaConnection {
        bootstrap_servers: vec![bootstrap()],
        security_protocol: "PLAINTEXT".into(),
        sasl: None,
        tls: None,
    }
}

/// A fresh topic and cluster id per test, so tests never see each other's records.
fn unique(name: &str) -> (String, String) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    (
        format!("__portcullis_test_{name}_{nanos}"),
        format!("{name}-{nanos}"),
    )
}

fn settings(topic: &str, cluster: &str, node: i32) -> KafkaStoreSettings {
    KafkaStoreSettings::new(
        connection(),
        topic,
        cluster,
        node,
        format!("127.0.0.1:{}", 9000 + node),
    )
}

fn credential(user: &str, salt: u8) -> MetadataRecord {
    MetadataRecord::ScramCredential {
        user: user.into(),
        mechanism: ScramMechanism::Sha256,
        credential: portcullis::credentials::ScramCredential {
            salt: vec![salt],
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
            iterations: 4096,
        },
    }
}

fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn collector(store: &KafkaMetadataStore) -> Arc<Mutex<Vec<StoredRecord>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    store
        .subscribe(
            0,
            Box::new(move |records: &[StoredRecord]| {
                sink.lock().unwrap().extend_from_slice(records)
            }),
        )
        .unwrap();
    seen
}

fn writer_of<'a>(stores: &[&'a KafkaMetadataStore]) -> &'a KafkaMetadataStore {
    let mut found = None;
    wait_until("one node is the writer", Duration::from_secs(30), || {
        let writers: Vec<_> = stores.iter().filter(|s| s.is_writer()).collect();
        assert!(writers.len() <= 1, "two writers at once");
        found = writers.first().map(|s| **s);
        found.is_some()
    });
    found.unwrap()
}

#[test]
#[ignore = "needs a Kafka broker: PORTCULLIS_TEST_KAFKA (scripts/test.sh runs it)"]
fn one_writer_and_every_node_follows_the_log() {
    let (topic, cluster) = unique("follow");
    let a = KafkaMetadataStore::open(settings(&topic, &cluster, 1)).unwrap();
    let b = KafkaMetadataStore::open(settings(&topic, &cluster, 2)).unwrap();
    let (seen_a, seen_b) = (collector(&a), collector(&b));
    let writer = writer_of(&[&a, &b]);
    let follower = if std::ptr::eq(writer, &a) { &b } else { &a };

    // A follower refuses to write.
    assert!(matches!(
        follower.append(&[credential("alice", 1)]),
        Err(StoreError::NotLeader(_))
    ));
    // The writer's append returns once its own view has applied it.
    let offset = writer.append(&[credential("alice", 1)]).unwrap();
    let own = if std::ptr::eq(writer, &a) {
        &seen_a
    } else {
        &seen_b
    };
    assert!(own.lock().unwrap().iter().any(|r| r.offset == offset));
    // The follower sees it soon.
    let other = if std::ptr::eq(writer, &a) {
        &seen_b
    } else {
        &seen_a
    };
    wait_until(
        "the follower applies the write",
        Duration::from_secs(2),
        || other.lock().unwrap().iter().any(|r| r.offset == offset),
    );
    // Both know who the writer is.
    wait_until("both nodes know the writer", Duration::from_secs(2), || {
        a.leader().is_some() && a.leader() == b.leader()
    });
    let leader = a.leader().unwrap();
    assert_eq!(Role::Writer { term: leader.term }, writer.progress().role);

    // A node started later replays what is there.
    writer
        .append(&[MetadataRecord::RemoveScramCredential {
            user: "alice".into(),
            mechanism: ScramMechanism::Sha256,
        }])
        .unwrap();
    writer.append(&[credential("bob", 7)]).unwrap();
    let mut late = settings(&topic, &cluster, 3);
    late.elect = false;
    let c = KafkaMetadataStore::open(late).unwrap();
    let replayed = c.snapshot().unwrap();
    assert_eq!(replayed, vec![credential("bob", 7)], "alice was removed");
}

#[test]
#[ignore = "needs a Kafka broker: PORTCULLIS_TEST_KAFKA (scripts/test.sh runs it)"]
fn conditions_are_checked_on_the_writers_view() {
    let (topic, cluster) = unique("conditions");
    let a = KafkaMetadataStore::open(settings(&topic, &cluster, 1)).unwrap();
    let writer = writer_of(&[&a]);
    let key = credential("carol", 1).key();
    let absent = Condition::Latest {
        key: key.clone(),
        offset: None,
    };
    let first = writer
        .append_batch(
            &AppendBatch::new(vec![credential("carol", 1)]).with_conditions(vec![absent.clone()]),
        )
        .unwrap();
    // Decided on a view where carol did not exist: refused.
    assert!(matches!(
        writer.append_batch(
            &AppendBatch::new(vec![credential("carol", 2)]).with_conditions(vec![absent])
        ),
        Err(StoreError::Conflict { .. })
    ));
    let live = Condition::Live { key: key.clone() };
    let removal = MetadataRecord::RemoveScramCredential {
        user: "carol".into(),
        mechanism: ScramMechanism::Sha256,
    };
    // In one group: the first removal is written, the second (same view) conflicts.
    let results = writer.append_group(&[
        AppendBatch::new(vec![removal.clone()]).with_conditions(vec![live.clone()]),
        AppendBatch::new(vec![removal]).with_conditions(vec![live]),
    ]);
    assert!(results[0].as_ref().is_ok_and(|o| *o > first), "{results:?}");
    assert!(
        matches!(results[1], Err(StoreError::Conflict { .. })),
        "{results:?}"
    );
}

/// The fence: a writer whose producer epoch was bumped by another (here `write_offline`, which
/// opens the cluster's transactional id as a new writer does) cannot write any more; its append
/// fails with NotLeader, nothing of it reaches the topic, and the node is elected again and
/// writes under a new term.
#[test]
#[ignore = "needs a Kafka broker: PORTCULLIS_TEST_KAFKA (scripts/test.sh runs it)"]
fn a_fenced_writer_writes_nothing_and_steps_down() {
    let (topic, cluster) = unique("fence");
    let a = KafkaMetadataStore::open(settings(&topic, &cluster, 1)).unwrap();
    let writer = writer_of(&[&a]);
    let term = match writer.progress().role {
        Role::Writer { term } => term,
        other => panic!("{other:?}"),
    };
    writer.append(&[credential("before", 1)]).unwrap();
    write_offline(&settings(&topic, &cluster, 99), &[credential("tool", 1)]).unwrap();
    let refused = writer.append(&[credential("zombie", 1)]);
    assert!(
        matches!(refused, Err(StoreError::NotLeader(_))),
        "{refused:?}"
    );
    // Elected again (the only member), under a new term, and writing.
    wait_until(
        "the node writes again under a new term",
        Duration::from_secs(30),
        || matches!(a.progress().role, Role::Writer { term: t } if t > term),
    );
    a.append(&[credential("after", 1)]).unwrap();

    // The whole topic, aborted messages included: nothing of the fenced write is there.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", "fence-checker")
        .set("isolation.level", "read_uncommitted")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut keys = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "could not read the topic");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let node = m.headers().and_then(|h| {
                    h.iter()
                        .find(|h| h.key == "portcullis.node")
                        .and_then(|h| h.value.map(|v| String::from_utf8_lossy(v).into_owned()))
                });
                keys.push((String::from_utf8_lossy(m.key().unwrap()).into_owned(), node));
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
            _ => {}
        }
    }
    assert!(keys.iter().any(|(k, _)| k.contains("\"before\"")));
    assert!(keys
        .iter()
        .any(|(k, n)| k.contains("\"tool\"") && n.as_deref() == Some("99")));
    assert!(keys.iter().any(|(k, _)| k.contains("\"after\"")));
    assert!(!keys.iter().any(|(k, _)| k.contains("zombie")), "{keys:?}");
}

#[test]
#[ignore = "needs a Kafka broker: PORTCULLIS_TEST_KAFKA (scripts/test.sh runs it)"]
fn a_topic_of_another_cluster_is_refused() {
    let (topic, cluster) = unique("foreign");
    write_offline(&settings(&topic, &cluster, 1), &[credential("x", 1)]).unwrap();
    let error = KafkaMetadataStore::open(settings(&topic, "someone-else", 1)).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("each cluster needs its own topic"),
        "{error}"
    );
}
