//! The PLAIN client message: `authzid NUL authcid NUL passwd` (RFC 4616 §2), parsed the way
//! Kafka's `PlainSaslServer.extractTokens` counts tokens.

/// Why a PLAIN message was refused. The `Display` text is what Kafka sends to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlainParseError {
    /// Not exactly three NUL-separated tokens. Like Kafka, counting stops at four.
    #[error("Invalid SASL/PLAIN response: expected 3 tokens, got {0}")]
    TokenCount(usize),
    /// The message is not UTF-8.
    #[error("Invalid SASL/PLAIN response: not valid UTF-8")]
    NotUtf8,
    /// The user name is empty.
    #[error("Authentication failed: username not specified")]
    EmptyUsername,
    /// The password is empty.
    #[error("Authentication failed: password not specified")]
    EmptyPassword,
}

/// A parsed PLAIN message, borrowing from the received bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PlainMessage<'a> {
    /// The requested authorization id; empty when the client sent none.
    pub authzid: &'a str,
    /// The user name.
    pub username: &'a str,
    /// The password.
    pub password: &'a str,
}

impl std::fmt::Debug for PlainMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainMessage")
            .field("authzid", &self.authzid)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Parses `authzid NUL username NUL password`.
pub fn parse(message: &[u8]) -> Result<PlainMessage<'_>, PlainParseError> {
    let text = std::str::from_utf8(message).map_err(|_| PlainParseError::NotUtf8)?;
    // Kafka splits at most four times and reports the count it reached, so "got 4" covers every
    // message with three or more NULs.
    let mut tokens = text.splitn(4, '\0');
    let (Some(authzid), Some(username), Some(password), None) =
        (tokens.next(), tokens.next(), tokens.next(), tokens.next())
    else {
        return Err(PlainParseError::TokenCount(text.splitn(4, '\0').count()));
    };
    if username.is_empty() {
        return Err(PlainParseError::EmptyUsername);
    }
    if password.is_empty() {
        return Err(PlainParseError::EmptyPassword);
    }
    Ok(PlainMessage {
        authzid,
        username,
        password,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_tokens() {
        let m = parse(b"\0alice\0secret").unwrap();
        assert_eq!((m.authzid, m.username, m.password), ("", "alice", "secret"));
        let m = parse(b"alice\0alice\0p\xc3\xa4ss").unwrap();
        assert_eq!((m.authzid, m.password), ("alice", "p\u{e4}ss"));
        assert!(!format!("{m:?}").contains("pss"));
    }

    #[test]
    fn token_counts_like_kafka() {
        for (input, n) in [
            (&b""[..], 1),
            (b"alice", 1),
            (b"\0alice", 2),
            (b"\0alice\0secret\0", 4),
            (b"a\0b\0c\0d\0e\0f", 4),
        ] {
            assert_eq!(parse(input), Err(PlainParseError::TokenCount(n)));
        }
        assert_eq!(
            PlainParseError::TokenCount(2).to_string(),
            "Invalid SASL/PLAIN response: expected 3 tokens, got 2"
        );
    }

    #[test]
    fn empty_fields() {
        assert_eq!(parse(b"\0\0secret"), Err(PlainParseError::EmptyUsername));
        assert_eq!(parse(b"\0alice\0"), Err(PlainParseError::EmptyPassword));
        assert_eq!(parse(b"\0\0"), Err(PlainParseError::EmptyUsername));
        assert_eq!(parse(b"\0alice\0\xff"), Err(PlainParseError::NotUtf8));
    }
}
