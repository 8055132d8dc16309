//! What every plugin is, whatever its kind: a name, a typed configuration, and a constructor.
//!
//! ```ignore
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct Config { prefix: String }
//!
//! impl Plugin for MyAuthorizer {
//!     const NAME: &'static str = "my-authorizer";
//!     type Config = Config;
//!     fn new(config: Config, host: &Host) -> Result<Self, PluginError> { ... }
//! }
//! ```
//!
//! The host hands a plugin its `[plugins.config.<NAME>]` table; [`Plugin::Config`] is that table
//! deserialized with serde (an empty table when the operator wrote none). Unknown keys (with
//! `#[serde(deny_unknown_fields)]`, which every plugin should use) and wrong types refuse the
//! plugin at start-up, and the host reports them with the plugin's name, the key and the line of
//! its configuration file.

use std::ops::Range;

use serde::de::DeserializeOwned;

use crate::host::Host;

/// A plugin of any kind. The kind traits ([`crate::sasl::SaslMechanism`],
/// [`crate::authorizer::Authorizer`], ...) say what it does; this says how it is made.
pub trait Plugin: Sized + Send + Sync + 'static {
    /// The plugin's name (1 to 63 bytes): the key of its configuration table,
    /// `[plugins.config.<NAME>]`, the name configuration selects it by (`[authorizer] plugin =
    /// "<NAME>"`, ...), and how the host reports it.
    const NAME: &'static str;

    /// The plugin's configuration. Use [`NoConfig`] when it has none.
    type Config: DeserializeOwned;

    /// Builds the plugin. Called once, at start-up; an error refuses the plugin and stops the
    /// host when the plugin is in use. Read files and check values here: the kind traits'
    /// methods run on the request path.
    fn new(config: Self::Config, host: &Host) -> Result<Self, PluginError>;
}

/// The configuration of a plugin that takes none: an empty table (any key is refused).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoConfig {}

/// Why a plugin could not be built. Messages are shown to operators: never put a secret in one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// The configuration table does not deserialize into [`Plugin::Config`]: an unknown key, a
    /// wrong type, a missing key.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A configuration value has the right type but cannot be used (a pattern that does not
    /// compile, an empty list, ...).
    #[error("`{key}`: {message}")]
    InvalidValue {
        /// The key, dotted from the plugin's table (`rules`, `tokens.alice`).
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// Something the plugin needs at start-up is not there (a file it reads, ...).
    #[error("{message}")]
    Startup {
        /// What failed.
        message: String,
    },
}

impl PluginError {
    /// A value that cannot be used.
    pub fn invalid_value(key: impl Into<String>, message: impl Into<String>) -> Self {
        PluginError::InvalidValue {
            key: key.into(),
            message: message.into(),
        }
    }
    /// A start-up failure; `error` is displayed (it must not contain a secret).
    pub fn startup(error: impl std::fmt::Display) -> Self {
        PluginError::Startup {
            message: error.to_string(),
        }
    }
}

/// A configuration table that does not fit a plugin's [`Plugin::Config`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct ConfigError {
    /// What is wrong (serde's message: "unknown field `x`, expected one of ...", "invalid type:
    /// string \"a\", expected u64", "missing field `x`").
    pub message: String,
    /// Where, as a byte range of the configuration text the plugin was given (the host turns it
    /// into a key and a line of its file).
    pub span: Option<Range<usize>>,
}

impl ConfigError {
    /// An error at `span` of the configuration text.
    pub fn new(message: impl Into<String>, span: Option<Range<usize>>) -> Self {
        Self {
            message: message.into(),
            span,
        }
    }
}

/// Deserializes a plugin's configuration from the TOML text of its table (empty text is an empty
/// table).
///
/// # Errors
/// [`ConfigError`] with serde's message and the position in `text`.
pub fn parse_config<C: DeserializeOwned>(text: &str) -> Result<C, ConfigError> {
    toml::from_str::<C>(text).map_err(|error| {
        let message = redact_strings(error.message().trim()).replace('\n', "; ");
        ConfigError::new(message, error.span())
    })
}

