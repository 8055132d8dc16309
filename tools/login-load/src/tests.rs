//! Unit tests of the option checks, the client mechanisms and the report arithmetic.

use clap::Parser;
use portcullis::credentials::ScramMechanism;
use portcullis::secret::Secret;

use crate::args::{Args, Mechanism};
use crate::mechanisms::ClientFactory;

fn args(extra: &[&str]) -> Args {
    let mut argv = vec![
        "portcullis-login-load",
        "--bootstrap",
        "127.0.0.1:9",
        "--user",
        "u",
    ];
    argv.extend_from_slice(extra);
    Args::try_parse_from(argv).unwrap()
}

#[test]
fn mechanisms_parse_case_insensitively() {
    let plan = args(&["--password", "p", "--mechanism", "scram-sha-256"])
        .plan()
        .unwrap();
    assert_eq!(plan.mechanism, Mechanism::Scram(ScramMechanism::Sha256));
    let plan = args(&["--password", "p", "--mechanism", "plain"])
        .plan()
        .unwrap();
    assert_eq!(plan.mechanism, Mechanism::Plain);
    assert!(args(&["--password", "p", "--mechanism", "GSSAPI"])
        .plan()
        .is_err());
}

#[test]
fn a_run_is_bounded_and_needs_a_password() {
    assert!(args(&[]).plan().is_err());
    assert!(args(&["--password", "p", "--connections", "0"])
        .plan()
        .is_err());
    assert!(args(&["--password", "p", "--duration", "0"])
        .plan()
        .is_err());
    assert!(args(&["--password", "p", "--duration", "inf"])
        .plan()
        .is_err());
    assert!(args(&["--password", "p", "--logins", "0"]).plan().is_err());
    assert!(
        args(&["--password-env", "PORTCULLIS_LOAD_TEST_UNSET_VARIABLE"])
            .plan()
            .is_err()
    );
    let plan = args(&["--password", "p", "--logins", "10"]).plan().unwrap();
    assert_eq!(plan.logins, Some(10));
    assert!(plan.duration.as_secs_f64() > 0.0);
}

#[test]
fn plain_sends_one_message_and_completes_on_the_answer() {
    let factory = ClientFactory::new(Mechanism::Plain, "alice".into(), Secret::new("s3cret"));
    let mut client = factory.start();
    assert_eq!(client.initial().unwrap(), b"\0alice\0s3cret");
    assert!(!client.is_complete());
    assert_eq!(client.step(b"").unwrap(), None);
    assert!(client.is_complete());
    assert!(client.step(b"").is_err());
}

#[test]
fn scram_client_refuses_a_forged_server_first() {
    let factory = ClientFactory::new(
        Mechanism::Scram(ScramMechanism::Sha512),
        "alice".into(),
        Secret::new("s3cret"),
    );
    let mut client = factory.start();
    let first = client.initial().unwrap();
    assert!(first.starts_with(b"n,,n=alice,r="));
    // A server nonce that does not extend the client's.
    assert!(client.step(b"r=abc,s=c2FsdA==,i=4096").is_err());
    assert!(!client.is_complete());
}

#[test]
fn percentiles_use_nearest_rank() {
    let values: Vec<u64> = (1..=100).collect();
    assert_eq!(crate::report::percentile(&values, 50.0), 50);
    assert_eq!(crate::report::percentile(&values, 99.0), 99);
    assert_eq!(crate::report::percentile(&values, 100.0), 100);
    assert_eq!(crate::report::percentile(&[7], 90.0), 7);
    assert_eq!(crate::report::percentile(&[], 50.0), 0);
}

#[test]
fn own_cpu_time_is_readable_on_linux() {
    if std::path::Path::new("/proc/self/stat").exists() {
        let spent = crate::report::process_cpu_seconds().unwrap();
        assert!(spent >= 0.0);
    }
}
