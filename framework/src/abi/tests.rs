//! Validation of declarations, and the whole export → validate → create → wrap path of every
//! kind run in-process (the loading of real libraries is tested by the host, with the examples).

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use super::*;
use crate::acl::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, PatternType, PermissionType,
    ResourcePattern, ResourceType,
};
use crate::authorizer::{
    AclAdmin, AclAdminError, Action, Authorization, Authorizer, DecidingRule, Decision,
    RequestContext,
};
use crate::credentials::{
    CredentialView, InMemoryCredentials, NoTokens, ScramCredential, ScramMechanism, TokenView,
};
use crate::events::{Event, EventSubscriber};
use crate::forwarding::{ForwardingPolicy, RequestInfo, Route};
use crate::host::{Host, HostServices, Level, MetricKind};
use crate::login::{
    ClientExchange, ExpiringCredential, LoginError, LoginModule, SaslClientExchange,
};
use crate::plugin::{Plugin, PluginError};
use crate::principal::{
    AuthenticationContext, Principal, PrincipalBuilder, PrincipalError, TlsPeer,
};
use crate::registry::PluginInstance;
use crate::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
};
use crate::secret::Secret;

// ---- Host services a test can inspect --------------------------------------------------------

#[derive(Default)]
struct Recorder {
    logs: Mutex<Vec<(Level, String)>>,
    metrics: Mutex<Vec<(MetricKind, String, f64)>>,
    credentials: Arc<InMemoryCredentials>,
}

impl HostServices for Recorder {
    fn log(&self, level: Level, message: &str) {
        self.logs.lock().unwrap().push((level, message.to_owned()));
    }
    fn now_ms(&self) -> i64 {
        1_000
    }
    fn credentials(&self) -> Arc<dyn CredentialView> {
        Arc::clone(&self.credentials) as Arc<dyn CredentialView>
    }
    fn tokens(&self) -> Arc<dyn TokenView> {
        Arc::new(NoTokens)
    }
    fn publish_metric(&self, kind: MetricKind, name: &str, value: f64) {
        self.metrics
            .lock()
            .unwrap()
            .push((kind, name.to_owned(), value));
    }
}

fn recorder() -> Arc<Recorder> {
    let recorder = Recorder::default();
    recorder.credentials.upsert(
        "alice",
        ScramMechanism::Sha256,
        ScramCredential {
            salt: vec![1, 2],
            stored_key: vec![3; 32],
            server_key: vec![4; 32],
            iterations: 4096,
        },
    );
    Arc::new(recorder)
}

// ---- One test plugin of each kind --------------------------------------------------------------

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EchoConfig {
    greeting: String,
}

/// Client tokens: `config` → the greeting, `ctx` → what `start` saw, `cred` → whether the host's
/// credential view knows alice, `ok:<user>` → complete, `panic` → panic, else a visible failure.
struct Echo {
    greeting: String,
    host: Host,
}

impl Plugin for Echo {
    const NAME: &'static str = "test-echo";
    type Config = EchoConfig;
    fn new(config: EchoConfig, host: &Host) -> Result<Self, PluginError> {
        match config.greeting.as_str() {
            "panic" => panic!("asked to panic in new"),
            g if g.starts_with("reject:") => Err(PluginError::invalid_value("greeting", g)),
            _ => {
                host.info(format_args!("greeting {}", config.greeting));
                host.counter("created", 1);
                Ok(Echo {
                    greeting: config.greeting,
                    host: host.clone(),
                })
            }
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
            host: self.host.clone(),
        })
    }
}

struct EchoExchange {
    greeting: String,
    seen: String,
    host: Host,
}

impl SaslExchange for EchoExchange {
    fn step(&mut self, token: &[u8]) -> StepOutcome {
        match token {
            b"config" => StepOutcome::Continue(self.greeting.clone().into_bytes()),
            b"ctx" => StepOutcome::Continue(self.seen.clone().into_bytes()),
            b"cred" => {
                let found = self
                    .host
                    .credentials()
                    .scram("alice", ScramMechanism::Sha256)
                    .map(|c| c.iterations.to_string())
                    .unwrap_or_default();
                StepOutcome::Continue(found.into_bytes())
            }
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
                            .with_extensions(extensions)
                            .with_credential(crate::credentials::CredentialId::plugin(
                                "ignored", "key-1",
                            )),
                    )
                }
                None => StepOutcome::Fail(AuthFailure::Visible("nope".to_owned())),
            },
        }
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PrefixConfig {
    #[serde(default)]
    acl_admin: bool,
}

/// What [`Prefix`] was asked with, by correlation id: the groups, scopes and token id.
type SeenContext = (i32, Vec<Principal>, Vec<String>, Option<String>);
static CONTEXTS: Mutex<Vec<SeenContext>> = Mutex::new(Vec::new());

/// The context [`Prefix`] saw last for `correlation_id`.
fn seen_context(correlation_id: i32) -> Option<(Vec<Principal>, Vec<String>, Option<String>)> {
    CONTEXTS
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find(|seen| seen.0 == correlation_id)
        .map(|(_, groups, scopes, jti)| (groups.clone(), scopes.clone(), jti.clone()))
}

/// Allows topics prefixed with the principal's name (or one of its groups' names) and a dot;
/// panics on a topic named `panic`; records every context it is asked with.
struct Prefix {
    acls: Option<Mutex<Vec<AclBinding>>>,
}

impl Plugin for Prefix {
    const NAME: &'static str = "test-prefix";
    type Config = PrefixConfig;
    fn new(config: PrefixConfig, _host: &Host) -> Result<Self, PluginError> {
        Ok(Prefix {
            acls: config.acl_admin.then(|| Mutex::new(Vec::new())),
        })
    }
}

impl Authorizer for Prefix {
    fn authorize(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
    ) -> Vec<Authorization> {
        CONTEXTS.lock().unwrap().push((
            context.correlation_id,
            context.groups.to_vec(),
            context.scopes.to_vec(),
            context.jti.as_deref().map(str::to_owned),
        ));
        actions
            .iter()
            .map(|action| {
                assert_ne!(action.resource.name, "panic", "asked to panic in authorize");
                let owned_by = |p: &Principal| {
                    action
                        .resource
                        .name
                        .strip_prefix(p.name.as_str())
                        .is_some_and(|rest| rest.starts_with('.'))
                };
                if action.resource.resource_type != ResourceType::Topic {
                    Authorization::allowed(DecidingRule::SuperUser)
                } else if context.principals().any(owned_by) {
                    Authorization::allowed(DecidingRule::MatchingAcl(Arc::new(binding("x"))))
                } else {
                    Authorization::denied(DecidingRule::DefaultDeny)
                }
            })
            .collect()
    }
    fn authorize_by_resource_type(
        &self,
        context: &RequestContext<'_>,
        _operation: AclOperation,
        _resource_type: ResourceType,
    ) -> Decision {
        if context.principal.name == "nobody" {
            Decision::Denied
        } else {
            Decision::Allowed
        }
    }
    fn acl_admin(&self) -> Option<&dyn AclAdmin> {
        self.acls.as_ref().map(|_| self as &dyn AclAdmin)
    }
}

