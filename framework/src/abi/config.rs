//! A dependency-free reader for the configuration text a plugin receives in `from_config`.
//!
//! The host passes the plugin's `[plugins.config.<NAME>]` table as TOML text. Plugins should not
//! need a TOML crate for the usual "a few strings" configuration, so this reads the line-based
//! subset of TOML that a serializer writes for such tables: `[table]` headers, `key = value`
//! lines, dotted and quoted keys, basic and literal strings, single-line inline tables, bare
//! scalars (numbers, booleans, dates — kept as their text) and `#` comments. Arrays and
//! multi-line strings are reported as unsupported rather than misread.

use std::collections::BTreeMap;

/// Why a plugin configuration could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("plugin configuration line {line}: {problem}")]
#[non_exhaustive]
pub struct ConfigError {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong (never contains the value, which may be a secret).
    pub problem: &'static str,
}

/// A plugin's configuration: every scalar value under its dotted key path.
///
/// ```
/// # use portcullis::abi::PluginConfig;
/// let config = PluginConfig::parse("realm = \"demo\"\n[tokens]\nalice = \"s3cr3t\"\n").unwrap();
/// assert_eq!(config.get("realm"), Some("demo"));
/// assert_eq!(config.table("tokens").collect::<Vec<_>>(), [("alice", "s3cr3t")]);
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PluginConfig {
    values: BTreeMap<Vec<String>, String>,
}

impl std::fmt::Debug for PluginConfig {
    // Values may be secrets: only the keys are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(self.values.keys().map(|path| path.join(".")))
            .finish()
    }
}

