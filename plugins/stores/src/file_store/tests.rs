//! Unit tests of the file store: group commit and refusing writes after a failure.

use super::*;
use portcullis::credentials::ScramMechanism;

fn removal(user: &str) -> MetadataRecord {
    MetadataRecord::RemoveScramCredential {
        user: user.to_owned(),
        mechanism: ScramMechanism::Sha512,
    }
}

#[test]
fn a_group_is_one_log_sync_and_one_commit_sync() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    let before = store.stats();
    let batches: Vec<AppendBatch> = (0..10)
        .map(|i| AppendBatch::new(vec![removal(&format!("u{i}"))]))
        .collect();
    let results = store.append_group(&batches);
    assert_eq!(
        results.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    let after = store.stats();
    assert_eq!(after.log_syncs - before.log_syncs, 1);
    assert_eq!(after.commit_syncs - before.commit_syncs, 1);
    assert_eq!(after.batches, 10);
    // Nothing to write, nothing to sync.
    assert_eq!(store.append(&[]).unwrap(), 10);
    assert_eq!(store.stats().log_syncs, after.log_syncs);
}

#[test]
fn a_failed_store_refuses_appends() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMetadataStore::open(dir.path()).unwrap();
    FileMetadataStore::fail(&mut store.lock(), "fsync failed (test)".to_owned());
    let err = store.append(&[removal("a")]).unwrap_err();
    assert!(err.to_string().contains("restart"), "{err}");
    assert!(store.snapshot().unwrap().is_empty());
}
