//! Strict JSON for token headers, claims and key sets: a bounded nesting depth, and an object with
//! a member name twice is refused (as jose4j, behind Kafka's validator, does), so that no two
//! parsers can disagree on which `alg`, `kid` or `sub` a token carries.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why a JSON document was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct JsonError(String);

/// Parses `bytes` as a JSON object nested at most `max_depth` levels (the object itself is level
/// 1), with unique member names at every level.
pub(crate) fn parse_object(
    bytes: &[u8],
    max_depth: usize,
) -> Result<Map<String, Value>, JsonError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Strict { depth: max_depth }
        .deserialize(&mut de)
        .map_err(|e| JsonError(e.to_string()))?;
    de.end().map_err(|e| JsonError(e.to_string()))?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(JsonError("not a JSON object".to_owned())),
    }
}

/// A value allowed `depth` more levels of arrays and objects.
#[derive(Clone, Copy)]
struct Strict {
    depth: usize,
}

impl Strict {
    fn nested<E: serde::de::Error>(self) -> Result<Strict, E> {
        match self.depth.checked_sub(1) {
            Some(depth) => Ok(Strict { depth }),
            None => Err(E::custom("JSON nested too deeply")),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let inner = self.nested()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(inner)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let inner = self.nested()?;
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            let value = access.next_value_seed(inner)?;
            if map.contains_key(&key) {
                return Err(A::Error::custom(format!(
                    "member name {:?} appears twice",
                    truncated(&key)
                )));
            }
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

/// At most 64 characters of `s`, for messages that quote untrusted input.
pub(crate) fn truncated(s: &str) -> String {
    let mut out: String = s.chars().take(64).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_only() {
        assert!(parse_object(br#"{"a":1,"b":[true,null,"x",1.5]}"#, 4).is_ok());
        assert!(parse_object(b"[1]", 4).is_err());
        assert!(parse_object(b"{} x", 4).is_err());
        assert!(parse_object(b"", 4).is_err());
    }

    #[test]
    fn duplicate_names_refused_at_every_level() {
        assert!(parse_object(br#"{"a":1,"a":2}"#, 4).is_err());
        assert!(parse_object(br#"{"a":{"b":1,"b":1}}"#, 4).is_err());
        assert!(parse_object(br#"{"a":[{"b":1,"b":1}]}"#, 4).is_err());
    }

    #[test]
    fn depth_bound() {
        assert!(parse_object(br#"{"a":{"b":[1]}}"#, 3).is_ok());
        assert!(parse_object(br#"{"a":{"b":[[1]]}}"#, 3).is_err());
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse_object(deep.as_bytes(), 16).is_err());
    }
}
