//! The file store against real files: durability across reopen, recovery of torn tails,
//! refusal of damaged logs, the directory lock, and replay into the credential view.
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

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use portcullis::credentials::{
    CredentialView, InMemoryCredentials, ScramCredential, ScramMechanism,
};
use portcullis::store::{MetadataRecord, MetadataStore, StoreError};
use portcullis_plugin_stores::{
    apply_record, load_credentials, FileMetadataStore, LOG_FILE_NAME, MAX_BATCH_BYTES,
};

const HEADER_LEN: u64 = 12;

fn credential(iterations: u32, fill: u8) -> ScramCredential {
    ScramCredential {
        salt: vec![fill; 16],
        stored_key: vec![fill.wrapping_add(1); 32],
        server_key: vec![fill.wrapping_add(2); 32],
        iterations,
    }
}

fn set(user: &str, mechanism: ScramMechanism, iterations: u32) -> MetadataRecord {
    MetadataRecord::ScramCredential {
        user: user.to_owned(),
        mechanism,
        credential: credential(iterations, iterations as u8),
    }
}

fn remove(user: &str, mechanism: ScramMechanism) -> MetadataRecord {
    MetadataRecord::RemoveScramCredential {
        user: user.to_owned(),
        mechanism,
    }
}

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

/// A store in a fresh directory holding three single-record frames.
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

fn corrupt_offset(err: &StoreError) -> u64 {
    match err {
        StoreError::Corrupt { offset, .. } => *offset,
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

fn flip(path: &Path, at: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at as usize] ^= 0x40;
    fs::write(path, bytes).unwrap();
}

#[test]
fn a_new_directory_gets_a_log_with_only_a_header() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("nested").join("data");
    let store = FileMetadataStore::open(&data).unwrap();
    assert_eq!(store.path(), log_path(&data));
    assert!(store.snapshot().unwrap().is_empty());
    assert_eq!(fs::read(log_path(&data)).unwrap(), b"PCLSMLOG\0\0\0\x01");
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
    assert_eq!(
        store
            .append(&[remove("carol", ScramMechanism::Sha256)])
            .unwrap(),
        4
    );
}

#[test]
fn an_acknowledged_append_is_already_in_the_file() {
    // Read through a separate handle while the store is still open: append must have written
    // (and synced) before returning, not buffered.
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    let record = set("alice", ScramMechanism::Sha256, 4096);
    store.append(std::slice::from_ref(&record)).unwrap();
    let bytes = fs::read(log_path(dir.path())).unwrap();
    let starts = frame_starts(&bytes);
    assert_eq!(starts, vec![HEADER_LEN]);
    let len = u32::from_be_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let crc = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let payload = &bytes[20..];
    assert_eq!(payload.len(), len);
    assert_eq!(crc32c::crc32c(payload), crc);
    let on_disk: Vec<MetadataRecord> = serde_json::from_slice(payload).unwrap();
    assert_eq!(on_disk, vec![record]);
}

#[test]
fn a_flipped_byte_in_the_middle_record_is_corruption_at_its_offset() {
    let (dir, _, starts) = three_frames();
    let middle = starts[1];
    flip(&log_path(dir.path()), middle + 8 + 5);
    let err = open_err(dir.path());
    assert_eq!(corrupt_offset(&err), middle);
    let message = err.to_string();
    assert!(
        message.contains(&format!("byte offset {middle}")),
        "{message}"
    );
    assert!(message.contains("checksum mismatch"), "{message}");
    // Refusing to start must not have changed the file.
    assert_eq!(
        frame_starts(&fs::read(log_path(dir.path())).unwrap()),
        starts
    );
}

#[test]
fn a_damaged_middle_length_that_runs_past_eof_is_corruption_not_a_torn_tail() {
    let (dir, _, starts) = three_frames();
    let path = log_path(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    let middle = starts[1] as usize;
    bytes[middle..middle + 4].copy_from_slice(&1_000_000u32.to_be_bytes());
    let len_before = bytes.len() as u64;
    fs::write(&path, bytes).unwrap();
    let err = open_err(dir.path());
    assert_eq!(corrupt_offset(&err), starts[1]);
    assert!(err.to_string().contains("intact record follows"), "{err}");
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        len_before,
        "nothing may be truncated"
    );
}

