//! Validation of hand-built declarations, and the whole export → validate → wrap path run
//! in-process (the loading of real libraries is tested by the host).

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::net::{IpAddr, Ipv6Addr};

use super::layout::{DECLARATION_SIZE, SASL_TABLE_SIZE};
use super::validate::check_framework_version;
use super::*;
use crate::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
};

/// A mechanism that exercises every field of the step result. Client tokens:
/// `config` → replies with its configured greeting, `ctx` → replies with what `start` saw,
/// `ok:<user>` → completes with an expiry, token id and extensions, `panic` → panics,
/// anything else → visible failure.
struct Echo {
    greeting: String,
}

impl MechanismPlugin for Echo {
    const PLUGIN_NAME: &'static str = "test-echo";
    fn from_config(config: &str) -> Result<Self, String> {
        let config = PluginConfig::parse(config).map_err(|e| e.to_string())?;
        match config.get("greeting") {
            Some("panic") => panic!("asked to panic in from_config"),
            Some(greeting) if greeting.starts_with("reject:") => Err(greeting.to_owned()),
            Some(greeting) => Ok(Echo {
                greeting: greeting.to_owned(),
            }),
            None => Err("missing `greeting`".to_owned()),
        }
    }
}

impl SaslMechanism for Echo {
    fn name(&self) -> &str {
        "X-ECHO"
    }
    fn start(&self, context: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(EchoExchange {
            greeting: self.greeting.clone(),
            seen: format!(
                "{} {} {}",
                context.client_address, context.listener, context.now_ms
            ),
        })
    }
}

struct EchoExchange {
    greeting: String,
    seen: String,
}

impl SaslExchange for EchoExchange {
    fn step(&mut self, token: &[u8]) -> StepOutcome {
        match token {
            b"config" => StepOutcome::Continue(self.greeting.clone().into_bytes()),
            b"ctx" => StepOutcome::Continue(self.seen.clone().into_bytes()),
            b"panic" => panic!("asked to panic in step"),
            b"hidden" => StepOutcome::Fail(AuthFailure::Hidden("secret reason".to_owned())),
            _ => match token.strip_prefix(b"ok:") {
                Some(user) => {
                    let mut extensions = BTreeMap::new();
                    extensions.insert("tokenauth".to_owned(), "true".to_owned());
                    StepOutcome::Complete(
                        Authenticated::new(String::from_utf8_lossy(user))
                            .with_server_final(b"v=done".to_vec())
                            .with_credential_expiry_ms(Some(1234))
                            .with_token_id(Some("tok-1".to_owned()))
                            .with_extensions(extensions),
                    )
                }
                None => StepOutcome::Fail(AuthFailure::Visible("nope".to_owned())),
            },
        }
    }
}

static ECHO_TABLE: SaslMechanismTable = __private::sasl_mechanism_table::<Echo>();
static ECHO_DECLARATION: PluginDeclaration =
    __private::sasl_mechanism_declaration::<Echo>(&ECHO_TABLE, ABI_VERSION);

fn validate(declaration: &PluginDeclaration) -> Result<ValidatedPlugin, AbiError> {
    // SAFETY: a complete declaration in this process, whose table (if any) is a real static.
    unsafe { validate_declaration(declaration) }
}

fn echo_mechanism(config: &str) -> Result<DynamicMechanism, AbiError> {
    validate(&ECHO_DECLARATION)?.create_sasl_mechanism(config)
}

fn context() -> ExchangeContext {
    ExchangeContext::new(IpAddr::V6(Ipv6Addr::LOCALHOST), "external", 42)
}

#[test]
fn a_well_formed_declaration_validates() {
    let plugin = validate(&ECHO_DECLARATION).unwrap();
    assert_eq!(plugin.name(), "test-echo");
    assert_eq!(plugin.kind(), PluginKind::SaslMechanism);
    assert_eq!(plugin.framework_version(), crate::FRAMEWORK_VERSION);
    assert_eq!(plugin.rustc_version(), RUSTC_VERSION);
    assert!(RUSTC_VERSION.starts_with("rustc ") || RUSTC_VERSION.starts_with("unknown"));
    assert_eq!(plugin.warnings(), &[] as &[AbiWarning]);
    assert_eq!(ECHO_DECLARATION.decl_size, DECLARATION_SIZE);
}

#[test]
fn refuses_wrong_magic() {
    let mut declaration = ECHO_DECLARATION;
    declaration.magic = *b"ELF\0\0\0\0\0";
    let error = validate(&declaration).unwrap_err();
    assert_eq!(
        error,
        AbiError::BadMagic {
            found: *b"ELF\0\0\0\0\0"
        }
    );
    assert!(error
        .to_string()
        .contains("not a Portcullis plugin declaration"));
}

#[test]
fn refuses_wrong_abi_version_before_reading_further() {
    let mut declaration = ECHO_DECLARATION;
    declaration.abi_version = 2;
    // Garbage past the version must not matter: the version check comes first.
    declaration.decl_size = 0;
    declaration.kind = 99;
    let error = validate(&declaration).unwrap_err();
    assert_eq!(error, AbiError::AbiVersion { plugin: 2, host: 1 });
    assert_eq!(error.to_string(), "ABI version 2, this host speaks 1");
}

