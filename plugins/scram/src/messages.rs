//! The SCRAM message grammar (RFC 5802 §7), parsed strictly and without panics.
//!
//! Every parser works on the received bytes: they must be ASCII without NUL (the grammar allows
//! nothing else, and Kafka rejects UTF-8 user names), are split on `,`, and each attribute is
//! checked against its character class and a length limit. Parsers keep the raw text where the
//! protocol signs it (client-first-message-bare, client-final-message-without-proof), so the
//! AuthMessage is built from exactly what the peer sent.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;

/// The longest client-first or client-final message accepted.
pub const MAX_MESSAGE_LEN: usize = 4096;
/// The longest escaped saslname (user name or token id).
pub const MAX_NAME_LEN: usize = 1024;
/// The longest nonce (client, server or combined).
pub const MAX_NONCE_LEN: usize = 512;
/// The most extensions one message may carry.
pub const MAX_EXTENSIONS: usize = 16;
/// The longest extension name.
pub const MAX_EXTENSION_KEY_LEN: usize = 64;
/// The longest extension value.
pub const MAX_EXTENSION_VALUE_LEN: usize = 1024;

/// Why a SCRAM message was refused. Carries no part of the message: the reason is logged and the
/// message may hold a user name or a proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Longer than [`MAX_MESSAGE_LEN`].
    #[error("message too long")]
    TooLong,
    /// A byte outside 0x01–0x7F.
    #[error("message contains a byte outside 0x01-0x7F")]
    NotAscii,
    /// The client asked for channel binding (`y` or `p=`), which is not offered.
    #[error("channel binding is not supported")]
    ChannelBinding,
    /// The gs2 header is not `n,,` or `n,a=<authzid>,`.
    #[error("malformed gs2 header")]
    Gs2Header,
    /// A mandatory extension (`m=`) was sent; none is supported.
    #[error("mandatory extensions are not supported")]
    MandatoryExtension,
    /// A required attribute is missing or out of place.
    #[error("missing or misplaced attribute '{0}='")]
    MissingAttribute(&'static str),
    /// A saslname is empty, too long, or has a bad `=` escape.
    #[error("invalid saslname")]
    SaslName,
    /// A nonce is empty, too long, or has a character outside 0x21–0x7E.
    #[error("invalid nonce")]
    Nonce,
    /// An extension is not `key=value` with `key` in `[A-Za-z]+` (not a reserved attribute).
    #[error("invalid extension")]
    Extension,
    /// An extension name appears twice.
    #[error("duplicate extension")]
    DuplicateExtension,
    /// More than [`MAX_EXTENSIONS`] extensions.
    #[error("too many extensions")]
    TooManyExtensions,
    /// A base64 attribute is not canonical padded base64.
    #[error("invalid base64 in '{0}='")]
    Base64(&'static str),
    /// The iteration count is not a decimal u32.
    #[error("invalid iteration count")]
    Iterations,
}

/// A parsed client-first-message.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientFirst {
    /// The gs2 header as received (`n,,` or `n,a=<authzid>,`); the client must echo it in `c=`.
    pub gs2_header: String,
    /// The unescaped authorization id, if one was sent.
    pub authzid: Option<String>,
    /// The unescaped user name (or token id with `tokenauth=true`).
    pub username: String,
    /// The client nonce.
    pub nonce: String,
    /// Extensions in the order received.
    pub extensions: Vec<(String, String)>,
    /// client-first-message-bare exactly as received, for the AuthMessage.
    pub bare: String,
}

