//! The file store against real files: durability across reopen, the commit record (nothing
//! acknowledged is ever dropped silently), what a reader may and may not do, subscriptions,
//! conditional appends, group commit, compaction, conversion of version-1 logs, the lock.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the test damages and inspects the store's real files"
)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use portcullis::credentials::{CredentialView, InMemoryCredentials, ScramMechanism};
use portcullis::store::{
    AppendBatch, Condition, MetadataRecord, MetadataStore, RecordKey, StoreError, StoredRecord,
};
use portcullis_plugin_stores::{
    apply_record, credentials_from, load_credentials, FileMetadataStore, StoreOptions,
    COMMIT_FILE_NAME, COMPACTING_FILE_NAME, LOG_FILE_NAME, MAX_BATCH_BYTES,
};

mod support;

use support::{credential, dropped_files, remove, set};

const HEADER_LEN: u64 = 32;

fn log_path(dir: &Path) -> PathBuf {
    dir.join(LOG_FILE_NAME)
}

/// The byte offset of every frame, read from the length fields.
fn frame_starts(bytes: &[u8]) -> Vec<u64> {
    let mut starts = Vec::new();
    let mut pos = HEADER_LEN as usize;
    while pos + 8 <= bytes.len() {
        starts.push(pos as u64);
        let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        pos += 8 + len;
    }
    starts
}

/// A store in a fresh directory holding three single-record frames (all acknowledged).
fn three_frames() -> (tempfile::TempDir, Vec<MetadataRecord>, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let records = vec![
        set("alice", ScramMechanism::Sha256, 4096),
        set("bob", ScramMechanism::Sha512, 8192),
        remove("alice", ScramMechanism::Sha256),
    ];
    {
        let store = FileMetadataStore::open(dir.path()).unwrap();
        for (i, record) in records.iter().enumerate() {
            assert_eq!(
                store.append(std::slice::from_ref(record)).unwrap(),
                i as u64
            );
        }
    }
    let starts = frame_starts(&fs::read(log_path(dir.path())).unwrap());
    assert_eq!(starts.len(), 3);
    (dir, records, starts)
}

fn open_err(dir: &Path) -> StoreError {
    FileMetadataStore::open(dir).expect_err("open should fail")
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_new_directory_gets_a_log_and_a_commit_record() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("nested").join("data");
    let store = FileMetadataStore::open(&data).unwrap();
    assert_eq!(store.path(), log_path(&data));
    assert!(store.snapshot().unwrap().is_empty());
    let log = fs::read(log_path(&data)).unwrap();
    assert_eq!(&log[..12], b"PCLSMLOG\0\0\0\x02");
    assert_eq!(log.len() as u64, HEADER_LEN);
    assert_eq!(fs::read(data.join(COMMIT_FILE_NAME)).unwrap().len(), 64);
}

#[test]
fn appends_survive_reopen_in_order_with_record_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let first = set("alice", ScramMechanism::Sha256, 4096);
    let batch = vec![
        set("bob", ScramMechanism::Sha512, 4096),
        set("carol", ScramMechanism::Sha256, 5000),
    ];
    let last = remove("bob", ScramMechanism::Sha512);
    {
        let store = FileMetadataStore::open(dir.path()).unwrap();
        assert_eq!(store.append(std::slice::from_ref(&first)).unwrap(), 0);
        assert_eq!(store.append(&batch).unwrap(), 1);
        assert_eq!(store.append(std::slice::from_ref(&last)).unwrap(), 3);
        assert_eq!(store.append(&[]).unwrap(), 4);
    }
    let expected = vec![first, batch[0].clone(), batch[1].clone(), last];
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(store.snapshot().unwrap(), expected);
    store.release_startup_cache();
    assert_eq!(
        store.snapshot().unwrap(),
        expected,
        "read back from the file"
    );
    assert_eq!(
        store
            .append(&[remove("carol", ScramMechanism::Sha256)])
            .unwrap(),
        4
    );
}

