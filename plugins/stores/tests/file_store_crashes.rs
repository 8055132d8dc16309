//! The file store killed mid-write: a child process of this binary writes and aborts at a chosen
//! step (of compaction; between the log's fsync and the commit record), and the parent checks
//! that everything acknowledged is there, and nothing else.
//!
//! Apart from `file_store.rs`, and one crash test at a time, because the store's lock is a
//! `flock` on an open file: a child forked while another thread of the same process holds a
//! store open shares that lock until the child's exec closes its copy of the descriptor. A test
//! that drops a store and reopens it in that moment finds its own directory locked (seen on a
//! loaded machine: `Locked` at a reopen right after a drop). Here only the crash tests fork, and
//! they take turns ([`ONE_AT_A_TIME`]); a test process of its own keeps the other store tests
//! out of their children.
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
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use portcullis::credentials::{CredentialView, InMemoryCredentials, ScramMechanism};
use portcullis::store::MetadataStore;
use portcullis_plugin_stores::{
    credentials_from, load_credentials, FileMetadataStore, COMMIT_FILE_NAME, COMPACTING_FILE_NAME,
};

mod support;

use support::{dropped_files, remove, set};

/// Held by each crash test for its whole run: one test's fork never copies another's open store.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    // A failed crash test poisons the lock; the next one may still run.
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---- Crashes --------------------------------------------------------------------------------------

/// Runs `test` of this binary in a child process with `env` set, and returns whether it aborted.
fn run_child(test: &str, env: &[(&str, String)]) -> std::process::Output {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

const CRASH_DIR: &str = "PORTCULLIS_TEST_CRASH_DIR";
const CRASH_STEP: &str = "PORTCULLIS_TEST_CRASH_STEP";

/// The child half of `a_crash_at_every_compaction_step_loses_nothing_acknowledged`: writes a
/// workload, acknowledging each record by writing its name to `acked` after `append` returned,
/// then compacts and aborts the process at the chosen step.
#[test]
fn crash_child_compaction() {
    let (Ok(dir), Ok(step)) = (std::env::var(CRASH_DIR), std::env::var(CRASH_STEP)) else {
        return; // only does something when run by the parent test
    };
    let dir = PathBuf::from(dir);
    let acked = dir.join("acked");
    let store = Arc::new(FileMetadataStore::open(dir.join("data")).unwrap());
    let note = |line: String| {
        use std::io::Write;
        let mut f = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&acked)
            .unwrap();
        writeln!(f, "{line}").unwrap();
        f.sync_all().unwrap();
    };
    for i in 0..30 {
        let user = format!("u{i}");
        store
            .append(&[set(&user, ScramMechanism::Sha256, 4096)])
            .unwrap();
        note(format!("+{user}"));
        if i % 3 != 0 {
            store
                .append(&[remove(&user, ScramMechanism::Sha256)])
                .unwrap();
            note(format!("-{user}"));
        }
    }
    let writer = Arc::clone(&store);
    let _ = store.compact_observed(&mut |at| {
        if at == portcullis_plugin_stores::CompactionStep::SnapshotWritten {
            // Acknowledged while the compaction runs: lands in the tail it copies.
            writer
                .append(&[set("late", ScramMechanism::Sha512, 4096)])
                .unwrap();
            note("+late".to_owned());
        }
        if format!("{at:?}") == step {
            std::process::abort();
        }
    });
    // The step was never reached: tell the parent.
    note("finished".to_owned());
}

#[test]
fn a_crash_at_every_compaction_step_loses_nothing_acknowledged() {
    let _turn = one_at_a_time();
    for step in [
        "SnapshotWritten",
        "TailCopied",
        "Renamed",
        "DirSynced",
        "Committed",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = run_child(
            "crash_child_compaction",
            &[
                (CRASH_DIR, dir.path().display().to_string()),
                (CRASH_STEP, step.to_owned()),
            ],
        );
        assert!(!out.status.success(), "the child did not crash at {step}");
        let acked = fs::read_to_string(dir.path().join("acked")).unwrap();
        assert!(!acked.contains("finished"), "{step} was never reached");
        // What the acknowledgements say must be live, exactly.
        let mut expected = std::collections::BTreeSet::new();
        for line in acked.lines() {
            let (op, user) = line.split_at(1);
            if op == "+" {
                expected.insert(user.to_owned());
            } else {
                expected.remove(user);
            }
        }
        let data = dir.path().join("data");
        // A reader first (it must not repair anything), then a writer.
        let read = FileMetadataStore::read_only(&data)
            .unwrap_or_else(|e| panic!("after a crash at {step}: {e}"));
        let live: std::collections::BTreeSet<String> =
            credentials_from(read.records.iter().map(|r| &r.record))
                .into_keys()
                .map(|(u, _)| u)
                .collect();
        assert_eq!(live, expected, "reader after a crash at {step}");
        let store = FileMetadataStore::open(&data)
            .unwrap_or_else(|e| panic!("after a crash at {step}: {e}"));
        let creds = InMemoryCredentials::new();
        load_credentials(&store, &creds).unwrap();
        let live: std::collections::BTreeSet<String> =
            creds.users().into_iter().map(|(u, _, _)| u).collect();
        assert_eq!(live, expected, "after a crash at {step}");
        assert!(!data.join(COMPACTING_FILE_NAME).exists());
        // And it works on: append, compact, reopen.
        store
            .append(&[remove("late", ScramMechanism::Sha512)])
            .unwrap();
        store.compact().unwrap();
        drop(store);
        FileMetadataStore::open(&data).unwrap();
    }
}

/// The child half of `a_crash_between_log_sync_and_commit_is_an_unacknowledged_tail`.
#[test]
fn crash_child_after_log_sync() {
    let Ok(dir) = std::env::var(CRASH_DIR) else {
        return;
    };
    let store = FileMetadataStore::open(PathBuf::from(&dir).join("data")).unwrap();
    store
        .append(&[set("acked", ScramMechanism::Sha256, 4096)])
        .unwrap();
    // What a crash between the log's fsync and the commit record's write leaves: a complete
    // frame beyond the commit, written here with the store's own encoding by appending it and
    // then rolling the commit record back to the previous state.
    let commit = fs::read(PathBuf::from(&dir).join("data").join(COMMIT_FILE_NAME)).unwrap();
    store
        .append(&[set("never-acked", ScramMechanism::Sha256, 4096)])
        .unwrap();
    fs::write(
        PathBuf::from(&dir).join("data").join(COMMIT_FILE_NAME),
        commit,
    )
    .unwrap();
    std::process::abort();
}

#[test]
fn a_crash_between_log_sync_and_commit_is_an_unacknowledged_tail() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = run_child(
        "crash_child_after_log_sync",
        &[(CRASH_DIR, dir.path().display().to_string())],
    );
    assert!(!out.status.success());
    let data = dir.path().join("data");
    let store = FileMetadataStore::open(&data).unwrap();
    let creds = InMemoryCredentials::new();
    load_credentials(&store, &creds).unwrap();
    assert_eq!(creds.users().len(), 1);
    assert!(creds.scram("acked", ScramMechanism::Sha256).is_some());
    assert_eq!(dropped_files(&data).len(), 1);
}