impl AclAdmin for Prefix {
    fn create_acls(&self, bindings: &[AclBinding]) -> Vec<Result<(), AclAdminError>> {
        let mut acls = self.acls.as_ref().unwrap().lock().unwrap();
        bindings
            .iter()
            .map(|b| {
                if b.pattern.name.is_empty() {
                    Err(AclAdminError::Invalid(crate::acl::InvalidAcl(
                        "empty".into(),
                    )))
                } else {
                    acls.push(b.clone());
                    Ok(())
                }
            })
            .collect()
    }
    fn delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<Vec<AclBinding>>, AclAdminError> {
        let mut acls = self.acls.as_ref().unwrap().lock().unwrap();
        let deleted = filters
            .iter()
            .map(|f| acls.iter().filter(|b| f.matches(b)).cloned().collect())
            .collect();
        acls.retain(|b| !filters.iter().any(|f| f.matches(b)));
        Ok(deleted)
    }
    fn describe_acls(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let acls = self.acls.as_ref().unwrap().lock().unwrap();
        acls.iter().filter(|b| filter.matches(b)).cloned().collect()
    }
}

fn binding(name: &str) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern::new(ResourceType::Topic, name, PatternType::Literal),
        entry: AccessControlEntry {
            principal: "User:alice".into(),
            host: "*".into(),
            operation: AclOperation::Write,
            permission: PermissionType::Allow,
        },
    }
}

/// `CN=<x>,...` → `User:<x>`; a SASL id → `Sasl:<id>`; `panic` panics; `none` has no rule.
struct CnBuilder;

impl Plugin for CnBuilder {
    const NAME: &'static str = "test-cn";
    type Config = crate::plugin_api::NoConfig;
    fn new(_: Self::Config, _: &Host) -> Result<Self, PluginError> {
        Ok(CnBuilder)
    }
}

