//! Authorization enforcement reads every body a client sends to an upstream-bound API: for every
//! API key and authorizable version, arbitrary bodies go through `enforce` with an authorizer that
//! allows everything and one that denies everything. It must never panic, and whatever it
//! forwards is the client's frame or an edit of it that is never longer.
//!
//! The same bodies also go through `enforce_in` with a connection's fetch-session table in which
//! session 1 (topic "t", partition 0) is established, so a Fetch can reach the incremental path
//! (epoch 1 of session 1, forgotten topics, revocation under the denying authorizer); a Fetch's
//! plan under the allowing authorizer is applied to a response made of the fuzzed bytes (the
//! response-side session id reader).
//! There the forwarded frame may grow by the forgotten topics a revocation appends.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use portcullis::acl::{AclOperation, ResourceType};
use portcullis::authorization::{
    authorizable_versions, enforce, enforce_in, FetchSessions, Verdict,
};
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

/// A Fetch v7 frame opening a session on topic "t", partition 0 (header v1, client id null).
fn opening_frame() -> bytes::Bytes {
    let mut f = Vec::new();
    f.extend_from_slice(&1i16.to_be_bytes());
    f.extend_from_slice(&7i16.to_be_bytes());
    f.extend_from_slice(&7i32.to_be_bytes());
    f.extend_from_slice(&(-1i16).to_be_bytes());
    for v in [-1i32, 100, 1, 1 << 20] {
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.push(0); // isolation level
    f.extend_from_slice(&0i32.to_be_bytes()); // session id
    f.extend_from_slice(&0i32.to_be_bytes()); // epoch: open
    f.extend_from_slice(&1i32.to_be_bytes());
    f.extend_from_slice(&1i16.to_be_bytes());
    f.push(b't');
    f.extend_from_slice(&1i32.to_be_bytes());
    f.extend_from_slice(&0i32.to_be_bytes()); // partition
    f.extend_from_slice(&0i64.to_be_bytes()); // fetch offset
    f.extend_from_slice(&(-1i64).to_be_bytes()); // log start offset
    f.extend_from_slice(&(1i32 << 20).to_be_bytes());
    f.extend_from_slice(&0i32.to_be_bytes()); // forgotten topics
    bytes::Bytes::from(f)
}

/// A table with session 1 established (next epoch 1).
fn established_sessions(
    authorizer: &Arc<dyn Authorizer>,
    context: &RequestContext,
) -> FetchSessions {
    let sessions = FetchSessions::new();
    let frame = opening_frame();
    let Ok(h) = header::parse(&frame) else {
        return sessions;
    };
    if let Verdict::Forward { plan, .. } =
        enforce_in(authorizer, context, &h, &frame, &sessions).verdict
    {
        // Fetch v7 response: correlation id, throttle, error 0, session id 1, no topics.
        let mut response = Vec::new();
        for v in [7i32, 0] {
            response.extend_from_slice(&v.to_be_bytes());
        }
        response.extend_from_slice(&0i16.to_be_bytes());
        response.extend_from_slice(&1i32.to_be_bytes());
        response.extend_from_slice(&0i32.to_be_bytes());
        let _ = plan.apply(bytes::Bytes::from(response));
    }
    sessions
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
    let allow: Arc<dyn Authorizer> = Arc::new(Fixed(Decision::Allowed));
    let sessions = established_sessions(&allow, &context);
    for decision in [Decision::Allowed, Decision::Denied] {
        let authorizer: Arc<dyn Authorizer> = Arc::new(Fixed(decision));
        let e = enforce(&authorizer, &context, &h, &frame);
        if let Verdict::Forward { frame: out, .. } = &e.verdict {
            assert!(out.len() <= frame.len());
            assert_eq!(out.get(..h.header_len), frame.get(..h.header_len));
        }
        let e = enforce_in(&authorizer, &context, &h, &frame, &sessions);
        if let Verdict::Forward { frame: out, plan } = &e.verdict {
            assert_eq!(out.get(..h.header_len), frame.get(..h.header_len));
            // Only where the plan reads the response with the bounds-checked reader (an opening's
            // session id; nothing denied under `Allowed`): merging denied entries decodes the
            // upstream's response with kafka-protocol, which trusts wire lengths, as Portcullis
            // trusts its upstream (docs/security.md).
            if key == 1 && decision == Decision::Allowed {
                let mut response = 7i32.to_be_bytes().to_vec();
                response.extend_from_slice(body);
                let _ = plan.apply(bytes::Bytes::from(response));
            }
        }
    }
});
