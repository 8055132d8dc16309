//! Fetch (API 1), v4–v12 (v13+ names topics by id only). Kafka's `handleFetchRequest`:
//! - a fetch from a follower (`replica_id >= 0`) needs CLUSTER_ACTION; clients are never
//!   followers here, so every partition gets TOPIC_AUTHORIZATION_FAILED (Kafka's answer to an
//!   unauthorized follower) without asking;
//! - a consumer fetch needs READ on each topic; the partitions of a denied topic get
//!   TOPIC_AUTHORIZATION_FAILED, the rest is served.
//!
//! Incremental fetch sessions (KIP-227) let the broker serve partitions the request does not
//! list. On a connection that tracks them (a [`FetchSessions`] table, see `fetch_session.rs`)
//! they pass through, and authorization covers what the broker's session holds:
//! - a full fetch that opens a session (epoch 0) is authorized like any full fetch; its allowed
//!   partitions become the session's mirror once the response names the session id (the plan of
//!   an opening reads it, so that response is collected whole);
//! - an incremental fetch must name a session this connection saw established and the epoch it
//!   expects; otherwise it is answered here with FETCH_SESSION_ID_NOT_FOUND or
//!   INVALID_FETCH_SESSION_EPOCH, as Kafka's broker answers, and never forwarded;
//! - every fetch re-checks READ on every topic of the session, not only on those it lists: a
//!   decision is never cached, so a revoked ACL, a reloaded super-user list or a
//!   re-authentication with other groups takes effect on the next fetch, whatever the authorizer
//!   (there is no change signal all authorizers give). It costs one authorizer call per fetch over
//!   the session's distinct topics — what the sessionless full fetch asked before;
//! - a served partition whose READ is revoked is added to the forwarded request's forgotten
//!   topics (the broker's session stops serving it); it and every denied partition the client
//!   lists are answered TOPIC_AUTHORIZATION_FAILED, on every fetch until the client forgets or
//!   re-adds them, as Kafka's broker keeps answering a session's unauthorized partitions.
//!
//! A session is tied to the upstream connection that opened it; a client connection has one
//! upstream connection for life (its loss closes the client connection), so the table dies with
//! both. Without a table (`authorization::enforce`), every Fetch is made sessionless (session id
//! 0, epoch -1, Kafka's `FetchMetadata.LEGACY`).

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::FetchableTopicResponse;
use kafka_protocol::messages::{ApiKey, FetchResponse};
use smallvec::SmallVec;

use super::check::{Checker, Loud};
use super::entries::{allowed_topics, denied_topics, put_back, TOPIC_DENIED};
use super::fetch_session::{
    FetchSessions, Metadata, Partitions, SessionError, Standing, FINAL_EPOCH, NO_SESSION,
};
use super::wire::{self, Edit, PlanError, TopicPartitions, Topics, Walk};
use super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};
use crate::protocol::reader::{Malformed, Reader};

/// Denied partitions to put back into the upstream response, and the opening whose session id
/// the response names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Merge {
    denied: TopicPartitions,
    opening: Option<Opening>,
}

/// A forwarded fetch that opens a session: its response says which.
#[derive(Clone, Debug)]
pub(crate) struct Opening {
    sessions: FetchSessions,
    token: u64,
}

impl PartialEq for Opening {
    fn eq(&self, other: &Self) -> bool {
        self.token == other.token && self.sessions.same(&other.sessions)
    }
}
impl Eq for Opening {}

/// A topic's forgotten partitions.
type Forgets<'a> = (&'a str, SmallVec<[i32; 8]>);

/// The forgotten topics of a v7+ request: where the array lies and what it names.
struct Forgotten<'a> {
    /// The bytes of its length prefix.
    count: std::ops::Range<usize>,
    /// Where it ends (new entries go there).
    end: usize,
    entries: SmallVec<[Forgets<'a>; 2]>,
}

struct Parsed<'a> {
    replica_id: i32,
    /// Where session id and epoch lie (v7+), and their values.
    session: Option<(std::ops::Range<usize>, i32, i32)>,
    topics: Topics<'a>,
    forgotten: Option<Forgotten<'a>>,
}

/// Session id 0 and epoch -1: Kafka's `FetchMetadata.LEGACY`, a sessionless full fetch.
const LEGACY_SESSION: [u8; 8] = [0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];

