//! The `portcullis` binary, run as an operator would: configuration checks, plugin listing and
//! the offline SCRAM credential tools.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_portcullis");

/// A scratch directory with a configuration file whose data directory lives inside it.
struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Setup {
    fn new() -> Self {
        Self::with(|text| text)
    }

    /// A configuration edited by `edit` before it is written.
    fn with(edit: impl FnOnce(String) -> String) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let text = format!(
            r#"[node]
id = 1
data_dir = "{}"

[listener]
address = "127.0.0.1:0"
advertised_host = "localhost"
broker_port_base = 9100
sasl_mechanisms = ["SCRAM-SHA-512", "PLAIN"]

[upstream]
bootstrap_servers = ["127.0.0.1:19092"]
"#,
            data.display()
        );
        let config = dir.path().join("portcullis.toml");
        std::fs::write(&config, edit(text)).unwrap();
        Self { dir, config }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

/// Runs the binary with a clean `PORTCULLIS_` environment plus `env`, feeding `stdin`.
fn run(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Output {
    let mut command = Command::new(BIN);
    command.args(args);
    for (key, _) in std::env::vars() {
        if key.to_ascii_uppercase().starts_with("PORTCULLIS_") {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied());
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn check_config_accepts_a_good_file() {
    let s = Setup::new();
    let o = run(&["check-config", "--config", path(&s.config)], &[], "");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("configuration OK"), "{out}");
    assert!(out.contains("mechanisms:  SCRAM-SHA-512, PLAIN"), "{out}");
    assert!(out.contains("passthrough"), "{out}");
    // check-config neither creates nor locks the data directory.
    assert!(!s.data_dir().exists());
}

#[test]
fn check_config_names_the_line_of_an_unknown_key() {
    let s = Setup::with(|t| {
        t.replace(
            "broker_port_base = 9100",
            "broker_port_base = 9100\nbrokr_port = 1",
        )
    });
    let o = run(&["check-config", "--config", path(&s.config)], &[], "");
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.contains("line 9, column 1 (`listener.brokr_port`)"),
        "{err}"
    );
    assert!(err.contains("unknown field `brokr_port`"), "{err}");
}

#[test]
fn check_config_names_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.toml");
    let o = run(&["check-config", "--config", path(&missing)], &[], "");
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("cannot read configuration file"), "{err}");
    assert!(err.contains(path(&missing)), "{err}");
}

