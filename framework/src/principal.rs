//! Principals and how an authenticated identity (SASL, and on TLS listeners the client
//! certificate) becomes one. The types are the plugin API's; the certificate subject a TLS
//! connection's principal builder sees is worked out here: an RFC 2253 distinguished name written
//! as Java's `X500Principal.getName()` writes it — the string Kafka's `ssl.principal.mapping.rules`
//! apply to: most specific RDN first, `,` between RDNs and `+` inside one, no spaces, the usual
//! keywords (`CN`, `OU`, `O`, `L`, `ST`, `C`, `STREET`, `DC`, `UID`), other attributes as their
//! dotted OID, and `,+"\<>;` escaped with a backslash.

use std::fmt::Write as _;

use x509_parser::prelude::{FromDer, X509Certificate};

pub use portcullis_plugin_api::principal::*;

/// The RFC 2253 subject of a DER certificate; `None` if it does not parse (which rustls, having
/// verified it, makes unexpected).
pub fn certificate_subject(der: &[u8]) -> Option<String> {
    let (_, certificate) = X509Certificate::from_der(der).ok()?;
    let mut out = String::new();
    // RFC 2253 §2.1: the RDNs in reverse order of the encoding.
    let rdns: Vec<_> = certificate.subject().iter().collect();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, attribute) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = attribute.attr_type().to_id_string();
            match keyword(&oid) {
                Some(keyword) => out.push_str(keyword),
                None => out.push_str(&oid),
            }
            out.push('=');
            match attribute.as_str() {
                Ok(text) => escape_into(&mut out, text),
                Err(_) => {
                    // Not a string type x509-parser decodes: RFC 2253's `#` + hex of the value.
                    out.push('#');
                    for byte in attribute.as_slice() {
                        let _ = write!(out, "{byte:02x}");
                    }
                }
            }
        }
    }
    Some(out)
}

fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// RFC 2253 §2.4: a backslash before `,+"\<>;`, before a leading `#` or space, and before a
/// trailing space.
fn escape_into(out: &mut String, value: &str) {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped() {
        let mut out = String::new();
        escape_into(&mut out, "#a+b;c ");
        assert_eq!(out, "\\#a\\+b\\;c\\ ");
    }

    #[test]
    fn garbage_has_no_subject() {
        for len in 0..64 {
            assert_eq!(certificate_subject(&vec![0x30; len]), None);
        }
    }
}