#[test]
fn refuses_a_short_declaration() {
    let mut declaration = ECHO_DECLARATION;
    declaration.decl_size = 16;
    assert_eq!(
        validate(&declaration).unwrap_err(),
        AbiError::DeclarationTooSmall {
            plugin: 16,
            host: DECLARATION_SIZE
        }
    );
    // A longer declaration (a newer plugin with appended fields) is fine.
    declaration.decl_size = DECLARATION_SIZE + 8;
    assert!(validate(&declaration).is_ok());
}

#[test]
fn refuses_an_unknown_kind() {
    let mut declaration = ECHO_DECLARATION;
    declaration.kind = 7;
    let error = validate(&declaration).unwrap_err();
    assert_eq!(error, AbiError::UnknownKind { kind: 7 });
    assert!(error.to_string().contains("unknown plugin kind 7"));
}

#[test]
fn refuses_an_incompatible_or_malformed_framework_version() {
    let mut declaration = ECHO_DECLARATION;
    declaration.framework_version = FixedStr::truncated("9.0.0");
    assert!(matches!(
        validate(&declaration).unwrap_err(),
        AbiError::IncompatibleFramework { .. }
    ));
    declaration.framework_version = FixedStr::from_bytes([b'x'; 32]);
    assert_eq!(
        validate(&declaration).unwrap_err(),
        AbiError::MalformedField {
            field: "framework version"
        }
    );
}

#[test]
fn framework_versions_follow_cargo_compatibility() {
    assert!(check_framework_version("0.1.0", "0.1.7").is_ok());
    assert!(check_framework_version("0.1.3-rc.1", "0.1.0").is_ok());
    assert!(check_framework_version("0.2.0", "0.1.0").is_err());
    assert!(check_framework_version("1.2.0", "1.9.3").is_ok());
    assert!(check_framework_version("2.0.0", "1.0.0").is_err());
    assert!(check_framework_version("0.0.1", "0.0.2").is_err());
    assert!(matches!(
        check_framework_version("1.2", "1.2.0"),
        Err(AbiError::BadFrameworkVersion { .. })
    ));
}

#[test]
fn refuses_malformed_names_and_tables() {
    let mut declaration = ECHO_DECLARATION;
    declaration.name = FixedStr::truncated("");
    assert_eq!(
        validate(&declaration).unwrap_err(),
        AbiError::MalformedField { field: "name" }
    );

    let mut declaration = ECHO_DECLARATION;
    declaration.table = std::ptr::null();
    assert_eq!(validate(&declaration).unwrap_err(), AbiError::MissingTable);

    static SHORT_TABLE: SaslMechanismTable = SaslMechanismTable {
        table_size: 8,
        ..__private::sasl_mechanism_table::<Echo>()
    };
    let mut declaration = ECHO_DECLARATION;
    declaration.table = (&SHORT_TABLE as *const SaslMechanismTable).cast::<c_void>();
    assert_eq!(
        validate(&declaration).unwrap_err(),
        AbiError::TableTooSmall {
            plugin: 8,
            host: SASL_TABLE_SIZE
        }
    );

    static HOLEY_TABLE: SaslMechanismTable = SaslMechanismTable {
        step: None,
        ..__private::sasl_mechanism_table::<Echo>()
    };
    declaration.table = (&HOLEY_TABLE as *const SaslMechanismTable).cast::<c_void>();
    assert_eq!(
        validate(&declaration).unwrap_err(),
        AbiError::MissingFunction { function: "step" }
    );
}

#[test]
fn warns_about_another_compiler_and_panic_abort() {
    let mut declaration = ECHO_DECLARATION;
    declaration.rustc_version = FixedStr::truncated("rustc 1.0.0 (a59807616 2015-05-15)");
    declaration.flags = 0;
    let plugin = validate(&declaration).unwrap();
    assert!(matches!(
        plugin.warnings(),
        [AbiWarning::RustcMismatch { .. }, AbiWarning::PanicAbort]
    ));
}

#[test]
fn a_null_declaration_is_refused() {
    // SAFETY: null is explicitly allowed.
    let error = unsafe { validate_declaration(std::ptr::null()) }.unwrap_err();
    assert_eq!(error, AbiError::NullDeclaration);
}

#[test]
fn fixed_strings_truncate_at_character_boundaries() {
    let s = FixedStr::<4>::truncated("aé€");
    assert_eq!(s.to_str(), Some("aé"));
    assert_eq!(FixedStr::<4>::truncated("abc").to_str(), Some("abc"));
    assert_eq!(FixedStr::<4>::from_bytes([b'a'; 4]).to_str(), None);
    assert!(!FixedStr::<4>::fits("abcd"));
}