#[test]
fn check_config_applies_and_checks_env_overrides() {
    let s = Setup::new();
    let config = path(&s.config);
    let o = run(
        &["check-config", "--config", config],
        &[
            ("PORTCULLIS_LISTENER__ADDRESS", "127.0.0.1:9300"),
            ("PORTCULLIS_UPSTREAM__BOOTSTRAP_SERVERS", "[127.0.0.1:9092]"),
            // Not a configuration key (no `__`): scripts export these.
            ("PORTCULLIS_CACHE", "/tmp"),
        ],
        "",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("on 127.0.0.1:9300"), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("upstream:    127.0.0.1:9092 "),
        "{}",
        stdout(&o)
    );

    let o = run(
        &["check-config", "--config", config],
        &[("PORTCULLIS_LISTENER__BROKER_PORT_BASE", "many")],
        "",
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("environment variable PORTCULLIS_LISTENER__BROKER_PORT_BASE"),
        "{err}"
    );

    let o = run(
        &["check-config", "--config", config],
        &[("PORTCULLIS_UPSTREAM__NO_SUCH_KEY", "1")],
        "",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("PORTCULLIS_UPSTREAM__NO_SUCH_KEY"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn check_config_rejects_an_unknown_mechanism_listing_the_available_ones() {
    let s = Setup::with(|t| t.replace("\"PLAIN\"", "\"GSSAPI\""));
    let o = run(&["check-config", "--config", path(&s.config)], &[], "");
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("unknown SASL mechanism `GSSAPI`"), "{err}");
    assert!(err.contains("PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"), "{err}");
}

#[test]
fn usage_errors_exit_with_2() {
    let o = run(&["check-config"], &[], "");
    assert_eq!(o.status.code(), Some(2));
    let o = run(
        &[
            "scram",
            "add",
            "--config",
            "x.toml",
            "--user",
            "a",
            "--mechanism",
            "MD5",
            "--password-stdin",
        ],
        &[],
        "",
    );
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn plugins_lists_the_built_ins() {
    let s = Setup::new();
    let o = run(&["plugins", "--config", path(&s.config)], &[], "");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    // Every kind's built-ins, with their kind: nothing is hard-wired in the host.
    for (name, kind) in [
        ("PLAIN", "SASL mechanism"),
        ("SCRAM-SHA-256", "SASL mechanism"),
        ("SCRAM-SHA-512", "SASL mechanism"),
        ("acl", "authorizer"),
        ("default", "principal builder"),
        ("password", "login module"),
        ("passthrough", "forwarding policy"),
    ] {
        assert!(
            out.lines().any(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                fields.first() == Some(&name)
                    && l.contains(kind)
                    && l.contains("built in")
                    && l.contains("config: none")
            }),
            "{name} ({kind}) missing in {out}"
        );
    }
    assert!(out.contains("plugin directory: not configured"), "{out}");
}

#[test]
fn plugins_reports_refused_files_with_the_reason() {
    let s = Setup::new();
    let plugin_dir = s.dir.path().join("plugins");
    std::fs::create_dir(&plugin_dir).unwrap();
    std::fs::write(plugin_dir.join("libbroken.so"), b"not an ELF file").unwrap();
    let text = std::fs::read_to_string(&s.config).unwrap();
    let text = text.replace(
        "[listener]",
        &format!(
            "[plugins]\ndir = \"{}\"\n\n[listener]",
            plugin_dir.display()
        ),
    );
    std::fs::write(&s.config, text).unwrap();

    let o = run(&["plugins", "--config", path(&s.config)], &[], "");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("refused plugin files:"), "{out}");
    assert!(
        out.contains("libbroken.so: cannot load the library"),
        "{out}"
    );
}

#[test]
fn scram_add_then_list_then_delete() {
    let s = Setup::new();
    let config = path(&s.config);
    let o = run(
        &[
            "scram",
            "add",
            "--config",
            config,
            "--user",
            "alice",
            "--mechanism",
            "SCRAM-SHA-512",
            "--iterations",
            "8192",
            "--password-stdin",
        ],
        &[],
        "alice-secret\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim(),
        "added SCRAM-SHA-512 credential for user 'alice'"
    );

    let o = run(
        &[
            "scram",
            "add",
            "--config",
            config,
            "--user",
            "bob",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password-stdin",
        ],
        &[],
        "bob-secret\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let o = run(&["scram", "list", "--config", config], &[], "");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["alice", "SCRAM-SHA-512", "8192"],
            ["bob", "SCRAM-SHA-256", "4096"]
        ],
        "{out}"
    );
    assert!(!out.contains("secret"));

    // The log on disk holds the derived keys, never the password.
    let log = std::fs::read(s.data_dir().join("metadata.log")).unwrap();
    assert!(!String::from_utf8_lossy(&log).contains("alice-secret"));

    let o = run(
        &[
            "scram",
            "delete",
            "--config",
            config,
            "--user",
            "alice",
            "--mechanism",
            "SCRAM-SHA-512",
        ],
        &[],
        "",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&["scram", "list", "--config", config], &[], "");
    assert!(!stdout(&o).contains("alice"), "{}", stdout(&o));
    let o = run(
        &[
            "scram",
            "delete",
            "--config",
            config,
            "--user",
            "alice",
            "--mechanism",
            "SCRAM-SHA-512",
        ],
        &[],
        "",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("user 'alice' has no SCRAM-SHA-512 credential"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn scram_add_refuses_a_locked_store_and_an_empty_password() {
    let s = Setup::new();
    let config = path(&s.config);
    let o = run(
        &[
            "scram",
            "add",
            "--config",
            config,
            "--user",
            "alice",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password-stdin",
        ],
        &[],
        "\n",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("the password is empty"),
        "{}",
        stderr(&o)
    );

    // A running node holds the data directory's lock.
    let held = portcullis_plugin_stores::FileMetadataStore::open(s.data_dir()).unwrap();
    let o = run(
        &[
            "scram",
            "add",
            "--config",
            config,
            "--user",
            "alice",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password-stdin",
        ],
        &[],
        "pw\n",
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("while a node is running on it: stop the node first"),
        "{err}"
    );
    assert!(
        err.contains("in use by another Portcullis process"),
        "{err}"
    );
    drop(held);
}

#[test]
fn scram_list_never_writes_and_works_while_a_node_holds_the_store() {
    let s = Setup::new();
    let config = path(&s.config);
    let o = run(
        &[
            "scram",
            "add",
            "--config",
            config,
            "--user",
            "alice",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password-stdin",
        ],
        &[],
        "alice-secret\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The remains of a write a crash interrupted: only a node opening the store for writing may
    // cut them off (and it saves them first).
    let log = s.data_dir().join("metadata.log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(b"\x00\x00\x00\x40torn write");
    std::fs::write(&log, &bytes).unwrap();
    let listing = |expect_user: &str| {
        let o = run(&["scram", "list", "--config", config], &[], "");
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).contains(expect_user), "{}", stdout(&o));
    };
    listing("alice");
    assert_eq!(
        std::fs::read(&log).unwrap(),
        bytes,
        "scram list changed the log"
    );
    let entries: Vec<String> = std::fs::read_dir(s.data_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !entries.iter().any(|e| e.contains("dropped")),
        "scram list saved bytes aside: {entries:?}"
    );
    // While a node holds the lock, listing still works.
    let held = portcullis_plugin_stores::FileMetadataStore::open(s.data_dir()).unwrap();
    listing("alice");
    drop(held);
}

#[test]
fn check_config_says_whether_tokens_are_enabled_and_never_shows_the_secret() {
    let s = Setup::new();
    let o = run(&["check-config", "--config", path(&s.config)], &[], "");
    assert!(
        stdout(&o).contains("tokens:      disabled"),
        "{}",
        stdout(&o)
    );
    let o = run(
        &["check-config", "--config", path(&s.config)],
        &[("PORTCULLIS_DELEGATION_TOKENS__SECRET", "do-not-print-me")],
        "",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("tokens:      enabled (max lifetime 604800000 ms"),
        "{out}"
    );
    assert!(!out.contains("do-not-print-me") && !stderr(&o).contains("do-not-print-me"));
}

#[test]
fn scram_add_refuses_token_shaped_names_when_tokens_need_no_extension() {
    let s = Setup::new();
    let add = |env: &[(&str, &str)]| {
        run(
            &[
                "scram",
                "add",
                "--config",
                path(&s.config),
                "--user",
                "AAAAAAAAQACAAAAAAAAAAA",
                "--mechanism",
                "SCRAM-SHA-512",
                "--password-stdin",
            ],
            env,
            "pw\n",
        )
    };
    let o = add(&[
        ("PORTCULLIS_DELEGATION_TOKENS__SECRET", "k"),
        (
            "PORTCULLIS_DELEGATION_TOKENS__ACCEPT_TOKEN_WITHOUT_EXTENSION",
            "true",
        ),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("shape of a delegation token id"),
        "{}",
        stderr(&o)
    );
    // Without the setting the name is an ordinary user name.
    assert_eq!(add(&[]).status.code(), Some(0), "{}", stderr(&add(&[])));
}

#[test]
fn store_check_and_recover_after_damage() {
    let s = Setup::new();
    let config = path(&s.config);
    for user in ["alice", "bob"] {
        let o = run(
            &[
                "scram",
                "add",
                "--config",
                config,
                "--user",
                user,
                "--mechanism",
                "SCRAM-SHA-512",
                "--password-stdin",
            ],
            &[],
            "pw\n",
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let o = run(&["store", "check", "--config", config], &[], "");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("2 SCRAM credentials"), "{}", stdout(&o));
    // A flipped byte in the last (acknowledged) record.
    let log = s.data_dir().join("metadata.log");
    let mut bytes = std::fs::read(&log).unwrap();
    let last = bytes.len() - 5;
    bytes[last] ^= 0x01;
    std::fs::write(&log, &bytes).unwrap();
    let o = run(&["store", "check", "--config", config], &[], "");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("would refuse to start"),
        "{}",
        stderr(&o)
    );
    let o = run(&["scram", "list", "--config", config], &[], "");
    assert_eq!(
        o.status.code(),
        Some(1),
        "listing must not repair: {}",
        stdout(&o)
    );
    let o = run(&["store", "recover", "--config", config], &[], "");
    assert_eq!(o.status.code(), Some(2), "--accept-loss is required");
    let o = run(
        &["store", "recover", "--config", config, "--accept-loss"],
        &[],
        "",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("kept 1 records"), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("acknowledged bytes were lost"),
        "{}",
        stdout(&o)
    );
    let o = run(&["scram", "list", "--config", config], &[], "");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("alice") && !stdout(&o).contains("bob"));
}
