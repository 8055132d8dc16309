//! The triggers of a reload besides the admin endpoint: SIGHUP, and a poll of the listener's TLS
//! files.

use std::sync::{Arc, Weak};

use super::files::{stamps, Stamp, POLL_INTERVAL};
use super::{Reloader, Trigger};

/// Reloads on every SIGHUP, until the runtime stops. Installing the handler also replaces
/// SIGHUP's default action (ending the process): call it before the node serves.
pub fn spawn_sighup(reloader: Arc<Reloader>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(hangup) => hangup,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGHUP; reload with `portcullis reload` instead");
                return;
            }
        };
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                let reloader = Arc::clone(&reloader);
                // A reload reads files: off the async workers.
                let _ = tokio::task::spawn_blocking(move || reloader.run(Trigger::Signal)).await;
            }
        });
    }
    #[cfg(not(unix))]
    drop(reloader);
}

/// Polls the running configuration's TLS files every [`POLL_INTERVAL`] on a thread of its own
/// and reloads when one of them changed. A change that was refused (a certificate written before
/// its key) is not tried again until the files change again; the thread ends with the reloader.
///
/// # Errors
/// The thread cannot be started.
pub fn spawn_file_poll(reloader: &Arc<Reloader>) -> std::io::Result<()> {
    let reloader: Weak<Reloader> = Arc::downgrade(reloader);
    std::thread::Builder::new()
        .name("portcullis-tls-files".into())
        .spawn(move || {
            let mut last_tried: Option<Vec<Stamp>> = None;
            loop {
                std::thread::sleep(POLL_INTERVAL);
                let Some(reloader) = reloader.upgrade() else {
                    return;
                };
                let applied = reloader.watched();
                if applied.is_empty() {
                    continue;
                }
                let paths: Vec<_> = applied.iter().map(|(path, _)| path.clone()).collect();
                let now = stamps(&paths);
                if now != applied && last_tried.as_ref() != Some(&now) {
                    last_tried = Some(now);
                    reloader.run(Trigger::Files);
                }
            }
        })
        .map(drop)
}

/// `POST /reload` on the admin endpoint.
impl crate::telemetry::admin::ReloadHandler for Reloader {
    fn reload(&self, named_file: Option<&str>) -> crate::telemetry::admin::ReloadAnswer {
        use crate::telemetry::admin::{ReloadAnswer, ReloadStatus};
        if let Some(named) = named_file {
            let same = match (
                std::fs::canonicalize(named),
                std::fs::canonicalize(self.path()),
            ) {
                (Ok(a), Ok(b)) => a == b,
                _ => std::path::Path::new(named) == self.path(),
            };
            if !same {
                return ReloadAnswer {
                    status: ReloadStatus::WrongFile,
                    text: format!(
                        "reload not tried: this node runs on {}, not {named}; a node reloads the file it was started with",
                        self.path().display()
                    ),
                };
            }
        }
        let outcome = self.run(Trigger::Admin);
        ReloadAnswer {
            status: if outcome.result.is_ok() {
                ReloadStatus::Applied
            } else {
                ReloadStatus::Refused
            },
            text: outcome.to_string(),
        }
    }
}