#[test]
fn an_acknowledged_append_is_already_in_the_file_and_the_commit_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    store
        .append(&[set("alice", ScramMechanism::Sha256, 4096)])
        .unwrap();
    // Through a separate reader while the store is still open.
    let read = FileMetadataStore::read_only(dir.path()).unwrap();
    assert_eq!(read.records.len(), 1);
    assert_eq!(read.ignored_bytes, 0);
}

// ---- What was acknowledged is never dropped silently -------------------------------------------

#[test]
fn a_bit_flip_in_the_last_acknowledged_record_refuses_the_open() {
    let (dir, _, starts) = three_frames();
    let len = fs::read(log_path(dir.path())).unwrap().len() as u64;
    for at in starts[2]..len {
        let mut bytes = fs::read(log_path(dir.path())).unwrap();
        bytes[at as usize] ^= 0x20;
        let path = dir.path().join(format!("case-{at}"));
        fs::create_dir(&path).unwrap();
        fs::write(log_path(&path), &bytes).unwrap();
        fs::copy(
            dir.path().join(COMMIT_FILE_NAME),
            path.join(COMMIT_FILE_NAME),
        )
        .unwrap();
        let err = open_err(&path);
        assert!(
            matches!(err, StoreError::Corrupt { offset, .. } if offset == starts[2]),
            "flip at {at}: {err}"
        );
        // And nothing was written: the damaged file is left for the operator.
        assert_eq!(fs::read(log_path(&path)).unwrap(), bytes);
        assert!(dropped_files(&path).is_empty());
    }
}

#[test]
fn a_truncation_at_any_offset_refuses_the_open() {
    let (dir, _, _) = three_frames();
    let bytes = fs::read(log_path(dir.path())).unwrap();
    for cut in 0..bytes.len() {
        let path = dir.path().join(format!("cut-{cut}"));
        fs::create_dir(&path).unwrap();
        fs::write(log_path(&path), &bytes[..cut]).unwrap();
        fs::copy(
            dir.path().join(COMMIT_FILE_NAME),
            path.join(COMMIT_FILE_NAME),
        )
        .unwrap();
        let err = open_err(&path);
        assert!(
            matches!(err, StoreError::Lost { .. }),
            "cut at {cut}: {err}"
        );
        assert!(err.to_string().contains("acknowledged"), "{err}");
    }
}

#[test]
fn an_emptied_log_or_a_lost_commit_record_refuses_the_open() {
    let (dir, _, _) = three_frames();
    let log = fs::read(log_path(dir.path())).unwrap();
    fs::write(log_path(dir.path()), b"").unwrap();
    assert!(matches!(open_err(dir.path()), StoreError::Lost { .. }));
    fs::write(log_path(dir.path()), &log).unwrap();
    fs::remove_file(dir.path().join(COMMIT_FILE_NAME)).unwrap();
    let err = open_err(dir.path());
    assert!(err.to_string().contains("commit record"), "{err}");
}

#[test]
fn unacknowledged_bytes_are_saved_aside_then_cut_off() {
    let (dir, records, _) = three_frames();
    let acknowledged = fs::read(log_path(dir.path())).unwrap();
    // The remains of a write a crash interrupted before its commit: an intact frame and a torn one.
    let mut bytes = acknowledged.clone();
    let extra = b"\x00\x00\x00\x30\x12\x34\x56\x78{\"offset\":3,\"re";
    bytes.extend_from_slice(extra);
    fs::write(log_path(dir.path()), &bytes).unwrap();
    {
        let store = FileMetadataStore::open(dir.path()).unwrap();
        assert_eq!(store.snapshot().unwrap(), records);
        assert_eq!(
            store
                .append(&[remove("bob", ScramMechanism::Sha512)])
                .unwrap(),
            3
        );
    }
    let dropped = dropped_files(dir.path());
    assert_eq!(dropped.len(), 1);
    assert_eq!(fs::read(&dropped[0]).unwrap(), extra);
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(store.snapshot().unwrap().len(), 4);
}