fn parse<'a>(walk: &mut Walk<'a>, version: i16) -> Result<Parsed<'a>, Malformed> {
    let replica_id = walk.i32()?;
    let _max_wait_ms = walk.i32()?;
    let _min_bytes = walk.i32()?;
    let _max_bytes = walk.i32()?;
    let _isolation_level = walk.i8()?;
    let session = if version >= 7 {
        let at = walk.pos();
        let session_id = walk.i32()?;
        let session_epoch = walk.i32()?;
        Some((at..walk.pos(), session_id, session_epoch))
    } else {
        None
    };
    let topics = wire::topic_array(walk, |w| {
        let index = w.i32()?;
        if version >= 9 {
            let _current_leader_epoch = w.i32()?;
        }
        let _fetch_offset = w.i64()?;
        if version >= 12 {
            let _last_fetched_epoch = w.i32()?;
        }
        if version >= 5 {
            let _log_start_offset = w.i64()?;
        }
        let _partition_max_bytes = w.i32()?;
        w.tags()?;
        Ok(index)
    })?;
    let forgotten = if version >= 7 {
        let start = walk.pos();
        let n = walk.array_len_required()?;
        let count = start..walk.pos();
        let mut entries = SmallVec::new();
        for _ in 0..n {
            let name = walk.str()?;
            let m = walk.array_len()?.unwrap_or(0);
            let mut partitions = SmallVec::new();
            for _ in 0..m {
                partitions.push(walk.i32()?);
            }
            walk.tags()?;
            entries.push((name, partitions));
        }
        Some(Forgotten {
            count,
            end: walk.pos(),
            entries,
        })
    } else {
        None
    };
    if version >= 11 {
        walk.skip_string()?; // rack id
    }
    walk.tags()?;
    walk.finish()?;
    Ok(Parsed {
        replica_id,
        session,
        topics,
        forgotten,
    })
}

pub(crate) fn enforce(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let parsed = parse(&mut req.walk(), req.version)?;
    if parsed.replica_id >= 0 {
        let denied = parsed.topics.all();
        return respond_denied(req, &denied);
    }
    match (&parsed.session, req.fetch_sessions) {
        (Some((at, id, epoch)), Some(sessions)) => {
            in_session(req, chk, &parsed, at.clone(), *id, *epoch, sessions)
        }
        _ => {
            let edit = parsed
                .session
                .as_ref()
                .map(|(at, _, _)| (at.clone(), LEGACY_SESSION));
            full(req, chk, &parsed, edit, None)
        }
    }
}

/// Every listed partition denied: answered here, without a session.
fn respond_denied(req: &Request<'_>, denied: &TopicPartitions) -> Result<Outcome, Refusal> {
    let body = FetchResponse::default()
        .with_session_id(NO_SESSION)
        .with_responses(denied_topics::<FetchableTopicResponse>(
            denied,
            TOPIC_DENIED,
        ));
    req.respond(&body)
}

/// A session error, answered as Kafka's broker answers it: the top-level code, no session, no
/// partitions.
fn respond_session_error(req: &Request<'_>, error: SessionError) -> Result<Outcome, Refusal> {
    tracing::debug!(%error, "fetch answered locally");
    let body = FetchResponse::default()
        .with_error_code(error.code())
        .with_session_id(NO_SESSION);
    req.respond(&body)
}

fn session_bytes(id: i32, epoch: i32) -> [u8; 8] {
    let mut out = [0u8; 8];
    let (a, b) = out.split_at_mut(4);
    a.copy_from_slice(&id.to_be_bytes());
    b.copy_from_slice(&epoch.to_be_bytes());
    out
}

fn in_session(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
    parsed: &Parsed<'_>,
    at: std::ops::Range<usize>,
    id: i32,
    epoch: i32,
    sessions: &FetchSessions,
) -> Result<Outcome, Refusal> {
    match Metadata::of(id, epoch) {
        Metadata::Sessionless => full(req, chk, parsed, None, None),
        // A session of this connection is closed by the broker; another id is not passed on, so
        // that no client closes a session it does not own.
        Metadata::Close(id) => {
            let edit = (!sessions.lock().close(id)).then_some((at, LEGACY_SESSION));
            full(req, chk, parsed, edit, None)
        }
        Metadata::Open { replacing } => {
            let replaced = replacing.is_some_and(|id| sessions.lock().close(id));
            let edit = match replacing {
                Some(_) if !replaced => Some((at.clone(), session_bytes(NO_SESSION, epoch))),
                _ => None,
            };
            // Closed at the broker even if the new one gets no session (see `full`).
            let closing = replaced.then_some(id);
            full(req, chk, parsed, edit, Some((sessions, at, closing)))
        }
        Metadata::Incremental { id, epoch } => incremental(req, chk, parsed, id, epoch, sessions),
    }
}