impl PrincipalBuilder for CnBuilder {
    fn build(&self, context: &AuthenticationContext<'_>) -> Result<Principal, PrincipalError> {
        if let Some(cn) = context
            .certificate_subject()
            .and_then(|s| s.strip_prefix("CN="))
            .and_then(|s| s.split(',').next())
        {
            return Ok(Principal::user(cn));
        }
        let sasl = context.sasl.ok_or(PrincipalError::Unavailable {
            reason: "no sasl".into(),
        })?;
        match sasl.authorization_id.as_str() {
            "panic" => panic!("asked to panic in build"),
            "none" => Err(PrincipalError::NoRuleApplies {
                name: "none".into(),
            }),
            id => Ok(Principal {
                kind: "Sasl".into(),
                name: format!(
                    "{id}/{}/{}",
                    context.mechanism.unwrap_or(""),
                    sasl.extensions.len()
                ),
            }),
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginConfig {
    password: String,
    #[serde(default)]
    custom: bool,
}

struct TestLogin {
    password: Mutex<String>,
    custom: bool,
    refreshes: Mutex<i64>,
}

impl Plugin for TestLogin {
    const NAME: &'static str = "test-login";
    type Config = LoginConfig;
    fn new(config: LoginConfig, _: &Host) -> Result<Self, PluginError> {
        Ok(TestLogin {
            password: Mutex::new(config.password),
            custom: config.custom,
            refreshes: Mutex::new(0),
        })
    }
}

impl LoginModule for TestLogin {
    fn mechanism(&self) -> &str {
        "SCRAM-SHA-512"
    }
    fn credential(&self) -> ExpiringCredential {
        let n = *self.refreshes.lock().unwrap();
        ExpiringCredential::expiring("svc", n * 10, n * 10 + 100)
    }
    fn refresh(&self) -> Result<ExpiringCredential, LoginError> {
        let mut password = self.password.lock().unwrap();
        if *password == "panic" {
            panic!("asked to panic in refresh");
        }
        if *password == "fail" {
            return Err(LoginError("cannot read the password".into()));
        }
        password.push('+');
        *self.refreshes.lock().unwrap() += 1;
        drop(password);
        Ok(self.credential())
    }
    fn start(&self) -> Result<ClientExchange, LoginError> {
        let password = self.password.lock().unwrap().clone();
        if self.custom {
            return Ok(ClientExchange::Custom(Box::new(Greeter { sent: false })));
        }
        Ok(ClientExchange::Password {
            username: "svc".into(),
            password: Secret::new(password),
        })
    }
}

/// Sends `hello`, expects `welcome`, then panics on anything else.
struct Greeter {
    sent: bool,
}

impl SaslClientExchange for Greeter {
    fn initial(&mut self) -> Result<Vec<u8>, LoginError> {
        self.sent = true;
        Ok(b"hello".to_vec())
    }
    fn step(&mut self, server_token: &[u8]) -> Result<Option<Vec<u8>>, LoginError> {
        match server_token {
            b"welcome" => Ok(None),
            b"again" => Ok(Some(b"more".to_vec())),
            b"panic" => panic!("asked to panic in the client step"),
            _ => Err(LoginError("unexpected server token".into())),
        }
    }
    fn is_complete(&self) -> bool {
        self.sent
    }
}

/// Standard routes, API key 999 panics; refuses actions on the topic `forbidden`.
struct TestPolicy;

impl Plugin for TestPolicy {
    const NAME: &'static str = "test-policy";
    type Config = crate::plugin_api::NoConfig;
    fn new(_: Self::Config, _: &Host) -> Result<Self, PluginError> {
        Ok(TestPolicy)
    }
}

impl ForwardingPolicy for TestPolicy {
    fn name(&self) -> &str {
        "test-policy"
    }
    fn route(&self, request: &RequestInfo<'_>) -> Route {
        assert_ne!(request.api_key, 999, "asked to panic in route");
        if request.principal.name == "blocked" {
            return Route::Reject(crate::errors::ErrorCode::CLUSTER_AUTHORIZATION_FAILED);
        }
        Route::standard(request.api_key)
    }
    fn screens_actions(&self) -> bool {
        true
    }
    fn admits(&self, context: &RequestContext<'_>, action: &Action<'_>) -> bool {
        assert_ne!(action.resource.name, "panic", "asked to panic in admits");
        action.resource.name != "forbidden"
            && !context.groups.contains(&Principal::group("blocked"))
    }
}

static SEEN: Mutex<Vec<Event>> = Mutex::new(Vec::new());

/// Records events; panics on `AclsChanged`.
struct Recording;

impl Plugin for Recording {
    const NAME: &'static str = "test-events";
    type Config = crate::plugin_api::NoConfig;
    fn new(_: Self::Config, _: &Host) -> Result<Self, PluginError> {
        Ok(Recording)
    }
}

impl EventSubscriber for Recording {
    fn on_event(&self, event: &Event) {
        assert!(
            !matches!(event, Event::AclsChanged { .. }),
            "asked to panic in on_event"
        );
        SEEN.lock().unwrap().push(event.clone());
    }
}

// ---- Helpers ----------------------------------------------------------------------------------

fn exports() -> Vec<PluginExport> {
    vec![
        __private::sasl_mechanism::<Echo>(),
        __private::authorizer::<Prefix>(),
        __private::principal_builder::<CnBuilder>(),
        __private::login_module::<TestLogin>(),
        __private::forwarding_policy::<TestPolicy>(),
        __private::event_subscriber::<Recording>(),
    ]
}

fn declaration_of(exports: Vec<PluginExport>) -> PluginDeclaration {
    let exports: &'static [PluginExport] = Box::leak(exports.into_boxed_slice());
    __private::declaration(exports, ABI_VERSION)
}

fn validate(declaration: &PluginDeclaration) -> Result<ValidatedLibrary, AbiError> {
    // SAFETY: a complete declaration in this process whose exports and tables are real statics
    // (or leaked copies of them).
    unsafe { validate_declaration(declaration) }
}

fn create_with(
    name: &str,
    config: &str,
    services: Arc<dyn HostServices>,
) -> Result<PluginInstance, CreateError> {
    let library = validate(&declaration_of(exports())).unwrap();
    let export = library.exports().iter().find(|e| e.name() == name).unwrap();
    export.create(config, export_services(services))
}

fn create(name: &str, config: &str) -> Result<PluginInstance, CreateError> {
    create_with(name, config, recorder())
}

fn context() -> ExchangeContext {
    ExchangeContext::new(IpAddr::V6(Ipv6Addr::LOCALHOST), "external", 42)
}

fn mechanism(config: &str) -> Arc<dyn SaslMechanism> {
    match create("test-echo", config).unwrap() {
        PluginInstance::SaslMechanism(m) => m,
        other => panic!("{other:?}"),
    }
}

// ---- Validation -------------------------------------------------------------------------------

#[test]
fn a_library_with_every_kind_validates() {
    let library = validate(&declaration_of(exports())).unwrap();
    let kinds: Vec<_> = library
        .exports()
        .iter()
        .map(|e| (e.name(), e.kind()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("test-echo", PluginKind::SaslMechanism),
            ("test-prefix", PluginKind::Authorizer),
            ("test-cn", PluginKind::PrincipalBuilder),
            ("test-login", PluginKind::LoginModule),
            ("test-policy", PluginKind::ForwardingPolicy),
            ("test-events", PluginKind::EventSubscriber),
        ]
    );
    assert_eq!(library.api_version(), portcullis_plugin_api::API_VERSION);
    assert_eq!(library.rustc_version(), RUSTC_VERSION);
    assert_eq!(library.services_version(), SERVICES_VERSION);
    assert!(RUSTC_VERSION.starts_with("rustc ") || RUSTC_VERSION.starts_with("unknown"));
    assert_eq!(library.warnings(), &[] as &[AbiWarning]);
}

#[test]
fn refuses_wrong_magic_and_a_null_declaration() {
    let mut declaration = declaration_of(exports());
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
    // SAFETY: null is explicitly allowed.
    let error = unsafe { validate_declaration(std::ptr::null()) }.unwrap_err();
    assert_eq!(error, AbiError::NullDeclaration);
}

#[test]
fn refuses_another_abi_version_before_reading_further() {
    let mut declaration = declaration_of(exports());
    declaration.abi_version = 1;
    // Garbage past the version must not matter: the version check comes first.
    declaration.decl_size = 0;
    declaration.exports = std::ptr::null();
    let error = validate(&declaration).unwrap_err();
    assert_eq!(error, AbiError::AbiVersion { plugin: 1, host: 2 });
    assert_eq!(error.to_string(), "ABI version 1, this host speaks 2");
}

#[test]
fn refuses_a_short_declaration_and_accepts_a_longer_one() {
    let mut declaration = declaration_of(exports());
    declaration.decl_size = 16;
    assert_eq!(
        validate(&declaration).unwrap_err(),
        AbiError::DeclarationTooSmall {
            plugin: 16,
            host: DECLARATION_SIZE
        }
    );
    declaration.decl_size = DECLARATION_SIZE + 8;
    assert!(validate(&declaration).is_ok());
}

#[test]
fn refuses_an_incompatible_or_malformed_api_version() {
    let mut declaration = declaration_of(exports());
    declaration.api_version = FixedStr::truncated("9.0.0");
    assert!(matches!(
        validate(&declaration).unwrap_err(),
        AbiError::IncompatibleApi { .. }
    ));
    declaration.api_version = FixedStr::from_bytes([b'x'; 32]);
    assert_eq!(
        validate(&declaration).unwrap_err(),
        AbiError::MalformedField {
            field: "API version"
        }
    );
}

#[test]
fn api_versions_follow_cargo_compatibility() {
    use super::validate::check_api_version;
    assert!(check_api_version("0.1.0", "0.1.7").is_ok());
    assert!(check_api_version("0.1.3-rc.1", "0.1.0").is_ok());
    assert!(check_api_version("0.2.0", "0.1.0").is_err());
    assert!(check_api_version("1.2.0", "1.9.3").is_ok());
    assert!(check_api_version("2.0.0", "1.0.0").is_err());
    assert!(check_api_version("0.0.1", "0.0.2").is_err());
    assert!(matches!(
        check_api_version("1.2", "1.2.0"),
        Err(AbiError::BadApiVersion { .. })
    ));
}

#[test]
fn refuses_bad_exports() {
    let mut declaration = declaration_of(exports());
    declaration.export_count = 0;
    assert_eq!(validate(&declaration).unwrap_err(), AbiError::NoExports);

    let mut unknown = exports();
    unknown[1].kind = 99;
    let error = validate(&declaration_of(unknown)).unwrap_err();
    assert!(matches!(
        error,
        AbiError::UnknownKind {
            index: 1,
            kind: 99,
            ..
        }
    ));
    assert!(
        error.to_string().contains("unknown plugin kind 99"),
        "{error}"
    );

    let mut twice = exports();
    twice.push(__private::sasl_mechanism::<Echo>());
    assert_eq!(
        validate(&declaration_of(twice)).unwrap_err(),
        AbiError::DuplicateExport {
            name: "test-echo".into()
        }
    );

    let mut unnamed = exports();
    unnamed[0].name = FixedStr::truncated("");
    assert_eq!(
        validate(&declaration_of(unnamed)).unwrap_err(),
        AbiError::MalformedField {
            field: "plugin name"
        }
    );

    let mut tableless = exports();
    tableless[2].table = std::ptr::null();
    assert_eq!(
        validate(&declaration_of(tableless)).unwrap_err(),
        AbiError::MissingTable {
            plugin: "test-cn".into()
        }
    );
}

/// A copy of export `index`'s table of type `T`, changed by `change`, leaked.
fn patched<T: Copy + 'static>(index: usize, change: impl FnOnce(&mut T)) -> Vec<PluginExport> {
    let mut all = exports();
    // SAFETY: export `index` of `exports()` has a `T` table (the tests pick matching pairs).
    let mut table: T = unsafe { *all[index].table.cast::<T>() };
    change(&mut table);
    all[index].table = (Box::leak(Box::new(table)) as *const T).cast::<c_void>();
    all
}

#[test]
fn refuses_short_tables_and_missing_functions() {
    let short = patched::<SaslMechanismTable>(0, |t| t.table_size = 8);
    assert_eq!(
        validate(&declaration_of(short)).unwrap_err(),
        AbiError::TableTooSmall {
            plugin: "test-echo".into(),
            found: 8,
            needed: table_size(PluginKind::SaslMechanism)
        }
    );
    let holey = patched::<AuthorizerTable>(1, |t| t.authorize = None);
    let error = validate(&declaration_of(holey)).unwrap_err();
    assert_eq!(
        error,
        AbiError::MissingFunction {
            plugin: "test-prefix".into(),
            function: "authorize"
        }
    );
    assert_eq!(
        error.to_string(),
        "test-prefix: function table entry `authorize` is null"
    );
    let holey = patched::<LoginModuleTable>(3, |t| t.free_client_exchange = None);
    assert!(matches!(
        validate(&declaration_of(holey)).unwrap_err(),
        AbiError::MissingFunction {
            function: "free_client_exchange",
            ..
        }
    ));
}

#[test]
fn warns_about_another_compiler_panic_abort_and_newer_services() {
    let mut declaration = declaration_of(exports());
    declaration.rustc_version = FixedStr::truncated("rustc 1.0.0 (a59807616 2015-05-15)");
    declaration.flags = 0;
    declaration.services_version = SERVICES_VERSION + 1;
    let library = validate(&declaration).unwrap();
    assert!(matches!(
        library.warnings(),
        [
            AbiWarning::RustcMismatch { .. },
            AbiWarning::PanicAbort,
            AbiWarning::NewerServices { .. }
        ]
    ));
}

#[test]
fn fixed_strings_truncate_at_character_boundaries() {
    let s = FixedStr::<4>::truncated("aé€");
    assert_eq!(s.to_str(), Some("aé"));
    assert_eq!(FixedStr::<4>::truncated("abc").to_str(), Some("abc"));
    assert_eq!(FixedStr::<4>::from_bytes([b'a'; 4]).to_str(), None);
    assert!(!FixedStr::<4>::fits("abcd"));
}

// ---- Creation and typed configuration ----------------------------------------------------------

#[test]
fn typed_configuration_errors_carry_their_position() {
    match create("test-echo", "greeting = \"hi\"\ngretting = 1\n") {
        Err(CreateError::Refused(PluginError::Config(error))) => {
            assert!(
                error.message.contains("unknown field `gretting`"),
                "{}",
                error.message
            );
            assert_eq!(error.span, Some(16..24));
        }
        other => panic!("{other:?}"),
    }
    match create("test-echo", "greeting = 7\n") {
        Err(CreateError::Refused(PluginError::Config(error))) => {
            assert!(error.message.contains("invalid type"), "{}", error.message);
            assert_eq!(error.span, Some(11..12));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        create("test-echo", ""),
        Err(CreateError::Refused(PluginError::Config(e))) if e.message.contains("missing field `greeting`")
    ));
    assert!(matches!(
        create("test-echo", "greeting = \"reject:me\""),
        Err(CreateError::Refused(PluginError::InvalidValue { key, .. })) if key == "greeting"
    ));
    match create("test-echo", "greeting = \"panic\"") {
        Err(CreateError::Panicked(message)) => assert_eq!(message, "asked to panic in new"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_plugin_logs_and_publishes_through_the_host() {
    let recorder = recorder();
    create_with(
        "test-echo",
        "greeting = \"hello\"",
        Arc::clone(&recorder) as Arc<dyn HostServices>,
    )
    .unwrap();
    assert_eq!(
        *recorder.logs.lock().unwrap(),
        [(Level::Info, "greeting hello".to_owned())]
    );
    assert_eq!(
        *recorder.metrics.lock().unwrap(),
        [(MetricKind::Counter, "created".to_owned(), 1.0)]
    );
}

/// A host whose services table is older (shorter) than the plugin's: the plugin still loads, and
/// what the table lacks is a no-op on its side.
#[test]
fn a_shorter_services_table_degrades_to_no_ops() {
    let recorder = recorder();
    let full = export_services(Arc::clone(&recorder) as Arc<dyn HostServices>);
    // Only version, size, context, log and log_enabled: no credentials, no metrics.
    let mut old = *full;
    old.size = std::mem::offset_of!(AbiHostServices, now_ms) as u32;
    old.version = 0;
    let old: &'static AbiHostServices = Box::leak(Box::new(old));
    let library = validate(&declaration_of(exports())).unwrap();
    let export = &library.exports()[0];
    let PluginInstance::SaslMechanism(mechanism) =
        export.create("greeting = \"old\"", old).unwrap()
    else {
        panic!("not a mechanism")
    };
    // Logging is in the old table; metrics are not.
    assert_eq!(recorder.logs.lock().unwrap().len(), 1);
    assert!(recorder.metrics.lock().unwrap().is_empty());
    // The credential lookup is not in it either: the plugin sees no credential.
    let mut exchange = mechanism.start(&context());
    assert!(matches!(exchange.step(b"cred"), StepOutcome::Continue(b) if b.is_empty()));
    // With the full table the same plugin finds alice's credential.
    let mechanism = mechanism_with(full);
    let mut exchange = mechanism.start(&context());
    assert!(matches!(exchange.step(b"cred"), StepOutcome::Continue(b) if b == b"4096"));
}

/// A host whose table is newer (longer) than the one the plugin was built against, as a plugin
/// built against an older API sees it: the plugin loads without a warning, copies the prefix it
/// knows and ignores the rest.
#[test]
fn a_plugin_built_against_an_older_services_table_loads_and_uses_it() {
    #[repr(C)]
    struct NewerTable {
        known: AbiHostServices,
        /// Services appended by a later version; garbage to this plugin, so never read.
        appended: [u64; 4],
    }
    let recorder = recorder();
    let full = export_services(Arc::clone(&recorder) as Arc<dyn HostServices>);
    let mut known = *full;
    known.version = SERVICES_VERSION + 1;
    known.size = std::mem::size_of::<NewerTable>() as u32;
    let newer: &'static NewerTable = Box::leak(Box::new(NewerTable {
        known,
        appended: [u64::MAX; 4],
    }));
    let mut declaration = declaration_of(exports());
    declaration.services_version = SERVICES_VERSION.saturating_sub(1);
    let library = validate(&declaration).unwrap();
    assert!(library.warnings().is_empty(), "{:?}", library.warnings());
    let PluginInstance::SaslMechanism(mechanism) = library.exports()[0]
        .create("greeting = \"older\"", &newer.known)
        .unwrap()
    else {
        panic!("not a mechanism")
    };
    assert_eq!(
        *recorder.logs.lock().unwrap(),
        [(Level::Info, "greeting older".to_owned())]
    );
    let mut exchange = mechanism.start(&context());
    assert!(matches!(exchange.step(b"cred"), StepOutcome::Continue(b) if b == b"4096"));
}

fn mechanism_with(services: &'static AbiHostServices) -> Arc<dyn SaslMechanism> {
    let library = validate(&declaration_of(exports())).unwrap();
    match library.exports()[0]
        .create("greeting = \"x\"", services)
        .unwrap()
    {
        PluginInstance::SaslMechanism(m) => m,
        other => panic!("{other:?}"),
    }
}

// ---- SASL mechanisms ----------------------------------------------------------------------------

#[test]
fn the_wrapped_mechanism_runs_exchanges() {
    let mechanism = mechanism("greeting = \"hello\"");
    assert_eq!(mechanism.name(), "X-ECHO");
    assert!(!mechanism.steps_are_cheap());
    let mut exchange = mechanism.start(&context());
    assert!(matches!(exchange.step(b"config"), StepOutcome::Continue(b) if b == b"hello"));
    assert!(matches!(exchange.step(b"ctx"), StepOutcome::Continue(b) if b == b"::1 external 42"));
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
            // The mechanism's own key crosses, attributed to the mechanism that completed.
            assert_eq!(
                authenticated.credential,
                Some(crate::credentials::CredentialId::plugin("X-ECHO", "key-1"))
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        exchange.step(b"config"),
        StepOutcome::Fail(AuthFailure::Hidden(reason)) if reason.contains("after the exchange finished")
    ));
    let mut exchange = mechanism.start(&context());
    assert!(matches!(
        exchange.step(b"bad"),
        StepOutcome::Fail(AuthFailure::Visible(m)) if m == "nope"
    ));
    let mut exchange = mechanism.start(&context());
    assert!(matches!(
        exchange.step(b"hidden"),
        StepOutcome::Fail(AuthFailure::Hidden(reason)) if reason.ends_with("secret reason")
    ));
}

#[test]
fn a_panic_in_step_becomes_a_failure_for_that_exchange_only() {
    let mechanism = mechanism("greeting = \"hi\"");
    let mut exchange = mechanism.start(&context());
    match exchange.step(b"panic") {
        StepOutcome::Fail(AuthFailure::Hidden(reason)) => {
            assert!(reason.contains("asked to panic in step"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }
    let mut exchange = mechanism.start(&context());
    assert!(matches!(exchange.step(b"config"), StepOutcome::Continue(_)));
}

// ---- Authorizers -------------------------------------------------------------------------------

fn authorizer(config: &str) -> Arc<dyn Authorizer> {
    match create("test-prefix", config).unwrap() {
        PluginInstance::Authorizer(a) => a,
        other => panic!("{other:?}"),
    }
}

fn decide(
    authorizer: &dyn Authorizer,
    principal: &str,
    names: &[&str],
) -> Vec<(Decision, DecidingRule)> {
    let principal = Principal::user(principal);
    let context = RequestContext::new(&principal, IpAddr::from([10, 0, 0, 1]), "l", 0, 9, 7)
        .with_client_id(Some("client"));
    let mut actions: Vec<Action<'_>> = names
        .iter()
        .map(|n| Action::new(AclOperation::Write, ResourceType::Topic, *n))
        .collect();
    actions.push(Action::new(AclOperation::Read, ResourceType::Group, "g").quiet());
    authorizer
        .authorize(&context, &actions)
        .into_iter()
        .map(|a| (a.decision, a.rule))
        .collect()
}

#[test]
fn the_wrapped_authorizer_decides_every_action() {
    let authorizer = authorizer("");
    let plugin = DecidingRule::Plugin {
        plugin: Arc::from("test-prefix"),
    };
    assert_eq!(
        decide(
            authorizer.as_ref(),
            "alice",
            &["alice.orders", "bob.orders"]
        ),
        [
            (Decision::Allowed, plugin),
            (Decision::Denied, DecidingRule::DefaultDeny),
            (Decision::Allowed, DecidingRule::SuperUser),
        ]
    );
    let nobody = Principal::user("nobody");
    let context = RequestContext::new(&nobody, IpAddr::from([10, 0, 0, 1]), "l", 0, 9, 7);
    assert_eq!(
        authorizer.authorize_by_resource_type(&context, AclOperation::Write, ResourceType::Topic),
        Decision::Denied
    );
    assert!(authorizer.acl_admin().is_none());
}

#[test]
fn a_panicking_authorizer_denies_that_request_and_serves_the_next() {
    let authorizer = authorizer("");
    assert_eq!(
        decide(authorizer.as_ref(), "alice", &["alice.a", "panic"]),
        vec![(Decision::Denied, DecidingRule::Failed); 3]
    );
    assert_eq!(
        decide(authorizer.as_ref(), "alice", &["alice.a"])[0].0,
        Decision::Allowed
    );
}

/// A context with a bearer token's groups (more than cross on the stack, too), scopes and id.
fn token_context<'a>(
    principal: &'a Principal,
    groups: &'a [Principal],
    scopes: &'a [String],
    correlation_id: i32,
) -> RequestContext<'a> {
    RequestContext::new(
        principal,
        IpAddr::from([10, 0, 0, 1]),
        "l",
        0,
        9,
        correlation_id,
    )
    .with_client_id(Some("client"))
    .with_groups(groups)
    .with_scopes(scopes)
    .with_jti(Some("jti-é"))
}

#[test]
fn groups_scopes_and_the_token_id_cross_the_abi() {
    let authorizer = authorizer("");
    let carol = Principal::user("carol");
    let scopes = ["kafka.read".to_owned(), "kafka.write".to_owned()];
    for count in [1, 2, 9] {
        let groups: Vec<Principal> = (0..count)
            .map(|i| Principal::group(format!("team{i}")))
            .collect();
        let correlation_id = 7_000 + count;
        let context = token_context(&carol, &groups, &scopes, correlation_id);
        let last = format!("team{}.orders", count - 1);
        let actions = [
            Action::new(AclOperation::Write, ResourceType::Topic, "carol.orders"),
            Action::new(AclOperation::Write, ResourceType::Topic, last.as_str()),
            Action::new(AclOperation::Write, ResourceType::Topic, "other.orders"),
        ];
        let decisions: Vec<bool> = authorizer
            .authorize(&context, &actions)
            .iter()
            .map(Authorization::is_allowed)
            .collect();
        assert_eq!(decisions, [true, true, false], "{count} groups");
        assert_eq!(
            seen_context(correlation_id),
            Some((groups.clone(), scopes.to_vec(), Some("jti-é".to_owned()))),
            "{count} groups"
        );
    }
    // Without a token: nothing (and the plugin decides on the principal alone).
    let context = RequestContext::new(&carol, IpAddr::from([10, 0, 0, 1]), "l", 0, 9, 7_100);
    let write = [Action::new(
        AclOperation::Write,
        ResourceType::Topic,
        "team0.orders",
    )];
    assert!(!authorizer.authorize(&context, &write)[0].is_allowed());
    assert_eq!(seen_context(7_100), Some((Vec::new(), Vec::new(), None)));
}

#[test]
fn a_policy_screens_actions_with_the_sessions_groups() {
    let policy = match create("test-policy", "").unwrap() {
        PluginInstance::ForwardingPolicy(p) => p,
        other => panic!("{other:?}"),
    };
    let carol = Principal::user("carol");
    let write = Action::new(AclOperation::Write, ResourceType::Topic, "orders");
    let groups = [Principal::group("readers")];
    assert!(policy.admits(&token_context(&carol, &groups, &[], 1), &write));
    let groups = [Principal::group("readers"), Principal::group("blocked")];
    assert!(!policy.admits(&token_context(&carol, &groups, &[], 1), &write));
}

/// The raw authorizer table of [`Prefix`] and an instance of it, for calls the host's wrapper
/// would never make (a context as another host lends it).
fn raw_prefix() -> (AuthorizerTable, *const c_void) {
    let all = exports();
    // SAFETY: export 1 of `exports()` is `Prefix`'s authorizer table, a static.
    let table: AuthorizerTable = unsafe { *all[1].table.cast::<AuthorizerTable>() };
    let services = export_services(recorder());
    let mut instance: *const c_void = std::ptr::null();
    let create = table.create.unwrap();
    // SAFETY: the ABI's create arguments: an empty configuration, the services table (valid
    // forever), an output slot and no error sink.
    let status = unsafe { create(AbiBytes::EMPTY, services, &mut instance, std::ptr::null()) };
    assert_eq!(status, STATUS_OK);
    (table, instance)
}

/// A host from before the token fields lends a context with `size` 0 that ends at `client_id`:
/// the plugin reads nothing after it. Here the bytes after it are garbage (pointers to nowhere,
/// counts, a `has_jti` flag) that a plugin following them would crash on or report.
#[test]
fn a_context_from_an_older_host_has_no_token_fields_and_nothing_past_it_is_read() {
    let (table, instance) = raw_prefix();
    let (kind, name, listener, client) = ("User", "carol", "l", "client");
    let old = AbiRequestContext {
        principal_type: AbiBytes::from_text(kind),
        principal_name: AbiBytes::from_text(name),
        address: IpAddr::from([10, 0, 0, 1]).into(),
        listener: AbiBytes::from_text(listener),
        api_key: 0,
        api_version: 9,
        correlation_id: 7_200,
        has_client_id: 1,
        size: 0,
        client_id: AbiBytes::from_text(client),
        groups: std::ptr::dangling(),
        group_count: 3,
        scopes: std::ptr::dangling(),
        scope_count: usize::MAX,
        has_jti: 1,
        reserved: 7,
        jti: AbiBytes {
            ptr: std::ptr::dangling(),
            len: 99,
        },
    };
    let group_topic = "readers.orders";
    let own_topic = "carol.orders";
    let actions = [abi_action_of(own_topic), abi_action_of(group_topic)];
    let mut answers = [AbiAuthorization::default(); 2];
    let authorize = table.authorize.unwrap();
    // SAFETY: our instance; a context whose first REQUEST_CONTEXT_SIZE_V1 bytes are valid (all
    // an older host promises with `size` 0); arrays of two actions and two answers we own.
    let status = unsafe {
        authorize(
            instance,
            &old,
            actions.as_ptr(),
            actions.len(),
            answers.as_mut_ptr(),
        )
    };
    assert_eq!(status, STATUS_OK);
    assert_eq!(
        answers.map(|a| a.decision),
        [DECISION_ALLOWED, DECISION_DENIED]
    );
    assert_eq!(seen_context(7_200), Some((Vec::new(), Vec::new(), None)));

    // The same call from this host (`size` set, the fields real): the group counts.
    let groups = [AbiPrincipal {
        kind: AbiBytes::from_text("Group"),
        name: AbiBytes::from_text("readers"),
    }];
    let current = AbiRequestContext {
        size: REQUEST_CONTEXT_SIZE,
        correlation_id: 7_201,
        groups: groups.as_ptr(),
        group_count: 1,
        scopes: std::ptr::null(),
        scope_count: 0,
        has_jti: 0,
        ..old
    };
    // SAFETY: as above, with a whole context.
    let status = unsafe {
        authorize(
            instance,
            &current,
            actions.as_ptr(),
            actions.len(),
            answers.as_mut_ptr(),
        )
    };
    assert_eq!(status, STATUS_OK);
    assert_eq!(
        answers.map(|a| a.decision),
        [DECISION_ALLOWED, DECISION_ALLOWED]
    );
    assert_eq!(
        seen_context(7_201),
        Some((vec![Principal::group("readers")], Vec::new(), None))
    );
    // A broken array (null with a count) fails the call: every action denied, nothing read.
    let broken = AbiRequestContext {
        groups: std::ptr::null(),
        group_count: 2,
        ..current
    };
    // SAFETY: as above.
    let status = unsafe {
        authorize(
            instance,
            &broken,
            actions.as_ptr(),
            actions.len(),
            answers.as_mut_ptr(),
        )
    };
    assert_eq!(status, STATUS_ERROR);
}

fn abi_action_of(topic: &'static str) -> AbiAction {
    AbiAction {
        operation: i32::from(AclOperation::Write.code()),
        resource_type: i32::from(ResourceType::Topic.code()),
        pattern_type: i32::from(PatternType::Literal.code()),
        reference_count: 1,
        flags: 0,
        reserved: 0,
        name: AbiBytes::from_text(topic),
    }
}

/// The context as a plugin built before the token fields declares it: 104 bytes, `reserved`
/// where `size` now is.
#[repr(C)]
struct ContextBeforeTokens {
    principal_type: AbiBytes,
    principal_name: AbiBytes,
    address: AbiAddress,
    listener: AbiBytes,
    api_key: i16,
    api_version: i16,
    correlation_id: i32,
    has_client_id: u32,
    reserved: u32,
    client_id: AbiBytes,
}

/// What such a plugin's `authorize` does: read its layout of the context. Allows a WRITE when the
/// principal, the listener and the client id read back as the host wrote them.
unsafe extern "C" fn authorize_before_tokens(
    _instance: *const c_void,
    context: *const AbiRequestContext,
    _actions: *const AbiAction,
    count: usize,
    out: *mut AbiAuthorization,
) -> u32 {
    // SAFETY: the host lends a context at least as long as the older layout.
    let old = unsafe { &*context.cast::<ContextBeforeTokens>() };
    // SAFETY: the host lends these texts for the call.
    let read = |bytes: AbiBytes| unsafe { bytes.as_str() }.unwrap_or("?").to_owned();
    let ok = read(old.principal_type) == "User"
        && read(old.principal_name) == "carol"
        && read(old.listener) == "l"
        && old.has_client_id == 1
        && read(old.client_id) == "client"
        && old.correlation_id == 7_300;
    for i in 0..count {
        // SAFETY: the host's answer array of `count`.
        unsafe {
            *out.add(i) = AbiAuthorization {
                decision: if ok {
                    DECISION_ALLOWED
                } else {
                    DECISION_DENIED
                },
                rule: RULE_DEFAULT_ALLOW,
            };
        }
    }
    STATUS_OK
}

/// A plugin built before the token fields loads (nothing in its declaration or tables changed),
/// and this host's longer context reads as the older one: the prefix is unchanged.
#[test]
fn a_plugin_built_before_the_token_fields_loads_and_reads_its_prefix() {
    assert_eq!(
        std::mem::size_of::<ContextBeforeTokens>() as u32,
        REQUEST_CONTEXT_SIZE_V1
    );
    let older = patched::<AuthorizerTable>(1, |t| t.authorize = Some(authorize_before_tokens));
    let library = validate(&declaration_of(older)).unwrap();
    assert!(library.warnings().is_empty(), "{:?}", library.warnings());
    let export = library
        .exports()
        .iter()
        .find(|e| e.name() == "test-prefix")
        .unwrap();
    let PluginInstance::Authorizer(authorizer) =
        export.create("", export_services(recorder())).unwrap()
    else {
        panic!("not an authorizer")
    };
    let carol = Principal::user("carol");
    let groups: Vec<Principal> = (0..6).map(|i| Principal::group(format!("g{i}"))).collect();
    let scopes = ["s".to_owned()];
    let context = token_context(&carol, &groups, &scopes, 7_300);
    let write = [Action::new(AclOperation::Write, ResourceType::Topic, "t")];
    assert!(authorizer.authorize(&context, &write)[0].is_allowed());
}

#[test]
fn acl_administration_crosses_the_abi() {
    let authorizer = authorizer("acl_admin = true");
    let admin = authorizer.acl_admin().expect("an ACL admin");
    let results = admin.create_acls(&[binding("a"), binding(""), binding("b")]);
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok() && results[2].is_ok());
    assert!(matches!(results[1], Err(AclAdminError::Invalid(_))));
    assert_eq!(
        admin.describe_acls(&AclBindingFilter::any()),
        [binding("a"), binding("b")]
    );
    let mut only_a = AclBindingFilter::any();
    only_a.pattern.name = Some("a".into());
    assert_eq!(admin.delete_acls(&[only_a]).unwrap(), [vec![binding("a")]]);
    assert_eq!(
        admin.describe_acls(&AclBindingFilter::any()),
        [binding("b")]
    );
}

// ---- Principal builders -------------------------------------------------------------------------

fn principal_builder() -> Arc<dyn PrincipalBuilder> {
    match create("test-cn", "").unwrap() {
        PluginInstance::PrincipalBuilder(p) => p,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_wrapped_principal_builder_sees_sasl_and_the_certificate() {
    let builder = principal_builder();
    let address = IpAddr::from([127, 0, 0, 1]);
    let mut extensions = BTreeMap::new();
    extensions.insert("a".to_owned(), "b".to_owned());
    let done = Authenticated::new("alice").with_extensions(extensions);
    let sasl = AuthenticationContext::sasl(&done, "PLAIN", address, "l");
    assert_eq!(
        builder.build(&sasl).unwrap(),
        Principal {
            kind: "Sasl".into(),
            name: "alice/PLAIN/1".into()
        }
    );
    let peer = TlsPeer::new(vec![vec![0x30, 1, 2]], Some("CN=svc,O=x".into()));
    let with_cert = AuthenticationContext::sasl(&done, "PLAIN", address, "l").with_tls(Some(&peer));
    assert_eq!(builder.build(&with_cert).unwrap(), Principal::user("svc"));
    let tls_only = AuthenticationContext::tls_only(&peer, address, "l");
    assert_eq!(builder.build(&tls_only).unwrap(), Principal::user("svc"));
}

#[test]
fn principal_builder_errors_and_panics_fail_the_authentication() {
    let builder = principal_builder();
    let address = IpAddr::from([127, 0, 0, 1]);
    let none = Authenticated::new("none");
    assert_eq!(
        builder
            .build(&AuthenticationContext::sasl(&none, "PLAIN", address, "l"))
            .unwrap_err(),
        PrincipalError::NoRuleApplies {
            name: "none".into()
        }
    );
    let panic = Authenticated::new("panic");
    match builder.build(&AuthenticationContext::sasl(&panic, "PLAIN", address, "l")) {
        Err(PrincipalError::Failed { reason }) => {
            assert!(reason.contains("asked to panic in build"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

// ---- Login modules -------------------------------------------------------------------------------

fn login(config: &str) -> Arc<dyn LoginModule> {
    match create("test-login", config).unwrap() {
        PluginInstance::LoginModule(l) => l,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_wrapped_login_module_hands_over_its_password_and_refreshes() {
    let login = login("password = \"pw\"");
    assert_eq!(login.mechanism(), "SCRAM-SHA-512");
    assert_eq!(
        login.credential(),
        ExpiringCredential::expiring("svc", 0, 100)
    );
    match login.start().unwrap() {
        ClientExchange::Password { username, password } => {
            assert_eq!((username.as_str(), password.expose()), ("svc", "pw"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        login.refresh().unwrap(),
        ExpiringCredential::expiring("svc", 10, 110)
    );
    assert!(matches!(
        login.start().unwrap(),
        ClientExchange::Password { password, .. } if password.expose() == "pw+"
    ));
}

#[test]
fn login_failures_and_panics_are_errors() {
    assert!(login("password = \"fail\"")
        .refresh()
        .unwrap_err()
        .to_string()
        .contains("cannot read the password"));
    let panicking = login("password = \"panic\"");
    assert!(panicking
        .refresh()
        .unwrap_err()
        .to_string()
        .contains("asked to panic in refresh"));
    // The module keeps serving its last credential.
    assert_eq!(panicking.credential().principal_name, "svc");
}

#[test]
fn a_custom_client_exchange_crosses_the_abi() {
    let login = login("password = \"pw\"\ncustom = true");
    let ClientExchange::Custom(mut exchange) = login.start().unwrap() else {
        panic!("expected a custom exchange")
    };
    assert!(!exchange.is_complete());
    assert_eq!(exchange.initial().unwrap(), b"hello");
    assert_eq!(exchange.step(b"again").unwrap(), Some(b"more".to_vec()));
    assert_eq!(exchange.step(b"welcome").unwrap(), None);
    assert!(exchange.is_complete());
    assert!(exchange.step(b"other").is_err());
    let ClientExchange::Custom(mut exchange) = login.start().unwrap() else {
        panic!("expected a custom exchange")
    };
    exchange.initial().unwrap();
    assert!(exchange.step(b"panic").is_err());
    // A panicked exchange is never stepped again.
    assert!(exchange
        .step(b"welcome")
        .unwrap_err()
        .to_string()
        .contains("panicked before"));
}

// ---- Forwarding policies ---------------------------------------------------------------------------

#[test]
fn the_wrapped_policy_routes_screens_and_fails_closed() {
    let policy = match create("test-policy", "").unwrap() {
        PluginInstance::ForwardingPolicy(p) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(policy.name(), "test-policy");
    assert!(policy.screens_actions());
    let alice = Principal::user("alice");
    assert_eq!(policy.route(&RequestInfo::new(17, 1, &alice)), Route::Local);
    assert_eq!(
        policy.route(&RequestInfo::new(0, 9, &alice)),
        Route::standard(0)
    );
    let blocked = Principal::user("blocked");
    assert_eq!(
        policy.route(&RequestInfo::new(0, 9, &blocked)),
        Route::Reject(crate::errors::ErrorCode::CLUSTER_AUTHORIZATION_FAILED)
    );
    assert_eq!(
        policy.route(&RequestInfo::new(999, 0, &alice)),
        Route::Reject(crate::errors::ErrorCode::POLICY_VIOLATION)
    );
    let context = RequestContext::new(&alice, IpAddr::from([1, 2, 3, 4]), "l", 0, 9, 1);
    let admits = |name: &str| {
        policy.admits(
            &context,
            &Action::new(AclOperation::Write, ResourceType::Topic, name),
        )
    };
    assert!(admits("orders"));
    assert!(!admits("forbidden"));
    assert!(!admits("panic"));
}

// ---- Event subscribers ---------------------------------------------------------------------------

#[test]
fn the_wrapped_subscriber_receives_events_and_survives_a_panic() {
    let subscriber = match create("test-events", "").unwrap() {
        PluginInstance::EventSubscriber(s) => s,
        other => panic!("{other:?}"),
    };
    let event = Event::SessionAuthenticated {
        principal: Principal::user("alice"),
        mechanism: "PLAIN".into(),
        client_address: IpAddr::from([127, 0, 0, 1]),
        token_claims: None,
    };
    subscriber.on_event(&Event::AclsChanged {
        created: 1,
        deleted: 0,
    });
    subscriber.on_event(&event);
    assert!(SEEN.lock().unwrap().contains(&event));
}

#[test]
fn the_subscriber_receives_a_tokens_scopes_groups_and_id() {
    let subscriber = match create("test-events", "").unwrap() {
        PluginInstance::EventSubscriber(s) => s,
        other => panic!("{other:?}"),
    };
    let claims = crate::sasl::TokenClaims::new(
        vec!["kafka.read".into()],
        vec!["readers".into(), "ops".into()],
        Some("jti-événement".into()),
    );
    let events = [
        Event::SessionAuthenticated {
            principal: Principal::user("carol"),
            mechanism: "OAUTHBEARER".into(),
            client_address: IpAddr::from([127, 0, 0, 2]),
            token_claims: Some(claims.clone()),
        },
        Event::SessionReauthenticated {
            principal: Principal::user("carol"),
            mechanism: "OAUTHBEARER".into(),
            client_address: IpAddr::from([127, 0, 0, 2]),
            token_claims: Some(claims),
        },
    ];
    for event in &events {
        subscriber.on_event(event);
    }
    let seen = SEEN.lock().unwrap();
    for event in &events {
        assert!(seen.contains(event), "{event:?} not delivered whole");
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
    assert_eq!(offset_of!(PluginDeclaration, api_version), 16);
    assert_eq!(offset_of!(PluginDeclaration, rustc_version), 48);
    assert_eq!(offset_of!(PluginDeclaration, flags), 176);
    assert_eq!(offset_of!(PluginDeclaration, services_version), 180);
    assert_eq!(offset_of!(PluginDeclaration, export_count), 184);
    assert_eq!(offset_of!(PluginDeclaration, exports), 192);
    assert_eq!(size_of::<PluginDeclaration>(), 200);
    assert_eq!(size_of::<PluginExport>(), 80);
    assert_eq!(offset_of!(AbiHostServices, context), 8);
    assert_eq!(offset_of!(AbiHostServices, publish_metric), 64);
    // Services version 2 appended the span functions (a version-1 table ends at 72).
    assert_eq!(offset_of!(AbiHostServices, span_enter), 72);
    assert_eq!(offset_of!(AbiHostServices, span_exit), 80);
    assert_eq!(size_of::<AbiHostServices>(), 88);
    assert_eq!(size_of::<SaslMechanismTable>(), 48);
    assert_eq!(size_of::<AuthorizerTable>(), 64);
    assert_eq!(size_of::<PrincipalBuilderTable>(), 24);
    assert_eq!(size_of::<LoginModuleTable>(), 80);
    assert_eq!(size_of::<ForwardingPolicyTable>(), 48);
    assert_eq!(size_of::<EventSubscriberTable>(), 24);
    assert_eq!(size_of::<AbiExchangeContext>(), 48);
    assert_eq!(size_of::<AbiStepResult>(), 104);
    // The token fields were appended after `client_id` (which ends at 104, where a context from
    // a host before them ends); `size` is the former reserved zero.
    assert_eq!(offset_of!(AbiRequestContext, has_client_id), 80);
    assert_eq!(offset_of!(AbiRequestContext, size), 84);
    assert_eq!(offset_of!(AbiRequestContext, client_id), 88);
    assert_eq!(REQUEST_CONTEXT_SIZE_V1, 104);
    assert_eq!(offset_of!(AbiRequestContext, groups), 104);
    assert_eq!(offset_of!(AbiRequestContext, group_count), 112);
    assert_eq!(offset_of!(AbiRequestContext, scopes), 120);
    assert_eq!(offset_of!(AbiRequestContext, scope_count), 128);
    assert_eq!(offset_of!(AbiRequestContext, has_jti), 136);
    assert_eq!(offset_of!(AbiRequestContext, jti), 144);
    assert_eq!(size_of::<AbiRequestContext>(), 160);
    assert_eq!(REQUEST_CONTEXT_SIZE, 160);
    assert_eq!(size_of::<AbiPrincipal>(), 32);
    assert_eq!(size_of::<AbiAction>(), 40);
    assert_eq!(size_of::<AbiAuthenticationContext>(), 168);
}
