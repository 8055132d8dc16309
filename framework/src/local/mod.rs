//! Security APIs that Portcullis answers itself (never forwarded with its service identity).
//!
//! A handler decodes the body with the bounds-checked [`crate::protocol::reader::Reader`],
//! applies Kafka's rules and answers. What it changes goes through a service trait the host
//! implements (the store does the I/O), so the rules stay testable here without files or sockets.

pub mod acls;
pub mod scram_credentials;

use std::net::IpAddr;

use bytes::Bytes;

use crate::connection::Session;
use crate::protocol::header::RequestHeader;

/// A request routed to a local handler.
#[derive(Debug)]
#[non_exhaustive]
pub struct LocalRequest<'a> {
    /// The parsed header.
    pub header: &'a RequestHeader,
    /// The body (after the header).
    pub body: &'a [u8],
    /// The authenticated session.
    pub session: &'a Session,
    /// The client's address.
    pub client_address: IpAddr,
}

/// What a handler answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum LocalResponse {
    /// This response frame.
    Respond(Bytes),
    /// The request cannot be parsed: close the connection (Kafka's behaviour for an unparseable
    /// request).
    Close(String),
}

/// Whether the session may perform `operation` on the CLUSTER resource (what the ACL and
/// credential APIs require).
pub(crate) fn cluster_allowed(
    authorizer: &dyn crate::authorizer::Authorizer,
    request: &LocalRequest<'_>,
    operation: crate::acl::AclOperation,
) -> bool {
    use crate::authorizer::{Action, Decision, RequestContext};
    let context = RequestContext::new(
        request.session.principal.clone(),
        request.client_address,
        "",
        request.header.api_key,
        request.header.api_version,
        request.header.correlation_id,
    );
    let action = Action::new(
        operation,
        crate::acl::ResourceType::Cluster,
        crate::acl::CLUSTER_NAME,
    );
    authorizer
        .authorize(&context, &[action])
        .first()
        .is_some_and(|a| a.decision == Decision::Allowed)
}

/// A locally served API.
pub trait LocalHandler: Send + Sync {
    /// The API key.
    fn api_key(&self) -> i16;
    /// The versions served, `(min, max)`.
    fn versions(&self) -> (i16, i16);
    /// Answers one request.
    fn handle(&self, request: &LocalRequest<'_>) -> LocalResponse;
}
