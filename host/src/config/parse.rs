//! Reading the file and the environment: line and column for TOML errors, the overrides, and
//! error text that never quotes a secret.

use super::*;

/// Checks the file alone with `toml`, whose errors carry positions. A missing key is let through:
/// the environment may supply it, and figment reports it otherwise.
pub(super) fn check_file(path: &Path, text: &str) -> Result<(), ConfigError> {
    match toml::from_str::<Config>(text) {
        Ok(_) => Ok(()),
        Err(e) if e.message().starts_with("missing field") => Ok(()),
        Err(e) => {
            let offset = e.span().map_or(0, |s| s.start);
            let (line, column) = line_and_column(text, offset);
            let key = key_at(text, offset);
            let message = readable(&e.message().trim().replace('\n', "; "), key.as_deref());
            Err(ConfigError::File {
                path: path.to_owned(),
                line,
                column,
                key,
                message,
            })
        }
    }
}

/// Rewrites serde's and figment's wording for people: `expected u16` becomes "expected a port
/// (1–65535)" for a port key and "expected a whole number (0 or more)" otherwise, `i32` and
/// friends "an integer"; figment's doubled quoting (``expected `one of `a`, `b```) loses a level.
pub(super) fn readable(message: &str, key: Option<&str>) -> String {
    let mut text = message.to_owned();
    // figment quotes serde's "one of `a`, `b`" list once more.
    if let Some(start) = text.find("expected `one of ") {
        let list_start = start + "expected `".len();
        if text.ends_with('`') {
            text.pop();
        }
        text.replace_range(start..list_start, "expected ");
    }
    text = text
        .replace("invalid value signed int ", "invalid value ")
        .replace("invalid value unsigned int ", "invalid value ")
        .replace("invalid value: integer ", "invalid value ");
    let is_port = key.is_some_and(|k| k.ends_with("port") || k.ends_with("port_base"));
    let unsigned = if is_port {
        "a port (1–65535)"
    } else {
        "a whole number (0 or more)"
    };
    for (rust, plain) in [
        ("u8", unsigned),
        ("u16", unsigned),
        ("u32", unsigned),
        ("u64", unsigned),
        ("usize", unsigned),
        ("i8", "an integer"),
        ("i16", "an integer"),
        ("i32", "an integer"),
        ("i64", "an integer"),
        ("isize", "an integer"),
        ("f32", "a number"),
        ("f64", "a number"),
    ] {
        let expected = format!("expected {rust}");
        if text.ends_with(&expected) || text.contains(&format!("{expected} ")) {
            text = text.replace(&expected, &format!("expected {plain}"));
        }
    }
    text
}

/// 1-based line and column of a byte offset.
pub(super) fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The dotted key written on the line at `offset`: a table header, or `key = value` under the
/// nearest header above. A best effort for messages; `None` when the line is neither (for
/// example inside a multi-line array).
pub(super) fn key_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(line_start..)?.lines().next().unwrap_or("");
    if let Some(table) = header_name(line) {
        return Some(table);
    }
    let (key, _) = line.split_once('=')?;
    let key = dotted_key(key)?;
    let table = text.get(..line_start)?.lines().rev().find_map(header_name);
    Some(match table {
        Some(table) => format!("{table}.{key}"),
        None => key,
    })
}

/// The name of a `[table]` or `[[array]]` header line.
pub(super) fn header_name(line: &str) -> Option<String> {
    let line = line.split('#').next().unwrap_or("").trim();
    let inner = line
        .strip_prefix("[[")
        .and_then(|l| l.strip_suffix("]]"))
        .or_else(|| line.strip_prefix('[').and_then(|l| l.strip_suffix(']')))?;
    dotted_key(inner)
}

/// Normalises `a . "b"` to `a.b`; `None` unless every part is a bare or quoted key.
pub(super) fn dotted_key(raw: &str) -> Option<String> {
    let parts: Option<Vec<&str>> = raw
        .split('.')
        .map(|part| {
            let part = part.trim();
            let unquoted = part
                .strip_prefix('"')
                .and_then(|p| p.strip_suffix('"'))
                .or_else(|| part.strip_prefix('\'').and_then(|p| p.strip_suffix('\'')));
            match unquoted {
                Some(q) if !q.contains(['"', '\'']) => Some(q),
                Some(_) => None,
                None if !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
                {
                    Some(part)
                }
                None => None,
            }
        })
        .collect();
    Some(parts?.join("."))
}