#[test]
fn a_reader_never_writes() {
    let (dir, records, _) = three_frames();
    let mut bytes = fs::read(log_path(dir.path())).unwrap();
    bytes.extend_from_slice(b"\x00\x00\x00\x30torn");
    fs::write(log_path(dir.path()), &bytes).unwrap();
    let before = files(dir.path());
    let read = FileMetadataStore::read_only(dir.path()).unwrap();
    assert_eq!(
        read.records
            .iter()
            .map(|r| r.record.clone())
            .collect::<Vec<_>>(),
        records
    );
    assert_eq!(read.ignored_bytes, 8);
    assert_eq!(
        files(dir.path()),
        before,
        "a reader changed the data directory"
    );
    // Also without a data directory at all: nothing is created.
    let missing = dir.path().join("missing");
    assert!(FileMetadataStore::read_only(&missing)
        .unwrap()
        .records
        .is_empty());
    assert!(!missing.exists());
}

#[test]
fn a_reader_works_while_the_writer_holds_the_lock() {
    let (dir, records, _) = three_frames();
    let _store = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(
        FileMetadataStore::read_only(dir.path())
            .unwrap()
            .records
            .len(),
        records.len()
    );
}

#[test]
fn a_foreign_file_is_corruption_at_offset_zero() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        log_path(dir.path()),
        b"NOTALOG!\0\0\0\x02 and more bytes than a header holds",
    )
    .unwrap();
    assert!(matches!(
        open_err(dir.path()),
        StoreError::Corrupt { offset: 0, .. }
    ));
}

#[test]
fn a_batch_above_the_limit_is_refused_and_the_store_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    let huge = MetadataRecord::ScramCredential {
        user: "x".repeat(MAX_BATCH_BYTES),
        mechanism: ScramMechanism::Sha256,
        credential: credential(4096, 1),
    };
    assert!(matches!(store.append(&[huge]), Err(StoreError::Io { .. })));
    assert_eq!(
        store
            .append(&[remove("a", ScramMechanism::Sha256)])
            .unwrap(),
        0
    );
}

#[test]
fn a_second_open_of_a_locked_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert!(matches!(open_err(dir.path()), StoreError::Locked(_)));
    drop(store);
    FileMetadataStore::open(dir.path()).unwrap();
}

// ---- Conditions, group commit, subscriptions -----------------------------------------------------

#[test]
fn conditions_see_the_latest_live_record_of_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    let key = RecordKey::ScramCredential {
        user: "alice".into(),
        mechanism: ScramMechanism::Sha256,
    };
    let absent = Condition::Latest {
        key: key.clone(),
        offset: None,
    };
    let at = |o| Condition::Latest {
        key: key.clone(),
        offset: Some(o),
    };
    let set_alice = AppendBatch::new(vec![set("alice", ScramMechanism::Sha256, 4096)]);
    assert_eq!(
        store
            .append_batch(&set_alice.clone().with_conditions(vec![absent.clone()]))
            .unwrap(),
        0
    );
    // A second writer that decided on the view before offset 0 loses.
    assert!(matches!(
        store.append_batch(&set_alice.clone().with_conditions(vec![absent.clone()])),
        Err(StoreError::Conflict { .. })
    ));
    let removal = AppendBatch::new(vec![remove("alice", ScramMechanism::Sha256)]);
    // Within one group, a later batch sees the earlier one.
    let results = store.append_group(&[
        removal.clone().with_conditions(vec![at(0)]),
        removal.clone().with_conditions(vec![at(0)]),
        set_alice.clone().with_conditions(vec![absent.clone()]),
    ]);
    assert!(results[0].is_ok());
    assert!(matches!(results[1], Err(StoreError::Conflict { .. })));
    assert_eq!(results[2].as_ref().unwrap(), &2);
    // Survives a reopen (the index is rebuilt from the log).
    drop(store);
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert!(store
        .append_batch(&removal.with_conditions(vec![at(2)]))
        .is_ok());
}

