//! A deliberately wrong plugin library, for the host's refusal tests: one working plugin of every
//! kind, in a declaration that claims ABI version 1 (the SASL-only ABI of framework 0.1). A host
//! speaking version 2 must refuse the whole library before calling anything in it, with a message
//! that names the file and the version.
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

/// Every kind at once: nothing here is ever called by a host that checks the ABI version.
pub struct Old;

impl Plugin for Old {
    const NAME: &'static str = "old-abi";
    type Config = NoConfig;
    fn new(_: NoConfig, _: &Host) -> Result<Self, PluginError> {
        Ok(Old)
    }
}

impl SaslMechanism for Old {
    fn name(&self) -> &str {
        "X-OLD-ABI"
    }
    fn start(&self, _: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(Old)
    }
}

impl SaslExchange for Old {
    fn step(&mut self, _: &[u8]) -> StepOutcome {
        StepOutcome::Fail(AuthFailure::Hidden("never reached".to_owned()))
    }
}

impl Authorizer for Old {
    fn authorize(&self, _: &RequestContext<'_>, actions: &[Action<'_>]) -> Vec<Authorization> {
        actions
            .iter()
            .map(|_| Authorization::denied(DecidingRule::DefaultDeny))
            .collect()
    }
    fn authorize_by_resource_type(
        &self,
        _: &RequestContext<'_>,
        _: AclOperation,
        _: ResourceType,
    ) -> Decision {
        Decision::Denied
    }
}

impl PrincipalBuilder for Old {
    fn build(&self, context: &AuthenticationContext<'_>) -> Result<Principal, PrincipalError> {
        DefaultPrincipalBuilder.build(context)
    }
}

impl LoginModule for Old {
    fn mechanism(&self) -> &str {
        "PLAIN"
    }
    fn credential(&self) -> ExpiringCredential {
        ExpiringCredential::non_expiring("old")
    }
    fn start(&self) -> Result<ClientExchange, LoginError> {
        Err(LoginError("never reached".to_owned()))
    }
}

impl ForwardingPolicy for Old {
    fn name(&self) -> &str {
        "old-abi"
    }
    fn route(&self, request: &RequestInfo<'_>) -> Route {
        Route::standard(request.api_key)
    }
}

impl EventSubscriber for Old {
    fn on_event(&self, _: &Event) {}
}

// The hidden `@abi_version` form exists only for tests like this one. (One type under every kind
// and one name: a host that checks the ABI version first never reads the exports.)
portcullis_plugin_api::export_plugins! {
    @abi_version 1;
    sasl_mechanism: Old,
    authorizer: Old,
    principal_builder: Old,
    login_module: Old,
    forwarding_policy: Old,
    event_subscriber: Old,
}
