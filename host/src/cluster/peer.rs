//! The inter-node peer's principal, from its client certificate.
//!
//! TEMPORARY SEAM (issue 13 / issue 11): this is Kafka's `DefaultKafkaPrincipalBuilder` for an
//! SSL peer with the default `ssl.principal.mapping.rules` (`DEFAULT`): `User:` followed by the
//! certificate subject's RFC 2253 distinguished name. It lives here, as one small function, only
//! until the node's `PrincipalBuilder` receives the TLS peer certificate chain (issue 11); then
//! the inter-node listener must build the peer principal through the node's `PrincipalBuilder`
//! like every other listener, and this module goes away.

use portcullis::principal::Principal;
use x509_parser::der_parser::asn1_rs::Tag;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::AttributeTypeAndValue;

/// `User:<RFC 2253 subject DN>` of a DER certificate, or `None` if it does not parse.
pub(crate) fn principal_from_certificate(der: &[u8]) -> Option<Principal> {
    let (_, certificate) = X509Certificate::from_der(der).ok()?;
    let subject = rfc2253(certificate.subject())?;
    Some(Principal::user(subject))
}

/// The RFC 2253 string of a name, as Java's `X500Principal.getName(RFC2253)` writes it: RDNs in
/// reverse order of their encoding, comma-separated, the attributes of a multi-valued RDN joined
/// with `+`, the keywords Java knows and dotted OIDs (with a `#`-hex value) for the rest.
fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> Option<String> {
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(attribute)
                .collect::<Option<Vec<String>>>()
                .map(|parts| parts.join("+"))
        })
        .collect::<Option<Vec<String>>>()?;
    Some(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

fn attribute(atv: &AttributeTypeAndValue<'_>) -> Option<String> {
    let oid = atv.attr_type().to_id_string();
    let keyword = match oid.as_str() {
        "2.5.4.3" => Some("CN"),
        "2.5.4.6" => Some("C"),
        "2.5.4.7" => Some("L"),
        "2.5.4.8" => Some("ST"),
        "2.5.4.10" => Some("O"),
        "2.5.4.11" => Some("OU"),
        "2.5.4.9" => Some("STREET"),
        "0.9.2342.19200300.100.1.25" => Some("DC"),
        "0.9.2342.19200300.100.1.1" => Some("UID"),
        _ => None,
    };
    let value = atv.attr_value();
    let text = match value.tag() {
        Tag::Utf8String
        | Tag::PrintableString
        | Tag::Ia5String
        | Tag::NumericString
        | Tag::TeletexString
        | Tag::VisibleString => std::str::from_utf8(value.data).ok().map(str::to_owned),
        Tag::BmpString => {
            let units: Vec<u16> = value
                .data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c.first().copied()?, c.get(1).copied()?]).into())
                .collect::<Option<Vec<u16>>>()
                .unwrap_or_default();
            String::from_utf16(&units).ok()
        }
        _ => None,
    };
    match (keyword, text) {
        (Some(keyword), Some(text)) => Some(format!("{keyword}={}", escape(&text))),
        // Unknown attribute types (or values that are not strings): the dotted OID and the
        // value's DER encoding in hex, as RFC 2253 §2.4 says.
        (keyword, _) => {
            let tag = u8::try_from(value.tag().0).ok().filter(|t| *t < 31)?;
            let mut der = vec![tag];
            der.extend(der_length(value.data.len()));
            der.extend_from_slice(value.data);
            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
            Some(format!(
                "{}=#{hex}",
                keyword.map_or(oid.clone(), str::to_owned)
            ))
        }
    }
}

fn der_length(len: usize) -> Vec<u8> {
    if len < 0x80 {
        return vec![len as u8];
    }
    let bytes: Vec<u8> = len
        .to_be_bytes()
        .into_iter()
        .skip_while(|b| *b == 0)
        .collect();
    let mut out = vec![0x80 | bytes.len() as u8];
    out.extend(bytes);
    out
}

/// RFC 2253 §2.4 escaping.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    fn certificate(dn: &[(DnType, &str)]) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut name = DistinguishedName::new();
        for (kind, value) in dn {
            name.push(kind.clone(), *value);
        }
        params.distinguished_name = name;
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn subject_in_rfc2253_order_with_kafkas_user_prefix() {
        let der = certificate(&[
            (DnType::CountryName, "DE"),
            (DnType::OrganizationName, "Example, Inc"),
            (DnType::CommonName, "node-a"),
        ]);
        assert_eq!(
            principal_from_certificate(&der).unwrap().to_string(),
            r"User:CN=node-a,O=Example\, Inc,C=DE"
        );
    }

    #[test]
    fn escapes_leading_and_trailing_specials() {
        assert_eq!(escape("#a b "), r"\#a b\ ");
        assert_eq!(escape(r#"a"b<c>;d\"#), r#"a\"b\<c\>\;d\\"#);
    }

    #[test]
    fn garbage_is_no_principal() {
        assert_eq!(principal_from_certificate(b"not a certificate"), None);
    }
}
