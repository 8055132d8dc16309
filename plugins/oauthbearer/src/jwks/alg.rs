//! The JWS algorithms we verify, and the key each needs.

/// A JWS `alg` we accept. `none` and the HMAC algorithms are absent on purpose: a gateway holds
/// no shared secret with the issuer, and an HMAC "verified" with a public key is the classic
/// algorithm-confusion forgery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Alg {
    Rs256,
    Rs384,
    Rs512,
    Ps256,
    Ps384,
    Ps512,
    Es256,
    Es384,
    EdDsa,
}

/// The key an algorithm needs (JWK `kty`, plus `crv` for EC and OKP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum KeyType {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl Alg {
    /// The algorithm a header's `alg` names (case-sensitive, RFC 7515 §4.1.1).
    pub(crate) fn from_name(name: &str) -> Option<Alg> {
        Some(match name {
            "RS256" => Alg::Rs256,
            "RS384" => Alg::Rs384,
            "RS512" => Alg::Rs512,
            "PS256" => Alg::Ps256,
            "PS384" => Alg::Ps384,
            "PS512" => Alg::Ps512,
            "ES256" => Alg::Es256,
            "ES384" => Alg::Es384,
            "EdDSA" => Alg::EdDsa,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Rs384 => "RS384",
            Alg::Rs512 => "RS512",
            Alg::Ps256 => "PS256",
            Alg::Ps384 => "PS384",
            Alg::Ps512 => "PS512",
            Alg::Es256 => "ES256",
            Alg::Es384 => "ES384",
            Alg::EdDsa => "EdDSA",
        }
    }

    pub(crate) fn key_type(self) -> KeyType {
        match self {
            Alg::Rs256 | Alg::Rs384 | Alg::Rs512 | Alg::Ps256 | Alg::Ps384 | Alg::Ps512 => {
                KeyType::Rsa
            }
            Alg::Es256 => KeyType::P256,
            Alg::Es384 => KeyType::P384,
            Alg::EdDsa => KeyType::Ed25519,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for alg in [
            Alg::Rs256,
            Alg::Rs384,
            Alg::Rs512,
            Alg::Ps256,
            Alg::Ps384,
            Alg::Ps512,
            Alg::Es256,
            Alg::Es384,
            Alg::EdDsa,
        ] {
            assert_eq!(Alg::from_name(alg.name()), Some(alg));
        }
        for refused in [
            "none", "None", "HS256", "HS384", "HS512", "ES512", "rs256", "EdDSA ",
        ] {
            assert_eq!(Alg::from_name(refused), None);
        }
    }
}
