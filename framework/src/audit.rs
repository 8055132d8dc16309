//! The audit log: one JSON object per authorization decision.
//!
//! Each line names the principal and, for a session authenticated with a bearer token, its group
//! principals (`"groups":["Group:readers"]`, left out when there are none) and the token's id
//! (`"jti"`, left out without one). The token itself is never written.
//!
//! [`AuditingAuthorizer`] wraps the configured authorizer, so every decision — request
//! enforcement and the security APIs' own checks alike — passes through one place. The sink is
//! the host's (a file); this module decides what is written and how it looks.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::acl::{AclOperation, ResourceType};
use crate::authorizer::{
    AclAdmin, Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};

/// Which outcomes are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditPolicy {
    /// Write allowed decisions (of actions that ask to be logged when allowed).
    pub allowed: bool,
    /// Write denied decisions (of actions that ask to be logged when denied).
    pub denied: bool,
}

impl AuditPolicy {
    /// A policy.
    pub fn new(allowed: bool, denied: bool) -> Self {
        Self { allowed, denied }
    }
}

/// Where audit lines go. Must not block for long: it is called on the request path.
pub trait AuditSink: Send + Sync {
    /// Writes one JSON line (without the newline).
    fn write_line(&self, line: String);
}

/// An authorizer that writes its decisions to an [`AuditSink`].
pub struct AuditingAuthorizer {
    inner: Arc<dyn Authorizer>,
    sink: Arc<dyn AuditSink>,
    policy: AuditPolicy,
}

impl AuditingAuthorizer {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Authorizer>, sink: Arc<dyn AuditSink>, policy: AuditPolicy) -> Self {
        Self {
            inner,
            sink,
            policy,
        }
    }
}

impl AuditingAuthorizer {
    /// Writes the line for one decision if the policy and the action ask for it. The line is
    /// formatted only then: nothing is built for a decision that is not written.
    fn audit(&self, context: &RequestContext<'_>, action: &Action<'_>, result: &Authorization) {
        let wanted = if result.is_allowed() {
            self.policy.allowed && action.log_if_allowed
        } else {
            self.policy.denied && action.log_if_denied
        };
        if wanted {
            self.sink.write_line(audit_line(context, action, result));
        }
    }
}

impl Authorizer for AuditingAuthorizer {
    fn authorize(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
    ) -> Vec<Authorization> {
        let results = self.inner.authorize(context, actions);
        for (action, result) in actions.iter().zip(&results) {
            self.audit(context, action, result);
        }
        results
    }

    fn authorize_each(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
        decided: &mut dyn FnMut(usize, Authorization),
    ) {
        self.inner
            .authorize_each(context, actions, &mut |i, result| {
                if let Some(action) = actions.get(i) {
                    self.audit(context, action, &result);
                }
                decided(i, result);
            });
    }

