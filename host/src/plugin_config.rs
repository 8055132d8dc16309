//! The configuration of plugins: the sections that choose a plugin per kind (`[principal]`,
//! `[upstream.login]`, `[[events.subscribers]]`; `[authorizer] plugin` and `[forwarding] policy`
//! are in their own sections), each plugin's `[plugins.config.NAME]` table as the TOML text handed
//! to it, and errors that name the plugin, the key and the line of the configuration file.
//!
//! A plugin deserializes its table itself (a dynamic plugin on its own side of the ABI), so what
//! it reports is a position in the text the host gave it. That text is the table re-serialized,
//! not the file: the host finds the key at that position, then the same key in the file, and
//! reports the file's line — like the host's own configuration errors.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use portcullis::plugin::PluginError;
use serde::Deserialize;
use toml_edit::{ImDocument, Item, Table, Value};

/// `[principal]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalConfig {
    /// The principal builder (built in: `default`, Kafka's `User:<authorization id>`).
    #[serde(default = "default_principal_builder")]
    pub plugin: String,
}

impl Default for PrincipalConfig {
    fn default() -> Self {
        Self {
            plugin: default_principal_builder(),
        }
    }
}

fn default_principal_builder() -> String {
    portcullis::registry::DEFAULT_PRINCIPAL_BUILDER.to_owned()
}

/// `[upstream.login]`: the login module that authenticates Portcullis to a SASL upstream.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamLoginConfig {
    /// The login module (built in: `password`, which uses `upstream.sasl_mechanism`, `username`
    /// and `password`).
    pub plugin: String,
}

impl UpstreamLoginConfig {
    /// Whether the module is the built-in one that reads `[upstream]`'s user and password.
    pub fn is_password_login(&self) -> bool {
        self.plugin == portcullis_plugin_login::PASSWORD_LOGIN
    }
}

/// `[events]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsConfig {
    /// `[[events.subscribers]]`: the event subscribers, each on a thread of its own.
    #[serde(default)]
    pub subscribers: Vec<SubscriberConfig>,
}

/// One `[[events.subscribers]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriberConfig {
    /// The subscriber plugin.
    pub plugin: String,
    /// How many events may wait for it; beyond that, events are dropped for it (and counted).
    #[serde(default = "default_queue_capacity")]
    pub queue_capacity: usize,
}

fn default_queue_capacity() -> usize {
    4_096
}

/// The largest `queue_capacity`: the queue is allocated up front, and a subscriber that needs
/// more than a million events of slack is better served by a faster `on_event`.
pub const MAX_QUEUE_CAPACITY: usize = 1 << 20;

impl EventsConfig {
    pub(crate) fn validate(&self) -> Result<(), crate::config::ConfigError> {
        for (i, subscriber) in self.subscribers.iter().enumerate() {
            if subscriber.plugin.trim().is_empty() {
                return Err(crate::config::ConfigError::Invalid {
                    key: format!("events.subscribers[{i}].plugin"),
                    message: "must not be empty".to_owned(),
                });
            }
            if !(1..=MAX_QUEUE_CAPACITY).contains(&subscriber.queue_capacity) {
                return Err(crate::config::ConfigError::Invalid {
                    key: format!("events.subscribers[{i}].queue_capacity"),
                    message: format!("must be from 1 to {MAX_QUEUE_CAPACITY}"),
                });
            }
        }
        Ok(())
    }
}

/// The configuration file a node was loaded from, kept to point plugin errors at its lines.
/// Its text holds secrets (the upstream password, the token secret): it is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigSource {
    /// The file.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

impl fmt::Debug for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigSource")
            .field("path", &self.path)
            .field("bytes", &self.text.len())
            .finish()
    }
}

/// Every `[plugins.config.NAME]` table as the text handed to plugin NAME, and the file it came
/// from, to locate a plugin's configuration errors.
#[derive(Debug, Clone, Default)]
pub struct PluginTables {
    texts: std::collections::BTreeMap<String, String>,
    source: Option<ConfigSource>,
    /// `[plugins.wasm.NAME]`: the sandbox limits of WASM components.
    wasm_limits: std::collections::BTreeMap<String, portcullis_plugin_wasm::WasmLimits>,
}

