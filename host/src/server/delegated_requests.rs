//! The `delegated` policy's token requests (Create, Describe, Renew and ExpireDelegationToken) on
//! its one service connection: an upstream connection authenticated as the service principal
//! (the node's `[upstream]` login), opened on first use and again after a failure.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::create_delegation_token_request::CreatableRenewers;
use kafka_protocol::messages::describe_delegation_token_request::DescribeDelegationTokenOwner;
use kafka_protocol::messages::{
    ApiKey, CreateDelegationTokenRequest, CreateDelegationTokenResponse,
    DescribeDelegationTokenRequest, DescribeDelegationTokenResponse, ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse, RenewDelegationTokenRequest, RenewDelegationTokenResponse,
};
use kafka_protocol::protocol::StrBytes;
use portcullis::errors::ErrorCode;
use portcullis::principal::Principal;
use portcullis_plugin_forwarding::delegated::tokens::{ExpireReason, RenewOutcome, UpstreamToken};

use super::delegated_error::DelegatedError;
use super::upstream::{pick_version, UpstreamConnection, UpstreamError, UpstreamSettings};

/// The service connection and the token requests sent on it.
pub(super) struct TokenRequests {
    /// The service principal: every token's renewer, and named in the hints of errors.
    service_principal: String,
    /// `token_lifetime_ms`: the lifetime asked for at creation and at each renewal.
    token_lifetime_ms: i64,
    service: tokio::sync::Mutex<Option<UpstreamConnection>>,
}

impl TokenRequests {
    /// Requests made as `service_principal` (the name of the `[upstream]` login), for tokens of
    /// `token_lifetime_ms`. The connection is opened on the first request.
    pub(super) fn new(service_principal: String, token_lifetime_ms: i64) -> Self {
        Self {
            service_principal,
            token_lifetime_ms,
            service: tokio::sync::Mutex::new(None),
        }
    }

    /// CreateDelegationToken v3 owned by `principal`, requested by the service principal, which
    /// is the token's renewer (so it may renew and expire it).
    pub(super) async fn create(
        &self,
        principal: &Principal,
        upstream: &UpstreamSettings,
    ) -> Result<Arc<UpstreamToken>, DelegatedError> {
        let versions = upstream.versions.load();
        let version = pick_version(&versions, ApiKey::CreateDelegationToken, 3)
            .filter(|v| *v >= 3)
            .ok_or(DelegatedError::Unsupported)?;
        let service = portcullis::principal::Principal::user(self.service_principal.clone());
        let request = CreateDelegationTokenRequest::default()
            .with_owner_principal_type(Some(StrBytes::from_string(principal.kind.clone())))
            .with_owner_principal_name(Some(StrBytes::from_string(principal.name.clone())))
            .with_renewers(vec![CreatableRenewers::default()
                .with_principal_type(StrBytes::from_string(service.kind.clone()))
                .with_principal_name(StrBytes::from_string(service.name.clone()))])
            .with_max_lifetime_ms(self.token_lifetime_ms);
        let response: CreateDelegationTokenResponse = self
            .call(upstream, ApiKey::CreateDelegationToken, version, &request)
            .await?;
        let code = ErrorCode(response.error_code);
        if code != ErrorCode::NONE {
            let error = DelegatedError::Refused {
                owner: principal.to_string(),
                code,
                hint: self.hint(code, principal),
            };
            tracing::warn!(principal = %principal, error = %error, "cannot act as the client upstream; its authentication fails");
            return Err(error);
        }
        let token = UpstreamToken {
            token_id: response.token_id.to_string(),
            hmac: response.hmac.to_vec(),
            issued_ms: response.issue_timestamp_ms,
            expiry_ms: response.expiry_timestamp_ms,
            max_ms: response.max_timestamp_ms,
        };
        self.wait_until_known(upstream, principal, &token.token_id)
            .await;
        tracing::info!(principal = %principal, token_id = %token.token_id, expiry_ms = token.expiry_ms, max_ms = token.max_ms, "upstream delegation token created");
        Ok(Arc::new(token))
    }