/// A full fetch: the listed topics are authorized, the denied ones spliced out and merged back
/// into the response. `edit` rewrites the session fields; `opening` records the allowed
/// partitions as a session to be (the range of the session fields, and the session the fetch
/// closes, if it is one of this connection's).
fn full(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
    parsed: &Parsed<'_>,
    mut edit: Option<(std::ops::Range<usize>, [u8; 8])>,
    opening: Option<(&FetchSessions, std::ops::Range<usize>, Option<i32>)>,
) -> Result<Outcome, Refusal> {
    let keep = allowed_topics(chk, AclOperation::Read, &parsed.topics);
    let denied = parsed.topics.denied(&keep);
    if !keep.is_empty() && keep.iter().all(|k| !*k) {
        return respond_denied(req, &denied);
    }
    let mut opened = None;
    if let Some((sessions, at, closing)) = opening {
        let mut partitions = Partitions::default();
        for (entry, keep) in parsed.topics.entries.iter().zip(&keep) {
            let standing = if *keep {
                Standing::Served
            } else {
                Standing::Denied
            };
            for p in &entry.partitions {
                partitions.set(entry.name.as_str(), *p, standing);
            }
        }
        match sessions.lock().begin(partitions) {
            Some(token) => {
                opened = Some(Opening {
                    sessions: sessions.clone(),
                    token,
                })
            }
            // More than a connection may mirror: sessionless, as Kafka's broker serves a full
            // fetch when its session cache has no room (closing the replaced session still).
            None => {
                let id = closing.unwrap_or(NO_SESSION);
                edit = Some((at, session_bytes(id, FINAL_EPOCH)));
            }
        }
    }
    if denied.is_empty() && opened.is_none() {
        return Ok(match edit {
            Some((range, bytes)) => Outcome::Forward(
                wire::overwrite(req.frame, req.header.header_len, range, &bytes),
                Rewrite::Unchanged,
            ),
            None => req.unchanged(),
        });
    }
    let mut edits = Vec::new();
    if let Some((range, bytes)) = edit {
        edits.push(Edit {
            range,
            replacement: bytes.to_vec(),
        });
    }
    if !denied.is_empty() {
        parsed.topics.span.keep_only(&keep, &mut edits);
    }
    let frame = req.rewritten(edits);
    Ok(Outcome::Forward(
        frame,
        Rewrite::Fetch(Merge {
            denied,
            opening: opened,
        }),
    ))
}

/// An incremental fetch in session `id` at `epoch`.
fn incremental(
    req: &Request<'_>,
    chk: &mut Checker<'_>,
    parsed: &Parsed<'_>,
    id: i32,
    epoch: i32,
    sessions: &FetchSessions,
) -> Result<Outcome, Refusal> {
    let mut table = sessions.lock();
    if let Err(error) = table.incremental(id, epoch) {
        return respond_session_error(req, error);
    }
    let listed = parsed.topics.entries.iter();
    let extra = (
        listed.clone().map(|e| e.partitions.len()).sum::<usize>(),
        listed.map(|e| e.name.len()).sum::<usize>(),
    );
    if !table.make_room(id, extra) {
        table.close(id);
        return respond_session_error(req, SessionError::TooLarge(id));
    }
    let Some(session) = table.session_mut(id) else {
        return respond_session_error(req, SessionError::NotFound(id));
    };
    // One authorizer call over every topic of the session and the listed topics new to it (each
    // name once: the names stay in the checker's inline buffer for a consumer's handful).
    let partitions = &session.partitions;
    let allowed = chk.allowed_names(
        AclOperation::Read,
        ResourceType::Topic,
        parsed
            .topics
            .entries
            .iter()
            .map(|e| e.name.as_str())
            .filter(|name| !partitions.has_topic(name))
            .chain(partitions.topic_names()),
        Loud::Yes,
    );
    let keep: SmallVec<[bool; 8]> = parsed
        .topics
        .entries
        .iter()
        .map(|e| allowed.contains(&e.name))
        .collect();
    // Only the session's own topics can have served partitions to forget (a denied listed topic
    // new to the session has none; its partitions are set denied below). One pass over names
    // that are unique already: a request listing many denied topics costs no more than a lookup
    // each in `allowed`.
    let revoked_topics: SmallVec<[String; 2]> = session
        .partitions
        .topic_names()
        .filter(|name| !allowed.contains(name))
        .map(str::to_owned)
        .collect();
    let regranted: SmallVec<[String; 2]> = session
        .partitions
        .denied_topics()
        .filter(|name| allowed.contains(name))
        .map(str::to_owned)
        .collect();
    drop(allowed);
    // Served partitions of denied topics: the broker must forget them (before the listed ones
    // are applied, so that a listed, previously served partition is forgotten too).
    let mut revoked: TopicPartitions = Vec::new();
    for topic in revoked_topics {
        let partitions = session.partitions.deny_topic(&topic);
        if !partitions.is_empty() {
            revoked.push((topic, partitions));
        }
    }
    // Kafka's `FetchSession.update`: added and updated partitions, then the forgotten ones.
    for (entry, keep) in parsed.topics.entries.iter().zip(&keep) {
        let standing = if *keep {
            Standing::Served
        } else {
            Standing::Denied
        };
        for p in &entry.partitions {
            session.partitions.set(entry.name.as_str(), *p, standing);
        }
    }
    if let Some(forgotten) = &parsed.forgotten {
        for (name, partitions) in &forgotten.entries {
            for p in partitions {
                session.partitions.remove(name, *p);
            }
        }
    }
    // READ granted again on a topic whose partitions the session holds denied (and this fetch
    // neither lists nor forgets them). Kafka's broker serves them again at once (they never
    // left its session); the broker behind Portcullis forgot them at the revocation, and only the
    // client knows their positions. So the session ends here, as one the broker lost: the
    // client's next fetch opens a new one listing every partition at its position, authorized
    // afresh (the Java client and kafka-python do so after FETCH_SESSION_ID_NOT_FOUND). The
    // broker's copy is left to its own eviction.
    if regranted
        .iter()
        .any(|topic| session.partitions.has_denied_in(topic))
    {
        table.close(id);
        tracing::debug!(
            session_id = id,
            "read granted again in a fetch session; ended"
        );
        return respond_session_error(req, SessionError::NotFound(id));
    }
    let has_denied = session.partitions.has_denied();
    let denied = if has_denied {
        session.partitions.denied()
    } else {
        Vec::new()
    };
    // The broker closes a session left without partitions (the fetch is sessionless).
    if !session.partitions.has_served() {
        table.close(id);
    }
    drop(table);
    tracing::debug!(
        session_id = id,
        epoch,
        listed = keep.len(),
        revoked = revoked.len(),
        denied = denied.len(),
        "incremental fetch forwarded"
    );
    let strip = keep.iter().any(|k| !*k);
    if !strip && revoked.is_empty() && denied.is_empty() {
        return Ok(req.unchanged());
    }
    let mut edits = Vec::new();
    if strip {
        parsed.topics.span.keep_only(&keep, &mut edits);
    }
    if let (false, Some(forgotten)) = (revoked.is_empty(), &parsed.forgotten) {
        forget(req.flexible, forgotten, &revoked, &mut edits);
    }
    let frame = req.rewritten(edits);
    Ok(Outcome::Forward(
        frame,
        Rewrite::Fetch(Merge {
            denied,
            opening: None,
        }),
    ))
}