impl PluginTables {
    /// The tables of `[plugins]`.
    ///
    /// # Errors
    /// A table that cannot be written back as TOML, with its plugin's name.
    pub fn new(config: &crate::config::PluginsConfig) -> Result<Self, PluginConfigError> {
        let texts = config
            .config
            .iter()
            .map(|(name, table)| {
                text_of(table)
                    .map(|text| (name.clone(), text))
                    .map_err(|e| PluginConfigError::other(name, e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            texts,
            source: config.source.clone(),
            wasm_limits: config.wasm.clone(),
        })
    }

    /// Tables given directly (tests and tools), with no file behind them.
    pub fn from_texts(texts: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            texts: texts.into_iter().collect(),
            source: None,
            wasm_limits: Default::default(),
        }
    }

    /// The same tables with these WASM limits (tests and tools).
    pub fn with_wasm_limits(
        mut self,
        limits: impl IntoIterator<Item = (String, portcullis_plugin_wasm::WasmLimits)>,
    ) -> Self {
        self.wasm_limits = limits.into_iter().collect();
        self
    }

    /// The sandbox limits of WASM component `name` (the defaults without a table).
    pub fn wasm_limits(&self, name: &str) -> portcullis_plugin_wasm::WasmLimits {
        self.wasm_limits.get(name).cloned().unwrap_or_default()
    }

    /// The names of every `[plugins.wasm.NAME]` table.
    pub fn wasm_names(&self) -> impl Iterator<Item = &str> {
        self.wasm_limits.keys().map(String::as_str)
    }

    /// Plugin `name`'s text (empty without a table).
    pub fn text(&self, name: &str) -> &str {
        self.texts.get(name).map_or("", String::as_str)
    }

    /// Whether the operator wrote a table for `name`.
    pub fn has(&self, name: &str) -> bool {
        self.texts.contains_key(name)
    }

    /// The names of every table.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.texts.keys().map(String::as_str)
    }

    /// Plugin `name`'s refusal, located in the configuration file.
    pub fn locate(&self, name: &str, error: &PluginError) -> PluginConfigError {
        PluginConfigError::locate(name, error, self.text(name), self.source.as_ref())
    }
}

/// The TOML text handed to a plugin for its `[plugins.config.NAME]` table.
///
/// # Errors
/// A table that cannot be written back as TOML (it came from TOML, so this is not expected).
pub fn text_of(table: &toml::Table) -> Result<String, toml::ser::Error> {
    toml::to_string(table)
}