    /// Waits until the broker has the new token in its cache. The controller answers the creation
    /// once the token is committed, but each broker applies it to the cache its SCRAM
    /// authenticator reads a little later; a login with the token before that fails as "invalid
    /// credentials". DescribeDelegationToken is served from that same cache, so the token showing
    /// up there means connections can log in with it. Bounded by the connect timeout; on timeout
    /// the connections try anyway (and fail visibly if the token never arrives).
    async fn wait_until_known(
        &self,
        upstream: &UpstreamSettings,
        owner: &Principal,
        token_id: &str,
    ) {
        let Some(version) = pick_version(
            &upstream.versions.load(),
            ApiKey::DescribeDelegationToken,
            3,
        ) else {
            return;
        };
        let request = DescribeDelegationTokenRequest::default().with_owners(Some(vec![
            DescribeDelegationTokenOwner::default()
                .with_principal_type(StrBytes::from_string(owner.kind.clone()))
                .with_principal_name(StrBytes::from_string(owner.name.clone())),
        ]));
        let deadline = tokio::time::Instant::now() + upstream.connect_timeout;
        let mut pause = Duration::from_millis(5);
        while tokio::time::Instant::now() < deadline {
            match self
                .call::<_, DescribeDelegationTokenResponse>(
                    upstream,
                    ApiKey::DescribeDelegationToken,
                    version,
                    &request,
                )
                .await
            {
                Ok(r) if r.tokens.iter().any(|t| t.token_id.as_str() == token_id) => return,
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "cannot describe the new upstream token");
                    return;
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
        tracing::warn!(owner = %owner, token_id, "the upstream broker did not show the new delegation token in time");
    }

    /// What the operator must change for `code`.
    fn hint(&self, code: ErrorCode, owner: &Principal) -> String {
        let service = &self.service_principal;
        match code.0 {
            65 => format!(
                "; the upstream service principal User:{service} lacks CreateTokens on the User \
                 resource named '{owner}' (grant it: kafka-acls --bootstrap-server <upstream> --add \
                 --allow-principal User:{service} --operation CreateTokens --operation \
                 DescribeTokens --user-principal '{owner}', or '*' for every user)"
            ),
            61 => "; delegation tokens are disabled upstream (set delegation.token.secret.key on \
                   every broker and controller)"
                .to_owned(),
            64 => "; the upstream allows token requests only on SASL or mutual-TLS connections \
                   authenticated without a token ([upstream] security_protocol)"
                .to_owned(),
            _ => String::new(),
        }
    }

    /// Sends one token request on the service connection (opened, or reopened once after a
    /// failure). Each attempt is bounded by `connect_timeout_ms`, like every other round trip of
    /// Portcullis' own: an upstream that stops answering must not hold a login (and every other
    /// principal's token work, queued behind the service connection) forever.
    async fn call<Req, Resp>(
        &self,
        upstream: &UpstreamSettings,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, DelegatedError>
    where
        Req: kafka_protocol::protocol::Encodable,
        Resp: kafka_protocol::protocol::Decodable,
    {
        let mut service = self.service.lock().await;
        for attempt in 0..2 {
            if service.is_none() {
                let opened =
                    UpstreamConnection::open_any(&upstream.bootstrap_servers, upstream).await;
                *service = Some(opened.map_err(|e| DelegatedError::Upstream(e.to_string()))?);
            }
            let Some(connection) = service.as_mut() else {
                continue;
            };
            let address = connection.address().to_owned();
            let exchange = async {
                connection.reauthenticate_if_due().await?;
                connection.call(api, version, request).await
            };
            // On a timeout the connection is dropped below: a late answer would otherwise be
            // read as the answer to the next request.
            let result: Result<Resp, UpstreamError> =
                tokio::time::timeout(upstream.connect_timeout, exchange)
                    .await
                    .unwrap_or_else(|_| Err(UpstreamError::NoAnswer(address)));
            match result {
                Ok(response) => return Ok(response),
                Err(e) => {
                    *service = None;
                    if attempt == 1 {
                        return Err(DelegatedError::Upstream(e.to_string()));
                    }
                }
            }
        }
        Err(DelegatedError::Upstream("no service connection".into()))
    }

    pub(super) async fn renew(
        &self,
        upstream: &UpstreamSettings,
        token: &UpstreamToken,
    ) -> RenewOutcome {
        let version =
            pick_version(&upstream.versions.load(), ApiKey::RenewDelegationToken, 2).unwrap_or(1);
        let request = RenewDelegationTokenRequest::default()
            .with_hmac(token.hmac.clone().into())
            .with_renew_period_ms(self.token_lifetime_ms);
        match self
            .call::<_, RenewDelegationTokenResponse>(
                upstream,
                ApiKey::RenewDelegationToken,
                version,
                &request,
            )
            .await
        {
            Ok(r) if r.error_code == 0 => RenewOutcome::Renewed {
                expiry_ms: r.expiry_timestamp_ms,
            },
            // NOT_FOUND, EXPIRED: create a new token.
            Ok(r) if r.error_code == 62 || r.error_code == 66 => RenewOutcome::Gone,
            Ok(r) => {
                tracing::warn!(token_id = %token.token_id, code = %ErrorCode(r.error_code), "upstream refused to renew a delegation token; retrying");
                RenewOutcome::Failed
            }
            Err(e) => {
                tracing::warn!(token_id = %token.token_id, error = %e, "cannot renew an upstream delegation token; retrying");
                RenewOutcome::Failed
            }
        }
    }

    /// ExpireDelegationToken with a negative period: the upstream removes the token at once.
    pub(super) async fn expire(
        &self,
        upstream: &UpstreamSettings,
        principal: &Principal,
        token: &UpstreamToken,
        reason: ExpireReason,
    ) {
        let version =
            pick_version(&upstream.versions.load(), ApiKey::ExpireDelegationToken, 2).unwrap_or(1);
        let request = ExpireDelegationTokenRequest::default()
            .with_hmac(token.hmac.clone().into())
            .with_expiry_time_period_ms(-1);
        match self
            .call::<_, ExpireDelegationTokenResponse>(
                upstream,
                ApiKey::ExpireDelegationToken,
                version,
                &request,
            )
            .await
        {
            Ok(r) if r.error_code == 0 || r.error_code == 62 => {
                tracing::info!(principal = %principal, token_id = %token.token_id, ?reason, "upstream delegation token expired");
            }
            Ok(r) => {
                tracing::warn!(principal = %principal, token_id = %token.token_id, ?reason, code = %ErrorCode(r.error_code), "upstream refused to expire a delegation token");
            }
            Err(e) => {
                tracing::warn!(principal = %principal, token_id = %token.token_id, ?reason, error = %e, "cannot expire an upstream delegation token");
            }
        }
    }
}