impl PluginConfig {
    /// Parses configuration text (empty text gives an empty configuration).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut config = PluginConfig::default();
        let mut table: Vec<String> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let error = |problem| ConfigError {
                line: index + 1,
                problem,
            };
            let mut cursor = Cursor { rest: line };
            cursor.skip_blank();
            if cursor.at_end() {
                continue;
            }
            if cursor.eat('[') {
                if cursor.eat('[') {
                    return Err(error("arrays of tables are not supported"));
                }
                table = cursor.key_path().map_err(error)?;
                cursor.skip_blank();
                if !cursor.eat(']') {
                    return Err(error("expected `]` after the table name"));
                }
            } else {
                let mut path = table.clone();
                path.extend(cursor.key_path().map_err(error)?);
                cursor.skip_blank();
                if !cursor.eat('=') {
                    return Err(error("expected `=` after the key"));
                }
                cursor.value(path, &mut config.values).map_err(error)?;
            }
            cursor.skip_blank();
            if !cursor.at_end() {
                return Err(error("unexpected text after the value"));
            }
        }
        Ok(config)
    }

    /// A top-level value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(path, _)| path.len() == 1 && path.first().is_some_and(|k| k == key))
            .map(|(_, value)| value.as_str())
    }

    /// The scalar entries of table `name` (`[name]` or `name = { .. }`), as `(key, value)`.
    pub fn table<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.values
            .iter()
            .filter_map(move |(path, value)| match path.as_slice() {
                [table, key] if table == name => Some((key.as_str(), value.as_str())),
                _ => None,
            })
    }

    /// Every value with its full key path.
    pub fn entries(&self) -> impl Iterator<Item = (&[String], &str)> {
        self.values
            .iter()
            .map(|(path, value)| (path.as_slice(), value.as_str()))
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A position in one line.
struct Cursor<'a> {
    rest: &'a str,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<char> {
        self.rest.chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.rest = self.rest.get(c.len_utf8()..).unwrap_or_default();
        Some(c)
    }

    fn eat(&mut self, expected: char) -> bool {
        let found = self.peek() == Some(expected);
        if found {
            self.bump();
        }
        found
    }

    /// Skips spaces, tabs and a trailing comment.
    fn skip_blank(&mut self) {
        self.rest = self.rest.trim_start_matches([' ', '\t']);
        if self.rest.starts_with('#') {
            self.rest = "";
        }
    }

    fn at_end(&self) -> bool {
        self.rest.is_empty()
    }

    /// `a.b."c d"`
    fn key_path(&mut self) -> Result<Vec<String>, &'static str> {
        let mut path = Vec::new();
        loop {
            self.skip_blank();
            path.push(self.key()?);
            self.skip_blank();
            if !self.eat('.') {
                return Ok(path);
            }
        }
    }

    fn key(&mut self) -> Result<String, &'static str> {
        match self.peek() {
            Some('"') => self.basic_string(),
            Some('\'') => self.literal_string(),
            _ => {
                let end = self
                    .rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                    .unwrap_or(self.rest.len());
                let (key, rest) = self.rest.split_at(end);
                if key.is_empty() {
                    return Err("expected a key");
                }
                self.rest = rest;
                Ok(key.to_owned())
            }
        }
    }

    /// A value after `=`, stored under `path` (an inline table stores each of its entries).
    fn value(
        &mut self,
        path: Vec<String>,
        values: &mut BTreeMap<Vec<String>, String>,
    ) -> Result<(), &'static str> {
        self.skip_blank();
        let scalar = match self.peek() {
            Some('{') => return self.inline_table(path, values),
            Some('[') => return Err("arrays are not supported"),
            _ if self.rest.starts_with("\"\"\"") || self.rest.starts_with("'''") => {
                return Err("multi-line strings are not supported")
            }
            Some('"') => self.basic_string()?,
            Some('\'') => self.literal_string()?,
            _ => self.bare_scalar()?,
        };
        if values.insert(path, scalar).is_some() {
            return Err("duplicate key");
        }
        Ok(())
    }

    fn inline_table(
        &mut self,
        path: Vec<String>,
        values: &mut BTreeMap<Vec<String>, String>,
    ) -> Result<(), &'static str> {
        self.bump();
        self.skip_blank();
        if self.eat('}') {
            return Ok(());
        }
        loop {
            let mut entry = path.clone();
            entry.extend(self.key_path()?);
            if !self.eat('=') {
                return Err("expected `=` after the key");
            }
            self.value(entry, values)?;
            self.skip_blank();
            if self.eat('}') {
                return Ok(());
            }
            if !self.eat(',') {
                return Err("expected `,` or `}` in an inline table");
            }
        }
    }

    /// A number, boolean or date: kept as written.
    fn bare_scalar(&mut self) -> Result<String, &'static str> {
        let end = self
            .rest
            .find([' ', '\t', ',', '}', '#'])
            .unwrap_or(self.rest.len());
        let (scalar, rest) = self.rest.split_at(end);
        if scalar.is_empty() {
            return Err("expected a value");
        }
        self.rest = rest;
        Ok(scalar.to_owned())
    }

    /// `'…'`: no escapes.
    fn literal_string(&mut self) -> Result<String, &'static str> {
        self.bump();
        let end = self.rest.find('\'').ok_or("unterminated string")?;
        let (text, rest) = self.rest.split_at(end);
        self.rest = rest.get(1..).unwrap_or_default();
        Ok(text.to_owned())
    }

    /// `"…"` with TOML's escapes.
    fn basic_string(&mut self) -> Result<String, &'static str> {
        self.bump();
        let mut out = String::new();
        loop {
            match self.bump().ok_or("unterminated string")? {
                '"' => return Ok(out),
                '\\' => out.push(self.escape()?),
                c => out.push(c),
            }
        }
    }

    fn escape(&mut self) -> Result<char, &'static str> {
        Ok(match self.bump().ok_or("unterminated string")? {
            'b' => '\u{8}',
            't' => '\t',
            'n' => '\n',
            'f' => '\u{c}',
            'r' => '\r',
            'e' => '\u{1b}',
            '"' => '"',
            '\\' => '\\',
            'u' => self.unicode(4)?,
            'U' => self.unicode(8)?,
            _ => return Err("unknown escape sequence"),
        })
    }

    fn unicode(&mut self, digits: usize) -> Result<char, &'static str> {
        let hex = self.rest.get(..digits).ok_or("short unicode escape")?;
        let code = u32::from_str_radix(hex, 16).map_err(|_| "bad unicode escape")?;
        self.rest = self.rest.get(digits..).unwrap_or_default();
        char::from_u32(code).ok_or("bad unicode escape")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tables_inline_tables_and_scalars() {
        let text = "# demo\nrealm = \"demo\" # trailing\nlimit = 5\n\n[tokens]\nalice = \"s3\\\"cr3t\"\n\"bob.smith\" = 'x\\y'\n";
        let config = PluginConfig::parse(text).unwrap();
        assert_eq!(config.get("realm"), Some("demo"));
        assert_eq!(config.get("limit"), Some("5"));
        assert_eq!(config.get("alice"), None);
        let tokens: Vec<_> = config.table("tokens").collect();
        assert_eq!(tokens, [("alice", "s3\"cr3t"), ("bob.smith", "x\\y")]);

        let inline = PluginConfig::parse("tokens = { alice = \"a\", bob = \"b\" }").unwrap();
        assert_eq!(
            inline.table("tokens").collect::<Vec<_>>(),
            [("alice", "a"), ("bob", "b")]
        );
        let dotted = PluginConfig::parse("tokens.alice = \"\\u00e9\"").unwrap();
        assert_eq!(dotted.table("tokens").collect::<Vec<_>>(), [("alice", "é")]);
        assert!(PluginConfig::parse("").unwrap().is_empty());
    }

    #[test]
    fn reads_what_the_toml_serializer_writes() {
        // The host re-serializes its `[plugins.config.<NAME>]` table; this is that shape.
        let text =
            "mode = \"strict\"\n\n[tokens]\nalice = \"s3cr3t\"\n\"carol@example.com\" = \"t\"\n";
        let config = PluginConfig::parse(text).unwrap();
        assert_eq!(config.get("mode"), Some("strict"));
        assert_eq!(config.table("tokens").count(), 2);
    }

    #[test]
    fn reports_unsupported_and_malformed_lines() {
        let problem = |text: &str| PluginConfig::parse(text).unwrap_err();
        assert_eq!(
            problem("a = [1, 2]"),
            ConfigError {
                line: 1,
                problem: "arrays are not supported"
            }
        );
        assert_eq!(problem("ok = 1\nb = \"open").line, 2);
        assert_eq!(
            problem("[[x]]").problem,
            "arrays of tables are not supported"
        );
        assert_eq!(problem("a = 1\na = 2").problem, "duplicate key");
        assert_eq!(
            problem("a = \"x\" y").problem,
            "unexpected text after the value"
        );
        assert_eq!(problem("= 1").problem, "expected a key");
        assert_eq!(
            problem("a = '''x'''").problem,
            "multi-line strings are not supported"
        );
        assert_eq!(
            problem("t = { a = 1 b = 2 }").problem,
            "expected `,` or `}` in an inline table"
        );
    }

    #[test]
    fn debug_hides_values() {
        let config = PluginConfig::parse("[tokens]\nalice = \"s3cr3t\"").unwrap();
        assert!(!format!("{config:?}").contains("s3cr3t"));
    }
}
