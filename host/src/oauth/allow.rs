//! `[oauthbearer] allowed_urls`: the operator's list of URL prefixes that Portcullis may fetch
//! from (CVE-2025-27817: a JWKS or token URL pointed at an internal service or a local file is a
//! server-side request forgery or a file read).
//!
//! The rule, for an entry (a prefix) and a URL:
//!
//! - both are parsed and normalised first (`url::Url`: scheme and host lower-cased, the default
//!   port dropped, `.`/`..` segments resolved, `https://idp.example` written
//!   `https://idp.example/`, `file:/etc/x` written `file:///etc/x`), so `..` cannot climb out of
//!   an allowed path and `HTTPS://IDP.EXAMPLE` is the same URL as `https://idp.example`;
//! - the URL is allowed when its normalised text starts with the entry's, **and** the entry ends
//!   with `/` or the URL's next character is `/`, `?` or `#` (or there is none): the entry
//!   `https://idp.example/realms/kafka` allows `…/realms/kafka/protocol/…` but not
//!   `…/realms/kafka-evil/…`. Write entries with a trailing slash to say exactly which path is
//!   allowed; a bare origin (`https://idp.example`) already gets one when normalised, so
//!   `https://idp.example.evil/` never passes for it;
//! - only `http`, `https` and `file` URLs exist here; a URL with a user name or password in it
//!   is refused (it would end up in logs);
//! - an empty list allows nothing: every URL is refused, naming the key that holds it.

use url::Url;

/// The schemes Portcullis fetches from.
const SCHEMES: [&str; 3] = ["https", "http", "file"];

/// The parsed `allowed_urls`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    prefixes: Vec<String>,
}

/// Why a URL (or an entry of the list) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefused {
    /// Not a URL at all.
    #[error("`{url}` is not a URL: {reason}")]
    Unparsable {
        /// The text.
        url: String,
        /// The parser's reason.
        reason: String,
    },
    /// A scheme other than http, https or file.
    #[error("`{url}`: only http://, https:// and file: URLs are supported")]
    Scheme {
        /// The text.
        url: String,
    },
    /// A user name or password in the URL.
    #[error("`{url}`: a URL must not carry a user name or password (it would be logged)")]
    UserInfo {
        /// The URL without its credentials.
        url: String,
    },
    /// No entry of the list allows it.
    #[error("`{url}` is not allowed by oauthbearer.allowed_urls ({})", listed(.allowed))]
    NotAllowed {
        /// The normalised URL.
        url: String,
        /// The normalised entries of the list.
        allowed: Vec<String>,
    },
}

