use clap::Parser;
use portcullis::credentials::ScramMechanism;

use super::*;

#[test]
fn the_password_is_the_first_line_without_its_ending() {
    assert_eq!(read_password(&b"s3cret\n"[..]).unwrap(), "s3cret");
    assert_eq!(read_password(&b"s3cret\r\nmore\n"[..]).unwrap(), "s3cret");
    assert_eq!(read_password(&b"no newline"[..]).unwrap(), "no newline");
    assert_eq!(read_password(&b" spaced \n"[..]).unwrap(), " spaced ");
    assert!(read_password(&b""[..]).is_err());
    assert!(read_password(&b"\n"[..]).is_err());
}

#[test]
fn the_command_line_parses() {
    let cli = Cli::try_parse_from([
        "portcullis",
        "scram",
        "add",
        "--config",
        "c.toml",
        "--user",
        "alice",
        "--mechanism",
        "SCRAM-SHA-512",
        "--password-stdin",
    ])
    .unwrap();
    match cli.command {
        Command::Scram(ScramCommand::Add(add)) => {
            assert_eq!(add.mechanism, ScramMechanism::Sha512);
            assert_eq!(add.iterations, 4096);
        }
        other => panic!("{other:?}"),
    }
    for bad in [
        &[
            "portcullis",
            "scram",
            "add",
            "--config",
            "c",
            "--user",
            "a",
            "--mechanism",
            "SCRAM-SHA-512",
        ][..],
        &[
            "portcullis",
            "scram",
            "add",
            "--config",
            "c",
            "--user",
            "a",
            "--mechanism",
            "MD5",
            "--password-stdin",
        ],
        &[
            "portcullis",
            "scram",
            "add",
            "--config",
            "c",
            "--user",
            "a",
            "--mechanism",
            "SCRAM-SHA-256",
            "--iterations",
            "100",
            "--password-stdin",
        ],
        &["portcullis", "check-config"],
    ] {
        assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
    }
}
