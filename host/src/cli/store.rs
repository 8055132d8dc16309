//! `store check|recover` and `cluster status`: what the metadata store holds, and its repair.

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;
use portcullis::store::{MetadataRecord, StoreError};
use portcullis_plugin_stores::FileMetadataStore;

use crate::node::{self};

use super::load::{file_store_only, load_config};

/// `store check`: what the store holds, read-only.
pub(super) fn store_check(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(path)?;
    file_store_only(&config, "store check")?;
    let dir = &config.node.data_dir;
    let log = FileMetadataStore::read_only(dir).with_context(|| {
        format!(
            "a node would refuse to start on {}; see docs/configuration.md, \"Recovering the metadata store\"",
            dir.display()
        )
    })?;
    let records: Vec<&MetadataRecord> = log.records.iter().map(|r| &r.record).collect();
    let mut live = std::collections::HashMap::new();
    for r in &records {
        if r.is_tombstone() {
            live.remove(&r.key());
        } else {
            live.insert(r.key(), *r);
        }
    }
    let (mut credentials, mut acls, mut tokens) = (0, 0, 0);
    for record in live.values() {
        match record {
            MetadataRecord::ScramCredential { .. } => credentials += 1,
            MetadataRecord::Acl { .. } => acls += 1,
            MetadataRecord::DelegationToken(_) => tokens += 1,
            _ => {}
        }
    }
    writeln!(out, "metadata store {}: OK", dir.display())?;
    writeln!(
        out,
        "  records:     {} ({} live: {credentials} SCRAM credentials, {acls} ACLs, {tokens} delegation tokens)",
        records.len(),
        live.len()
    )?;
    if log.ignored_bytes > 0 {
        writeln!(
            out,
            "  unacknowledged bytes at the end: {} (a write in progress, or one a crash interrupted; a node cuts them off)",
            log.ignored_bytes
        )?;
    }
    Ok(())
}

/// `store recover --accept-loss`.
pub(super) fn store_recover(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(path)?;
    file_store_only(&config, "store recover")?;
    let dir = &config.node.data_dir;
    let report = FileMetadataStore::recover_accepting_loss(dir).map_err(|e| match e {
        StoreError::Locked(_) => anyhow::Error::new(e).context("stop the node first"),
        other => anyhow::Error::new(other).context("cannot recover the metadata store"),
    })?;
    writeln!(
        out,
        "kept {} records ({} bytes); dropped {} bytes{}",
        report.records_kept,
        report.log_len,
        report.bytes_dropped,
        report
            .saved_to
            .as_ref()
            .map(|p| format!(", saved to {}", p.display()))
            .unwrap_or_default()
    )?;
    if let Some(committed) = report.committed_before {
        if committed > report.log_len {
            writeln!(
                out,
                "{} acknowledged bytes were lost: re-apply the SCRAM, ACL and token changes made after the damage",
                committed - report.log_len
            )?;
        }
    }
    Ok(())
}

/// `cluster status`: the nodes' latest reports (status topic) and the log's end offset.
pub(super) fn cluster_status(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(path)?;
    let settings = node::kafka_store_settings(&config, false)?;
    let topics = portcullis_plugin_kafka_store::Topics::for_log(&settings.topic);
    let status = portcullis_plugin_kafka_store::read_cluster_status(
        &settings.connection,
        &topics,
        std::time::Duration::from_secs(10),
    )
    .map_err(|e| anyhow::anyhow!(e))
    .context("cannot read the cluster's status")?;
    let now = crate::services::now_ms();
    // A node that has not reported for this long is shown as gone (it reports every second).
    const STALE_MS: i64 = 10_000;
    let writer = status
        .nodes
        .values()
        .filter(|n| n.role == "writer" && now - n.reported_at_ms <= STALE_MS)
        .max_by_key(|n| n.term);
    writeln!(
        out,
        "cluster {} (topic {}): log end offset {}, writer: {}",
        settings.cluster_id,
        topics.metadata,
        status.log_end,
        writer.map_or("none".to_owned(), |w| format!(
            "node {} at {} (term {})",
            w.node_id,
            w.address,
            w.term.unwrap_or_default()
        ))
    )?;
    writeln!(
        out,
        "{:<6}  {:<24}  {:<10}  {:>10}  {:>8}  {:<16}  LAST REPORT",
        "NODE", "ADDRESS", "ROLE", "APPLIED", "LAG", "CONFIG"
    )?;
    for node in status.nodes.values() {
        let age = now - node.reported_at_ms;
        let role = if age > STALE_MS {
            "gone"
        } else {
            node.role.as_str()
        };
        writeln!(
            out,
            "{:<6}  {:<24}  {:<10}  {:>10}  {:>8}  {:<16}  {:.1}s ago",
            node.node_id,
            node.address,
            role,
            node.applied,
            status.log_end.saturating_sub(node.applied),
            node.config_fingerprint.as_deref().unwrap_or("-"),
            age as f64 / 1000.0
        )?;
    }
    Ok(())
}