#[test]
fn subscribers_get_the_replay_then_every_append_in_order_before_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileMetadataStore::open(dir.path()).unwrap());
    for i in 0..5 {
        store
            .append(&[set(&format!("u{i}"), ScramMechanism::Sha256, 4096)])
            .unwrap();
    }
    store.release_startup_cache();
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let id = store
        .subscribe(
            2,
            Box::new(move |records: &[StoredRecord]| {
                sink.lock()
                    .unwrap()
                    .extend(records.iter().map(|r| r.offset))
            }),
        )
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![2, 3, 4]);
    let first = store
        .append(&[
            remove("u0", ScramMechanism::Sha256),
            remove("u1", ScramMechanism::Sha256),
        ])
        .unwrap();
    assert_eq!(first, 5);
    assert_eq!(*seen.lock().unwrap(), vec![2, 3, 4, 5, 6]);
    store.unsubscribe(id);
    store
        .append(&[remove("u2", ScramMechanism::Sha256)])
        .unwrap();
    assert_eq!(seen.lock().unwrap().len(), 5);
}

#[test]
fn a_credential_view_follows_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    store
        .append(&[
            set("alice", ScramMechanism::Sha256, 4096),
            set("bob", ScramMechanism::Sha512, 4096),
        ])
        .unwrap();
    let creds = Arc::new(InMemoryCredentials::new());
    let view = Arc::clone(&creds);
    store
        .subscribe(
            0,
            Box::new(move |records: &[StoredRecord]| {
                records.iter().for_each(|r| apply_record(&view, &r.record))
            }),
        )
        .unwrap();
    assert!(creds.scram("alice", ScramMechanism::Sha256).is_some());
    store
        .append(&[remove("alice", ScramMechanism::Sha256)])
        .unwrap();
    assert!(creds.scram("alice", ScramMechanism::Sha256).is_none());
    assert!(creds.scram("bob", ScramMechanism::Sha512).is_some());
    let fresh = InMemoryCredentials::new();
    load_credentials(&store, &fresh).unwrap();
    assert_eq!(fresh.users(), creds.users());
    let read = FileMetadataStore::read_only(dir.path()).unwrap();
    assert_eq!(
        credentials_from(read.records.iter().map(|r| &r.record)).len(),
        1
    );
}

// ---- Compaction -----------------------------------------------------------------------------------

#[test]
fn compaction_keeps_the_live_records_at_their_offsets_and_bounds_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open_with(
        dir.path(),
        StoreOptions {
            compaction_min_dead: 100,
        },
    )
    .unwrap();
    // A token-like workload: create, then delete, over and over; one key stays alive.
    store
        .append(&[set("keeper", ScramMechanism::Sha512, 4096)])
        .unwrap();
    let mut largest = 0;
    for round in 0..20 {
        for i in 0..50 {
            let user = format!("r{round}-{i}");
            store
                .append(&[set(&user, ScramMechanism::Sha256, 4096)])
                .unwrap();
            store
                .append(&[remove(&user, ScramMechanism::Sha256)])
                .unwrap();
        }
        if store.needs_compaction() {
            store.compact().unwrap();
        }
        largest = largest.max(fs::metadata(log_path(dir.path())).unwrap().len());
    }
    let stats = store.stats();
    assert!(stats.compactions >= 5, "{stats:?}");
    assert!(largest < 60_000, "log grew to {largest} bytes");
    store.compact().unwrap();
    assert_eq!(store.stats().records_in_file, 1);
    let next = store
        .append(&[remove("x", ScramMechanism::Sha256)])
        .unwrap();
    assert_eq!(next, 2001, "offsets continue after compaction");
    drop(store);
    let reopened = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(
        reopened.snapshot().unwrap(),
        vec![
            set("keeper", ScramMechanism::Sha512, 4096),
            remove("x", ScramMechanism::Sha256)
        ]
    );
}

