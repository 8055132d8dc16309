//! The host's implementations of the framework's service traits: the SCRAM credential admin
//! over the metadata store, the audit log file, and the metrics snapshot.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use portcullis::audit::AuditSink;
use portcullis::credentials::ScramMechanism;
use portcullis::credentials::{CredentialView, InMemoryCredentials};
use portcullis::local::scram_credentials::{CredentialAdmin, CredentialChange};
use portcullis::metrics::SecurityMetrics;
use portcullis::store::MetadataRecord;
use portcullis_plugin_scram::credential_from_salted_password;

/// KIP-554 changes turned into metadata records. The handler persists them through the store
/// writer; the node's view of the log (see `node.rs`) updates the in-memory credentials and
/// publishes `CredentialChanged`, which revokes the sessions that used a changed credential.
pub struct StoreCredentialAdmin {
    credentials: Arc<InMemoryCredentials>,
}

impl StoreCredentialAdmin {
    /// Creates the admin service over the node's credential view.
    pub fn new(credentials: Arc<InMemoryCredentials>) -> Self {
        Self { credentials }
    }
}

impl CredentialAdmin for StoreCredentialAdmin {
    fn list(&self) -> Vec<(String, ScramMechanism, u32)> {
        let mut users = self.credentials.users();
        users.sort();
        users
    }

    fn records(&self, changes: &[CredentialChange]) -> Vec<MetadataRecord> {
        changes
            .iter()
            .filter_map(|change| match change {
                CredentialChange::Upsert {
                    user,
                    mechanism,
                    iterations,
                    salt,
                    salted_password,
                } => {
                    let credential = credential_from_salted_password(
                        *mechanism,
                        salted_password,
                        salt,
                        *iterations,
                    );
                    // The same credential again (a request retried after its first answer was
                    // lost, e.g. by a forwarding node whose writer died) changes nothing: no
                    // record, so that a mutation is never applied twice.
                    let unchanged = self
                        .credentials
                        .scram(user, *mechanism)
                        .is_some_and(|current| current == credential);
                    (!unchanged).then(|| MetadataRecord::ScramCredential {
                        user: user.clone(),
                        mechanism: *mechanism,
                        credential,
                    })
                }
                CredentialChange::Delete { user, mechanism } => {
                    Some(MetadataRecord::RemoveScramCredential {
                        user: user.clone(),
                        mechanism: *mechanism,
                    })
                }
                _ => None,
            })
            .collect()
    }
}

/// Appends audit lines to a file from a writer thread, so the request path never waits for the
/// disk. Lines that do not fit in the queue are counted and reported, never silently lost.
pub struct FileAuditSink {
    sender: SyncSender<String>,
    dropped: Arc<AtomicU64>,
}

impl FileAuditSink {
    /// Opens (appending) `path` and starts the writer thread.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let (sender, receiver) = sync_channel::<String>(65_536);
        let dropped = Arc::new(AtomicU64::new(0));
        let reported = Arc::clone(&dropped);
        std::thread::Builder::new()
            .name("portcullis-audit".into())
            .spawn(move || {
                let mut out = BufWriter::new(file);
                let mut last_reported = 0;
                while let Ok(line) = receiver.recv() {
                    let _ = writeln!(out, "{line}");
                    // Flush when the queue is drained, so the file is current without a write per line.
                    while let Ok(line) = receiver.try_recv() {
                        let _ = writeln!(out, "{line}");
                    }
                    let _ = out.flush();
                    let now = reported.load(Ordering::Relaxed);
                    if now != last_reported {
                        tracing::warn!(dropped = now, "audit queue overflowed; lines were dropped");
                        last_reported = now;
                    }
                }
            })?;
        Ok(Self { sender, dropped })
    }
}

