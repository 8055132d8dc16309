//! A JSON Web Key Set (RFC 7517 §5) reduced to the keys we verify with: RSA (2048–8192 bits),
//! EC P-256 and P-384, OKP Ed25519. Everything else is skipped, with the reason kept for the
//! host's log: `oct` keys always (an HMAC secret published in a key set is a misconfiguration,
//! and accepting one is how alg-confusion attacks start), keys whose `use` is not `sig`, keys
//! whose `key_ops` lack `verify`, unknown types and curves, malformed keys.

use std::sync::Arc;

use arc_swap::ArcSwap;
use base64::Engine as _;
use serde_json::{Map, Value};

use super::alg::{Alg, KeyType};
use super::verify::KeyMaterial;
use crate::json::{parse_object, truncated};
use crate::jws::BASE64URL;

/// The largest key set document accepted, in bytes.
pub const MAX_KEY_SET_LEN: usize = 1024 * 1024;
/// The most keys a set may hold.
pub const MAX_KEYS: usize = 256;
/// Nesting allowed in a key set (`{"keys":[{…,"key_ops":[…]}]}` is 3 deep; `x5c` lists too).
const KEY_SET_DEPTH: usize = 5;
/// jose4j refuses RSA keys under 2048 bits; ring verifies up to 8192.
const RSA_MIN_BITS: usize = 2048;
const RSA_MAX_BITS: usize = 8192;

/// Why a key set document was refused as a whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeySetError {
    /// Longer than [`MAX_KEY_SET_LEN`].
    #[error("the key set is {0} bytes, over the {MAX_KEY_SET_LEN}-byte limit")]
    TooLong(usize),
    /// Not a JSON object (or nested too deeply, or with a member twice).
    #[error("the key set is not a JSON object: {0}")]
    NotJson(String),
    /// No `keys` array.
    #[error("the key set has no \"keys\" array")]
    NoKeys,
    /// More than [`MAX_KEYS`] keys.
    #[error("the key set has {0} keys, over the limit of {MAX_KEYS}")]
    TooManyKeys(usize),
}

/// One verification key.
#[derive(Clone)]
pub(crate) struct Key {
    pub(crate) kid: Option<String>,
    pub(crate) key_type: KeyType,
    /// The key's `alg`, when it names one: then only that algorithm may use it.
    pub(crate) alg: Option<Alg>,
    pub(crate) material: KeyMaterial,
}

impl Key {
    /// Whether a token signed with `alg` may be checked with this key.
    pub(crate) fn fits(&self, alg: Alg) -> bool {
        alg.key_type() == self.key_type && self.alg.is_none_or(|own| own == alg)
    }
}

/// A parsed key set.
#[derive(Clone, Default)]
pub struct KeySet {
    keys: Vec<Key>,
    skipped: Vec<String>,
}

impl KeySet {
    /// An empty set (no token verifies against it).
    pub fn empty() -> Self {
        Self::default()
    }

    /// Parses a JWKS document. Keys we cannot or will not use are skipped (see
    /// [`KeySet::skipped`]); only a document that is not a key set at all is an error. A set with
    /// no usable key is not an error here: the host decides whether to start (or to keep its
    /// previous set) when [`KeySet::is_empty`].
    pub fn from_json(bytes: &[u8]) -> Result<KeySet, KeySetError> {
        if bytes.len() > MAX_KEY_SET_LEN {
            return Err(KeySetError::TooLong(bytes.len()));
        }
        let doc =
            parse_object(bytes, KEY_SET_DEPTH).map_err(|e| KeySetError::NotJson(e.to_string()))?;
        let Some(Value::Array(entries)) = doc.get("keys") else {
            return Err(KeySetError::NoKeys);
        };
        if entries.len() > MAX_KEYS {
            return Err(KeySetError::TooManyKeys(entries.len()));
        }
        let mut set = KeySet::default();
        for (index, entry) in entries.iter().enumerate() {
            let Value::Object(jwk) = entry else {
                set.skipped.push(format!("key #{index}: not a JSON object"));
                continue;
            };
            match parse_key(jwk) {
                Ok(key) => set.keys.push(key),
                Err(why) => {
                    let name = match jwk.get("kid") {
                        Some(Value::String(kid)) => format!("key {:?}", truncated(kid)),
                        _ => format!("key #{index}"),
                    };
                    set.skipped.push(format!("{name}: {why}"));
                }
            }
        }
        Ok(set)
    }

    /// How many usable keys the set holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set holds no usable key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The `kid`s of the usable keys (keys without one are not listed).
    pub fn kids(&self) -> Vec<String> {
        self.keys.iter().filter_map(|k| k.kid.clone()).collect()
    }

