//! TEMPORARY (helper D): runs bench cases N times, for instruction counts under callgrind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, clippy::disallowed_methods, clippy::disallowed_types, reason = "temporary")]
#[path = "../benches/support/mod.rs"]
mod support;
use std::hint::black_box;
use portcullis::authorizer::Authorizer;
use portcullis_plugin_acl::corpus::CaseKind;
fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap();
    let n: usize = args.next().unwrap().parse().unwrap();
    let mode = args.next().unwrap();
    let (authorizer, cases) = support::load(std::path::Path::new(&path));
    for case in cases.iter().filter(|c| c.name.starts_with("bench_")) {
        let ctx = support::context(case);
        match &case.kind {
            CaseKind::Authorize { .. } => {
                let actions = [support::action(case).unwrap()];
                for _ in 0..n {
                    match mode.as_str() {
                        "authorize" => { black_box(authorizer.authorize(black_box(&ctx), black_box(&actions))); }
                        "decide" => { black_box(authorizer.decide(black_box(&ctx), black_box(&actions[0]))); }
                        _ => {}
                    }
                }
            }
            CaseKind::ByResourceType { operation, resource_type } => {
                if mode == "by_type" {
                    for _ in 0..n {
                        black_box(authorizer.authorize_by_resource_type(black_box(&ctx), *operation, *resource_type));
                    }
                }
            }
        }
    }
}
