//! The client certificate's subject, as the principal builder receives it: any bytes a client
//! could present (rustls verifies the chain first, but the parser must not depend on that) give
//! a subject or `None`, never a panic; a subject never ends in an unescaped separator.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::principal::certificate_subject;

fuzz_target!(|data: &[u8]| {
    if let Some(subject) = certificate_subject(data) {
        assert!(
            !subject.ends_with(',') || subject.ends_with("\\,"),
            "{subject}"
        );
    }
});