#[test]
fn a_truncated_last_record_is_cut_off_and_appends_continue() {
    let (dir, records, starts) = three_frames();
    let path = log_path(dir.path());
    let full = fs::metadata(&path).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(full - 5)
        .unwrap();

    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(store.snapshot().unwrap(), records[..2]);
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        starts[2],
        "torn tail truncated"
    );

    let next = set("dave", ScramMechanism::Sha512, 4096);
    assert_eq!(store.append(std::slice::from_ref(&next)).unwrap(), 2);
    drop(store);
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(
        store.snapshot().unwrap(),
        vec![records[0].clone(), records[1].clone(), next]
    );
}

#[test]
fn a_partial_record_header_at_the_end_is_cut_off() {
    let (dir, records, starts) = three_frames();
    let path = log_path(dir.path());
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(starts[2] + 3)
        .unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(store.snapshot().unwrap(), records[..2]);
    assert_eq!(fs::metadata(&path).unwrap().len(), starts[2]);
}

#[test]
fn a_checksum_failure_in_the_last_record_is_a_torn_tail() {
    let (dir, records, starts) = three_frames();
    let path = log_path(dir.path());
    flip(&path, starts[2] + 8 + 3);
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(store.snapshot().unwrap(), records[..2]);
    assert_eq!(fs::metadata(&path).unwrap().len(), starts[2]);
}

#[test]
fn a_zero_filled_tail_is_cut_off() {
    let (dir, records, _) = three_frames();
    let path = log_path(dir.path());
    let full = fs::metadata(&path).unwrap().len();
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&[0u8; 4096])
        .unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(store.snapshot().unwrap(), records);
    assert_eq!(fs::metadata(&path).unwrap().len(), full);
}

#[test]
fn a_bad_magic_is_corruption_at_offset_zero() {
    let (dir, _, _) = three_frames();
    flip(&log_path(dir.path()), 2);
    let err = open_err(dir.path());
    assert_eq!(corrupt_offset(&err), 0);
    assert!(err.to_string().contains("bad magic"), "{err}");
}

#[test]
fn a_foreign_file_shorter_than_the_header_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(log_path(dir.path()), b"hello").unwrap();
    assert_eq!(corrupt_offset(&open_err(dir.path())), 0);
    assert_eq!(fs::read(log_path(dir.path())).unwrap(), b"hello");
}

#[test]
fn an_unknown_format_version_is_corruption_at_offset_eight() {
    let (dir, _, _) = three_frames();
    let path = log_path(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&2u32.to_be_bytes());
    fs::write(&path, bytes).unwrap();
    let err = open_err(dir.path());
    assert_eq!(corrupt_offset(&err), 8);
    assert!(err.to_string().contains("version 2"), "{err}");
}

#[test]
fn a_half_written_header_is_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(log_path(dir.path()), b"PCLSM").unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert!(store.snapshot().unwrap().is_empty());
    store
        .append(&[remove("x", ScramMechanism::Sha256)])
        .unwrap();
    drop(store);
    let store = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(
        store.snapshot().unwrap(),
        vec![remove("x", ScramMechanism::Sha256)]
    );
}