/// A plugin refused to start; names the plugin and, for a configuration error, the key and the
/// line of the configuration file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct PluginConfigError {
    /// The plugin.
    pub plugin: String,
    /// The configuration file, when the table came from one.
    pub path: Option<PathBuf>,
    /// 1-based line and column of the key in the file, when found there.
    pub position: Option<(usize, usize)>,
    /// The dotted key (`plugins.config.NAME.key`), when known.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PluginConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(path), Some((line, column))) = (&self.path, self.position) {
            write!(f, "{}, line {line}, column {column}", path.display())?;
            if let Some(key) = &self.key {
                write!(f, " (`{key}`)")?;
            }
            return write!(f, ": plugin {}: {}", self.plugin, self.message);
        }
        write!(f, "plugin {}", self.plugin)?;
        if let Some(key) = &self.key {
            write!(f, ", key `{key}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl PluginConfigError {
    /// The error for `plugin`'s refusal, located in `source` (the file) through `sent` (the text
    /// the plugin was given).
    pub fn locate(
        plugin: &str,
        error: &PluginError,
        sent: &str,
        source: Option<&ConfigSource>,
    ) -> Self {
        let prefix = vec!["plugins".to_owned(), "config".to_owned(), plugin.to_owned()];
        let (relative, message) = match error {
            PluginError::Config(config) => {
                let path = config
                    .span
                    .as_ref()
                    .and_then(|span| path_at(sent, span.start))
                    .unwrap_or_default();
                (Some(path), config.message.clone())
            }
            PluginError::InvalidValue { key, message } => (
                Some(key.split('.').map(str::to_owned).collect()),
                message.clone(),
            ),
            other => (None, other.to_string()),
        };
        let Some(relative) = relative else {
            return Self {
                plugin: plugin.to_owned(),
                path: source.map(|s| s.path.clone()),
                position: None,
                key: None,
                message,
            };
        };
        let mut full = prefix;
        full.extend(relative);
        let position = source.and_then(|source| {
            let span = span_in(&source.text, &full)?;
            Some(line_and_column(&source.text, span.start))
        });
        Self {
            plugin: plugin.to_owned(),
            path: source.map(|s| s.path.clone()),
            position,
            key: Some(full.join(".")),
            message,
        }
    }

    /// A refusal that is not about a key (a panic, a broken plugin).
    pub fn other(plugin: &str, message: impl Into<String>) -> Self {
        Self {
            plugin: plugin.to_owned(),
            path: None,
            position: None,
            key: None,
            message: message.into(),
        }
    }
}

/// The dotted path (as segments) of the deepest key whose name or value covers `offset` in a
/// TOML document.
fn path_at(text: &str, offset: usize) -> Option<Vec<String>> {
    let document = ImDocument::parse(text).ok()?;
    let mut path = Vec::new();
    descend_table(document.as_table(), offset, &mut path);
    Some(path)
}

fn covers(span: Option<Range<usize>>, offset: usize) -> bool {
    span.is_some_and(|span| span.contains(&offset) || span.start == offset)
}

fn descend_table(table: &Table, offset: usize, path: &mut Vec<String>) {
    for (name, _) in table.iter() {
        let Some((key, item)) = table.get_key_value(name) else {
            continue;
        };
        if covers(key.span(), offset) {
            path.push(name.to_owned());
            return;
        }
        let inside = match item {
            Item::Table(sub) => {
                let before = path.len();
                path.push(name.to_owned());
                descend_table(sub, offset, path);
                if path.len() > before + 1 || covers(sub.span(), offset) {
                    return;
                }
                path.truncate(before);
                false
            }
            Item::Value(value) => covers(value.span(), offset),
            other => covers(other.span(), offset),
        };
        if inside {
            path.push(name.to_owned());
            if let Item::Value(Value::InlineTable(inline)) = item {
                descend_inline(inline, offset, path);
            }
            return;
        }
    }
}

fn descend_inline(table: &toml_edit::InlineTable, offset: usize, path: &mut Vec<String>) {
    for (name, _) in table.iter() {
        let Some((key, item)) = table.get_key_value(name) else {
            continue;
        };
        if covers(key.span(), offset) || covers(item.span(), offset) {
            path.push(name.to_owned());
            if let Item::Value(Value::InlineTable(inner)) = item {
                descend_inline(inner, offset, path);
            }
            return;
        }
    }
}

/// Where `path` is written in a TOML document: the span of its deepest key found.
fn span_in(text: &str, path: &[String]) -> Option<Range<usize>> {
    let document = ImDocument::parse(text).ok()?;
    let mut best: Option<Range<usize>> = None;
    let mut table: Option<&Table> = Some(document.as_table());
    let mut inline: Option<&toml_edit::InlineTable> = None;
    for segment in path {
        let found = match (table, inline) {
            (Some(t), _) => t.get_key_value(segment),
            (None, Some(i)) => i.get_key_value(segment),
            (None, None) => None,
        };
        let Some((key, item)) = found else { break };
        if let Some(span) = key.span().or_else(|| item.span()) {
            best = Some(span);
        }
        (table, inline) = match item {
            Item::Table(t) => (Some(t), None),
            Item::Value(Value::InlineTable(i)) => (None, Some(i)),
            _ => (None, None),
        };
    }
    best
}

/// 1-based line and column (in characters) of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis::plugin::ConfigError;

    const FILE: &str = "[node]\nid = 1\n\n[plugins.config.demo]\nprefix = \"x\"\nlimits = { max = 3, burst = 4 }\n\n[plugins.config.demo.users]\nalice = 1\n";

    fn located(error: PluginError) -> PluginConfigError {
        let table: toml::Table = toml::from_str::<toml::Table>(FILE).unwrap()["plugins"]["config"]
            ["demo"]
            .as_table()
            .unwrap()
            .clone();
        let sent = text_of(&table).unwrap();
        // What the plugin would report: a span in `sent`.
        let error = match error {
            PluginError::Config(config) => {
                let needle = config.message.clone();
                let start = sent.find(&needle).unwrap();
                PluginError::Config(ConfigError::new(
                    format!("problem at {needle}"),
                    Some(start..start + needle.len()),
                ))
            }
            other => other,
        };
        let source = ConfigSource {
            path: "portcullis.toml".into(),
            text: FILE.to_owned(),
        };
        PluginConfigError::locate("demo", &error, &sent, Some(&source))
    }

    #[test]
    fn a_key_is_found_in_the_file_through_the_text_the_plugin_got() {
        let error = located(PluginError::Config(ConfigError::new("prefix", None)));
        assert_eq!(error.key.as_deref(), Some("plugins.config.demo.prefix"));
        assert_eq!(error.position, Some((5, 1)));
        let error = located(PluginError::Config(ConfigError::new("burst", None)));
        assert_eq!(
            error.key.as_deref(),
            Some("plugins.config.demo.limits.burst")
        );
        assert_eq!(error.position.map(|p| p.0), Some(6));
        let error = located(PluginError::Config(ConfigError::new("alice", None)));
        assert_eq!(
            error.key.as_deref(),
            Some("plugins.config.demo.users.alice")
        );
        assert_eq!(error.position, Some((9, 1)));
        assert_eq!(
            error.to_string(),
            "portcullis.toml, line 9, column 1 (`plugins.config.demo.users.alice`): plugin demo: problem at alice"
        );
    }

    #[test]
    fn an_invalid_value_names_its_key() {
        let error = located(PluginError::invalid_value("prefix", "must not be x"));
        assert_eq!(error.position, Some((5, 1)));
        assert!(error.to_string().ends_with("plugin demo: must not be x"));
        let error = located(PluginError::startup("no such file"));
        assert_eq!(error.key, None);
        assert_eq!(error.to_string(), "plugin demo: no such file");
    }

    #[test]
    fn a_subscriber_queue_is_bounded_both_ways() {
        let events = |capacity: usize| EventsConfig {
            subscribers: vec![SubscriberConfig {
                plugin: "audit".into(),
                queue_capacity: capacity,
            }],
        };
        for bad in [0, MAX_QUEUE_CAPACITY + 1] {
            let error = events(bad).validate().unwrap_err().to_string();
            assert!(
                error.contains("events.subscribers[0].queue_capacity"),
                "{error}"
            );
        }
        for good in [1, 4_096, MAX_QUEUE_CAPACITY] {
            events(good).validate().unwrap();
        }
    }

    #[test]
    fn the_source_text_is_never_printed() {
        let source = ConfigSource {
            path: "p.toml".into(),
            text: "password = \"hunter2\"".into(),
        };
        assert!(!format!("{source:?}").contains("hunter2"));
    }

    #[test]
    fn without_a_file_the_key_is_still_named() {
        let error = PluginConfigError::locate(
            "demo",
            &PluginError::Config(ConfigError::new("unknown field `x`", Some(0..1))),
            "x = 1\n",
            None,
        );
        assert_eq!(
            error.to_string(),
            "plugin demo, key `plugins.config.demo.x`: unknown field `x`"
        );
    }
}
