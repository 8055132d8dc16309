//! Keys and tokens made in the tests themselves: RSA, P-256, P-384 and Ed25519 key pairs from
//! the RustCrypto crates, their JWKs, and JWTs signed with jsonwebtoken's `EncodingKey`.

use std::sync::OnceLock;

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::EncodePrivateKey as _;
use rsa::pkcs1::EncodeRsaPrivateKey as _;
use rsa::pkcs1::EncodeRsaPublicKey as _;
use rsa::traits::PublicKeyParts as _;
use serde_json::{json, Value};

use crate::jws::BASE64URL;

/// A private key and its public JWK.
pub(crate) struct TestKey {
    pub encoding: EncodingKey,
    /// The public JWK without `kid` (added by [`TestKey::jwk`]).
    pub public: Value,
    /// The public key's bytes as an HMAC secret would be made of them (the PKCS#1 DER for RSA,
    /// the SEC1 point for EC, the raw key for Ed25519): what an alg-confusion forger uses.
    pub public_bytes: Vec<u8>,
}

impl TestKey {
    pub fn jwk(&self, kid: Option<&str>) -> Value {
        let mut jwk = self.public.clone();
        if let Some(kid) = kid {
            jwk["kid"] = json!(kid);
        }
        jwk
    }

    /// A compact JWT over `claims` with `alg`, `kid` in the header when given.
    pub fn sign(&self, alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
    }
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).unwrap();
    bytes
}

fn b64(bytes: &[u8]) -> String {
    BASE64URL.encode(bytes)
}

fn rsa_key() -> TestKey {
    let private = rsa::PrivateKey::new(&mut getrandom::SysRng, 2048).unwrap();
    let public = private.to_public_key();
    TestKey {
        encoding: EncodingKey::from_rsa_der(private.to_pkcs1_der().unwrap().as_bytes()),
        public: json!({"kty": "RSA", "n": b64(&public.n_bytes()), "e": b64(&public.e_bytes())}),
        public_bytes: public.to_pkcs1_der().unwrap().as_bytes().to_vec(),
    }
}

/// The test binary's RSA keys (2048-bit generation is slow in debug builds: made once).
pub(crate) fn rsa() -> &'static TestKey {
    static KEY: OnceLock<TestKey> = OnceLock::new();
    KEY.get_or_init(rsa_key)
}

/// A second RSA key, for "signed by someone else".
pub(crate) fn rsa_other() -> &'static TestKey {
    static KEY: OnceLock<TestKey> = OnceLock::new();
    KEY.get_or_init(rsa_key)
}

pub(crate) fn p256() -> TestKey {
    let signing = p256::ecdsa::SigningKey::from_slice(&random::<32>()).unwrap();
    let point = signing.verifying_key().to_sec1_point(false);
    let bytes = point.as_bytes();
    TestKey {
        encoding: EncodingKey::from_ec_der(signing.to_pkcs8_der().unwrap().as_bytes()),
        public: json!({"kty": "EC", "crv": "P-256", "x": b64(&bytes[1..33]), "y": b64(&bytes[33..65])}),
        public_bytes: bytes.to_vec(),
    }
}

pub(crate) fn p384() -> TestKey {
    let signing = p384::ecdsa::SigningKey::from_slice(&random::<48>()).unwrap();
    let point = signing.verifying_key().to_sec1_point(false);
    let bytes = point.as_bytes();
    TestKey {
        encoding: EncodingKey::from_ec_der(signing.to_pkcs8_der().unwrap().as_bytes()),
        public: json!({"kty": "EC", "crv": "P-384", "x": b64(&bytes[1..49]), "y": b64(&bytes[49..97])}),
        public_bytes: bytes.to_vec(),
    }
}

pub(crate) fn ed25519() -> TestKey {
    let signing = ed25519_dalek::SigningKey::from_bytes(&random::<32>());
    let public = signing.verifying_key().to_bytes();
    TestKey {
        encoding: EncodingKey::from_ed_der(signing.to_pkcs8_der().unwrap().as_bytes()),
        public: json!({"kty": "OKP", "crv": "Ed25519", "x": b64(&public)}),
        public_bytes: public.to_vec(),
    }
}

/// A JWKS document holding `jwks`.
pub(crate) fn key_set(jwks: &[Value]) -> Vec<u8> {
    json!({ "keys": jwks }).to_string().into_bytes()
}

/// A compact token from raw JSON header and claims with the given signature part.
pub(crate) fn raw_token(header: &Value, claims: &Value, signature: &str) -> String {
    format!(
        "{}.{}.{signature}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}
