//! `portcullis:plugin/request`: the request an authorizer decides, answered field by field when
//! the component asks.
//!
//! Why a resource and not a record argument: every string or list handed to a component is one
//! call into the component's allocator; the 0.1 interface's authorize call made ten, seven of them
//! for the record of the request (principal, address, listener, client id, groups, scopes, token
//! id), mostly fields few authorizers read. Now the call passes the principal, a handle and the
//! actions; the component pays only for what it reads (`benches/forms.rs`,
//! docs/benchmarks-history.md).
//!
//! The facts are copied into the instance's store before each call and reset after it: the store
//! cannot borrow the request, which lives only for the call. (The listener's buffer and the
//! lists' capacity are kept for the next call; a client id, groups, scopes and a token id are
//! copied anew when the request has them.) The component gets a borrowed handle, which the
//! canonical ABI invalidates when the call returns, so it cannot ask about a request later.

use std::net::{IpAddr, Ipv4Addr};

use portcullis_plugin_api::authorizer::RequestContext;
use portcullis_plugin_api::principal::Principal;
use wasmtime::component::Resource;
use wasmtime::Store;

use crate::bindings::authorizer::portcullis::plugin::request::{Host, HostRequestContext};
use crate::bindings::types;
use crate::pool::State;

/// The one handle a component is given: there is at most one request per store at a time.
const CURRENT: u32 = 0;

/// What the host knows about the request being authorized, owned by the instance's store for the
/// duration of one call.
#[derive(Debug)]
pub struct RequestFacts {
    client_address: IpAddr,
    listener: String,
    api_key: i16,
    api_version: i16,
    correlation_id: i32,
    client_id: Option<String>,
    groups: Vec<Principal>,
    scopes: Vec<String>,
    jti: Option<String>,
}

impl Default for RequestFacts {
    fn default() -> Self {
        Self {
            client_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            listener: String::new(),
            api_key: 0,
            api_version: 0,
            correlation_id: 0,
            client_id: None,
            groups: Vec::new(),
            scopes: Vec::new(),
            jti: None,
        }
    }
}

impl RequestFacts {
    /// Takes the facts of `context`, reusing this value's buffers, and returns the handle to
    /// pass to the component.
    fn hold(&mut self, context: &RequestContext<'_>) -> Resource<RequestFacts> {
        self.client_address = context.client_address;
        context.listener.as_ref().clone_into(&mut self.listener);
        self.api_key = context.api_key;
        self.api_version = context.api_version;
        self.correlation_id = context.correlation_id;
        self.client_id = context.client_id.as_deref().map(str::to_owned);
        context.groups.as_ref().clone_into(&mut self.groups);
        context.scopes.as_ref().clone_into(&mut self.scopes);
        self.jti = context.jti.as_deref().map(str::to_owned);
        Resource::new_borrow(CURRENT)
    }

    /// Forgets the request once the call returned: nothing of it stays in an idle instance's
    /// store (the listener's buffer and the lists' capacity stay, empty, for the next call).
    fn release(&mut self) {
        self.client_address = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        self.listener.clear();
        self.api_key = 0;
        self.api_version = 0;
        self.correlation_id = 0;
        self.client_id = None;
        self.groups.clear();
        self.scopes.clear();
        self.jti = None;
    }
}

/// Runs `call` (a call into the component) with the facts of `context` held in `store` and the
/// handle that names them; they are released when it returns, whatever it returned.
pub(crate) fn with_request<R>(
    store: &mut Store<State>,
    context: &RequestContext<'_>,
    call: impl FnOnce(&mut Store<State>, Resource<RequestFacts>) -> R,
) -> R {
    let request = store.data_mut().request.hold(context);
    let answer = call(store, request);
    store.data_mut().request.release();
    answer
}

fn owned_principal(principal: &Principal) -> types::PrincipalResult {
    types::PrincipalResult {
        kind: principal.kind.clone(),
        name: principal.name.clone(),
    }
}

impl Host for State {}

impl HostRequestContext for State {
    fn client_address(&mut self, _: Resource<RequestFacts>) -> String {
        self.request.client_address.to_string()
    }

    fn listener(&mut self, _: Resource<RequestFacts>) -> String {
        self.request.listener.clone()
    }

    fn api_key(&mut self, _: Resource<RequestFacts>) -> i16 {
        self.request.api_key
    }

    fn api_version(&mut self, _: Resource<RequestFacts>) -> i16 {
        self.request.api_version
    }

    fn correlation_id(&mut self, _: Resource<RequestFacts>) -> i32 {
        self.request.correlation_id
    }

    fn client_id(&mut self, _: Resource<RequestFacts>) -> Option<String> {
        self.request.client_id.clone()
    }

    fn groups(&mut self, _: Resource<RequestFacts>) -> Vec<types::PrincipalResult> {
        self.request.groups.iter().map(owned_principal).collect()
    }

    fn scopes(&mut self, _: Resource<RequestFacts>) -> Vec<String> {
        self.request.scopes.clone()
    }

    fn jti(&mut self, _: Resource<RequestFacts>) -> Option<String> {
        self.request.jti.clone()
    }

    /// Only borrowed handles are ever given: a component drops a borrow when it is done with it,
    /// which never reaches the host's `drop` (that is for owned handles).
    fn drop(&mut self, _: Resource<RequestFacts>) -> wasmtime::Result<()> {
        Ok(())
    }
}
