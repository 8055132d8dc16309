//! Loads real plugin libraries: the example crates are built with cargo, copied into a plugin
//! directory next to a C shared library without a declaration and a file that is not a library
//! at all, and the directory is loaded the way the host does at start-up.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use portcullis::abi::{AbiError, PluginKind};
use portcullis::sasl::{AuthFailure, ExchangeContext, SaslMechanism, StepOutcome};
use portcullis_host::plugin_loader::{
    config_to_text, load_plugin_dir, PluginLoadReport, RefusalReason,
};

const DEMO: &str = "libportcullis_example_custom_mechanism";
const BAD_ABI: &str = "libportcullis_example_bad_abi_plugin";
const PANICKING: &str = "libportcullis_example_panicking_plugin";
const NOT_A_PLUGIN: &str = "libnot_a_plugin";
const GARBAGE: &str = "libgarbage";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_owned()
}

/// The target directory cargo uses for this workspace: `CARGO_TARGET_DIR` if set (relative to
/// the workspace root), else `<workspace>/target`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

fn library_name(stem: &str) -> String {
    format!("{stem}.{}", std::env::consts::DLL_EXTENSION)
}

/// Builds the plugin crates and fills a fresh plugin directory, once per test run.
fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let target = target_dir();
        let status = Command::new(cargo)
            .current_dir(workspace_root())
            .args(["build", "--quiet"])
            .args(["-p", "portcullis-example-custom-mechanism"])
            .args(["-p", "portcullis-example-bad-abi-plugin"])
            .args(["-p", "portcullis-example-panicking-plugin"])
            .arg("--target-dir")
            .arg(&target)
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building the example plugins failed");

        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-loading");
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("clear the old plugin dir");
        }
        std::fs::create_dir_all(&dir).expect("create the plugin dir");
        for stem in [DEMO, BAD_ABI, PANICKING] {
            let built = target.join("debug").join(library_name(stem));
            std::fs::copy(&built, dir.join(library_name(stem)))
                .unwrap_or_else(|e| panic!("copy {}: {e}", built.display()));
        }

        // A real shared library that is not a Portcullis plugin.
        let source = dir.join("not_a_plugin.c");
        std::fs::write(&source, "int not_a_plugin(void) { return 42; }\n").expect("write C");
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(dir.join(library_name(NOT_A_PLUGIN)))
            .arg(&source)
            .status()
            .expect("run cc");
        assert!(status.success(), "cc failed");

        // A file with the right extension that the dynamic loader rejects.
        std::fs::write(dir.join(library_name(GARBAGE)), b"not an ELF file").expect("write");
        dir
    })
}

fn demo_configs() -> BTreeMap<String, String> {
    // The shape the host's config has: `[plugins.config.PORTCULLIS-DEMO]`.
    let table: toml::Table =
        toml::from_str("tokens = { alice = \"s3cr3t\", bob = \"hunter2\" }").expect("toml");
    BTreeMap::from([(
        "PORTCULLIS-DEMO".to_owned(),
        config_to_text(&table).expect("serialize"),
    )])
}

fn load(configs: &BTreeMap<String, String>) -> PluginLoadReport {
    load_plugin_dir(plugin_dir(), configs)
}

fn mechanism(report: &PluginLoadReport, name: &str) -> Arc<dyn SaslMechanism> {
    report
        .loaded
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{name} not loaded: {report:#?}"))
        .mechanism
        .clone()
}

fn refusal<'a>(report: &'a PluginLoadReport, stem: &str) -> &'a RefusalReason {
    let file = library_name(stem);
    &report
        .refused
        .iter()
        .find(|r| r.path.file_name().is_some_and(|n| n == file.as_str()))
        .unwrap_or_else(|| panic!("{file} not refused: {report:#?}"))
        .reason
}

fn context() -> ExchangeContext {
    ExchangeContext::new(
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        "plaintext",
        1_700_000_000_000,
    )
}

fn authenticate(mechanism: &dyn SaslMechanism, message: &[u8]) -> StepOutcome {
    mechanism.start(&context()).step(message)
}

#[test]
fn the_demo_plugin_authenticates_through_the_trait_object() {
    let report = load(&demo_configs());
    let loaded = report
        .loaded
        .iter()
        .find(|p| p.name == "PORTCULLIS-DEMO")
        .expect("demo loaded");
    assert_eq!(loaded.kind, PluginKind::SaslMechanism);
    assert_eq!(
        loaded.path,
        plugin_dir().join(library_name(DEMO)),
        "the report names the file"
    );
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let demo = mechanism(&report, "PORTCULLIS-DEMO");
    assert_eq!(demo.name(), "PORTCULLIS-DEMO");

    match authenticate(demo.as_ref(), b"alice\0s3cr3t") {
        StepOutcome::Complete(authenticated) => {
            assert_eq!(authenticated.authorization_id, "alice")
        }
        other => panic!("alice with her token: {other:?}"),
    }
    let invalid = AuthFailure::Visible("Invalid username or token".to_owned());
    for wrong in [
        &b"alice\0hunter2"[..],
        b"alice\0s3cr3",
        b"mallory\0s3cr3t",
        b"alice",
        b"",
    ] {
        match authenticate(demo.as_ref(), wrong) {
            StepOutcome::Fail(failure) => assert_eq!(failure, invalid, "{wrong:?}"),
            other => panic!("{wrong:?} must fail: {other:?}"),
        }
    }
}

