//! Head sampling whose ratio a reload changes (`telemetry.trace_sample_ratio` is live): the
//! tracer provider is built once, with a sampler that reads the ratio from an atomic on every
//! root span, so a new ratio applies at once to the next connection span and the spans under it
//! follow their root (parent-based). One ratio for the process, like the tracer provider.

use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::trace::{Link, SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SamplingResult, ShouldSample};

/// The ratio's bits (`f64::to_bits`); 1.0 until the configuration sets it.
static RATIO: AtomicU64 = AtomicU64::new(0x3FF0_0000_0000_0000);

/// Sets the share of new root spans that are sampled (checked to be within 0.0–1.0 when the
/// configuration is loaded; clamped here all the same).
pub fn set_ratio(ratio: f64) {
    let ratio = if ratio.is_nan() {
        0.0
    } else {
        ratio.clamp(0.0, 1.0)
    };
    RATIO.store(ratio.to_bits(), Ordering::Relaxed);
}

/// The ratio new root spans are sampled with.
pub fn ratio() -> f64 {
    f64::from_bits(RATIO.load(Ordering::Relaxed))
}

/// Trace-id ratio sampling at the ratio of the moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveRatio;

impl ShouldSample for LiveRatio {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        Sampler::TraceIdRatioBased(ratio()).should_sample(
            parent_context,
            trace_id,
            name,
            span_kind,
            attributes,
            links,
        )
    }
}

/// The sampler of the tracer provider: the parent's decision below a root, [`LiveRatio`] at it.
pub fn sampler() -> Sampler {
    Sampler::ParentBased(Box::new(LiveRatio))
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::trace::SamplingDecision;

    fn sampled_roots(n: u128) -> usize {
        (1..=n)
            .filter(|i| {
                // Trace ids spread over the whole range, as random ones are.
                let id = TraceId::from(i.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835));
                let result = sampler().should_sample(None, id, "root", &SpanKind::Server, &[], &[]);
                result.decision == SamplingDecision::RecordAndSample
            })
            .count()
    }

    // One test (the ratio is process-wide): each step is seen by the next root span at once.
    #[test]
    fn a_new_ratio_applies_to_the_next_root_spans() {
        set_ratio(1.0);
        assert_eq!(sampled_roots(1000), 1000);
        set_ratio(0.0);
        assert_eq!(sampled_roots(1000), 0);
        set_ratio(0.5);
        let half = sampled_roots(4000);
        assert!((1600..=2400).contains(&half), "{half} of 4000 at 0.5");
        set_ratio(7.0);
        assert_eq!(ratio(), 1.0);
        set_ratio(1.0);
    }
}
