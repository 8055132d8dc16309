//! What a TLS handshake learned about the client, for the principal builder: the certificate
//! chain the client presented (already verified by rustls against `[listener.tls] ca_file`) and
//! the leaf's subject as an RFC 2253 distinguished name
//! ([`portcullis::principal::certificate_subject`]: what Kafka's `ssl.principal.mapping.rules`
//! apply to).

use portcullis::principal::{certificate_subject, TlsPeer};

/// The peer of an accepted TLS connection, from the certificates rustls reports (leaf first).
pub fn peer_of(certificates: Option<&[rustls::pki_types::CertificateDer<'_>]>) -> TlsPeer {
    let Some(chain) = certificates.filter(|c| !c.is_empty()) else {
        return TlsPeer::default();
    };
    let certificates: Vec<Vec<u8>> = chain.iter().map(|c| c.as_ref().to_vec()).collect();
    let subject = certificates
        .first()
        .and_then(|leaf| certificate_subject(leaf));
    TlsPeer::new(certificates, subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(names: &[(rcgen::DnType, &str)]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        for (kind, value) in names {
            dn.push(kind.clone(), *value);
        }
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn subjects_read_as_java_writes_them() {
        let der = certificate(&[
            (rcgen::DnType::CountryName, "DE"),
            (rcgen::DnType::OrganizationName, "Example, Inc"),
            (rcgen::DnType::OrganizationalUnitName, "eng"),
            (rcgen::DnType::CommonName, "svc-orders"),
        ]);
        assert_eq!(
            certificate_subject(&der).as_deref(),
            Some("CN=svc-orders,OU=eng,O=Example\\, Inc,C=DE")
        );
        let peer = peer_of(Some(&[rustls::pki_types::CertificateDer::from(
            der.clone(),
        )]));
        assert_eq!(peer.certificates, vec![der]);
        assert_eq!(
            peer.subject.as_deref(),
            Some("CN=svc-orders,OU=eng,O=Example\\, Inc,C=DE")
        );
        assert_eq!(peer_of(None), TlsPeer::default());
    }
}
