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

/// What decided, for the span: never a secret (ACLs and rule names are configuration). Written
/// straight into the attribute's text (no intermediate `String` per rule).
struct RuleText<'a>(&'a DecidingRule);

impl std::fmt::Display for RuleText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            DecidingRule::SuperUser => f.write_str("super_user"),
            DecidingRule::MatchingAcl(acl) => write!(f, "acl {acl}"),
            DecidingRule::DefaultAllow => f.write_str("default_allow (no ACL found)"),
            DecidingRule::DefaultDeny => f.write_str("default_deny (no matching ALLOW)"),
            DecidingRule::Plugin { plugin } => write!(f, "plugin {plugin}"),
            DecidingRule::RefusedByPolicy { policy } => write!(f, "forwarding policy {policy}"),
            DecidingRule::Failed => f.write_str("authorizer failed"),
            _ => f.write_str("unknown"),
        }
    }
}

/// One decided action as the span shows it: `WRITE TOPIC:orders allowed`.
struct ActionText<'a, 'b>(&'a Action<'b>, Decision);

impl std::fmt::Display for ActionText<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}:{} {}",
            self.0.operation.kafka_name(),
            self.0.resource.resource_type.kafka_name(),
            self.0.resource.name,
            outcome(self.1)
        )
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

/// Collects the decisions of one check into the span's attributes. A check of one action (the
/// common case: a Produce to one topic) is recorded as it is decided, without collecting.
struct SpanRecord {
    single: bool,
    actions: String,
    rules: String,
    allowed: usize,
    denied: usize,
}

impl SpanRecord {
    fn new(action_count: usize) -> Self {
        Self {
            single: action_count == 1,
            actions: String::new(),
            rules: String::new(),
            allowed: 0,
            denied: 0,
        }
    }

    fn add(&mut self, span: &tracing::Span, action: &Action<'_>, answer: &Authorization) {
        if self.single {
            span.record(
                "authz.actions",
                tracing::field::display(ActionText(action, answer.decision)),
            );
            span.record(
                "authz.rule",
                tracing::field::display(RuleText(&answer.rule)),
            );
        } else {
            let sep = if self.actions.is_empty() { "" } else { "; " };
            let _ = write!(self.actions, "{sep}{}", ActionText(action, answer.decision));
            let _ = write!(self.rules, "{sep}{}", RuleText(&answer.rule));
        }
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
        if !self.single {
            span.record("authz.actions", self.actions.as_str());
            span.record("authz.rule", self.rules.as_str());
        }
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
        let mut record = (!span.is_disabled()).then(|| SpanRecord::new(actions.len()));
        let started = super::metrics_enabled().then(Instant::now);
        self.inner
            .authorize_each(context, actions, &mut |i, answer| {
                if let Some(action) = actions.get(i) {
                    if let Some(record) = record.as_mut() {
                        record.add(&span, action, &answer);
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