/// serde quotes the value it refused (`invalid type: string "…", expected a map`); a plugin's
/// table may hold secrets (tokens, passwords) and the host prints these messages, so quoted
/// strings are cut out. Field names (in backticks) and the expected type stay.
///
/// serde writes a string value in Rust's debug form, so a quote inside it comes escaped (`\"`):
/// splitting the message at every quote would show what follows an escaped one. And a field name
/// is shown as it is, quotes and all: a quote inside backticks opens no string. An unknown
/// variant is a value too, though serde puts it in backticks.
fn redact_strings(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        match c {
            // After "unknown variant", the backticks hold the value refused (an enum setting's
            // string), not a field name.
            '`' if out.ends_with("unknown variant ") => {
                out.push_str("(not shown)");
                chars.by_ref().take_while(|&c| c != '`').for_each(drop);
            }
            '`' => {
                out.push('`');
                for c in chars.by_ref() {
                    out.push(c);
                    if c == '`' {
                        break;
                    }
                }
            }
            '"' => {
                out.push_str("(not shown)");
                let mut escaped = false;
                for c in chars.by_ref() {
                    match (escaped, c) {
                        (true, _) => escaped = false,
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        (false, _) => {}
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Builds `T` from the TOML text of its table: [`parse_config`], then [`Plugin::new`].
///
/// # Errors
/// [`PluginError::Config`] for a table that does not deserialize, else what `new` returns.
pub fn build<T: Plugin>(text: &str, host: &Host) -> Result<T, PluginError> {
    let config = parse_config::<T::Config>(text)?;
    T::new(config, host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code, reason = "read only by the deserializer")]
    struct Sample {
        port: u16,
        #[serde(default)]
        names: Vec<String>,
    }

    #[test]
    fn unknown_keys_and_wrong_types_carry_their_position() {
        let text = "port = 1\nnmaes = [\"a\"]\n";
        let error = parse_config::<Sample>(text).unwrap_err();
        assert!(error.message.contains("unknown field `nmaes`"), "{error}");
        let span = error.span.unwrap();
        assert_eq!(&text[span], "nmaes");

        let text = "port = \"eighty\"\n";
        let error = parse_config::<Sample>(text).unwrap_err();
        assert!(error.message.contains("invalid type"), "{error}");
        assert!(
            !error.message.contains("eighty"),
            "values are not quoted: {error}"
        );
        assert_eq!(&text[error.span.unwrap()], "\"eighty\"");

        let error = parse_config::<Sample>("").unwrap_err();
        assert!(error.message.contains("missing field `port`"), "{error}");
        assert_eq!(
            parse_config::<Sample>("port = 9\nnames = [\"x\"]")
                .unwrap()
                .names,
            ["x"]
        );
    }

    /// A value with a quote in it is hidden whole (serde escapes the quote; cut at every quote,
    /// the part after it was shown), and a quote in a key name does not turn the rest of the
    /// message inside out.
    #[test]
    fn a_quote_inside_a_value_or_a_key_shows_no_part_of_a_value() {
        let text = "port = 'open\"sesame-secret-part'\n";
        let error = parse_config::<Sample>(text).unwrap_err();
        assert!(error.message.contains("invalid type"), "{error}");
        assert!(!error.message.contains("sesame"), "{error}");
        assert!(!error.message.contains("secret-part"), "{error}");

        let text = "port = 1\n'na\"mes' = 2\n";
        let error = parse_config::<Sample>(text).unwrap_err();
        assert!(error.message.contains("unknown field `na\"mes`"), "{error}");
        #[derive(Debug, serde::Deserialize)]
        #[serde(rename_all = "lowercase")]
        enum Mode {
            Open,
            Closed,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code, reason = "read only by the deserializer")]
        struct WithMode {
            mode: Mode,
        }
        let error = parse_config::<WithMode>("mode = 'hunter2-secret'").unwrap_err();
        assert!(error.message.contains("unknown variant"), "{error}");
        assert!(!error.message.contains("hunter2"), "{error}");
        assert!(error.message.contains("`open`"), "{error}");
        assert_eq!(
            redact_strings("unknown variant `hunter2`, expected `a` or `b`"),
            "unknown variant (not shown), expected `a` or `b`"
        );
        assert_eq!(
            redact_strings(r#"string "a\"b\\" and `k"ey` then "c""#),
            "string (not shown) and `k\"ey` then (not shown)"
        );
    }

    #[test]
    fn no_config_accepts_only_an_empty_table() {
        assert_eq!(parse_config::<NoConfig>(""), Ok(NoConfig {}));
        assert!(parse_config::<NoConfig>("x = 1").is_err());
    }
}