    /// Why each skipped key was skipped, for the host's log.
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// Whether some key carries `kid`.
    pub(crate) fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }

    pub(crate) fn keys(&self) -> &[Key] {
        &self.keys
    }
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySet")
            .field(
                "keys",
                &self
                    .keys
                    .iter()
                    .map(|k| (k.kid.as_deref(), k.key_type, k.alg))
                    .collect::<Vec<_>>(),
            )
            .field("skipped", &self.skipped)
            .finish()
    }
}

fn parse_key(jwk: &Map<String, Value>) -> Result<Key, String> {
    let kid = match jwk.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err("kid is not a string".to_owned()),
    };
    let kty = string(jwk, "kty")?.ok_or("no kty")?;
    if kty == "oct" {
        return Err("symmetric (oct) keys are never used".to_owned());
    }
    match string(jwk, "use")? {
        None | Some("sig") => {}
        Some(other) => return Err(format!("use is {:?}, not \"sig\"", truncated(other))),
    }
    if let Some(ops) = jwk.get("key_ops") {
        let Value::Array(ops) = ops else {
            return Err("key_ops is not a list".to_owned());
        };
        if !ops.iter().any(|op| op.as_str() == Some("verify")) {
            return Err("key_ops lacks \"verify\"".to_owned());
        }
    }
    let alg = match string(jwk, "alg")? {
        None => None,
        Some(name) => Some(
            Alg::from_name(name)
                .ok_or_else(|| format!("alg {:?} is not one we accept", truncated(name)))?,
        ),
    };
    let (key_type, material) = match kty {
        "RSA" => {
            let n = strip_leading_zeros(&component(jwk, "n")?);
            let e = strip_leading_zeros(&component(jwk, "e")?);
            let bits = bit_len(&n);
            if !(RSA_MIN_BITS..=RSA_MAX_BITS).contains(&bits) {
                return Err(format!(
                    "RSA modulus of {bits} bits (accepted: {RSA_MIN_BITS}–{RSA_MAX_BITS})"
                ));
            }
            if e.is_empty() || e.len() > 8 {
                return Err("RSA exponent out of range".to_owned());
            }
            (KeyType::Rsa, KeyMaterial::Rsa { n, e })
        }
        "EC" => {
            let (key_type, len) = match string(jwk, "crv")? {
                Some("P-256") => (KeyType::P256, 32),
                Some("P-384") => (KeyType::P384, 48),
                Some(other) => return Err(format!("EC curve {:?} unsupported", truncated(other))),
                None => return Err("EC key without crv".to_owned()),
            };
            let x = component(jwk, "x")?;
            let y = component(jwk, "y")?;
            if x.len() != len || y.len() != len {
                return Err("EC coordinates of the wrong length".to_owned());
            }
            // The SEC1 uncompressed point ring verifies with.
            let mut point = Vec::with_capacity(1 + 2 * len);
            point.push(0x04);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            (key_type, KeyMaterial::Ec { point })
        }
        "OKP" => {
            match string(jwk, "crv")? {
                Some("Ed25519") => {}
                Some(other) => return Err(format!("OKP curve {:?} unsupported", truncated(other))),
                None => return Err("OKP key without crv".to_owned()),
            }
            let x = component(jwk, "x")?;
            if x.len() != 32 {
                return Err("Ed25519 key of the wrong length".to_owned());
            }
            (KeyType::Ed25519, KeyMaterial::Ed25519 { x })
        }
        other => return Err(format!("key type {:?} unsupported", truncated(other))),
    };
    if let Some(alg) = alg {
        if alg.key_type() != key_type {
            return Err(format!("alg {} does not fit the key's type", alg.name()));
        }
    }
    Ok(Key {
        kid,
        key_type,
        alg,
        material,
    })
}

fn string<'a>(jwk: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, String> {
    match jwk.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{name} is not a string")),
    }
}

fn component(jwk: &Map<String, Value>, name: &str) -> Result<Vec<u8>, String> {
    let text = string(jwk, name)?.ok_or_else(|| format!("no {name}"))?;
    BASE64URL
        .decode(text)
        .map_err(|_| format!("{name} is not base64url"))
}

fn strip_leading_zeros(bytes: &[u8]) -> Vec<u8> {
    let first = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    bytes.get(first..).unwrap_or_default().to_vec()
}

fn bit_len(bytes: &[u8]) -> usize {
    match bytes.first() {
        None => 0,
        Some(&top) => (bytes.len() - 1) * 8 + (8 - top.leading_zeros() as usize),
    }
}

/// The current key set, swapped whole when the host refreshes it; readers never wait.
#[derive(Debug)]
pub struct SharedKeySet {
    current: ArcSwap<KeySet>,
}

impl SharedKeySet {
    /// Holds `initial`.
    pub fn new(initial: KeySet) -> Self {
        Self {
            current: ArcSwap::from_pointee(initial),
        }
    }