#[test]
fn the_wrapped_mechanism_runs_exchanges() {
    let mechanism: std::sync::Arc<dyn SaslMechanism> =
        std::sync::Arc::new(echo_mechanism("greeting = \"hello\"").unwrap());
    assert_eq!(mechanism.name(), "X-ECHO");

    let mut exchange = mechanism.start(&context());
    match exchange.step(b"config") {
        StepOutcome::Continue(bytes) => assert_eq!(bytes, b"hello"),
        other => panic!("unexpected {other:?}"),
    }
    match exchange.step(b"ctx") {
        StepOutcome::Continue(bytes) => assert_eq!(bytes, b"::1 external 42"),
        other => panic!("unexpected {other:?}"),
    }
    match exchange.step(b"ok:alice") {
        StepOutcome::Complete(authenticated) => {
            assert_eq!(authenticated.authorization_id, "alice");
            assert_eq!(authenticated.server_final, b"v=done");
            assert_eq!(authenticated.credential_expiry_ms, Some(1234));
            assert_eq!(authenticated.token_id.as_deref(), Some("tok-1"));
            assert_eq!(
                authenticated
                    .extensions
                    .get("tokenauth")
                    .map(String::as_str),
                Some("true")
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    // The plugin's exchange is gone; the wrapper answers on its own.
    assert!(matches!(
        exchange.step(b"config"),
        StepOutcome::Fail(AuthFailure::Hidden(reason)) if reason.contains("after the exchange finished")
    ));

    let mut exchange = mechanism.start(&context());
    assert_eq!(
        match exchange.step(b"bad") {
            StepOutcome::Fail(failure) => failure,
            other => panic!("unexpected {other:?}"),
        },
        AuthFailure::Visible("nope".to_owned())
    );
    let mut exchange = mechanism.start(&context());
    assert!(matches!(
        exchange.step(b"hidden"),
        StepOutcome::Fail(AuthFailure::Hidden(reason)) if reason.ends_with("secret reason")
    ));
}

#[test]
fn a_panic_in_step_becomes_a_failure() {
    let mechanism = echo_mechanism("greeting = \"hi\"").unwrap();
    let mut exchange = mechanism.start(&context());
    match exchange.step(b"panic") {
        StepOutcome::Fail(AuthFailure::Hidden(reason)) => {
            assert!(reason.contains("panicked"), "{reason}");
            assert!(reason.contains("asked to panic in step"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }
    // Other exchanges of the same mechanism are unaffected.
    let mut exchange = mechanism.start(&context());
    assert!(matches!(exchange.step(b"config"), StepOutcome::Continue(_)));
}

#[test]
fn configuration_errors_and_panics_refuse_the_instance() {
    assert_eq!(
        echo_mechanism("").unwrap_err(),
        AbiError::ConfigRejected {
            message: "missing `greeting`".to_owned()
        }
    );
    assert!(matches!(
        echo_mechanism("greeting = [1]").unwrap_err(),
        AbiError::ConfigRejected { message } if message.contains("arrays are not supported")
    ));
    match echo_mechanism("greeting = \"panic\"").unwrap_err() {
        AbiError::CreatePanicked { message } => {
            assert_eq!(message, "asked to panic in from_config")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn long_error_messages_are_cut_at_a_character_boundary() {
    // 2-byte characters and an odd prefix: a byte-wise cut at 1024 would split one.
    let long = format!("reject:{}", "é".repeat(1000));
    match echo_mechanism(&format!("greeting = \"{long}\"")) {
        Err(AbiError::ConfigRejected { message }) => {
            assert!(
                message.len() <= 1024 && message.len() > 1000,
                "{}",
                message.len()
            );
            assert!(long.starts_with(&message), "not a clean prefix");
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// The layout is the ABI: a change here without an `ABI_VERSION` bump would let old plugins be
/// misread. (Offsets for 64-bit targets.)
#[cfg(target_pointer_width = "64")]
#[test]
fn the_layout_is_frozen() {
    use std::mem::{offset_of, size_of};
    assert_eq!(offset_of!(PluginDeclaration, magic), 0);
    assert_eq!(offset_of!(PluginDeclaration, abi_version), 8);
    assert_eq!(offset_of!(PluginDeclaration, decl_size), 12);
    assert_eq!(offset_of!(PluginDeclaration, framework_version), 16);
    assert_eq!(offset_of!(PluginDeclaration, rustc_version), 48);
    assert_eq!(offset_of!(PluginDeclaration, name), 176);
    assert_eq!(offset_of!(PluginDeclaration, kind), 240);
    assert_eq!(offset_of!(PluginDeclaration, flags), 244);
    assert_eq!(offset_of!(PluginDeclaration, table), 248);
    assert_eq!(size_of::<PluginDeclaration>(), 256);
    assert_eq!(offset_of!(SaslMechanismTable, create), 8);
    assert_eq!(offset_of!(SaslMechanismTable, free_exchange), 40);
    assert_eq!(size_of::<SaslMechanismTable>(), 48);
    assert_eq!(size_of::<AbiExchangeContext>(), 48);
    assert_eq!(size_of::<AbiStepResult>(), 88);
}
