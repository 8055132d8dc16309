//! A fixed key set for the OAUTHBEARER fuzz targets: public keys whose private halves were
//! thrown away once `TOKEN` was signed, so no input but that token (and its signing input) can
//! verify.

/// RSA-2048, P-256, P-384 (alg ES384) and Ed25519 public keys.
pub const JWKS: &str = r#"{"keys":[{"kty":"RSA","kid":"rsa","use":"sig","n":"yGw8mMRWSzRQberE4363p-URXv78NTmABlbxD3HVJOFMW3Wl4kDPgbDxeQo_HvtDOro5IJvhXli9OSYgkchN6bR6TspujRnJ2nm6nIcC7yH-VOmdFwyeS8uVe8LxuWJ-7P7JyjPdqAXLKz13z-APPssGPR40RSHb7WSdSgH8I_hL8ncdkR8sLKnItFIgRZ6bcbi19ayNgWvj2Z1yOawtljLyGBaSSAylrPEAOiSYCsu9LCF0Pe5LtRIkBp3LuxlAbQCN-9xLJ4qEz06HyNmThx7iI5fIuO5XyhOllBeimLLrRJwOifg9L2Xo98EODmbUD452TiSpeG-iaHqc64288Q","e":"AQAB"},{"kty":"EC","kid":"p256","crv":"P-256","x":"8caxAc5jK_7cGwPxEviUj55X3HmubT8gk-PJ6jp5gGg","y":"sl_Xw9f-5kJCuoqDUGnabJojDmFKG4918F2tb9MHsOw"},{"kty":"EC","kid":"p384","crv":"P-384","alg":"ES384","x":"Nb5LyuPUJwFKYBNsMzXQzbD_BS43Y22PYLmpmQNhxl2E6Gr1p4B6yjl2SKp5Y4wQ","y":"yWCWjgXriEkMLK9Yjb-iJRsxRIxik8iCIhSr1w5nDKXx1jXmxr__LPoNqVkdOjk1"},{"kty":"OKP","kid":"ed","crv":"Ed25519","x":"0v0Jc2wA_GX2VNq9-lijOw33Z-muxlzKQcfvP1nGYAE"}]}"#;

/// An RS256 token signed by the RSA key: sub alice, aud kafka, iss https://idp, iat 1700000000,
/// exp 1700000300.
pub const TOKEN: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6InJzYSIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImF1ZCI6ImthZmthIiwiaXNzIjoiaHR0cHM6Ly9pZHAiLCJleHAiOjE3MDAwMDAzMDAsImlhdCI6MTcwMDAwMDAwMCwic2NvcGUiOiJhIGIiLCJncm91cHMiOlsiZyJdfQ.WyWoBhDY-Dq_uaWjnYy2aXAQ_a10SkOAuFWbRdz3vLxHxW3gU7uKeY5Dou1jGzGPcqJXE9UQnnp0qaEMPX7rSyZ8rfuuE1pACeXOy0SDZvbplHEpN06yzsXJCFEv61LFVh9e8_s-iBcmGGY1Gw7c-85v0-K-QWm9FFl2ORa0YZeu_WkJkylouGKpo4ulTbkaHx8RePji49MCsaphi-lPQb4KPFbhmmLliUHFvTK5ADfPvaa6OIWjrCHnUg0im6SoGUlk7uu241JmRDqkv3DG0geWjsC-uQpmY5_wqAKJfoAG-aL5O6w2OA6USWy-UjIMQoqwH9wvgqxVUTiIqJSI-g";

/// A time at which [`TOKEN`] is valid, in ms.
pub const NOW_MS: i64 = 1_700_000_100_000;