impl AuditSink for FileAuditSink {
    fn write_line(&self, line: String) {
        if let Err(TrySendError::Full(_)) = self.sender.try_send(line) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Writes the counters as JSON to `path` (atomically, through a temporary file and a rename).
pub fn write_metrics_snapshot(
    metrics: &SecurityMetrics,
    sessions: usize,
    path: &Path,
) -> std::io::Result<()> {
    let s = metrics.snapshot();
    let json = serde_json::json!({
        "successful_authentication": s.successful_authentication,
        "failed_authentication": s.failed_authentication,
        "successful_reauthentication": s.successful_reauthentication,
        "failed_reauthentication": s.failed_reauthentication,
        "expired_connections_killed": s.expired_connections_killed,
        "revoked_connections_closed": s.revoked_connections_closed,
        "sessions": sessions,
    });
    let tmp: PathBuf = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(json.to_string().as_bytes())?;
    }
    fs::rename(&tmp, path)
}

/// Runs the metrics snapshot and log loops until the runtime stops.
pub fn spawn_metrics_reporting(
    metrics: Arc<SecurityMetrics>,
    sessions: portcullis::reauth::ReauthScheduler,
    config: &crate::config::MetricsConfig,
) {
    if let Some(path) = config.snapshot_file.clone() {
        let interval = Duration::from_millis(config.snapshot_interval_ms.max(1));
        let (metrics, sessions) = (Arc::clone(&metrics), sessions.clone());
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            loop {
                ticker.tick().await;
                if let Err(e) = write_metrics_snapshot(&metrics, sessions.len(), &path) {
                    tracing::warn!(error = %e, path = %path.display(), "cannot write the metrics snapshot");
                }
            }
        });
    }
    if config.log_interval_ms > 0 {
        let interval = Duration::from_millis(config.log_interval_ms);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                let s = metrics.snapshot();
                tracing::info!(
                    successful_authentication = s.successful_authentication,
                    failed_authentication = s.failed_authentication,
                    successful_reauthentication = s.successful_reauthentication,
                    failed_reauthentication = s.failed_reauthentication,
                    expired_connections_killed = s.expired_connections_killed,
                    revoked_connections_closed = s.revoked_connections_closed,
                    sessions = sessions.len(),
                    "security metrics"
                );
            }
        });
    }
}

/// Refreshes the upstream login module's credential on Kafka's schedule (KIP-368 client side).
/// Static credentials (PLAIN, SCRAM passwords) never expire, so nothing is scheduled for them.
pub fn spawn_credential_refresh(
    login: Arc<dyn portcullis::login::LoginModule>,
    events: portcullis::events::EventBus,
) {
    use portcullis::refresh::{RefreshConfig, RefreshScheduler};
    let mut scheduler = RefreshScheduler::new(RefreshConfig::default(), events);
    scheduler.add(login, now_ms(), rand::random());
    if scheduler.poll_timeout().is_none() {
        return;
    }
    tokio::spawn(async move {
        while let Some(due) = scheduler.poll_timeout() {
            let wait = u64::try_from(due.saturating_sub(now_ms())).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            scheduler.on_timeout(now_ms(), rand::random);
        }
    });
}

/// Milliseconds since the epoch: the time the host passes to the framework.
pub fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// Runs the delegation-token sweep: once at start (tokens that expired while the node was down
/// go at once), then whenever [`TokenManager::poll_timeout`](portcullis::tokens::TokenManager)
/// says. Removals go through the store writer; a removal that loses a race with a renewal is
/// dropped (the next sweep decides again).
pub fn spawn_token_sweep(
    manager: Arc<portcullis::tokens::TokenManager>,
    writer: crate::store_writer::StoreWriter,
) {
    tokio::spawn(async move {
        let mut batches = manager.expired(now_ms());
        loop {
            for batch in batches {
                match writer.persist(batch).await {
                    // NotLeader: in a cluster, the writer sweeps (every node sees the removal).
                    Ok(_)
                    | Err(portcullis::local::PersistError::Conflict)
                    | Err(portcullis::local::PersistError::NotLeader) => {}
                    Err(e) => {
                        tracing::warn!(error = ?e, "sweeping an expired delegation token failed")
                    }
                }
            }
            let due = manager.poll_timeout();
            let wait = u64::try_from(due.saturating_sub(now_ms())).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            batches = manager.on_timeout(now_ms());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upsert of the credential a user already has writes nothing: a request retried after
    /// its answer was lost (a forwarding node whose writer died) is not applied twice.
    #[test]
    fn an_unchanged_credential_needs_no_record() {
        let credentials = Arc::new(InMemoryCredentials::new());
        let admin = StoreCredentialAdmin::new(Arc::clone(&credentials));
        let upsert = |salt: &[u8]| CredentialChange::Upsert {
            user: "alice".into(),
            mechanism: ScramMechanism::Sha256,
            iterations: 4096,
            salt: salt.to_vec(),
            salted_password: vec![7; 32],
        };
        let records = admin.records(&[upsert(b"salt-1")]);
        assert_eq!(records.len(), 1);
        if let MetadataRecord::ScramCredential { credential, .. } = &records[0] {
            credentials.upsert("alice", ScramMechanism::Sha256, credential.clone());
        }
        assert!(admin.records(&[upsert(b"salt-1")]).is_empty());
        assert_eq!(admin.records(&[upsert(b"salt-2")]).len(), 1);
    }
}