    fn authorize_by_resource_type(
        &self,
        context: &RequestContext<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> Decision {
        self.inner
            .authorize_by_resource_type(context, operation, resource_type)
    }

    fn acl_admin(&self) -> Option<&dyn AclAdmin> {
        self.inner.acl_admin()
    }
}

/// One decision as a JSON object.
pub fn audit_line(
    context: &RequestContext<'_>,
    action: &Action<'_>,
    result: &Authorization,
) -> String {
    let api = kafka_protocol::messages::ApiKey::try_from(context.api_key)
        .map(|k| format!("{k:?}"))
        .unwrap_or_else(|_| context.api_key.to_string());
    let rule = match &result.rule {
        DecidingRule::SuperUser => "SuperUser".to_owned(),
        DecidingRule::DefaultAllow => "DefaultAllow".to_owned(),
        DecidingRule::DefaultDeny => "DefaultDeny".to_owned(),
        DecidingRule::MatchingAcl(acl) => format!("MatchingAcl{acl}"),
        DecidingRule::Plugin { plugin } => format!("Plugin({plugin})"),
        DecidingRule::RefusedByPolicy { policy } => format!("RefusedByPolicy({policy})"),
        DecidingRule::Failed => "AuthorizerFailed".to_owned(),
        other => format!("{other:?}"),
    };
    let mut out = String::with_capacity(256);
    out.push('{');
    field(&mut out, "principal", &context.principal.to_string());
    if !context.groups.is_empty() {
        out.push_str("\"groups\":[");
        for (i, group) in context.groups.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push('"');
            escape_into(&mut out, &group.kind);
            out.push(':');
            escape_into(&mut out, &group.name);
            out.push('"');
        }
        out.push_str("],");
    }
    if let Some(jti) = &context.jti {
        field(&mut out, "jti", jti);
    }
    field(&mut out, "client", &context.client_address.to_string());
    field(&mut out, "operation", action.operation.kafka_name());
    field(
        &mut out,
        "resource_type",
        action.resource.resource_type.kafka_name(),
    );
    field(&mut out, "resource", &action.resource.name);
    field(
        &mut out,
        "pattern",
        action.resource.pattern_type.kafka_name(),
    );
    field(
        &mut out,
        "decision",
        if result.decision == Decision::Allowed {
            "ALLOWED"
        } else {
            "DENIED"
        },
    );
    field(&mut out, "rule", &rule);
    field(&mut out, "api", &api);
    let _ = write!(out, "\"correlation_id\":{}", context.correlation_id);
    out.push('}');
    out
}

fn field(out: &mut String, key: &str, value: &str) {
    out.push('"');
    out.push_str(key);
    out.push_str("\":\"");
    escape_into(out, value);
    out.push_str("\",");
}