#[test]
fn exchanges_run_concurrently_on_one_instance() {
    let report = load(&demo_configs());
    let demo = mechanism(&report, "PORTCULLIS-DEMO");
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let demo = demo.clone();
            std::thread::spawn(move || {
                let (user, token) = if i % 2 == 0 {
                    ("alice", "s3cr3t")
                } else {
                    ("bob", "hunter2")
                };
                (0..50).all(|_| {
                    let message = format!("{user}\0{token}");
                    matches!(
                        authenticate(demo.as_ref(), message.as_bytes()),
                        StepOutcome::Complete(a) if a.authorization_id == user
                    )
                })
            })
        })
        .collect();
    for thread in threads {
        assert!(thread.join().expect("thread"));
    }
}

#[test]
fn the_bad_abi_plugin_is_refused_naming_the_file_and_version() {
    let report = load(&demo_configs());
    let reason = refusal(&report, BAD_ABI);
    assert!(
        matches!(
            reason,
            RefusalReason::Abi(AbiError::AbiVersion { plugin: 2, host: 1 })
        ),
        "{reason:?}"
    );
    let message = report
        .refused
        .iter()
        .map(ToString::to_string)
        .find(|m| m.contains(&library_name(BAD_ABI)))
        .expect("a message naming the file");
    assert!(
        message.ends_with("ABI version 2, this host speaks 1"),
        "{message}"
    );
    assert!(
        report.loaded.iter().all(|p| p.name != "FUTURE-ABI"),
        "never loaded"
    );
}

#[test]
fn a_library_without_a_declaration_is_refused() {
    let report = load(&demo_configs());
    let reason = refusal(&report, NOT_A_PLUGIN);
    assert!(matches!(reason, RefusalReason::NotAPlugin), "{reason:?}");
    assert_eq!(
        reason.to_string(),
        "not a Portcullis plugin (no PORTCULLIS_PLUGIN_DECLARATION symbol)"
    );
    let reason = refusal(&report, GARBAGE);
    assert!(matches!(reason, RefusalReason::Open(_)), "{reason:?}");
}

#[test]
fn every_library_in_the_directory_is_accounted_for() {
    let report = load(&demo_configs());
    let mut loaded: Vec<_> = report.loaded.iter().map(|p| p.name.as_str()).collect();
    loaded.sort();
    assert_eq!(loaded, ["PORTCULLIS-DEMO", "X-PANIC"]);
    assert_eq!(report.refused.len(), 3, "{report:#?}");
}

#[test]
fn a_missing_directory_is_an_empty_report() {
    let report = load_plugin_dir(&plugin_dir().join("does-not-exist"), &BTreeMap::new());
    assert!(report.loaded.is_empty() && report.refused.is_empty());
}

#[test]
fn a_rejected_configuration_refuses_the_plugin() {
    let report = load(&BTreeMap::new());
    let reason = refusal(&report, DEMO);
    match reason {
        RefusalReason::Abi(AbiError::ConfigRejected { message }) => {
            assert!(message.contains("no users configured"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // The others still load.
    assert!(report.loaded.iter().any(|p| p.name == "X-PANIC"));
}

fn panicking_configs(panic_in: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("X-PANIC".to_owned(), format!("panic_in = \"{panic_in}\"\n"))])
}

#[test]
fn a_panic_in_step_becomes_a_failure() {
    let report = load(&panicking_configs("step"));
    let panicking = mechanism(&report, "X-PANIC");
    match authenticate(panicking.as_ref(), b"panic!") {
        StepOutcome::Fail(AuthFailure::Hidden(reason)) => {
            assert!(reason.contains("panicked"), "{reason}");
            assert!(reason.contains("test hook: panic in step"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // The process is alive and the mechanism still works.
    match authenticate(panicking.as_ref(), b"hello") {
        StepOutcome::Fail(AuthFailure::Visible(message)) => assert_eq!(message, "send `panic!`"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_panic_in_start_fails_the_exchange() {
    let report = load(&panicking_configs("start"));
    let panicking = mechanism(&report, "X-PANIC");
    match authenticate(panicking.as_ref(), b"hello") {
        StepOutcome::Fail(AuthFailure::Hidden(reason)) => {
            assert!(reason.contains("failed to start"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_panic_in_from_config_refuses_the_plugin() {
    let report = load(&panicking_configs("create"));
    match refusal(&report, PANICKING) {
        RefusalReason::Abi(AbiError::CreatePanicked { message }) => {
            assert_eq!(message, "test hook: panic in from_config")
        }
        other => panic!("{other:?}"),
    }
}