#[test]
fn appends_made_during_compaction_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileMetadataStore::open(dir.path()).unwrap());
    for i in 0..10 {
        store
            .append(&[set(&format!("u{i}"), ScramMechanism::Sha256, 4096)])
            .unwrap();
        store
            .append(&[remove(&format!("u{i}"), ScramMechanism::Sha256)])
            .unwrap();
    }
    let writer = Arc::clone(&store);
    store
        .compact_observed(&mut |step| {
            if step == portcullis_plugin_stores::CompactionStep::SnapshotWritten {
                writer
                    .append(&[set("during", ScramMechanism::Sha512, 4096)])
                    .unwrap();
            }
        })
        .unwrap();
    assert!(!dir.path().join(COMPACTING_FILE_NAME).exists());
    drop(writer);
    drop(store);
    let store = FileMetadataStore::open(dir.path()).unwrap();
    let creds = InMemoryCredentials::new();
    load_credentials(&store, &creds).unwrap();
    assert_eq!(
        creds.users(),
        vec![("during".into(), ScramMechanism::Sha512, 4096)]
    );
}

// ---- Version 1 logs ---------------------------------------------------------------------------------

/// A version-1 log as earlier builds wrote it: header, then frames of JSON arrays.
fn v1_log(batches: &[&[MetadataRecord]]) -> Vec<u8> {
    let mut out = b"PCLSMLOG\0\0\0\x01".to_vec();
    for batch in batches {
        let payload = serde_json::to_vec(batch).unwrap();
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
        out.extend_from_slice(&payload);
    }
    out
}

#[test]
fn a_version_1_log_is_read_and_converted() {
    let dir = tempfile::tempdir().unwrap();
    let records = [
        set("alice", ScramMechanism::Sha256, 4096),
        set("bob", ScramMechanism::Sha512, 4096),
    ];
    fs::write(
        log_path(dir.path()),
        v1_log(&[&records[..1], &records[1..]]),
    )
    .unwrap();
    let read = FileMetadataStore::read_only(dir.path()).unwrap();
    assert_eq!(read.records.len(), 2);
    {
        let store = FileMetadataStore::open(dir.path()).unwrap();
        assert_eq!(store.snapshot().unwrap(), records.to_vec());
        assert_eq!(
            store
                .append(&[remove("bob", ScramMechanism::Sha512)])
                .unwrap(),
            2
        );
    }
    let log = fs::read(log_path(dir.path())).unwrap();
    assert_eq!(&log[..12], b"PCLSMLOG\0\0\0\x02");
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(store.snapshot().unwrap().len(), 3);
}

#[test]
fn an_operator_can_accept_the_loss_after_damage_and_start_again() {
    let (dir, records, starts) = three_frames();
    let log = log_path(dir.path());
    let mut bytes = fs::read(&log).unwrap();
    // Damage in the second (acknowledged) record.
    bytes[starts[1] as usize + 12] ^= 0x01;
    fs::write(&log, &bytes).unwrap();
    assert!(matches!(open_err(dir.path()), StoreError::Corrupt { .. }));
    let report = FileMetadataStore::recover_accepting_loss(dir.path()).unwrap();
    assert_eq!(report.records_kept, 1);
    assert_eq!(report.log_len, starts[1]);
    assert_eq!(report.bytes_dropped, bytes.len() as u64 - starts[1]);
    let saved = report.saved_to.unwrap();
    assert_eq!(fs::read(saved).unwrap(), bytes[starts[1] as usize..]);
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(store.snapshot().unwrap(), records[..1].to_vec());
    // Refused while a node holds the directory.
    assert!(matches!(
        FileMetadataStore::recover_accepting_loss(dir.path()),
        Err(StoreError::Locked(_))
    ));
}
