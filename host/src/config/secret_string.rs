//! Deserializes the upstream password without ever quoting the value in an error.

use std::fmt;

use portcullis::secret::Secret;
use serde::de::{self, Deserializer, Visitor};

const NOT_A_STRING: &str = "expected a string (the value is not shown: it is a secret)";

pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Secret>, D::Error> {
    d.deserialize_any(SecretVisitor).map(Some)
}

struct SecretVisitor;

impl<'de> Visitor<'de> for SecretVisitor {
    type Value = Secret;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Secret, E> {
        Ok(Secret::new(v))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Secret, E> {
        Err(E::custom(NOT_A_STRING))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Secret, E> {
        Err(E::custom(NOT_A_STRING))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Secret, E> {
        Err(E::custom(NOT_A_STRING))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Secret, E> {
        Err(E::custom(NOT_A_STRING))
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Secret, E> {
        Err(E::custom(NOT_A_STRING))
    }
}
