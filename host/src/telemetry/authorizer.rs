//! The configured authorizer, wrapped so that every check is an `authorize` span (actions,
//! decision, deciding rule) and is counted in `portcullis.authorization.*`. The framework calls
//! the authorizer inside the request's span, so the authorization span is the request's child.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use opentelemetry::KeyValue;
use portcullis::acl::{AclOperation, ResourceType};
use portcullis::authorizer::{
    AclAdmin, Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};

use super::metrics::instruments;
use super::SPAN_TARGET;

/// An authorizer that traces and counts what the one inside decides.
pub struct Instrumented {
    inner: Arc<dyn Authorizer>,
}

impl Instrumented {
    /// Wraps `inner`.
    pub fn wrap(inner: Arc<dyn Authorizer>) -> Arc<dyn Authorizer> {
        Arc::new(Self { inner })
    }
}

fn outcome(decision: Decision) -> &'static str {
    match decision {
        Decision::Allowed => "allowed",
        _ => "denied",
    }
}

/// What decided, for the span: never a secret (ACLs and rule names are configuration).
fn rule(rule: &DecidingRule) -> String {
    match rule {
        DecidingRule::SuperUser => "super_user".to_owned(),
        DecidingRule::MatchingAcl(acl) => format!("acl {acl}"),
        DecidingRule::DefaultAllow => "default_allow (no ACL found)".to_owned(),
        DecidingRule::DefaultDeny => "default_deny (no matching ALLOW)".to_owned(),
        DecidingRule::Plugin { plugin } => format!("plugin {plugin}"),
        DecidingRule::RefusedByPolicy { policy } => format!("forwarding policy {policy}"),
        DecidingRule::Failed => "authorizer failed".to_owned(),
        _ => "unknown".to_owned(),
    }
}

fn count(action: &Action<'_>, decision: Decision) {
    instruments().authorization_decisions.add(
        1,
        &[
            KeyValue::new("resource.type", action.resource.resource_type.kafka_name()),
            KeyValue::new("operation", action.operation.kafka_name()),
            KeyValue::new("outcome", outcome(decision)),
        ],
    );
}

/// Collects the decisions of one check into the span's attributes.
#[derive(Default)]
struct SpanRecord {
    actions: String,
    rules: String,
    allowed: usize,
    denied: usize,
}

impl SpanRecord {
    fn add(&mut self, action: &Action<'_>, answer: &Authorization) {
        let sep = if self.actions.is_empty() { "" } else { "; " };
        let _ = write!(
            self.actions,
            "{sep}{} {}:{} {}",
            action.operation.kafka_name(),
            action.resource.resource_type.kafka_name(),
            action.resource.name,
            outcome(answer.decision)
        );
        let _ = write!(self.rules, "{sep}{}", rule(&answer.rule));
        if answer.is_allowed() {
            self.allowed += 1;
        } else {
            self.denied += 1;
        }
    }

    fn finish(self, span: &tracing::Span) {
        let decision = match (self.allowed, self.denied) {
            (_, 0) => "allowed",
            (0, _) => "denied",
            _ => "partially_allowed",
        };
        span.record("authz.decision", decision);
        span.record("authz.actions", self.actions.as_str());
        span.record("authz.rule", self.rules.as_str());
        span.record("authz.denied", self.denied);
    }
}

fn span(context: &RequestContext<'_>, count: usize) -> tracing::Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "authorize",
        enduser.id = %context.principal,
        kafka.api_key = context.api_key,
        authz.action_count = count,
        authz.decision = tracing::field::Empty,
        authz.actions = tracing::field::Empty,
        authz.rule = tracing::field::Empty,
        authz.denied = tracing::field::Empty,
    )
}

impl Authorizer for Instrumented {
    fn authorize(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
    ) -> Vec<Authorization> {
        let mut answers = Vec::with_capacity(actions.len());
        self.authorize_each(context, actions, &mut |_, answer| answers.push(answer));
        answers
    }

    fn authorize_each(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
        decided: &mut dyn FnMut(usize, Authorization),
    ) {
        let span = span(context, actions.len());
        let _entered = span.enter();
        let mut record = (!span.is_disabled()).then(SpanRecord::default);
        let started = super::metrics_enabled().then(Instant::now);
        self.inner
            .authorize_each(context, actions, &mut |i, answer| {
                if let Some(action) = actions.get(i) {
                    if let Some(record) = record.as_mut() {
                        record.add(action, &answer);
                    }
                    if started.is_some() {
                        count(action, answer.decision);
                    }
                }
                decided(i, answer);
            });
        if let Some(started) = started {
            instruments()
                .authorization_duration
                .record(started.elapsed().as_secs_f64(), &[]);
        }
        if let Some(record) = record {
            record.finish(&span);
        }
    }

    fn authorize_by_resource_type(
        &self,
        context: &RequestContext<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> Decision {
        let decision = self
            .inner
            .authorize_by_resource_type(context, operation, resource_type);
        if super::metrics_enabled() {
            instruments().authorization_decisions.add(
                1,
                &[
                    KeyValue::new("resource.type", resource_type.kafka_name()),
                    KeyValue::new("operation", operation.kafka_name()),
                    KeyValue::new("outcome", outcome(decision)),
                ],
            );
        }
        decision
    }

    fn acl_admin(&self) -> Option<&dyn AclAdmin> {
        self.inner.acl_admin()
    }
}