fn listed(allowed: &[String]) -> String {
    if allowed.is_empty() {
        "the list is empty, so no URL is: add the identity provider's prefix, e.g. \
         allowed_urls = [\"https://idp.example/\"]"
            .to_owned()
    } else {
        format!(
            "which allows URLs starting with {}",
            allowed
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Parses `text` as a URL Portcullis could fetch: http, https or file, no credentials.
///
/// # Errors
/// [`UrlRefused`] saying why not.
pub fn parse_url(text: &str) -> Result<Url, UrlRefused> {
    let url = Url::parse(text.trim()).map_err(|e| UrlRefused::Unparsable {
        url: text.to_owned(),
        reason: e.to_string(),
    })?;
    if !SCHEMES.contains(&url.scheme()) {
        return Err(UrlRefused::Scheme {
            url: text.to_owned(),
        });
    }
    if !url.username().is_empty() || url.password().is_some() {
        let mut shown = url.clone();
        // Only fails for URLs that cannot have credentials, which this one has.
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        return Err(UrlRefused::UserInfo {
            url: shown.to_string(),
        });
    }
    if url.scheme() != "file" && url.host_str().is_none_or(str::is_empty) {
        return Err(UrlRefused::Unparsable {
            url: text.to_owned(),
            reason: "no host".to_owned(),
        });
    }
    Ok(url)
}

impl AllowList {
    /// Parses the entries of `allowed_urls`.
    ///
    /// # Errors
    /// The first entry that is not an http, https or file URL.
    pub fn new(entries: &[String]) -> Result<Self, UrlRefused> {
        let prefixes = entries
            .iter()
            .map(|entry| parse_url(entry).map(|url| url.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { prefixes })
    }

    /// The normalised entries.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// Parses `text` and checks it against the list.
    ///
    /// # Errors
    /// [`UrlRefused`]: not a usable URL, or allowed by no entry.
    pub fn check(&self, text: &str) -> Result<Url, UrlRefused> {
        let url = parse_url(text)?;
        if self.allows(&url) {
            Ok(url)
        } else {
            Err(UrlRefused::NotAllowed {
                url: url.to_string(),
                allowed: self.prefixes.clone(),
            })
        }
    }

    /// Whether an entry allows `url` (see the module's rule).
    pub fn allows(&self, url: &Url) -> bool {
        let url = url.as_str();
        self.prefixes.iter().any(|prefix| {
            url.strip_prefix(prefix.as_str()).is_some_and(|rest| {
                prefix.ends_with('/') || rest.is_empty() || rest.starts_with(['/', '?', '#'])
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowList {
        AllowList::new(&entries.iter().map(|e| (*e).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    fn allowed(list: &AllowList, url: &str) -> bool {
        list.check(url).is_ok()
    }

    #[test]
    fn a_prefix_with_a_trailing_slash_allows_what_is_under_it() {
        let l = list(&["https://idp.example/"]);
        assert!(allowed(
            &l,
            "https://idp.example/realms/kafka/protocol/openid-connect/certs"
        ));
        assert!(allowed(&l, "https://idp.example/"));
        assert!(allowed(&l, "https://idp.example"));
        assert!(
            allowed(&l, "HTTPS://IDP.EXAMPLE/x"),
            "scheme and host are case-blind"
        );
        assert!(allowed(&l, "https://idp.example:443/x"), "the default port");
        assert!(!allowed(&l, "https://idp.example.evil/"));
        assert!(!allowed(&l, "https://idp.example.evil/realms"));
        assert!(!allowed(&l, "https://idp.example:8443/x"), "another port");
        assert!(!allowed(&l, "http://idp.example/x"), "another scheme");
        assert!(!allowed(&l, "https://evil.example/https://idp.example/"));
    }

    #[test]
    fn a_bare_origin_does_not_allow_a_longer_host() {
        let l = list(&["https://idp.example"]);
        assert_eq!(l.prefixes(), ["https://idp.example/"]);
        assert!(allowed(&l, "https://idp.example/certs"));
        assert!(!allowed(&l, "https://idp.example.evil"));
        assert!(!allowed(&l, "https://idp.example.evil/certs"));
        assert!(!allowed(&l, "https://idp.examplex/"));
        // userinfo tricks are refused outright
        assert!(matches!(
            l.check("https://idp.example@evil.example/"),
            Err(UrlRefused::UserInfo { .. })
        ));
    }

    #[test]
    fn a_path_prefix_without_a_slash_matches_whole_segments_only() {
        let l = list(&["https://idp.example/realms/kafka"]);
        assert!(allowed(&l, "https://idp.example/realms/kafka"));
        assert!(allowed(&l, "https://idp.example/realms/kafka/certs"));
        assert!(allowed(&l, "https://idp.example/realms/kafka?x=1"));
        assert!(!allowed(&l, "https://idp.example/realms/kafka-evil/certs"));
        assert!(!allowed(&l, "https://idp.example/realms/kafkaX"));
        let slash = list(&["https://idp.example/realms/kafka/"]);
        assert!(!allowed(&slash, "https://idp.example/realms/kafka"));
        assert!(allowed(&slash, "https://idp.example/realms/kafka/certs"));
    }

    #[test]
    fn dot_segments_cannot_climb_out_of_an_allowed_path() {
        let l = list(&["https://idp.example/realms/kafka/"]);
        assert!(!allowed(
            &l,
            "https://idp.example/realms/kafka/../../admin/secrets"
        ));
        assert!(allowed(&l, "https://idp.example/realms/kafka/./certs"));
    }

    #[test]
    fn file_urls_need_their_own_entry() {
        let web = list(&["https://idp.example/"]);
        assert!(!allowed(&web, "file:/etc/portcullis/jwks.json"));
        let files = list(&["file:/etc/portcullis/"]);
        assert_eq!(files.prefixes(), ["file:///etc/portcullis/"]);
        assert!(allowed(&files, "file:/etc/portcullis/jwks.json"));
        assert!(allowed(&files, "file:///etc/portcullis/jwks.json"));
        assert!(!allowed(&files, "file:/etc/passwd"));
        assert!(!allowed(&files, "file:/etc/portcullis/../shadow"));
        assert!(!allowed(&files, "file:/etc/portcullis-other/jwks.json"));
    }

    #[test]
    fn an_empty_list_allows_nothing_and_says_so() {
        let l = list(&[]);
        let err = l.check("https://idp.example/certs").unwrap_err();
        assert!(matches!(err, UrlRefused::NotAllowed { .. }));
        assert!(err.to_string().contains("the list is empty"), "{err}");
    }

    #[test]
    fn entries_and_urls_must_be_http_https_or_file() {
        for bad in [
            "ftp://idp.example/",
            "idp.example/",
            "",
            "gopher://x/",
            "https://",
        ] {
            assert!(
                AllowList::new(&[bad.to_owned()]).is_err(),
                "{bad:?} accepted as an entry"
            );
        }
        let l = list(&["https://idp.example/"]);
        assert!(matches!(
            l.check("ftp://idp.example/x"),
            Err(UrlRefused::Scheme { .. })
        ));
        assert!(matches!(
            l.check("not a url"),
            Err(UrlRefused::Unparsable { .. })
        ));
    }
}
