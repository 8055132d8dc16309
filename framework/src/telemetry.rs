//! What the framework contributes to tracing: the target of every span meant for export, and
//! the attributes recorded on the SASL span. Spans are plain `tracing` spans (no I/O here); the
//! host decides whether anything listens (`host/src/telemetry`). With no OTLP endpoint the host
//! disables this target, so creating one of these spans costs a cached callsite check.
//!
//! Never put a secret or a password-derived value in a span: only the mechanism, the principal
//! after success, and the failure reason that is logged anyway (mechanisms keep secrets out of it).

use crate::principal::Principal;

/// The `tracing` target of every span exported as an OpenTelemetry span.
pub const SPAN_TARGET: &str = "portcullis::span";

/// Records a successful SASL exchange on its span.
pub(crate) fn sasl_succeeded(span: &tracing::Span, principal: &Principal) {
    span.record("sasl.outcome", "success");
    span.record("enduser.id", tracing::field::display(principal));
}

/// Records a failed SASL exchange on its span.
pub(crate) fn sasl_failed(span: &tracing::Span, reason: &str) {
    span.record("sasl.outcome", "failure");
    span.record("sasl.failure", reason);
}
