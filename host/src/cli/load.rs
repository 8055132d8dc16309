//! What the commands share: loading the configuration a command names, and refusing a file-store
//! command on a node whose store is elsewhere, and warning of refused plugin files.

use std::path::Path;

use anyhow::bail;

use crate::config::{self, Config};
use crate::plugin_loader::PluginLoadReport;

pub(super) fn load_config(path: &Path) -> anyhow::Result<Config> {
    Ok(config::load(path)?)
}

/// The offline tools that read or change the node's own file log; with a shared store they would
/// act on a directory the node does not use.
pub(super) fn file_store_only(config: &Config, command: &str) -> anyhow::Result<()> {
    if config.store.kind == config::StoreKind::Kafka {
        bail!(
            "`portcullis {command}` works on the file store; this node's store is the cluster's \
             topic (use kafka-configs / kafka-acls against any node, or `portcullis cluster status`)"
        );
    }
    Ok(())
}

pub(super) fn warn_refused(report: &PluginLoadReport) {
    for refused in &report.refused {
        eprintln!("warning: {refused}");
    }
    for plugin in &report.loaded {
        if let Err(error) = &plugin.instance {
            eprintln!(
                "warning: plugin {} ({}) from {} is not usable: {error}",
                plugin.name,
                plugin.kind,
                plugin.path.display()
            );
        }
    }
}