/// JSON string escaping (names come from clients: quotes, backslashes and control characters are
/// escaped so a line can never be split or forged).
fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{
        AccessControlEntry, AclBinding, PatternType, PermissionType, ResourcePattern,
    };
    use crate::principal::Principal;
    use std::sync::Mutex;

    struct Lines(Mutex<Vec<String>>);
    impl AuditSink for Lines {
        fn write_line(&self, line: String) {
            self.0.lock().unwrap().push(line);
        }
    }

    struct AllowTopicA;
    impl Authorizer for AllowTopicA {
        fn authorize(&self, _: &RequestContext, actions: &[Action]) -> Vec<Authorization> {
            actions
                .iter()
                .map(|a| {
                    if a.resource.name == "a" {
                        Authorization {
                            decision: Decision::Allowed,
                            rule: DecidingRule::MatchingAcl(Arc::new(AclBinding {
                                pattern: ResourcePattern::new(
                                    ResourceType::Topic,
                                    "a",
                                    PatternType::Literal,
                                ),
                                entry: AccessControlEntry {
                                    principal: "User:alice".into(),
                                    host: "*".into(),
                                    operation: AclOperation::Read,
                                    permission: PermissionType::Allow,
                                },
                            })),
                        }
                    } else {
                        Authorization {
                            decision: Decision::Denied,
                            rule: DecidingRule::DefaultDeny,
                        }
                    }
                })
                .collect()
        }
        fn authorize_by_resource_type(
            &self,
            _: &RequestContext,
            _: AclOperation,
            _: ResourceType,
        ) -> Decision {
            Decision::Denied
        }
    }

    #[test]
    fn writes_the_outcomes_asked_for_as_json_lines() {
        let lines = Arc::new(Lines(Mutex::new(Vec::new())));
        let audited = AuditingAuthorizer::new(
            Arc::new(AllowTopicA),
            lines.clone(),
            AuditPolicy::new(false, true),
        );
        let ctx = RequestContext::new(
            Principal::user("al\"ice"),
            "10.0.0.1".parse().unwrap(),
            "l",
            1,
            13,
            42,
        );
        let actions = [
            Action::new(AclOperation::Read, ResourceType::Topic, "a"),
            Action::new(AclOperation::Read, ResourceType::Topic, "b\nc"),
            Action::new(AclOperation::Describe, ResourceType::Topic, "d").quiet(),
        ];
        let results = audited.authorize(&ctx, &actions);
        assert_eq!(results.len(), 3);
        let written = lines.0.lock().unwrap().clone();
        assert_eq!(written.len(), 1);
        assert_eq!(
            written[0],
            r#"{"principal":"User:al\"ice","client":"10.0.0.1","operation":"READ","resource_type":"TOPIC","resource":"b\nc","pattern":"LITERAL","decision":"DENIED","rule":"DefaultDeny","api":"Fetch","correlation_id":42}"#
        );

        let all = AuditingAuthorizer::new(
            Arc::new(AllowTopicA),
            lines.clone(),
            AuditPolicy::new(true, true),
        );
        let _ = all.authorize(&ctx, &actions[..1]);
        let last = lines.0.lock().unwrap().last().cloned().unwrap();
        assert!(last.contains(r#""decision":"ALLOWED","rule":"MatchingAcl(pattern=TOPIC:LITERAL:a, principal=User:alice, host=*, operation=READ, permission=ALLOW)""#), "{last}");
    }

    #[test]
    fn the_request_path_writes_the_same_lines() {
        let lines = Arc::new(Lines(Mutex::new(Vec::new())));
        let by_vec = Arc::new(Lines(Mutex::new(Vec::new())));
        let ctx = RequestContext::new(
            Principal::user("alice"),
            "10.0.0.1".parse().unwrap(),
            "l",
            1,
            13,
            42,
        );
        let actions = [
            Action::new(AclOperation::Read, ResourceType::Topic, "a"),
            Action::new(AclOperation::Read, ResourceType::Topic, "b"),
            Action::new(AclOperation::Describe, ResourceType::Topic, "c").quiet(),
        ];
        let policy = AuditPolicy::new(true, true);
        let mut answers = Vec::new();
        AuditingAuthorizer::new(Arc::new(AllowTopicA), lines.clone(), policy).authorize_each(
            &ctx,
            &actions,
            &mut |i, a| answers.push((i, a.decision)),
        );
        let expected = AuditingAuthorizer::new(Arc::new(AllowTopicA), by_vec.clone(), policy)
            .authorize(&ctx, &actions);
        assert_eq!(
            answers,
            expected
                .iter()
                .enumerate()
                .map(|(i, a)| (i, a.decision))
                .collect::<Vec<_>>()
        );
        let written = lines.0.lock().unwrap().clone();
        assert_eq!(written.len(), 2);
        assert_eq!(written, *by_vec.0.lock().unwrap());
    }

    #[test]
    fn a_token_session_shows_its_groups_and_token_id_never_more() {
        let lines = Arc::new(Lines(Mutex::new(Vec::new())));
        let audited = AuditingAuthorizer::new(
            Arc::new(AllowTopicA),
            lines.clone(),
            AuditPolicy::new(true, true),
        );
        let alice = Principal::user("alice");
        let groups = [Principal::group("readers"), Principal::group("a\"b")];
        let scopes = ["kafka.read".to_owned()];
        let ctx = RequestContext::new(&alice, "10.0.0.1".parse().unwrap(), "l", 1, 13, 42)
            .with_groups(&groups[..])
            .with_scopes(&scopes[..])
            .with_jti(Some("token-7"));
        let _ = audited.authorize(
            &ctx,
            &[Action::new(AclOperation::Read, ResourceType::Topic, "b")],
        );
        let written = lines.0.lock().unwrap().clone();
        assert_eq!(
            written,
            [
                r#"{"principal":"User:alice","groups":["Group:readers","Group:a\"b"],"jti":"token-7","client":"10.0.0.1","operation":"READ","resource_type":"TOPIC","resource":"b","pattern":"LITERAL","decision":"DENIED","rule":"DefaultDeny","api":"Fetch","correlation_id":42}"#
            ]
        );
        // One JSON object; scopes are for authorizers, not the log.
        let parsed: serde_json::Value = serde_json::from_str(&written[0]).unwrap();
        assert_eq!(parsed["groups"][1], "Group:a\"b");
        assert!(!written[0].contains("kafka.read"));
    }
}
