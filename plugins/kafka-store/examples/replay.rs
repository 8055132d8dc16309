//! Replay time of a large metadata log (docs/benchmarks.md, "Cluster"): writes RECORDS ACL
//! records into a fresh topic (transactions of 10 000, as a writer would), then opens the store
//! as a node does (replay to the end, then follow) with a subscriber that counts, and prints how
//! long the open took.
//!
//! `cargo run --release -p portcullis-plugin-kafka-store --example replay -- BOOTSTRAP [RECORDS]`
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a benchmark tool reports a failure by panicking"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use portcullis::acl::{
    AccessControlEntry, AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern,
    ResourceType,
};
use portcullis::store::{MetadataRecord, MetadataStore, StoredRecord};
use portcullis_plugin_kafka_store::{
    write_offline, KafkaConnection, KafkaMetadataStore, KafkaStoreSettings,
};

fn main() {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().expect("usage: replay BOOTSTRAP [RECORDS]");
    let total: usize = args
        .next()
        .map_or(1_000_000, |n| n.parse().expect("a count"));
    let connection = KafkaConnection {
        bootstrap_servers: vec![bootstrap],
        security_protocol: "PLAINTEXT".into(),
        sasl: None,
        tls: None,
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let (topic, cluster) = (
        format!("__portcullis_replay_{nanos}"),
        format!("replay-{nanos}"),
    );
    let settings = |node| {
        let mut s =
            KafkaStoreSettings::new(connection.clone(), &topic, &cluster, node, "127.0.0.1:1");
        s.elect = false;
        s.startup_timeout = std::time::Duration::from_secs(1800);
        s
    };
    let started = Instant::now();
    let mut written = 0;
    while written < total {
        let chunk: Vec<MetadataRecord> = (written..(written + 10_000).min(total))
            .map(|i| MetadataRecord::Acl {
                binding: AclBinding {
                    pattern: ResourcePattern::new(
                        ResourceType::Topic,
                        format!("topic-{i:07}"),
                        PatternType::Literal,
                    ),
                    entry: AccessControlEntry {
                        principal: format!("User:user-{}", i % 1000),
                        host: "*".into(),
                        operation: AclOperation::Read,
                        permission: PermissionType::Allow,
                    },
                },
            })
            .collect();
        write_offline(&settings(1), &chunk).expect("write");
        written += chunk.len();
    }
    eprintln!(
        "wrote {total} records in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    let counted = Arc::new(AtomicU64::new(0));
    let sink = Arc::clone(&counted);
    let opened = Instant::now();
    let store = KafkaMetadataStore::open(settings(2)).expect("open");
    let open_s = opened.elapsed().as_secs_f64();
    store
        .subscribe(
            0,
            Box::new(move |records: &[StoredRecord]| {
                sink.fetch_add(records.len() as u64, Ordering::Relaxed);
            }),
        )
        .unwrap();
    println!(
        "replayed {} live records ({} offsets) in {open_s:.2}s ({:.0} records/s)",
        counted.load(Ordering::Relaxed),
        store.progress().applied,
        counted.load(Ordering::Relaxed) as f64 / open_s
    );
    store.shutdown();
}