/// The edits that append `revoked` to the request's forgotten topics.
fn forget(
    flexible: bool,
    forgotten: &Forgotten<'_>,
    revoked: &TopicPartitions,
    edits: &mut Vec<Edit>,
) {
    let total = forgotten.entries.len().saturating_add(revoked.len());
    let mut count = Vec::new();
    put_array_len(&mut count, flexible, total);
    edits.push(Edit {
        range: forgotten.count.clone(),
        replacement: count,
    });
    let mut added = Vec::new();
    for (topic, partitions) in revoked {
        if flexible {
            wire::put_uvarint(
                &mut added,
                u32::try_from(topic.len())
                    .unwrap_or(u32::MAX)
                    .saturating_add(1),
            );
        } else {
            added.extend_from_slice(&i16::try_from(topic.len()).unwrap_or(i16::MAX).to_be_bytes());
        }
        added.extend_from_slice(topic.as_bytes());
        put_array_len(&mut added, flexible, partitions.len());
        for p in partitions {
            added.extend_from_slice(&p.to_be_bytes());
        }
        if flexible {
            added.push(0); // no tagged fields
        }
    }
    edits.push(Edit {
        range: forgotten.end..forgotten.end,
        replacement: added,
    });
}

fn put_array_len(out: &mut Vec<u8>, flexible: bool, len: usize) {
    if flexible {
        wire::put_uvarint(
            out,
            u32::try_from(len).unwrap_or(u32::MAX).saturating_add(1),
        );
    } else {
        out.extend_from_slice(&i32::try_from(len).unwrap_or(i32::MAX).to_be_bytes());
    }
}

/// The top-level error code and session id of a v7+ Fetch response frame (header included),
/// read without decoding the partitions.
pub(crate) fn response_session(frame: &[u8], version: i16) -> Result<(i16, i32), Malformed> {
    let mut r = Reader::new(frame);
    let _correlation_id = r.i32()?;
    if ApiKey::Fetch.response_header_version(version) >= 1 {
        r.skip_tagged_fields()?;
    }
    let _throttle_time_ms = r.i32()?;
    let error_code = r.i16()?;
    let session_id = r.i32()?;
    Ok((error_code, session_id))
}