/// What the loader makes of the `PORTCULLIS_*` variables before figment reads them.
#[derive(Default)]
pub(super) struct EnvOverrides {
    /// `(dotted lowercase key, variable name)` of every override.
    pub(super) keys: Vec<(String, String)>,
    /// `PORTCULLIS_UPSTREAM__PASSWORD`, verbatim.
    pub(super) password: Option<String>,
    /// `PORTCULLIS_DELEGATION_TOKENS__SECRET`, verbatim.
    pub(super) token_secret: Option<String>,
}

impl EnvOverrides {
    /// Sorts the variables under `prefix` (matched case-insensitively, like figment does) into
    /// overrides, the password, and variables that are no configuration keys; refuses names that
    /// look like a key written with one underscore instead of two.
    pub(crate) fn scan(
        prefix: &str,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Self, ConfigError> {
        let mut found = Self::default();
        for (name, value) in vars {
            let Some(name) = name.to_str() else { continue };
            let Some(rest) = strip_prefix_ignore_case(name, prefix) else {
                continue;
            };
            if !rest.contains(ENV_SEPARATOR) {
                let lower = rest.to_ascii_lowercase();
                if let Some(section) = SECTIONS
                    .iter()
                    .find(|s| lower.strip_prefix(**s).is_some_and(|r| r.starts_with('_')))
                {
                    let key = rest.get(section.len() + 1..).unwrap_or("");
                    return Err(ConfigError::Env {
                        var: name.to_owned(),
                        message: format!(
                            "not a configuration key: levels are separated by `{ENV_SEPARATOR}`, \
                             did you mean {prefix}{}{ENV_SEPARATOR}{}?",
                            section.to_ascii_uppercase(),
                            key
                        ),
                    });
                }
                tracing::debug!(
                    variable = name,
                    "ignoring environment variable: not a configuration key"
                );
                continue;
            }
            let key = rest.replace(ENV_SEPARATOR, ".").to_ascii_lowercase();
            if key.split('.').any(str::is_empty) {
                return Err(ConfigError::Env {
                    var: name.to_owned(),
                    message: "empty key segment".to_owned(),
                });
            }
            if key == PASSWORD_KEY || key == TOKEN_SECRET_KEY {
                let value = value.into_string().map_err(|_| ConfigError::Env {
                    var: name.to_owned(),
                    message: "not valid UTF-8".to_owned(),
                })?;
                if key == PASSWORD_KEY {
                    found.password = Some(value);
                } else {
                    found.token_secret = Some(value);
                }
            }
            found.keys.push((key, name.to_owned()));
        }
        Ok(found)
    }

    /// The variables that set `path` or something under it.
    pub(crate) fn vars_under(&self, path: &str) -> Vec<&str> {
        let mut vars: Vec<&str> = self
            .keys
            .iter()
            .filter(|(key, _)| {
                key == path || path.is_empty() || key.starts_with(&format!("{path}."))
            })
            .map(|(_, var)| var.as_str())
            .collect();
        vars.sort_unstable();
        vars
    }
}

pub(super) fn strip_prefix_ignore_case<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let head = name.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| name.get(prefix.len()..))
        .flatten()
}

/// Turns figment's first error into one that names the variable or the key.
pub(super) fn figment_error(
    path: &Path,
    prefix: &str,
    overrides: &EnvOverrides,
    error: figment::Error,
) -> ConfigError {
    let from_env = error
        .metadata
        .as_ref()
        .is_some_and(|m| m.name.contains("environment"));
    let mut key = error.path.join(".");
    if let figment::error::Kind::MissingField(field) = &error.kind {
        key = if key.is_empty() {
            field.to_string()
        } else {
            format!("{key}.{field}")
        };
    }
    let message = readable(&error.kind.to_string(), Some(&key));
    if from_env {
        let vars = overrides.vars_under(&error.path.join("."));
        let var = if vars.is_empty() {
            format!(
                "{prefix}{}",
                error.path.join(ENV_SEPARATOR).to_ascii_uppercase()
            )
        } else {
            vars.join(", ")
        };
        ConfigError::Env { var, message }
    } else {
        ConfigError::Key {
            path: path.to_owned(),
            key,
            message,
        }
    }
}
