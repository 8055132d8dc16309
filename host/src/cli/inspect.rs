//! `check-config` and `plugins`: what a configuration assembles to, without a store.

use std::io::{self, Write};
use std::path::Path;

use crate::config::Config;
use crate::node::{self, Assembly};
use crate::plugin_config::PluginTables;
use crate::services::HostContext;

use super::load::{load_config, warn_refused};

/// `check-config`: everything `serve` checks before it opens the store and the listeners.
pub(super) fn check_config(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(path)?;
    let assembly = node::assemble(&config, &HostContext::offline())?;
    warn_refused(&assembly.plugins);
    if let Some(section) = &config.oauthbearer {
        for warning in crate::oauth::warnings(section) {
            eprintln!("warning: {warning}");
        }
    }
    writeln!(out, "configuration OK: {}", path.display())?;
    write_summary(&config, &assembly, out)?;
    Ok(())
}

fn write_summary(config: &Config, assembly: &Assembly, out: &mut dyn Write) -> io::Result<()> {
    let listener = &config.listener;
    let upstream = &config.upstream;
    writeln!(
        out,
        "  node:        id {}, data_dir {}",
        config.node.id,
        config.node.data_dir.display()
    )?;
    writeln!(
        out,
        "  listener:    {} on {} ({}), advertised as {}, broker N at port {} + N",
        listener.name,
        listener.address,
        if listener.tls.is_some() {
            "SASL_SSL"
        } else {
            "SASL_PLAINTEXT"
        },
        listener.advertised_host,
        listener.broker_port_base
    )?;
    let mechanisms: Vec<&str> = assembly.mechanisms.iter().map(|m| m.name()).collect();
    writeln!(out, "  mechanisms:  {}", mechanisms.join(", "))?;
    if let Some(section) = &config.oauthbearer {
        writeln!(out, "  oauthbearer: {}", crate::oauth::summary(section))?;
    }
    let protocol = upstream.security_protocol.name();
    let login = match &assembly.upstream_login {
        Some(login) if upstream.security_protocol.uses_sasl() => format!(
            "{protocol}, {} as {} (login module {})",
            login.mechanism(),
            login.credential().principal_name,
            upstream
                .login
                .as_ref()
                .map_or(portcullis_plugin_login::PASSWORD_LOGIN, |l| l
                    .plugin
                    .as_str())
        ),
        _ => protocol.to_owned(),
    };
    writeln!(
        out,
        "  upstream:    {} ({login})",
        upstream.bootstrap_servers.join(", ")
    )?;
    let denied = if config.forwarding.deny_api_keys.is_empty() {
        "none".to_owned()
    } else {
        let keys: Vec<String> = config
            .forwarding
            .deny_api_keys
            .iter()
            .map(i16::to_string)
            .collect();
        keys.join(", ")
    };
    writeln!(
        out,
        "  forwarding:  {} (denied API keys: {denied})",
        assembly.policy.name()
    )?;
    let tokens = &config.delegation_tokens;
    if tokens.enabled() {
        writeln!(
            out,
            "  tokens:      enabled (max lifetime {} ms, expiry {} ms, sweep every {} ms{})",
            tokens.max_lifetime_ms,
            tokens.expiry_time_ms,
            tokens.expiry_check_interval_ms,
            if tokens.accept_token_without_extension {
                ", accepted without the tokenauth extension"
            } else {
                ""
            }
        )?;
    } else {
        writeln!(
            out,
            "  tokens:      disabled (no [delegation_tokens] secret; the token APIs answer DELEGATION_TOKEN_AUTH_DISABLED)"
        )?;
    }
    writeln!(
        out,
        "  principal:   {} (principal builder)",
        config.principal.plugin
    )?;
    if let Some(authorizer) = &config.authorizer {
        writeln!(out, "  authorizer:  {}", authorizer.plugin)?;
    }
    for subscriber in &config.events.subscribers {
        writeln!(
            out,
            "  events:      {} (queue of {})",
            subscriber.plugin, subscriber.queue_capacity
        )?;
    }
    match &config.plugins.dir {
        None => writeln!(out, "  plugins:     no plugin directory")?,
        Some(dir) => writeln!(
            out,
            "  plugins:     {}: {} loaded, {} refused",
            dir.display(),
            assembly.plugins.loaded.len(),
            assembly.plugins.refused.len()
        )?,
    }
    Ok(())
}

/// `plugins`: every built-in plugin, and with a configuration, every plugin of its plugin
/// directory: name, kind, version, file, and whether its configuration validated.
pub(super) fn plugins(path: Option<&Path>, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = path.map(load_config).transpose()?;
    let tables = match &config {
        Some(config) => PluginTables::new(&config.plugins)?,
        None => PluginTables::default(),
    };
    writeln!(
        out,
        "built-in plugins (portcullis {}):",
        portcullis::FRAMEWORK_VERSION
    )?;
    for (kind, name, check) in node::builtins() {
        let status = if !tables.has(name) {
            "config: none".to_owned()
        } else {
            match check(tables.text(name)) {
                Ok(()) => "config: valid".to_owned(),
                Err(e) => format!(
                    "config: INVALID: {}",
                    tables.locate(name, &portcullis::PluginError::Config(e))
                ),
            }
        };
        writeln!(out, "  {name:<24} {:<18} built in  {status}", kind.label())?;
    }
    let Some(config) = config else { return Ok(()) };
    let Some(dir) = &config.plugins.dir else {
        writeln!(out, "plugin directory: not configured")?;
        return Ok(());
    };
    let report = crate::wasm_plugins::load_plugin_dir(dir, &tables, &HostContext::offline());
    writeln!(out, "plugin directory {}:", dir.display())?;
    if report.loaded.is_empty() {
        writeln!(out, "  no plugins loaded")?;
    }
    for plugin in &report.loaded {
        let status = match &plugin.instance {
            Ok(instance) => {
                let detail = match instance {
                    portcullis::registry::PluginInstance::SaslMechanism(m) => {
                        format!(", mechanism {}", m.name())
                    }
                    portcullis::registry::PluginInstance::ForwardingPolicy(p) => {
                        format!(", policy {}", p.name())
                    }
                    _ => String::new(),
                };
                let table = if tables.has(&plugin.name) {
                    "valid"
                } else {
                    "valid (no table)"
                };
                format!("config: {table}{detail}")
            }
            Err(error) => format!("config: INVALID: {error}"),
        };
        writeln!(
            out,
            "  {:<24} {:<18} plugin API {}  {}  {status}",
            plugin.name,
            plugin.kind.label(),
            plugin.api_version,
            plugin.path.display()
        )?;
        for warning in &plugin.warnings {
            writeln!(out, "    warning: {warning}")?;
        }
    }
    if !report.refused.is_empty() {
        writeln!(out, "refused plugin files:")?;
        for refused in &report.refused {
            writeln!(out, "  {}: {}", refused.path.display(), refused.reason)?;
        }
    }
    Ok(())
}
