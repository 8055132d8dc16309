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

/// Why one key of a set is skipped (the set keeps the others; the host logs the reasons).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum KeySkipped {
    #[error("{0} is not a string")]
    NotAString(&'static str),
    #[error("no {0}")]
    Missing(&'static str),
    #[error("{0} is not base64url")]
    NotBase64Url(&'static str),
    #[error("symmetric (oct) keys are never used")]
    Symmetric,
    #[error("use is {0:?}, not \"sig\"")]
    NotForSignatures(String),
    #[error("key_ops is not a list")]
    KeyOpsNotAList,
    #[error("key_ops lacks \"verify\"")]
    NotForVerifying,
    #[error("alg {0:?} is not one we accept")]
    Alg(String),
    #[error("RSA modulus of {0} bits (accepted: {RSA_MIN_BITS}–{RSA_MAX_BITS})")]
    RsaModulus(usize),
    #[error("RSA exponent out of range")]
    RsaExponent,
    #[error("{kty} curve {crv:?} unsupported")]
    Curve { kty: &'static str, crv: String },
    #[error("{0} key without crv")]
    NoCurve(&'static str),
    #[error("EC coordinates of the wrong length")]
    EcCoordinates,
    #[error("Ed25519 key of the wrong length")]
    Ed25519Length,
    #[error("key type {0:?} unsupported")]
    KeyType(String),
    #[error("alg {0} does not fit the key's type")]
    AlgDoesNotFit(&'static str),
}

fn parse_key(jwk: &Map<String, Value>) -> Result<Key, KeySkipped> {
    let kid = match jwk.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(KeySkipped::NotAString("kid")),
    };
    let kty = string(jwk, "kty")?.ok_or(KeySkipped::Missing("kty"))?;
    if kty == "oct" {
        return Err(KeySkipped::Symmetric);
    }
    match string(jwk, "use")? {
        None | Some("sig") => {}
        Some(other) => return Err(KeySkipped::NotForSignatures(truncated(other))),
    }
    if let Some(ops) = jwk.get("key_ops") {
        let Value::Array(ops) = ops else {
            return Err(KeySkipped::KeyOpsNotAList);
        };
        if !ops.iter().any(|op| op.as_str() == Some("verify")) {
            return Err(KeySkipped::NotForVerifying);
        }
    }
    let alg = match string(jwk, "alg")? {
        None => None,
        Some(name) => Some(Alg::from_name(name).ok_or_else(|| KeySkipped::Alg(truncated(name)))?),
    };
    let (key_type, material) = match kty {
        "RSA" => {
            let n = strip_leading_zeros(&component(jwk, "n")?);
            let e = strip_leading_zeros(&component(jwk, "e")?);
            let bits = bit_len(&n);
            if !(RSA_MIN_BITS..=RSA_MAX_BITS).contains(&bits) {
                return Err(KeySkipped::RsaModulus(bits));
            }
            if e.is_empty() || e.len() > 8 {
                return Err(KeySkipped::RsaExponent);
            }
            (KeyType::Rsa, KeyMaterial::Rsa { n, e })
        }
        "EC" => {
            let (key_type, len) = match string(jwk, "crv")? {
                Some("P-256") => (KeyType::P256, 32),
                Some("P-384") => (KeyType::P384, 48),
                Some(other) => {
                    return Err(KeySkipped::Curve {
                        kty: "EC",
                        crv: truncated(other),
                    })
                }
                None => return Err(KeySkipped::NoCurve("EC")),
            };
            let x = component(jwk, "x")?;
            let y = component(jwk, "y")?;
            if x.len() != len || y.len() != len {
                return Err(KeySkipped::EcCoordinates);
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
                Some(other) => {
                    return Err(KeySkipped::Curve {
                        kty: "OKP",
                        crv: truncated(other),
                    })
                }
                None => return Err(KeySkipped::NoCurve("OKP")),
            }
            let x = component(jwk, "x")?;
            if x.len() != 32 {
                return Err(KeySkipped::Ed25519Length);
            }
            (KeyType::Ed25519, KeyMaterial::Ed25519 { x })
        }
        other => return Err(KeySkipped::KeyType(truncated(other))),
    };
    if let Some(alg) = alg {
        if alg.key_type() != key_type {
            return Err(KeySkipped::AlgDoesNotFit(alg.name()));
        }
    }
    Ok(Key {
        kid,
        key_type,
        alg,
        material,
    })
}

fn string<'a>(
    jwk: &'a Map<String, Value>,
    name: &'static str,
) -> Result<Option<&'a str>, KeySkipped> {
    match jwk.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(KeySkipped::NotAString(name)),
    }
}

fn component(jwk: &Map<String, Value>, name: &'static str) -> Result<Vec<u8>, KeySkipped> {
    let text = string(jwk, name)?.ok_or(KeySkipped::Missing(name))?;
    BASE64URL
        .decode(text)
        .map_err(|_| KeySkipped::NotBase64Url(name))
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