    /// Replaces the set (a refresh that failed should keep the old one: do not store then).
    pub fn store(&self, set: KeySet) {
        self.current.store(Arc::new(set));
    }

    /// The current set.
    pub fn load(&self) -> Arc<KeySet> {
        self.current.load_full()
    }

    /// The current set without touching the reference count (the hot path).
    pub(crate) fn guard(&self) -> arc_swap::Guard<Arc<KeySet>> {
        self.current.load()
    }
}

impl Default for SharedKeySet {
    fn default() -> Self {
        Self::new(KeySet::empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        BASE64URL.encode(bytes)
    }

    fn rsa_jwk(kid: &str, bits: usize) -> String {
        let mut n = vec![0xC5u8; bits / 8];
        n[bits / 8 - 1] |= 1;
        format!(
            r#"{{"kty":"RSA","kid":"{kid}","use":"sig","n":"{}","e":"AQAB"}}"#,
            b64(&n)
        )
    }

    #[test]
    fn parses_supported_keys_and_skips_the_rest() {
        let x32 = b64(&[7u8; 32]);
        let x48 = b64(&[7u8; 48]);
        let doc = format!(
            r#"{{"keys":[
                {},
                {{"kty":"EC","kid":"ec256","crv":"P-256","x":"{x32}","y":"{x32}","alg":"ES256"}},
                {{"kty":"EC","kid":"ec384","crv":"P-384","x":"{x48}","y":"{x48}"}},
                {{"kty":"OKP","kid":"ed","crv":"Ed25519","x":"{x32}","key_ops":["verify"]}},
                {{"kty":"oct","kid":"hmac","k":"c2VjcmV0"}},
                {{"kty":"RSA","kid":"enc","use":"enc","n":"AQAB","e":"AQAB"}},
                {},
                {{"kty":"EC","kid":"p521","crv":"P-521","x":"{x32}","y":"{x32}"}},
                {{"kty":"EC","kid":"short","crv":"P-256","x":"{x48}","y":"{x32}"}},
                {{"kty":"OKP","kid":"x25519","crv":"X25519","x":"{x32}"}},
                {{"kty":"OKP","kid":"ed-short","crv":"Ed25519","x":"AQAB"}},
                {{"kty":"EC","kid":"mismatch","crv":"P-256","x":"{x32}","y":"{x32}","alg":"ES384"}},
                {{"kty":"RSA","kid":"hs","alg":"HS256","n":"AQAB","e":"AQAB"}},
                {{"kty":"OKP","kid":"noverify","crv":"Ed25519","x":"{x32}","key_ops":["sign"]}},
                {{"kty":"XYZ"}},
                42
            ]}}"#,
            rsa_jwk("rsa", 2048),
            rsa_jwk("small", 1024),
        );
        let set = KeySet::from_json(doc.as_bytes()).unwrap();
        assert_eq!(set.kids(), vec!["rsa", "ec256", "ec384", "ed"]);
        assert_eq!(set.len(), 4);
        assert_eq!(set.skipped().len(), 12, "{:?}", set.skipped());
        assert!(set
            .skipped()
            .iter()
            .any(|s| s.contains("hmac") && s.contains("oct")));
        assert!(set.has_kid("ed") && !set.has_kid("hmac"));
        assert!(format!("{set:?}").contains("ec256"));
    }

    #[test]
    fn document_errors() {
        assert!(matches!(
            KeySet::from_json(b"[]"),
            Err(KeySetError::NotJson(_))
        ));
        assert!(matches!(KeySet::from_json(b"{}"), Err(KeySetError::NoKeys)));
        assert!(matches!(
            KeySet::from_json(br#"{"keys":{}}"#),
            Err(KeySetError::NoKeys)
        ));
        assert!(matches!(
            KeySet::from_json(br#"{"keys":[],"keys":[]}"#),
            Err(KeySetError::NotJson(_))
        ));
        let many = format!(r#"{{"keys":[{}]}}"#, vec!["{}"; MAX_KEYS + 1].join(","));
        assert!(matches!(
            KeySet::from_json(many.as_bytes()),
            Err(KeySetError::TooManyKeys(_))
        ));
        let long = vec![b' '; MAX_KEY_SET_LEN + 1];
        assert!(matches!(
            KeySet::from_json(&long),
            Err(KeySetError::TooLong(_))
        ));
        assert!(KeySet::from_json(br#"{"keys":[]}"#).unwrap().is_empty());
    }

    #[test]
    fn shared_set_swaps() {
        let shared = SharedKeySet::new(KeySet::empty());
        assert!(shared.load().is_empty());
        let doc = format!(r#"{{"keys":[{}]}}"#, rsa_jwk("a", 3072));
        shared.store(KeySet::from_json(doc.as_bytes()).unwrap());
        assert_eq!(shared.load().kids(), vec!["a"]);
        assert_eq!(shared.guard().len(), 1);
    }
}