impl ClientFirst {
    /// The value of extension `key`, if sent.
    pub fn extension(&self, key: &str) -> Option<&str> {
        self.extensions
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A parsed client-final-message.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientFinal {
    /// The decoded `c=` value: the gs2 header (no channel-binding data is supported).
    pub channel_binding: Vec<u8>,
    /// The combined nonce the client echoed.
    pub nonce: String,
    /// The decoded ClientProof.
    pub proof: Vec<u8>,
    /// client-final-message-without-proof exactly as received, for the AuthMessage.
    pub without_proof: String,
}

/// A parsed server-first-message (client side).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerFirst {
    /// The combined nonce.
    pub nonce: String,
    /// The decoded salt.
    pub salt: Vec<u8>,
    /// The iteration count.
    pub iterations: u32,
}

/// A parsed server-final-message (client side).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerFinal {
    /// `v=`: the decoded ServerSignature.
    Verifier(Vec<u8>),
    /// `e=`: the server's error value.
    Error(String),
}

/// Parses a client-first-message:
/// `gs2-cbind-flag "," [ "a=" saslname ] "," [ "m=" ... "," ] "n=" saslname ",r=" nonce *("," ext)`.
pub fn parse_client_first(message: &[u8]) -> Result<ClientFirst, ParseError> {
    let text = ascii_text(message)?;
    let (flag, rest) = text.split_once(',').ok_or(ParseError::Gs2Header)?;
    match flag {
        "n" => {}
        "y" => return Err(ParseError::ChannelBinding),
        f if f.starts_with("p=") => return Err(ParseError::ChannelBinding),
        _ => return Err(ParseError::Gs2Header),
    }
    let (authz, bare) = rest.split_once(',').ok_or(ParseError::Gs2Header)?;
    let authzid = if authz.is_empty() {
        None
    } else {
        let escaped = authz.strip_prefix("a=").ok_or(ParseError::Gs2Header)?;
        Some(unescape_saslname(escaped)?)
    };
    let gs2_header_len = flag.len() + 1 + authz.len() + 1;
    let gs2_header = text.get(..gs2_header_len).ok_or(ParseError::Gs2Header)?;

    let mut attributes = bare.split(',');
    let first = attributes.next().unwrap_or_default();
    if first.starts_with("m=") {
        return Err(ParseError::MandatoryExtension);
    }
    let username = unescape_saslname(
        first
            .strip_prefix("n=")
            .ok_or(ParseError::MissingAttribute("n"))?,
    )?;
    let nonce = attributes
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or(ParseError::MissingAttribute("r"))?;
    check_nonce(nonce)?;
    let extensions = parse_extensions(attributes)?;
    Ok(ClientFirst {
        gs2_header: gs2_header.to_owned(),
        authzid,
        username,
        nonce: nonce.to_owned(),
        extensions,
        bare: bare.to_owned(),
    })
}

/// Parses a client-final-message: `"c=" base64 ",r=" nonce *("," ext) ",p=" base64`.
pub fn parse_client_final(message: &[u8]) -> Result<ClientFinal, ParseError> {
    let text = ascii_text(message)?;
    // The proof is always the last attribute, so the signed part ends at the last comma.
    let (without_proof, proof_attribute) = text
        .rsplit_once(',')
        .ok_or(ParseError::MissingAttribute("p"))?;
    let proof = proof_attribute
        .strip_prefix("p=")
        .ok_or(ParseError::MissingAttribute("p"))?;
    let mut attributes = without_proof.split(',');
    let channel_binding = attributes
        .next()
        .and_then(|a| a.strip_prefix("c="))
        .ok_or(ParseError::MissingAttribute("c"))?;
    let nonce = attributes
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or(ParseError::MissingAttribute("r"))?;
    check_nonce(nonce)?;
    // Extensions of the final message are allowed by the grammar and ignored, like Kafka does;
    // they are still checked so that the message is well formed.
    parse_extensions(attributes)?;
    Ok(ClientFinal {
        channel_binding: B64
            .decode(channel_binding)
            .map_err(|_| ParseError::Base64("c"))?,
        nonce: nonce.to_owned(),
        proof: B64.decode(proof).map_err(|_| ParseError::Base64("p"))?,
        without_proof: without_proof.to_owned(),
    })
}

