//! A plugin's `[plugins.config.NAME]` table reaches it as TOML text, which it deserializes with
//! `parse_config` (on its own side of the C ABI). Whatever the text, parsing never panics, and an
//! error never repeats a string value of the table: such values are often secrets (tokens,
//! passwords), and the host prints these errors.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use portcullis::plugin_api::plugin::parse_config;

/// A table with the shapes plugins use: strings, numbers, lists, a nested table, optional keys.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Sample {
    mode: String,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    max_ms: u64,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    rules: BTreeMap<String, Rule>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Rule {
    prefix: String,
    allow: bool,
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Err(error) = parse_config::<Sample>(text) else {
        return;
    };
    // The string values of the table, when the text is TOML at all (long enough that they cannot
    // be a word of serde's own message by chance).
    let Ok(table) = toml::from_str::<toml::Table>(text) else {
        return;
    };
    let (mut values, mut keys) = (Vec::new(), Vec::new());
    strings(&toml::Value::Table(table.clone()), &mut values, &mut keys);
    // Key names are shown, quoted (`unknown field `x``): they are taken out of the message first
    // (a value may equal a key with its quote, as `` `ttt `` in `` `ttt)` ``), and a value that is
    // part of a key is not told apart.
    let strip_keys = |message: &str| {
        let mut out = message.to_owned();
        for key in &keys {
            out = out.replace(&format!("`{key}`"), "``");
        }
        out
    };
    let without_keys = strip_keys(&error.message);
    // Part of a key as serde quotes it, the backticks included: a key with a `"` in it is not
    // found above (the redaction hides what it takes for a quoted string, also inside a key), and
    // a value like `` `ttt `` is then in the message as the start of `` `ttt)… ``, a key's text.
    let in_a_key = |value: &String| {
        keys.iter()
            .any(|k: &String| format!("`{k}`").contains(value.as_str()))
    };
    // serde's own words list the fields of `Sample` and `Rule`; a value made of that text (such
    // as ``ret`, `max_ms`, ``) is in the message without coming from the table.
    const FIELD_LISTS: &str = "`mode`, `secret`, `max_ms`, `users`, `rules` `prefix`, `allow`";
    let in_serdes_words = |value: &String| FIELD_LISTS.contains(value.as_str());
    // The same table with every string value made "v" gives the message without any value in it
    // (its keys taken out the same way): a value found there too is text the message has for
    // another reason — the fuzzer copies the message it is shown into the table, as
    // "unknown field ``D/DDDd(not shown" next to the key that makes it, or "unknown field ``"
    // next to a key whose removal above leaves just that — not a leak.
    let without_values = neutralised(&table)
        .and_then(|text| parse_config::<Sample>(&text).err())
        .map(|e| strip_keys(&e.message))
        .unwrap_or_default();
    let in_a_message_without_values = |value: &String| without_values.contains(value.as_str());
    for value in values.iter().filter(|v| {
        v.len() >= 12 && !in_a_key(v) && !in_serdes_words(v) && !in_a_message_without_values(v)
    }) {
        assert!(
            !without_keys.contains(value.as_str()),
            "a string value of the table is in the error: {}",
            error.message
        );
    }
});

/// The table as TOML text with every string value replaced by `"v"` (keys and every other value
/// kept), or `None` when it cannot be written back.
fn neutralised(table: &toml::Table) -> Option<String> {
    fn blank(value: &toml::Value) -> toml::Value {
        match value {
            toml::Value::String(_) => toml::Value::String("v".to_owned()),
            toml::Value::Array(items) => toml::Value::Array(items.iter().map(blank).collect()),
            toml::Value::Table(t) => {
                toml::Value::Table(t.iter().map(|(k, v)| (k.clone(), blank(v))).collect())
            }
            other => other.clone(),
        }
    }
    let toml::Value::Table(blanked) = blank(&toml::Value::Table(table.clone())) else {
        return None;
    };
    toml::to_string(&blanked).ok()
}

/// The string values under `value`, and the key names.
fn strings(value: &toml::Value, values: &mut Vec<String>, keys: &mut Vec<String>) {
    match value {
        toml::Value::String(s) => values.push(s.clone()),
        toml::Value::Array(items) => items.iter().for_each(|v| strings(v, values, keys)),
        toml::Value::Table(table) => {
            for (key, v) in table {
                keys.push(key.clone());
                strings(v, values, keys);
            }
        }
        _ => {}
    }
}