#[test]
fn a_huge_length_field_is_corruption_not_an_allocation() {
    // In the middle...
    let (dir, _, starts) = three_frames();
    let path = log_path(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    let first = starts[0] as usize;
    bytes[first..first + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    fs::write(&path, &bytes).unwrap();
    let err = open_err(dir.path());
    assert_eq!(corrupt_offset(&err), starts[0]);
    assert!(err.to_string().contains("exceeds"), "{err}");

    // ...and at the very end, where a plausible length would look like a torn write.
    let dir = tempfile::tempdir().unwrap();
    drop(FileMetadataStore::open(dir.path()).unwrap());
    let mut file = OpenOptions::new()
        .append(true)
        .open(log_path(dir.path()))
        .unwrap();
    file.write_all(&((MAX_BATCH_BYTES as u32) + 1).to_be_bytes())
        .unwrap();
    file.write_all(&[0xAB; 12]).unwrap();
    drop(file);
    let err = open_err(dir.path());
    assert_eq!(corrupt_offset(&err), HEADER_LEN);
}

#[test]
fn a_batch_above_the_limit_is_refused_and_the_store_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    let big = MetadataRecord::RemoveScramCredential {
        user: "u".repeat(MAX_BATCH_BYTES),
        mechanism: ScramMechanism::Sha256,
    };
    let err = store.append(&[big]).unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("limit"), "{err}");
    assert_eq!(
        store
            .append(&[remove("a", ScramMechanism::Sha256)])
            .unwrap(),
        0
    );
    drop(store);
    assert_eq!(
        FileMetadataStore::open(dir.path())
            .unwrap()
            .snapshot()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_second_open_of_a_locked_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    store
        .append(&[remove("a", ScramMechanism::Sha256)])
        .unwrap();
    match FileMetadataStore::open(dir.path()) {
        Err(StoreError::Locked(d)) => assert_eq!(d, dir.path().display().to_string()),
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(store);
    // The lock goes with the store.
    let again = FileMetadataStore::open(dir.path()).unwrap();
    assert_eq!(again.snapshot().unwrap().len(), 1);
}

#[test]
fn load_credentials_replays_adds_changes_and_removals() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    store
        .append(&[
            set("alice", ScramMechanism::Sha256, 4096),
            set("bob", ScramMechanism::Sha512, 4096),
        ])
        .unwrap();
    store
        .append(&[set("alice", ScramMechanism::Sha256, 8192)])
        .unwrap();
    store
        .append(&[remove("bob", ScramMechanism::Sha512)])
        .unwrap();
    store
        .append(&[set("alice", ScramMechanism::Sha512, 5000)])
        .unwrap();
    drop(store);

    let store = FileMetadataStore::open(dir.path()).unwrap();
    let creds = InMemoryCredentials::new();
    // A credential that is not in the log must not survive the load.
    creds.upsert("stale", ScramMechanism::Sha256, credential(4096, 9));
    assert_eq!(load_credentials(&store, &creds).unwrap(), 5);

    assert_eq!(
        creds.scram("alice", ScramMechanism::Sha256),
        Some(credential(8192, 8192u32 as u8))
    );
    assert_eq!(
        creds.scram("alice", ScramMechanism::Sha512),
        Some(credential(5000, 5000u32 as u8))
    );
    assert_eq!(creds.scram("bob", ScramMechanism::Sha512), None);
    assert_eq!(creds.scram("stale", ScramMechanism::Sha256), None);
    let mut users = creds.users();
    users.sort();
    assert_eq!(
        users,
        vec![
            ("alice".to_owned(), ScramMechanism::Sha256, 8192),
            ("alice".to_owned(), ScramMechanism::Sha512, 5000),
        ]
    );
}

#[test]
fn apply_record_updates_the_view_one_record_at_a_time() {
    let creds = InMemoryCredentials::new();
    apply_record(&creds, &set("alice", ScramMechanism::Sha256, 4096));
    assert_eq!(
        creds
            .scram("alice", ScramMechanism::Sha256)
            .map(|c| c.iterations),
        Some(4096)
    );
    apply_record(&creds, &set("alice", ScramMechanism::Sha256, 8192));
    assert_eq!(
        creds
            .scram("alice", ScramMechanism::Sha256)
            .map(|c| c.iterations),
        Some(8192)
    );
    // Removing another mechanism leaves this one alone.
    apply_record(&creds, &remove("alice", ScramMechanism::Sha512));
    assert!(creds.scram("alice", ScramMechanism::Sha256).is_some());
    apply_record(&creds, &remove("alice", ScramMechanism::Sha256));
    assert_eq!(creds.scram("alice", ScramMechanism::Sha256), None);
}

#[test]
fn listeners_see_each_durable_record_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    let creds = Arc::new(InMemoryCredentials::new());
    let view = Arc::clone(&creds);
    store.add_listener(Box::new(move |record| apply_record(&view, record)));
    store
        .append(&[
            set("alice", ScramMechanism::Sha256, 4096),
            set("alice", ScramMechanism::Sha256, 6000),
        ])
        .unwrap();
    assert_eq!(
        creds
            .scram("alice", ScramMechanism::Sha256)
            .map(|c| c.iterations),
        Some(6000)
    );
    store
        .append(&[remove("alice", ScramMechanism::Sha256)])
        .unwrap();
    assert_eq!(creds.scram("alice", ScramMechanism::Sha256), None);
}