impl Merge {
    pub(crate) fn apply(&self, response: &Response<'_>) -> Result<Bytes, PlanError> {
        if let Some(opening) = &self.opening {
            let (error, id) = response_session(response.frame, response.version).map_err(|_| {
                PlanError::Decode {
                    api: ApiKey::Fetch,
                    version: response.version,
                }
            })?;
            let id = if error == 0 { id } else { NO_SESSION };
            if opening.sessions.lock().established(opening.token, id) {
                // The interop tests read this line to see sessions reach the broker.
                tracing::debug!(session_id = id, "fetch session opened");
            }
        }
        if self.denied.is_empty() {
            return Ok(response.frame.clone());
        }
        put_back::<FetchResponse>(response, &self.denied)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::acl::ResourceType;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
    use kafka_protocol::messages::fetch_response::PartitionData;
    use kafka_protocol::messages::{ApiKey, TopicName};
    use kafka_protocol::messages::{BrokerId, FetchRequest};

    fn request(replica: i32) -> FetchRequest {
        let topic = |name: &str| {
            FetchTopic::default()
                .with_topic(TopicName(s(name)))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(5),
                    FetchPartition::default().with_partition(1),
                ])
        };
        FetchRequest::default()
            .with_replica_id(BrokerId(replica))
            .with_max_bytes(1 << 20)
            .with_topics(vec![topic("a"), topic("b")])
    }

    #[test]
    fn denied_topics_are_spliced_out_and_fetches_become_sessionless() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Topic, "a")
            .arc();
        for version in [4, 7, 11, 12] {
            let mut req = request(-1);
            if version >= 7 {
                req = req
                    .with_session_id(77)
                    .with_session_epoch(3)
                    .with_forgotten_topics_data(vec![ForgottenTopic::default()
                        .with_topic(TopicName(s("z")))
                        .with_partitions(vec![1])]);
            }
            if version >= 11 {
                req = req.with_rack_id(s("r1"));
            }
            let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::Fetch, version, &req)));
            let sent: FetchRequest = request_body(&out);
            assert_eq!(sent.topics.len(), 1, "v{version}");
            assert_eq!(sent.topics[0].topic.0.as_str(), "a");
            assert_eq!(sent.topics[0].partitions[0].fetch_offset, 5);
            if version >= 7 {
                assert_eq!((sent.session_id, sent.session_epoch), (0, -1));
            }
            let upstream =
                FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                    .with_topic(TopicName(s("a")))
                    .with_partitions(vec![PartitionData::default()
                        .with_partition_index(0)
                        .with_high_watermark(9)
                        .with_records(Some(Bytes::from_static(b"rec")))])]);
            let merged: FetchResponse = applied(&plan, ApiKey::Fetch, version, &upstream);
            assert_eq!(merged.responses.len(), 2);
            assert_eq!(
                merged.responses[0].partitions[0].records.as_deref(),
                Some(&b"rec"[..])
            );
            let b = &merged.responses[1];
            assert_eq!(b.topic.0.as_str(), "b");
            assert_eq!(b.partitions.len(), 2);
            assert!(b.partitions.iter().all(|p| p.error_code == 29));
        }
    }

    #[test]
    fn allowed_fetches_keep_their_bytes_except_the_session() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Topic, "*")
            .arc();
        let f = frame(ApiKey::Fetch, 4, &request(-1));
        assert_eq!(forwarded(&run(&authz, &f)).0, f);
        let f = frame(ApiKey::Fetch, 12, &request(-1).with_session_epoch(0));
        let (out, plan) = forwarded(&run(&authz, &f));
        assert!(plan.is_unchanged());
        let sent: FetchRequest = request_body(&out);
        assert_eq!(sent.session_epoch, -1);
        assert_eq!(out.len(), f.len());
    }

    #[test]
    fn follower_fetches_and_fully_denied_fetches_are_answered_locally() {
        let authz = AllowList::new()
            .allow(AclOperation::Read, ResourceType::Topic, "*")
            .arc();
        let r: FetchResponse = response_body(
            ApiKey::Fetch,
            12,
            &responded(&run(&authz, &frame(ApiKey::Fetch, 12, &request(1)))),
        );
        assert_eq!(r.responses.len(), 2);
        assert!(r
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .all(|p| p.error_code == 29));
        let none = AllowList::new().arc();
        let r: FetchResponse = response_body(
            ApiKey::Fetch,
            7,
            &responded(&run(&none, &frame(ApiKey::Fetch, 7, &request(-1)))),
        );
        assert_eq!(r.responses.len(), 2);
    }

    mod sessions {
        use super::super::super::fetch_session::{FetchSessions, MAX_PARTITIONS};
        use super::*;
        use crate::authorization::Verdict;

        fn allow(topics: &[&str]) -> std::sync::Arc<dyn crate::authorizer::Authorizer> {
            topics
                .iter()
                .fold(AllowList::new(), |a, t| {
                    a.allow(AclOperation::Read, ResourceType::Topic, t)
                })
                .arc()
        }

        fn topic(name: &str, partitions: &[i32]) -> FetchTopic {
            FetchTopic::default()
                .with_topic(TopicName(s(name)))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| {
                            FetchPartition::default()
                                .with_partition(*p)
                                .with_fetch_offset(100)
                        })
                        .collect(),
                )
        }

        fn fetch(id: i32, epoch: i32, topics: Vec<FetchTopic>) -> FetchRequest {
            FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_session_id(id)
                .with_session_epoch(epoch)
                .with_topics(topics)
        }

        fn forgetting(req: FetchRequest, name: &str, partitions: Vec<i32>) -> FetchRequest {
            req.with_forgotten_topics_data(vec![ForgottenTopic::default()
                .with_topic(TopicName(s(name)))
                .with_partitions(partitions)])
        }

        /// The upstream's answer: `session` and records on each served partition.
        fn answer(session: i32, served: &[(&str, &[i32])]) -> FetchResponse {
            FetchResponse::default()
                .with_session_id(session)
                .with_responses(
                    served
                        .iter()
                        .map(|(t, ps)| {
                            FetchableTopicResponse::default()
                                .with_topic(TopicName(s(t)))
                                .with_partitions(
                                    ps.iter()
                                        .map(|p| {
                                            PartitionData::default()
                                                .with_partition_index(*p)
                                                .with_records(Some(Bytes::from_static(b"rec")))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                )
        }

        /// `(topic, partition, error)` of every partition of a response, sorted.
        fn codes(r: &FetchResponse) -> Vec<(String, i32, i16)> {
            let mut out: Vec<_> = r
                .responses
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(|p| (t.topic.0.to_string(), p.partition_index, p.error_code))
                })
                .collect();
            out.sort();
            out
        }

        fn forgotten(r: &FetchRequest) -> Vec<(String, Vec<i32>)> {
            r.forgotten_topics_data
                .iter()
                .map(|f| (f.topic.0.to_string(), f.partitions.clone()))
                .collect()
        }

        /// Opens session `id` with `topics` (allowed per `authz`) at `version`.
        fn open(
            authz: &std::sync::Arc<dyn crate::authorizer::Authorizer>,
            sessions: &FetchSessions,
            version: i16,
            id: i32,
            topics: Vec<FetchTopic>,
            served: &[(&str, &[i32])],
        ) -> FetchResponse {
            let f = frame(ApiKey::Fetch, version, &fetch(0, 0, topics));
            let (out, plan) = forwarded(&run_in(authz, &f, sessions));
            let sent: FetchRequest = request_body(&out);
            assert_eq!((sent.session_id, sent.session_epoch), (0, 0));
            assert!(!plan.is_unchanged(), "an opening's response is read");
            applied(&plan, ApiKey::Fetch, version, &answer(id, served))
        }

        /// Session 42, opened at v12 on partition 0 of topic `a`, which `authz` allows.
        fn session_on_a() -> (
            std::sync::Arc<dyn crate::authorizer::Authorizer>,
            FetchSessions,
        ) {
            let authz = allow(&["a"]);
            let sessions = FetchSessions::new();
            open(
                &authz,
                &sessions,
                12,
                42,
                vec![topic("a", &[0])],
                &[("a", &[0])],
            );
            (authz, sessions)
        }

        #[test]
        fn sessions_pass_through_and_incremental_fetches_are_forwarded_as_sent() {
            let authz = allow(&["a"]);
            for version in [7, 11, 12] {
                let sessions = FetchSessions::new();
                let merged = open(
                    &authz,
                    &sessions,
                    version,
                    42,
                    vec![topic("a", &[0, 1])],
                    &[("a", &[0, 1])],
                );
                assert_eq!(merged.session_id, 42);
                assert_eq!(sessions.established(), 1);
                for epoch in 1..4 {
                    let f = frame(ApiKey::Fetch, version, &fetch(42, epoch, vec![]));
                    let (out, plan) = match verdict_in(&authz, &f, &sessions) {
                        Verdict::Forward { frame, plan } => (frame, plan),
                        other => panic!("v{version}: {other:?}"),
                    };
                    assert_eq!(out, f, "v{version}: forwarded as sent");
                    assert!(plan.is_unchanged(), "v{version}: relayed as it comes");
                }
            }
        }

        #[test]
        fn unknown_sessions_and_wrong_epochs_are_answered_locally() {
            let (authz, sessions) = session_on_a();
            // Another connection's session id: never forwarded.
            let other = FetchSessions::new();
            for (table, id, epoch, code) in [
                (&other, 42, 1, 70),
                (&sessions, 43, 1, 70),
                (&sessions, 42, 2, 71),
                (&sessions, 42, -5, 71),
            ] {
                let f = frame(ApiKey::Fetch, 12, &fetch(id, epoch, vec![topic("a", &[0])]));
                let r: FetchResponse =
                    response_body(ApiKey::Fetch, 12, &responded(&run_in(&authz, &f, table)));
                assert_eq!((r.error_code, r.session_id), (code, 0), "{id}/{epoch}");
                assert!(r.responses.is_empty());
            }
            // The rejected fetches did not advance the session.
            let f = frame(ApiKey::Fetch, 12, &fetch(42, 1, vec![]));
            forwarded(&run_in(&authz, &f, &sessions));
        }

        #[test]
        fn partitions_denied_at_opening_are_answered_on_every_fetch() {
            let authz = allow(&["a"]);
            let sessions = FetchSessions::new();
            let f = frame(
                ApiKey::Fetch,
                12,
                &fetch(0, 0, vec![topic("a", &[0]), topic("b", &[0, 1])]),
            );
            let (out, plan) = forwarded(&run_in(&authz, &f, &sessions));
            let sent: FetchRequest = request_body(&out);
            assert_eq!(sent.topics.len(), 1);
            let merged: FetchResponse =
                applied(&plan, ApiKey::Fetch, 12, &answer(42, &[("a", &[0])]));
            assert_eq!(
                codes(&merged),
                vec![("a".into(), 0, 0), ("b".into(), 0, 29), ("b".into(), 1, 29)]
            );
            let f = frame(ApiKey::Fetch, 12, &fetch(42, 1, vec![]));
            let (out, plan) = forwarded(&run_in(&authz, &f, &sessions));
            assert_eq!(out, f);
            let merged: FetchResponse = applied(&plan, ApiKey::Fetch, 12, &answer(42, &[]));
            assert_eq!(
                codes(&merged),
                vec![("b".into(), 0, 29), ("b".into(), 1, 29)]
            );
            // Once the client forgets them, they are not answered any more.
            let f = frame(
                ApiKey::Fetch,
                12,
                &forgetting(fetch(42, 2, vec![]), "b", vec![0, 1]),
            );
            let (out, plan) = forwarded(&run_in(&authz, &f, &sessions));
            assert_eq!(out, f);
            assert!(plan.is_unchanged());
        }

        #[test]
        fn a_revoked_read_is_forgotten_upstream_and_answered_denied() {
            for version in [7, 11, 12] {
                let sessions = FetchSessions::new();
                open(
                    &allow(&["a", "b"]),
                    &sessions,
                    version,
                    42,
                    vec![topic("a", &[0]), topic("b", &[0, 1])],
                    &[("a", &[0]), ("b", &[0, 1])],
                );
                let revoked = allow(&["a"]);
                let f = frame(
                    ApiKey::Fetch,
                    version,
                    &forgetting(fetch(42, 1, vec![]), "z", vec![3]),
                );
                let (out, plan) = forwarded(&run_in(&revoked, &f, &sessions));
                let sent: FetchRequest = request_body(&out);
                assert_eq!((sent.session_id, sent.session_epoch), (42, 1));
                assert_eq!(
                    forgotten(&sent),
                    vec![("z".into(), vec![3]), ("b".into(), vec![0, 1])],
                    "v{version}"
                );
                let merged: FetchResponse =
                    applied(&plan, ApiKey::Fetch, version, &answer(42, &[("a", &[0])]));
                assert_eq!(
                    codes(&merged),
                    vec![("a".into(), 0, 0), ("b".into(), 0, 29), ("b".into(), 1, 29)]
                );
                // Forgotten once; still answered denied on the next fetch.
                let f = frame(ApiKey::Fetch, version, &fetch(42, 2, vec![]));
                let (out, plan) = forwarded(&run_in(&revoked, &f, &sessions));
                assert_eq!(out, f);
                let merged: FetchResponse =
                    applied(&plan, ApiKey::Fetch, version, &answer(42, &[]));
                assert_eq!(
                    codes(&merged),
                    vec![("b".into(), 0, 29), ("b".into(), 1, 29)]
                );
                // Re-adding one with the grant back makes it served again.
                let f = frame(
                    ApiKey::Fetch,
                    version,
                    &fetch(42, 3, vec![topic("b", &[0, 1])]),
                );
                let (out, plan) = forwarded(&run_in(&allow(&["a", "b"]), &f, &sessions));
                assert_eq!(out, f);
                let merged: FetchResponse =
                    applied(&plan, ApiKey::Fetch, version, &answer(42, &[("b", &[0])]));
                assert_eq!(codes(&merged), vec![("b".into(), 0, 0)]);
            }
        }

        #[test]
        fn a_grant_on_a_denied_topic_the_fetch_does_not_list_ends_the_session() {
            let sessions = FetchSessions::new();
            open(
                &allow(&["a", "b"]),
                &sessions,
                12,
                42,
                vec![topic("a", &[0]), topic("b", &[0, 1])],
                &[("a", &[0]), ("b", &[0, 1])],
            );
            let f = frame(ApiKey::Fetch, 12, &fetch(42, 1, vec![]));
            forwarded(&run_in(&allow(&["a"]), &f, &sessions));
            // Granted again, b's partitions not listed: the broker forgot them and only the
            // client knows their positions, so the session ends (answered locally).
            let f = frame(ApiKey::Fetch, 12, &fetch(42, 2, vec![topic("b", &[0])]));
            let r: FetchResponse = response_body(
                ApiKey::Fetch,
                12,
                &responded(&run_in(&allow(&["a", "b"]), &f, &sessions)),
            );
            assert_eq!((r.error_code, r.session_id), (70, 0));
            assert!(r.responses.is_empty());
            let f = frame(ApiKey::Fetch, 12, &fetch(42, 3, vec![]));
            let r: FetchResponse = response_body(
                ApiKey::Fetch,
                12,
                &responded(&run_in(&allow(&["a", "b"]), &f, &sessions)),
            );
            assert_eq!(r.error_code, 70, "the session is gone");
        }

        #[test]
        fn incremental_additions_are_authorized() {
            let (authz, sessions) = session_on_a();
            let f = frame(
                ApiKey::Fetch,
                12,
                &fetch(42, 1, vec![topic("a", &[1]), topic("c", &[0])]),
            );
            let (out, plan) = forwarded(&run_in(&authz, &f, &sessions));
            let sent: FetchRequest = request_body(&out);
            assert_eq!(sent.topics.len(), 1);
            assert_eq!(sent.topics[0].topic.0.as_str(), "a");
            assert!(sent.forgotten_topics_data.is_empty(), "c was never served");
            let merged: FetchResponse =
                applied(&plan, ApiKey::Fetch, 12, &answer(42, &[("a", &[1])]));
            assert_eq!(
                codes(&merged),
                vec![("a".into(), 1, 0), ("c".into(), 0, 29)]
            );
        }

        #[test]
        fn a_session_left_without_served_partitions_is_closed() {
            let sessions = FetchSessions::new();
            open(
                &allow(&["a"]),
                &sessions,
                12,
                42,
                vec![topic("a", &[0])],
                &[("a", &[0])],
            );
            let f = frame(ApiKey::Fetch, 12, &fetch(42, 1, vec![]));
            let (out, _) = forwarded(&run_in(&allow(&[]), &f, &sessions));
            let sent: FetchRequest = request_body(&out);
            assert_eq!(forgotten(&sent), vec![("a".into(), vec![0])]);
            assert_eq!(
                sessions.established(),
                0,
                "the broker closes an empty session"
            );
        }

        #[test]
        fn closing_and_replacing_touch_only_this_connections_sessions() {
            let (authz, sessions) = session_on_a();
            // Someone else's id: made sessionless / a plain opening, so it is not closed upstream.
            let f = frame(ApiKey::Fetch, 12, &fetch(99, -1, vec![topic("a", &[0])]));
            let sent: FetchRequest = request_body(&forwarded(&run_in(&authz, &f, &sessions)).0);
            assert_eq!((sent.session_id, sent.session_epoch), (0, -1));
            let f = frame(ApiKey::Fetch, 12, &fetch(99, 0, vec![topic("a", &[0])]));
            let (out, plan) = forwarded(&run_in(&authz, &f, &sessions));
            let sent: FetchRequest = request_body(&out);
            assert_eq!((sent.session_id, sent.session_epoch), (0, 0));
            let _: FetchResponse = applied(&plan, ApiKey::Fetch, 12, &answer(43, &[("a", &[0])]));
            assert_eq!(sessions.established(), 2);
            // Its own: passed on, and forgotten here.
            let f = frame(ApiKey::Fetch, 12, &fetch(42, 0, vec![topic("a", &[0])]));
            let (out, plan) = forwarded(&run_in(&authz, &f, &sessions));
            assert_eq!(out, f);
            let _: FetchResponse = applied(&plan, ApiKey::Fetch, 12, &answer(44, &[("a", &[0])]));
            let f = frame(ApiKey::Fetch, 12, &fetch(43, -1, vec![topic("a", &[0])]));
            assert_eq!(forwarded(&run_in(&authz, &f, &sessions)).0, f);
            assert_eq!(sessions.established(), 1);
            for gone in [42, 43] {
                let f = frame(ApiKey::Fetch, 12, &fetch(gone, 1, vec![]));
                let r: FetchResponse = response_body(
                    ApiKey::Fetch,
                    12,
                    &responded(&run_in(&authz, &f, &sessions)),
                );
                assert_eq!(r.error_code, 70);
            }
            let f = frame(ApiKey::Fetch, 12, &fetch(44, 1, vec![]));
            forwarded(&run_in(&authz, &f, &sessions));
        }

        #[test]
        fn failed_openings_and_oversized_ones_make_no_session() {
            let authz = allow(&["a"]);
            let sessions = FetchSessions::new();
            let f = frame(ApiKey::Fetch, 12, &fetch(0, 0, vec![topic("a", &[0])]));
            let (_, plan) = forwarded(&run_in(&authz, &f, &sessions));
            let _: FetchResponse = applied(
                &plan,
                ApiKey::Fetch,
                12,
                &answer(42, &[]).with_error_code(70),
            );
            assert_eq!(sessions.established(), 0);
            let many: Vec<i32> = (0..=MAX_PARTITIONS as i32).collect();
            let f = frame(ApiKey::Fetch, 12, &fetch(0, 0, vec![topic("a", &many)]));
            let (out, plan) = forwarded(&run_in(&authz, &f, &sessions));
            let sent: FetchRequest = request_body(&out);
            assert_eq!((sent.session_id, sent.session_epoch), (0, -1));
            assert!(plan.is_unchanged());
        }

        #[test]
        fn old_versions_and_followers_are_unchanged() {
            let authz = allow(&["a"]);
            let sessions = FetchSessions::new();
            let f = frame(ApiKey::Fetch, 4, &request(-1));
            let (out, plan) = forwarded(&run_in(&authz, &f, &sessions));
            assert_eq!(request_body::<FetchRequest>(&out).topics.len(), 1);
            assert!(!plan.is_unchanged());
            let f = frame(ApiKey::Fetch, 12, &request(1).with_session_epoch(0));
            let r: FetchResponse = response_body(
                ApiKey::Fetch,
                12,
                &responded(&run_in(&authz, &f, &sessions)),
            );
            assert!(codes(&r).iter().all(|(_, _, c)| *c == 29));
            assert_eq!(sessions.established(), 0);
        }

        #[test]
        fn response_session_reads_the_header_only() {
            for version in [7, 12] {
                let frame = response(
                    ApiKey::Fetch,
                    version,
                    &answer(7, &[("a", &[0])]).with_error_code(3),
                );
                assert_eq!(response_session(&frame, version), Ok((3, 7)));
                for cut in 0..12 {
                    assert!(response_session(frame.get(..cut).unwrap(), version).is_err());
                }
            }
        }
    }
}
