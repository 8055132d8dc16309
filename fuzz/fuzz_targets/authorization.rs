//! Authorization enforcement reads every body a client sends to an upstream-bound API: for every
//! API key and authorizable version, arbitrary bodies go through `enforce` with an authorizer that
//! allows everything and one that denies everything. It must never panic, and whatever it
//! forwards is the client's frame or an edit of it that is never longer.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use portcullis::acl::{AclOperation, ResourceType};
use portcullis::authorization::{authorizable_versions, enforce, Verdict};
use portcullis::authorizer::{
    Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};
use portcullis::principal::Principal;
use portcullis::protocol::header;

struct Fixed(Decision);

impl Authorizer for Fixed {
    fn authorize(&self, _: &RequestContext, actions: &[Action]) -> Vec<Authorization> {
        actions
            .iter()
            .map(|_| Authorization {
                decision: self.0,
                rule: DecidingRule::DefaultDeny,
            })
            .collect()
    }
    fn authorize_by_resource_type(
        &self,
        _: &RequestContext,
        _: AclOperation,
        _: ResourceType,
    ) -> Decision {
        self.0
    }
}

/// Every (key, version) that `enforce` may forward.
fn targets() -> Vec<(i16, i16)> {
    (0i16..=100)
        .filter_map(|k| authorizable_versions(k).map(|(min, max)| (k, min, max)))
        .flat_map(|(k, min, max)| (min..=max).map(move |v| (k, v)))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let [pick_hi, pick_lo, body @ ..] = data else {
        return;
    };
    let targets = targets();
    let pick = usize::from(u16::from_be_bytes([*pick_hi, *pick_lo]));
    let Some(&(key, version)) = targets.get(pick % targets.len().max(1)) else {
        return;
    };
    let Ok(api) = kafka_protocol::messages::ApiKey::try_from(key) else {
        return;
    };
    let mut frame = Vec::with_capacity(body.len() + 16);
    frame.extend_from_slice(&key.to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(&7i32.to_be_bytes());
    frame.extend_from_slice(&(-1i16).to_be_bytes());
    if api.request_header_version(version) >= 2 {
        frame.push(0);
    }
    frame.extend_from_slice(body);
    let frame = bytes::Bytes::from(frame);
    let Ok(h) = header::parse(&frame) else {
        return;
    };
    let context = RequestContext::new(
        Principal::user("fuzz"),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        "fuzz",
        key,
        version,
        7,
    );
    for decision in [Decision::Allowed, Decision::Denied] {
        let authorizer: Arc<dyn Authorizer> = Arc::new(Fixed(decision));
        let e = enforce(&authorizer, &context, &h, &frame);
        if let Verdict::Forward { frame: out, .. } = &e.verdict {
            assert!(out.len() <= frame.len());
            assert_eq!(out.get(..h.header_len), frame.get(..h.header_len));
        }
    }
});
