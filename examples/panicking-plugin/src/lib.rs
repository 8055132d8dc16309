//! A plugin library that panics on purpose, one plugin of every kind, for the host's tests that a
//! panic inside a plugin never crosses the library boundary and fails closed:
//!
//! | plugin             | kind              | panics when                                        |
//! |--------------------|-------------------|----------------------------------------------------|
//! | `X-PANIC`          | SASL mechanism    | `panic_in = "create"`, `"start"`, or (default) `"step"` and the client sends `panic!` |
//! | `panic-authorizer` | authorizer        | an action names a resource containing `panic`      |
//! | `panic-principal`  | principal builder | the SASL name starts with `panic`                  |
//! | `panic-login`      | login module      | `refresh` or `start` is called                     |
//! | `panic-policy`     | forwarding policy | the principal's name starts with `panic` (route), or a topic contains `panic` (admits) |
//! | `panic-events`     | event subscriber  | every event                                        |
//!
//! Its panics are deliberate and caught by the export wrapper, so they print one line each, never
//! a backtrace (even with `RUST_BACKTRACE=1`): a passing test run should not look like a failing
//! one. The library has its own copy of std, hence its own panic hook, so the quiet hook installed
//! here only ever applies to this plugin's panics.
#![allow(
    clippy::panic,
    reason = "this plugin exists to panic, for the host's containment tests"
)]

use std::sync::Once;

use portcullis_plugin_api::acl::{AclOperation, ResourceType};
use portcullis_plugin_api::authorizer::{
    Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};
use portcullis_plugin_api::events::{Event, EventSubscriber};
use portcullis_plugin_api::forwarding::{ForwardingPolicy, RequestInfo, Route};
use portcullis_plugin_api::login::{ClientExchange, ExpiringCredential, LoginError, LoginModule};
use portcullis_plugin_api::principal::{
    AuthenticationContext, DefaultPrincipalBuilder, Principal, PrincipalBuilder, PrincipalError,
};
use portcullis_plugin_api::sasl::{
    AuthFailure, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
};
use portcullis_plugin_api::{Host, NoConfig, Plugin, PluginError};

/// Replaces this library's panic hook with one line per (deliberate) panic.
fn quiet_panics() {
    static QUIET: Once = Once::new();
    QUIET.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            eprintln!("panicking-plugin: deliberate panic at {location} (the host must catch it)");
        }));
    });
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MechanismConfig {
    #[serde(default)]
    panic_in: Option<String>,
}

pub struct PanickingMechanism {
    panic_in_start: bool,
}

impl Plugin for PanickingMechanism {
    const NAME: &'static str = "X-PANIC";
    type Config = MechanismConfig;
    fn new(config: MechanismConfig, _: &Host) -> Result<Self, PluginError> {
        quiet_panics();
        match config.panic_in.as_deref().unwrap_or("step") {
            "create" => panic!("test hook: panic in from_config"),
            "start" => Ok(Self {
                panic_in_start: true,
            }),
            "step" => Ok(Self {
                panic_in_start: false,
            }),
            other => Err(PluginError::invalid_value(
                "panic_in",
                format!("unknown place {other:?}"),
            )),
        }
    }
}

impl SaslMechanism for PanickingMechanism {
    fn name(&self) -> &str {
        "X-PANIC"
    }
    fn start(&self, _context: &ExchangeContext) -> Box<dyn SaslExchange> {
        if self.panic_in_start {
            panic!("test hook: panic in start");
        }
        Box::new(PanickingExchange)
    }
}

struct PanickingExchange;

impl SaslExchange for PanickingExchange {
    fn step(&mut self, message: &[u8]) -> StepOutcome {
        if message == b"panic!" {
            panic!("test hook: panic in step");
        }
        StepOutcome::Fail(AuthFailure::Visible("send `panic!`".to_owned()))
    }
}

/// Declares a plugin without configuration.
macro_rules! plugin {
    ($ty:ident, $name:literal) => {
        pub struct $ty;
        impl Plugin for $ty {
            const NAME: &'static str = $name;
            type Config = NoConfig;
            fn new(_: NoConfig, _: &Host) -> Result<Self, PluginError> {
                quiet_panics();
                Ok($ty)
            }
        }
    };
}

plugin!(PanickingAuthorizer, "panic-authorizer");
plugin!(PanickingPrincipal, "panic-principal");
plugin!(PanickingLogin, "panic-login");
plugin!(PanickingPolicy, "panic-policy");
plugin!(PanickingEvents, "panic-events");

impl Authorizer for PanickingAuthorizer {
    fn authorize(&self, _: &RequestContext<'_>, actions: &[Action<'_>]) -> Vec<Authorization> {
        actions
            .iter()
            .map(|action| {
                if action.resource.name.contains("panic") {
                    panic!("test hook: panic in authorize");
                }
                Authorization::allowed(DecidingRule::DefaultAllow)
            })
            .collect()
    }
    fn authorize_by_resource_type(
        &self,
        _: &RequestContext<'_>,
        _: AclOperation,
        _: ResourceType,
    ) -> Decision {
        Decision::Allowed
    }
}

impl PrincipalBuilder for PanickingPrincipal {
    fn build(&self, context: &AuthenticationContext<'_>) -> Result<Principal, PrincipalError> {
        if context
            .sasl
            .is_some_and(|s| s.authorization_id.starts_with("panic"))
        {
            panic!("test hook: panic in build");
        }
        DefaultPrincipalBuilder.build(context)
    }
}

impl LoginModule for PanickingLogin {
    fn mechanism(&self) -> &str {
        "PLAIN"
    }
    fn credential(&self) -> ExpiringCredential {
        ExpiringCredential::expiring("panic", 0, 1)
    }
    fn refresh(&self) -> Result<ExpiringCredential, LoginError> {
        panic!("test hook: panic in refresh");
    }
    fn start(&self) -> Result<ClientExchange, LoginError> {
        panic!("test hook: panic in start");
    }
}

impl ForwardingPolicy for PanickingPolicy {
    fn name(&self) -> &str {
        "panic-policy"
    }
    fn route(&self, request: &RequestInfo<'_>) -> Route {
        if request.principal.name.starts_with("panic") {
            panic!("test hook: panic in route");
        }
        Route::standard(request.api_key)
    }
    fn screens_actions(&self) -> bool {
        true
    }
    fn admits(&self, _: &RequestContext<'_>, action: &Action<'_>) -> bool {
        if action.resource.name.contains("panic") {
            panic!("test hook: panic in admits");
        }
        true
    }
}

impl EventSubscriber for PanickingEvents {
    fn on_event(&self, _: &Event) {
        panic!("test hook: panic in on_event");
    }
}

portcullis_plugin_api::export_plugins! {
    sasl_mechanism: PanickingMechanism,
    authorizer: PanickingAuthorizer,
    principal_builder: PanickingPrincipal,
    login_module: PanickingLogin,
    forwarding_policy: PanickingPolicy,
    event_subscriber: PanickingEvents,
}