/// Parses a server-first-message: `[ "m=" ... "," ] "r=" nonce ",s=" base64 ",i=" digits *("," ext)`.
pub fn parse_server_first(message: &[u8]) -> Result<ServerFirst, ParseError> {
    let text = ascii_text(message)?;
    let mut attributes = text.split(',');
    let first = attributes.next().unwrap_or_default();
    if first.starts_with("m=") {
        return Err(ParseError::MandatoryExtension);
    }
    let nonce = first
        .strip_prefix("r=")
        .ok_or(ParseError::MissingAttribute("r"))?;
    check_nonce(nonce)?;
    let salt = attributes
        .next()
        .and_then(|a| a.strip_prefix("s="))
        .ok_or(ParseError::MissingAttribute("s"))?;
    let iterations = attributes
        .next()
        .and_then(|a| a.strip_prefix("i="))
        .ok_or(ParseError::MissingAttribute("i"))?;
    parse_extensions(attributes)?;
    Ok(ServerFirst {
        nonce: nonce.to_owned(),
        salt: B64.decode(salt).map_err(|_| ParseError::Base64("s"))?,
        iterations: parse_u32(iterations)?,
    })
}

/// Parses a server-final-message: `"e=" value` or `"v=" base64 *("," ext)`.
pub fn parse_server_final(message: &[u8]) -> Result<ServerFinal, ParseError> {
    let text = ascii_text(message)?;
    if let Some(error) = text.strip_prefix("e=") {
        return Ok(ServerFinal::Error(error.to_owned()));
    }
    let mut attributes = text.split(',');
    let verifier = attributes
        .next()
        .and_then(|a| a.strip_prefix("v="))
        .ok_or(ParseError::MissingAttribute("v"))?;
    parse_extensions(attributes)?;
    B64.decode(verifier)
        .map(ServerFinal::Verifier)
        .map_err(|_| ParseError::Base64("v"))
}

/// Escapes a name for the `n=`/`a=` attributes (`,` → `=2C`, `=` → `=3D`). The name must be
/// non-empty ASCII without NUL, which is what a Kafka server accepts.
pub fn escape_saslname(name: &str) -> Result<String, ParseError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.bytes().all(is_message_byte) {
        return Err(ParseError::SaslName);
    }
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            ',' => out.push_str("=2C"),
            '=' => out.push_str("=3D"),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Checks that an extension can be sent as-is (`[A-Za-z]+` key, value without `,`).
pub fn check_extension(key: &str, value: &str) -> Result<(), ParseError> {
    if key.is_empty()
        || key.len() > MAX_EXTENSION_KEY_LEN
        || !key.bytes().all(|b| b.is_ascii_alphabetic())
        || is_reserved_attribute(key)
    {
        return Err(ParseError::Extension);
    }
    if value.is_empty()
        || value.len() > MAX_EXTENSION_VALUE_LEN
        || !value.bytes().all(|b| is_message_byte(b) && b != b',')
    {
        return Err(ParseError::Extension);
    }
    Ok(())
}

fn ascii_text(message: &[u8]) -> Result<&str, ParseError> {
    if message.len() > MAX_MESSAGE_LEN {
        return Err(ParseError::TooLong);
    }
    if !message.iter().copied().all(is_message_byte) {
        return Err(ParseError::NotAscii);
    }
    std::str::from_utf8(message).map_err(|_| ParseError::NotAscii)
}

fn is_message_byte(b: u8) -> bool {
    (0x01..=0x7F).contains(&b)
}

