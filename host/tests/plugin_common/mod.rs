//! What the plugin-loading tests share: the plugin directory (the example crates built with
//! cargo, plus libraries that must be refused), the host context that loads it, and small
//! request builders. Each test binary uses part of it.
#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses part of the helpers"
)]
pub use std::net::{IpAddr, Ipv4Addr};
pub use std::path::{Path, PathBuf};
pub use std::process::Command;
pub use std::sync::atomic::{AtomicUsize, Ordering};
pub use std::sync::{Arc, OnceLock};

pub use portcullis::abi::AbiError;
pub use portcullis::acl::{AclOperation, ResourceType};
pub use portcullis::authorizer::{Action, DecidingRule, Decision, RequestContext};
pub use portcullis::errors::ErrorCode;
pub use portcullis::events::Event;
pub use portcullis::forwarding::{RequestInfo, Route};
pub use portcullis::login::{ClientExchange, LoginModule};
pub use portcullis::principal::{AuthenticationContext, Principal, PrincipalError, TlsPeer};
pub use portcullis::registry::PluginInstance;
pub use portcullis::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslMechanism, StepOutcome,
};
pub use portcullis::PluginKind;
pub use portcullis_host::config::PluginsConfig;
pub use portcullis_host::plugin_config::{ConfigSource, PluginTables};
pub use portcullis_host::plugin_loader::{load_plugin_dir, PluginLoadReport, RefusalReason};
pub use portcullis_host::services::HostContext;

pub const DEMO: &str = "libportcullis_example_custom_mechanism";
pub const BAD_ABI: &str = "libportcullis_example_bad_abi_plugin";
pub const PANICKING: &str = "libportcullis_example_panicking_plugin";
pub const NOT_A_PLUGIN: &str = "libnot_a_plugin";
pub const GARBAGE: &str = "libgarbage";
pub const EXAMPLES: [(&str, &str); 8] = [
    ("portcullis-example-custom-mechanism", DEMO),
    (
        "portcullis-example-prefix-authorizer",
        "libportcullis_example_prefix_authorizer",
    ),
    (
        "portcullis-example-principal-mapping",
        "libportcullis_example_principal_mapping",
    ),
    (
        "portcullis-example-file-login",
        "libportcullis_example_file_login",
    ),
    (
        "portcullis-example-topic-guard",
        "libportcullis_example_topic_guard",
    ),
    (
        "portcullis-example-auth-log",
        "libportcullis_example_auth_log",
    ),
    ("portcullis-example-bad-abi-plugin", BAD_ABI),
    ("portcullis-example-panicking-plugin", PANICKING),
];

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_owned()
}

/// The target directory cargo uses for this workspace: `CARGO_TARGET_DIR` if set (relative to
/// the workspace root), else `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

pub fn library_name(stem: &str) -> String {
    format!("{stem}.{}", std::env::consts::DLL_EXTENSION)
}

pub fn scratch() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-loading-files")
}

/// A directory of files of its own for one load (tests run in parallel: each login module and
/// event log reads and writes its own files).
pub fn files() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = scratch().join(NEXT.fetch_add(1, Ordering::Relaxed).to_string());
    std::fs::create_dir_all(&dir).expect("create the files dir");
    dir
}

/// Builds the plugin crates and fills a fresh plugin directory, once per test run.
pub fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let target = target_dir();
        let mut build = Command::new(cargo);
        build
            .current_dir(workspace_root())
            .args(["build", "--quiet"]);
        for (package, _) in EXAMPLES {
            build.args(["-p", package]);
        }
        let status = build
            .arg("--target-dir")
            .arg(&target)
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building the example plugins failed");

        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-loading");
        for fresh in [&dir, &scratch()] {
            if fresh.exists() {
                std::fs::remove_dir_all(fresh).expect("clear the old dir");
            }
            std::fs::create_dir_all(fresh).expect("create the dir");
        }
        for (_, stem) in EXAMPLES {
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

/// The configuration file these tests load the plugins with (its text, to locate errors).
pub fn config_text(files: &Path, extra: &str) -> String {
    format!(
        r#"
[plugins.config.PORTCULLIS-DEMO]
tokens = {{ alice = "s3cr3t", bob = "hunter2" }}

[plugins.config.principal-mapping]
rules = ["RULE:^CN=([^,]+),OU=apps,.*$/$1/L", "RULE:^(.*)@EXAMPLE$/$1/", "DEFAULT"]

[plugins.config.file-password]
username = "svc"
password_file = "{}"
mechanism = "SCRAM-SHA-512"
check_interval_ms = 5000

[plugins.config.topic-guard]
refuse_produce_to = "^audit\\..*"

[plugins.config.auth-log]
path = "{}"
{extra}"#,
        files.join("password").display(),
        files.join("auth.jsonl").display()
    )
}

/// Loads the directory with the base configuration plus `extra`; also returns the services the
/// plugins got and the directory of their files (`password`, `auth.jsonl`).
pub fn load_with(extra: &str) -> (PluginLoadReport, HostContext, PathBuf) {
    let dir = plugin_dir();
    let files = files();
    std::fs::write(files.join("password"), "first\n").expect("write the password");
    let text = config_text(&files, extra);
    let mut plugins: PluginsConfig = toml::from_str::<toml::Table>(&text)
        .expect("toml")
        .get("plugins")
        .expect("[plugins]")
        .clone()
        .try_into()
        .expect("[plugins] fits PluginsConfig");
    plugins.source = Some(ConfigSource {
        path: "portcullis.toml".into(),
        text,
    });
    let tables = PluginTables::new(&plugins).expect("tables");
    let context = HostContext::offline();
    (load_plugin_dir(dir, &tables, &context), context, files)
}

pub fn load() -> PluginLoadReport {
    load_with("").0
}

pub fn instance(report: &PluginLoadReport, name: &str) -> PluginInstance {
    let plugin = report
        .loaded
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{name} not loaded: {report:#?}"));
    plugin
        .instance
        .clone()
        .unwrap_or_else(|e| panic!("{name} did not start: {e}"))
}

pub fn refusal<'a>(report: &'a PluginLoadReport, stem: &str) -> &'a RefusalReason {
    let file = library_name(stem);
    &report
        .refused
        .iter()
        .find(|r| r.path.file_name().is_some_and(|n| n == file.as_str()))
        .unwrap_or_else(|| panic!("{file} not refused: {report:#?}"))
        .reason
}

pub fn exchange_context() -> ExchangeContext {
    ExchangeContext::new(
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        "plaintext",
        1_700_000_000_000,
    )
}

pub fn authenticate(mechanism: &dyn SaslMechanism, message: &[u8]) -> StepOutcome {
    mechanism.start(&exchange_context()).step(message)
}

pub fn request<'a>(principal: &'a Principal, api_key: i16) -> RequestContext<'a> {
    RequestContext::new(principal, IpAddr::from([127, 0, 0, 1]), "l", api_key, 9, 1)
}
