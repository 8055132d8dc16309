//! DescribeDelegationToken (41): the tokens the requester may see, with Kafka's owner filter and
//! visibility rules.

use bytes::Bytes;
use kafka_protocol::messages::describe_delegation_token_response::{
    DescribedDelegationToken, DescribedDelegationTokenRenewer,
};
use kafka_protocol::messages::{ApiKey, DescribeDelegationTokenResponse};

use super::{
    decode, principal, text, token_requests_allowed, DelegationTokenApis, Reply, TokenTrace,
};
use crate::acl::{AclOperation, ResourceType};
use crate::errors::ErrorCode;
use crate::local::{Effect, LocalRequest};
use crate::principal::Principal;
use crate::tokens::TokenInfo;

impl DelegationTokenApis {
    pub(super) fn describe(
        &self,
        request: &LocalRequest<'_>,
        owners: decode::DescribeBody,
        trace: TokenTrace,
    ) -> Effect {
        let reply = Reply::of(ApiKey::DescribeDelegationToken, request, trace);
        let refuse = |code: ErrorCode| {
            reply.send(
                code,
                &DescribeDelegationTokenResponse::default().with_error_code(code.0),
            )
        };
        if !token_requests_allowed(request.session) {
            return refuse(ErrorCode::DELEGATION_TOKEN_REQUEST_NOT_ALLOWED);
        }
        let Some(manager) = self.manager.as_deref() else {
            return refuse(ErrorCode::DELEGATION_TOKEN_AUTH_DISABLED);
        };
        // [quirk] A non-null but empty owner list describes nothing (Kafka's
        // `ownersListEmpty`); null describes every token the requester may see.
        let owners: Option<Vec<Principal>> = owners.map(|o| o.into_iter().map(principal).collect());
        if owners.as_ref().is_some_and(Vec::is_empty) {
            reply.trace.span.record("token.count", 0);
            return reply.send(ErrorCode::NONE, &DescribeDelegationTokenResponse::default());
        }
        let requester = &request.session.principal;
        let mut tokens: Vec<(TokenInfo, [u8; 64])> = manager
            .tokens()
            .into_iter()
            .filter(|(info, _)| self.visible(request, requester, owners.as_deref(), info))
            .collect();
        tokens.sort_by(|a, b| (a.0.issue_ms, &a.0.token_id).cmp(&(b.0.issue_ms, &b.0.token_id)));
        let described = tokens
            .iter()
            .map(|(info, hmac)| describe_token(info, hmac, reply.version))
            .collect();
        reply.trace.span.record("token.count", tokens.len());
        reply.send(
            ErrorCode::NONE,
            &DescribeDelegationTokenResponse::default().with_tokens(described),
        )
    }

    /// Kafka's `filterToken`: the owner filter first (some listed principal is the token's
    /// owner, requester or renewer), then visibility: the requester is its owner, requester or
    /// renewer, or may DESCRIBE the DelegationToken resource, or has DESCRIBE_TOKENS on
    /// `User:<owner>`.
    fn visible(
        &self,
        request: &LocalRequest<'_>,
        requester: &Principal,
        owners: Option<&[Principal]>,
        info: &TokenInfo,
    ) -> bool {
        if let Some(owners) = owners {
            if !owners.iter().any(|o| info.owner_requester_or_renewer(o)) {
                return false;
            }
        }
        info.owner_requester_or_renewer(requester)
            || self.allowed(
                request,
                AclOperation::Describe,
                ResourceType::DelegationToken,
                &info.token_id,
            )
            || self.allowed(
                request,
                AclOperation::DescribeTokens,
                ResourceType::User,
                &info.owner.to_string(),
            )
    }
}

fn describe_token(info: &TokenInfo, hmac: &[u8], version: i16) -> DescribedDelegationToken {
    let token = DescribedDelegationToken::default()
        .with_principal_type(text(&info.owner.kind))
        .with_principal_name(text(&info.owner.name))
        .with_issue_timestamp(info.issue_ms)
        .with_expiry_timestamp(info.expiry_ms)
        .with_max_timestamp(info.max_ms)
        .with_token_id(text(&info.token_id))
        .with_hmac(Bytes::copy_from_slice(hmac))
        .with_renewers(
            info.renewers
                .iter()
                .map(|r| {
                    DescribedDelegationTokenRenewer::default()
                        .with_principal_type(text(&r.kind))
                        .with_principal_name(text(&r.name))
                })
                .collect(),
        );
    if version >= 3 {
        token
            .with_token_requester_principal_type(text(&info.requester.kind))
            .with_token_requester_principal_name(text(&info.requester.name))
    } else {
        token
    }
}