/// `saslname = 1*(value-safe-char / "=2C" / "=3D")`; any other `=` is an error.
fn unescape_saslname(escaped: &str) -> Result<String, ParseError> {
    if escaped.is_empty() || escaped.len() > MAX_NAME_LEN {
        return Err(ParseError::SaslName);
    }
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find('=') {
        out.push_str(rest.get(..at).ok_or(ParseError::SaslName)?);
        let after = rest.get(at..).ok_or(ParseError::SaslName)?;
        if let Some(tail) = after.strip_prefix("=2C") {
            out.push(',');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("=3D") {
            out.push('=');
            rest = tail;
        } else {
            return Err(ParseError::SaslName);
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// `nonce = 1*printable` where printable is 0x21–0x7E without `,`.
fn check_nonce(nonce: &str) -> Result<(), ParseError> {
    if nonce.is_empty()
        || nonce.len() > MAX_NONCE_LEN
        || !nonce
            .bytes()
            .all(|b| (0x21..=0x7E).contains(&b) && b != b',')
    {
        return Err(ParseError::Nonce);
    }
    Ok(())
}

/// The attribute letters RFC 5802 reserves: an extension with one of these names would be
/// confused with the attribute itself (a second `p=` before the proof, say).
fn is_reserved_attribute(key: &str) -> bool {
    matches!(
        key,
        "a" | "c" | "e" | "i" | "m" | "n" | "p" | "r" | "s" | "v"
    )
}

fn parse_extensions<'a>(
    attributes: impl Iterator<Item = &'a str>,
) -> Result<Vec<(String, String)>, ParseError> {
    let mut extensions: Vec<(String, String)> = Vec::new();
    for attribute in attributes {
        if extensions.len() == MAX_EXTENSIONS {
            return Err(ParseError::TooManyExtensions);
        }
        let (key, value) = attribute.split_once('=').ok_or(ParseError::Extension)?;
        check_extension(key, value)?;
        if extensions.iter().any(|(k, _)| k == key) {
            return Err(ParseError::DuplicateExtension);
        }
        extensions.push((key.to_owned(), value.to_owned()));
    }
    Ok(extensions)
}

fn parse_u32(digits: &str) -> Result<u32, ParseError> {
    // `str::parse` accepts a leading '+'; the grammar allows digits only.
    if digits.is_empty() || digits.len() > 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::Iterations);
    }
    digits.parse().map_err(|_| ParseError::Iterations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_first_with_authzid_and_extensions() {
        let m =
            parse_client_first(b"n,a=al=2Cice,n=al=2Cice,r=abc,tokenauth=true,foo=b=ar").unwrap();
        assert_eq!(m.gs2_header, "n,a=al=2Cice,");
        assert_eq!(m.authzid.as_deref(), Some("al,ice"));
        assert_eq!(m.username, "al,ice");
        assert_eq!(m.nonce, "abc");
        assert_eq!(
            m.extensions,
            vec![
                ("tokenauth".to_owned(), "true".to_owned()),
                ("foo".to_owned(), "b=ar".to_owned())
            ]
        );
        assert_eq!(m.bare, "n=al=2Cice,r=abc,tokenauth=true,foo=b=ar");
        assert_eq!(m.extension("foo"), Some("b=ar"));
    }

    #[test]
    fn saslname_escapes() {
        assert_eq!(
            parse_client_first(b"n,,n=a=3Db=2Cc,r=x").unwrap().username,
            "a=b,c"
        );
        for bad in [
            &b"n,,n=a=b,r=x"[..],
            b"n,,n=a=2c,r=x",
            b"n,,n=a=,r=x",
            b"n,,n=a=3,r=x",
            b"n,,n=,r=x",
        ] {
            assert_eq!(
                parse_client_first(bad),
                Err(ParseError::SaslName),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(escape_saslname("a=b,c").unwrap(), "a=3Db=2Cc");
        assert!(escape_saslname("").is_err());
        assert!(escape_saslname("j\u{f6}rg").is_err());
    }

    #[test]
    fn client_first_rejections() {
        let cases: &[(&[u8], ParseError)] = &[
            (b"y,,n=u,r=x", ParseError::ChannelBinding),
            (b"p=tls-unique,,n=u,r=x", ParseError::ChannelBinding),
            (b"x,,n=u,r=x", ParseError::Gs2Header),
            (b"n,a,n=x,r=y", ParseError::Gs2Header),
            (b"n,a=,n=x,r=y", ParseError::SaslName),
            (b"n,,m=ext,n=u,r=x", ParseError::MandatoryExtension),
            (b"n,,n", ParseError::MissingAttribute("n")),
            (b"n,,", ParseError::MissingAttribute("n")),
            (b"n,", ParseError::Gs2Header),
            (b"n", ParseError::Gs2Header),
            (b"", ParseError::Gs2Header),
            (b"n,,n=u", ParseError::MissingAttribute("r")),
            (b"n,,n=u,r=", ParseError::Nonce),
            (b"n,,n=u,x=abc", ParseError::MissingAttribute("r")),
            (b"n,,n=u,r=a b", ParseError::Nonce),
            (b"n,,n=u,r=abc,", ParseError::Extension),
            (b"n,,n=u,r=abc,1x=2", ParseError::Extension),
            (b"n,,n=u,r=abc,k=", ParseError::Extension),
            (b"n,,n=u,r=abc,p=x", ParseError::Extension),
            (b"n,,n=u,r=abc,kk", ParseError::Extension),
            (b"n,,n=u,r=abc,k=1,k=2", ParseError::DuplicateExtension),
            (b"n,,n=j\xc3\xb6rg,r=abc", ParseError::NotAscii),
            (b"n,,n=u\0,r=abc", ParseError::NotAscii),
        ];
        for (input, expected) in cases {
            assert_eq!(
                parse_client_first(input),
                Err(*expected),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
        let mut long = b"n,,n=u,r=".to_vec();
        long.extend(std::iter::repeat_n(b'x', MAX_MESSAGE_LEN));
        assert_eq!(parse_client_first(&long), Err(ParseError::TooLong));
        let many: String = (0..=MAX_EXTENSIONS)
            .map(|i| format!(",{}=v", std::iter::repeat_n('k', i + 1).collect::<String>()))
            .collect();
        assert_eq!(
            parse_client_first(format!("n,,n=u,r=x{many}").as_bytes()),
            Err(ParseError::TooManyExtensions)
        );
    }

    #[test]
    fn client_final() {
        let m = parse_client_final(b"c=biws,r=abcdef,ext=1,p=AAEC").unwrap();
        assert_eq!(m.channel_binding, b"n,,");
        assert_eq!(m.nonce, "abcdef");
        assert_eq!(m.proof, vec![0, 1, 2]);
        assert_eq!(m.without_proof, "c=biws,r=abcdef,ext=1");
        for (bad, expected) in [
            (&b"c=biws,r=abc"[..], ParseError::MissingAttribute("p")),
            (b"r=abc,c=biws,p=AAEC", ParseError::MissingAttribute("c")),
            (b"c=biws,p=AAEC", ParseError::MissingAttribute("r")),
            (b"c=bi!s,r=abc,p=AAEC", ParseError::Base64("c")),
            (b"c=biws,r=abc,p=AAE", ParseError::Base64("p")),
            (b"c=biws,r=abc,p=x,p=AAEC", ParseError::Extension),
            (b"p=AAEC", ParseError::MissingAttribute("p")),
        ] {
            assert_eq!(parse_client_final(bad), Err(expected));
        }
    }

    #[test]
    fn server_messages() {
        let m = parse_server_first(b"r=abc,s=AAEC,i=4096").unwrap();
        assert_eq!(
            (m.nonce.as_str(), m.salt.as_slice(), m.iterations),
            ("abc", &[0u8, 1, 2][..], 4096)
        );
        assert_eq!(
            parse_server_first(b"r=abc,s=AAEC,i=+4096"),
            Err(ParseError::Iterations)
        );
        assert_eq!(
            parse_server_first(b"r=abc,s=AAEC,i=99999999999"),
            Err(ParseError::Iterations)
        );
        assert_eq!(
            parse_server_first(b"m=x,r=abc,s=AAEC,i=1"),
            Err(ParseError::MandatoryExtension)
        );
        assert_eq!(
            parse_server_final(b"v=AAEC").unwrap(),
            ServerFinal::Verifier(vec![0, 1, 2])
        );
        assert_eq!(
            parse_server_final(b"e=invalid-proof").unwrap(),
            ServerFinal::Error("invalid-proof".to_owned())
        );
        assert!(parse_server_final(b"x=1").is_err());
    }
}
