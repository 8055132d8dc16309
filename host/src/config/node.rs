//! `[node]` and `[plugins]`.

use super::*;

/// `[node]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The node id.
    pub id: i32,
    /// Where the metadata log lives (relative paths are relative to the working directory).
    pub data_dir: PathBuf,
}

/// `[plugins]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginsConfig {
    /// Every `*.so` here is loaded at start.
    pub dir: Option<PathBuf>,
    /// Per-plugin configuration tables, `[plugins.config.<PLUGIN-NAME>]`, handed to the plugin as TOML text.
    #[serde(default)]
    pub config: BTreeMap<String, toml::Table>,
    /// The sandbox limits of each WASM component, `[plugins.wasm.<PLUGIN-NAME>]` (fuel per call,
    /// memory cap); a component without a table gets the defaults.
    #[serde(default)]
    pub wasm: BTreeMap<String, portcullis_plugin_wasm::WasmLimits>,
    /// The file the configuration was loaded from, to point plugin errors at its lines.
    #[serde(skip)]
    pub source: Option<ConfigSource>,
}

impl NodeConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.id < 0 {
            return Err(invalid(
                "node.id",
                format!("must be 0 or more, got {}", self.id),
            ));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("node.data_dir", "must not be empty"));
        }
        if self.data_dir.exists() && !self.data_dir.is_dir() {
            return Err(invalid(
                "node.data_dir",
                format!("{} exists and is not a directory", self.data_dir.display()),
            ));
        }
        Ok(())
    }
}

impl PluginsConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        // A missing directory means no plugins (docs/plugins.md); a file in its place is a mistake.
        if let Some(dir) = &self.dir {
            if dir.exists() && !dir.is_dir() {
                return Err(invalid(
                    "plugins.dir",
                    format!("{} is not a directory", dir.display()),
                ));
            }
        }
        for (name, limits) in &self.wasm {
            limits.validate().map_err(|(key, message)| {
                invalid(&format!("plugins.wasm.{name}.{key}"), message)
            })?;
        }
        Ok(())
    }
}
