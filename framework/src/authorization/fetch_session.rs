//! Incremental fetch sessions (KIP-227), mirrored per client connection.
//!
//! A fetch session lives on the upstream broker: after a full fetch opens it, the client sends
//! only the partitions that changed and the broker keeps serving the others. Per-request
//! authorization would miss those, so each connection keeps a mirror of what its sessions hold
//! and authorization re-checks the whole mirror on every fetch (see `fetch.rs`).
//!
//! The rules follow Kafka's `FetchMetadata` and `FetchManager.newContext`:
//! - epoch -1 (FINAL) is a full fetch without a session; a session id with it closes that session;
//! - epoch 0 (INITIAL) is a full fetch that opens a session; a session id with it closes that one
//!   first;
//! - any other epoch is incremental: the session must exist (else FETCH_SESSION_ID_NOT_FOUND) and
//!   the epoch must be the one it expects (else INVALID_FETCH_SESSION_EPOCH); then the listed
//!   partitions are added or updated, the forgotten ones removed, and the expected epoch advances
//!   (`nextEpoch`: after `i32::MAX` comes 1). A session left without partitions is closed by the
//!   broker and the fetch is sessionless.
//!
//! The broker assigns the session id in the response to the opening fetch, so an opening is
//! [`Table::begin`]-ed when forwarded and [`Table::established`] when its response arrives.
//!
//! Only session ids this table has seen established may be used: fetch sessions are broker-wide,
//! and with a shared upstream identity another connection's id would serve that connection's
//! partitions.
//!
//! Memory is bounded per connection: at most [`MAX_PARTITIONS`] partitions and [`MAX_NAME_BYTES`]
//! bytes of topic names across all sessions and pending openings, [`MAX_SESSIONS`] sessions and
//! [`MAX_OPENINGS`] openings. The least recently used session (or oldest opening) makes room
//! first; an opening that alone exceeds the bound is not given a session (the fetch is forwarded
//! sessionless, as Kafka's broker does when its session cache is full).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Kafka's `FetchMetadata.INVALID_SESSION_ID`: no session.
pub(crate) const NO_SESSION: i32 = 0;
/// Kafka's `FetchMetadata.INITIAL_EPOCH`: a full fetch that opens a session.
pub(crate) const INITIAL_EPOCH: i32 = 0;
/// Kafka's `FetchMetadata.FINAL_EPOCH`: a full fetch without a session.
pub(crate) const FINAL_EPOCH: i32 = -1;

/// Partitions mirrored per connection, across sessions and openings. Kafka's own bound is the
/// broker-wide `max.incremental.fetch.session.cache.slots` (1000 sessions); a consumer fetches one
/// session per broker, so a few thousand partitions per connection is generous.
pub(crate) const MAX_PARTITIONS: usize = 4096;
/// Bytes of topic names mirrored per connection (a name is stored once per session).
pub(crate) const MAX_NAME_BYTES: usize = 256 * 1024;
/// Sessions per connection (a client needs one per broker, and a connection reaches one broker).
pub(crate) const MAX_SESSIONS: usize = 8;
/// Openings awaiting their response per connection.
pub(crate) const MAX_OPENINGS: usize = 8;

/// Kafka's `FETCH_SESSION_ID_NOT_FOUND`.
pub(crate) const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
/// Kafka's `INVALID_FETCH_SESSION_EPOCH`.
pub(crate) const INVALID_FETCH_SESSION_EPOCH: i16 = 71;

/// Kafka's `FetchMetadata.nextEpoch`.
pub(crate) fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

/// What a fetch's session id and epoch ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Metadata {
    /// Session id 0, epoch -1: a full fetch without a session.
    Sessionless,
    /// A session id with epoch -1: close that session, then a full fetch without one.
    Close(i32),
    /// Epoch 0: a full fetch opening a session, closing `replacing` first.
    Open { replacing: Option<i32> },
    /// Any other epoch: an incremental fetch in session `id`.
    Incremental { id: i32, epoch: i32 },
}

impl Metadata {
    pub(crate) fn of(session_id: i32, epoch: i32) -> Self {
        match (session_id, epoch) {
            (NO_SESSION, FINAL_EPOCH) => Self::Sessionless,
            (id, FINAL_EPOCH) => Self::Close(id),
            (id, INITIAL_EPOCH) => Self::Open {
                replacing: (id != NO_SESSION).then_some(id),
            },
            (id, epoch) => Self::Incremental { id, epoch },
        }
    }
}

/// Why an incremental fetch is answered locally.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SessionError {
    /// No session with this id was established on this connection.
    #[error("fetch session {0} is not one of this connection's")]
    NotFound(i32),
    /// The session expects another epoch.
    #[error("fetch session {id} expects epoch {expected}, got {got}")]
    InvalidEpoch { id: i32, expected: i32, got: i32 },
    /// The session would outgrow the per-connection bound; it is dropped.
    #[error("fetch session {0} would hold more than {MAX_PARTITIONS} partitions or {MAX_NAME_BYTES} bytes of topic names; dropped")]
    TooLarge(i32),
}

impl SessionError {
    /// The top-level error code Kafka's broker answers with (a dropped session is one the broker
    /// no longer knows: the client opens a new one).
    pub(crate) fn code(self) -> i16 {
        match self {
            Self::NotFound(_) | Self::TooLarge(_) => FETCH_SESSION_ID_NOT_FOUND,
            Self::InvalidEpoch { .. } => INVALID_FETCH_SESSION_EPOCH,
        }
    }
}

/// Where a mirrored partition stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// In the broker's session: the broker serves it.
    Served,
    /// Denied READ: not in the broker's session (stripped or forgotten), answered
    /// TOPIC_AUTHORIZATION_FAILED on every fetch until the client forgets it or adds it again, as
    /// Kafka's broker keeps answering a session's unauthorized partitions, or until READ is
    /// granted again (the session then ends: see `fetch::incremental`).
    Denied,
}

/// A session's partitions, by topic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Partitions {
    topics: BTreeMap<String, BTreeMap<i32, Standing>>,
    count: usize,
    name_bytes: usize,
}

impl Partitions {
    /// Adds or updates a partition.
    pub(crate) fn set(&mut self, topic: &str, partition: i32, standing: Standing) {
        let entry = match self.topics.get_mut(topic) {
            Some(entry) => entry,
            None => {
                self.name_bytes += topic.len();
                self.topics.entry(topic.to_owned()).or_default()
            }
        };
        if entry.insert(partition, standing).is_none() {
            self.count += 1;
        }
    }

    /// Removes a partition (absent ones are ignored, as the broker ignores them).
    pub(crate) fn remove(&mut self, topic: &str, partition: i32) {
        let Some(entry) = self.topics.get_mut(topic) else {
            return;
        };
        if entry.remove(&partition).is_some() {
            self.count = self.count.saturating_sub(1);
        }
        if entry.is_empty() {
            self.topics.remove(topic);
            self.name_bytes = self.name_bytes.saturating_sub(topic.len());
        }
    }

    /// How many partitions.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Whether the partition is mirrored.
    #[cfg(test)]
    pub(crate) fn contains(&self, topic: &str, partition: i32) -> bool {
        self.topics
            .get(topic)
            .is_some_and(|p| p.contains_key(&partition))
    }

    /// Whether any partition of `topic` is mirrored.
    pub(crate) fn has_topic(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }

    /// The topic names, sorted.
    pub(crate) fn topic_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.topics.keys().map(String::as_str)
    }

    /// Marks every partition of `topic` denied; returns those that were served (the broker must
    /// forget them).
    pub(crate) fn deny_topic(&mut self, topic: &str) -> Vec<i32> {
        let Some(entry) = self.topics.get_mut(topic) else {
            return Vec::new();
        };
        let mut revoked = Vec::new();
        for (partition, standing) in entry.iter_mut() {
            if *standing == Standing::Served {
                revoked.push(*partition);
                *standing = Standing::Denied;
            }
        }
        revoked
    }

    /// Every denied partition, by topic (sorted).
    pub(crate) fn denied(&self) -> Vec<(String, Vec<i32>)> {
        self.topics
            .iter()
            .filter_map(|(topic, partitions)| {
                let denied: Vec<i32> = partitions
                    .iter()
                    .filter(|(_, s)| **s == Standing::Denied)
                    .map(|(p, _)| *p)
                    .collect();
                (!denied.is_empty()).then(|| (topic.clone(), denied))
            })
            .collect()
    }

    /// The topics with a denied partition, sorted.
    pub(crate) fn denied_topics(&self) -> impl Iterator<Item = &str> + '_ {
        self.topics
            .iter()
            .filter(|(_, p)| p.values().any(|s| *s == Standing::Denied))
            .map(|(topic, _)| topic.as_str())
    }

    /// Whether any partition of `topic` is denied.
    pub(crate) fn has_denied_in(&self, topic: &str) -> bool {
        self.topics
            .get(topic)
            .is_some_and(|p| p.values().any(|s| *s == Standing::Denied))
    }

    /// Whether any partition is denied.
    pub(crate) fn has_denied(&self) -> bool {
        self.topics
            .values()
            .any(|p| p.values().any(|s| *s == Standing::Denied))
    }

    /// Whether any partition is served (a session without one is closed by the broker).
    pub(crate) fn has_served(&self) -> bool {
        self.topics
            .values()
            .any(|p| p.values().any(|s| *s == Standing::Served))
    }

    fn fits_with(&self, other: (usize, usize)) -> bool {
        self.count.saturating_add(other.0) <= MAX_PARTITIONS
            && self.name_bytes.saturating_add(other.1) <= MAX_NAME_BYTES
    }

    fn weight(&self) -> (usize, usize) {
        (self.count, self.name_bytes)
    }
}

/// An established session.
#[derive(Debug)]
pub(crate) struct Tracked {
    id: i32,
    /// The epoch the next incremental fetch must carry.
    epoch: i32,
    /// When last used (the table's clock), for eviction.
    used: u64,
    pub(crate) partitions: Partitions,
}

#[derive(Debug)]
struct Opening {
    token: u64,
    partitions: Partitions,
}

/// One connection's fetch sessions.
#[derive(Debug, Default)]
pub(crate) struct Table {
    sessions: Vec<Tracked>,
    openings: VecDeque<Opening>,
    /// Tokens of openings and the use clock of sessions.
    clock: u64,
}

impl Table {
    /// Whether session `id` was established here.
    #[cfg(test)]
    pub(crate) fn knows(&self, id: i32) -> bool {
        self.sessions.iter().any(|s| s.id == id)
    }

    /// Forgets session `id` (a full fetch closes it); whether it was known.
    pub(crate) fn close(&mut self, id: i32) -> bool {
        let before = self.sessions.len();
        self.sessions.retain(|s| s.id != id);
        self.sessions.len() != before
    }

    /// Records an opening fetch about to be forwarded with these partitions; the token names it
    /// when its response arrives. `None` when the partitions alone exceed the bound (the fetch
    /// must go sessionless).
    pub(crate) fn begin(&mut self, partitions: Partitions) -> Option<u64> {
        if !Partitions::default().fits_with(partitions.weight()) {
            return None;
        }
        while self.openings.len() >= MAX_OPENINGS {
            self.openings.pop_front();
        }
        while !self.fits(partitions.weight()) {
            if !self.evict_one() {
                return None;
            }
        }
        self.clock += 1;
        let token = self.clock;
        self.openings.push_back(Opening { token, partitions });
        Some(token)
    }

    /// The opening's response named session `id` (0: the broker made no session, e.g. its cache
    /// was full, or the fetch failed). Whether a session is now tracked.
    pub(crate) fn established(&mut self, token: u64, id: i32) -> bool {
        let Some(at) = self.openings.iter().position(|o| o.token == token) else {
            return false; // evicted meanwhile: the client will get FETCH_SESSION_ID_NOT_FOUND
        };
        let Some(opening) = self.openings.remove(at) else {
            return false;
        };
        // A session that serves nothing (yet) is tracked like any other: what the client adds
        // later is authorized then.
        if id == NO_SESSION {
            return false;
        }
        self.close(id);
        while self.sessions.len() >= MAX_SESSIONS {
            self.evict_session();
        }
        self.clock += 1;
        self.sessions.push(Tracked {
            id,
            epoch: next_epoch(INITIAL_EPOCH),
            used: self.clock,
            partitions: opening.partitions,
        });
        true
    }

    /// The session an incremental fetch runs in, if it exists and expects this epoch; the
    /// epoch then advances. Dropped by [`Table::close`] when it is left without served
    /// partitions.
    pub(crate) fn incremental(&mut self, id: i32, epoch: i32) -> Result<(), SessionError> {
        self.clock += 1;
        let clock = self.clock;
        let session = self
            .sessions
            .iter_mut()
            .find(|s| s.id == id)
            .ok_or(SessionError::NotFound(id))?;
        if session.epoch != epoch {
            return Err(SessionError::InvalidEpoch {
                id,
                expected: session.epoch,
                got: epoch,
            });
        }
        session.epoch = next_epoch(session.epoch);
        session.used = clock;
        Ok(())
    }

    /// Session `id`, to apply an incremental fetch that [`Table::incremental`] accepted.
    pub(crate) fn session_mut(&mut self, id: i32) -> Option<&mut Tracked> {
        self.sessions.iter_mut().find(|s| s.id == id)
    }

    /// Whether session `id` may grow by `extra` (partitions, name bytes) within the bound, after
    /// evicting other sessions and openings if needed.
    pub(crate) fn make_room(&mut self, id: i32, extra: (usize, usize)) -> bool {
        loop {
            if self.fits(extra) {
                return true;
            }
            if let Some(front) = self.openings.pop_front() {
                drop(front);
                continue;
            }
            let victim = self
                .sessions
                .iter()
                .filter(|s| s.id != id)
                .min_by_key(|s| s.used)
                .map(|s| s.id);
            match victim {
                Some(v) => {
                    self.close(v);
                }
                None => return false,
            }
        }
    }

    fn fits(&self, extra: (usize, usize)) -> bool {
        let (mut count, mut bytes) = extra;
        for p in self
            .sessions
            .iter()
            .map(|s| &s.partitions)
            .chain(self.openings.iter().map(|o| &o.partitions))
        {
            count = count.saturating_add(p.count);
            bytes = bytes.saturating_add(p.name_bytes);
        }
        count <= MAX_PARTITIONS && bytes <= MAX_NAME_BYTES
    }

    fn evict_one(&mut self) -> bool {
        if self.openings.pop_front().is_some() {
            return true;
        }
        self.evict_session()
    }

    fn evict_session(&mut self) -> bool {
        let Some(victim) = self.sessions.iter().min_by_key(|s| s.used).map(|s| s.id) else {
            return false;
        };
        self.close(victim)
    }

    /// How many sessions are established (for tests and metrics).
    pub(crate) fn sessions(&self) -> usize {
        self.sessions.len()
    }
}

/// One client connection's fetch sessions: its request side authorizes each Fetch against them,
/// and the response to an opening fetch records the session id the broker assigned. The
/// connection and the pending responses share it (one lock per Fetch, uncontended: a client
/// connection's requests and responses take turns).
#[derive(Clone, Default)]
pub struct FetchSessions(Arc<Mutex<Table>>);

impl FetchSessions {
    /// A connection's table, without sessions.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many sessions are established.
    pub fn established(&self) -> usize {
        self.lock().sessions()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock cannot leave the table inconsistent in a way that
        // grants more than was authorized: every entry was authorized when added.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for FetchSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `try_lock`: never wait on (or deadlock with) the holder just to print.
        let established = self.0.try_lock().ok().map(|t| t.sessions());
        f.debug_struct("FetchSessions")
            .field("established", &established)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(topic: &str, n: i32) -> Partitions {
        let mut p = Partitions::default();
        for i in 0..n {
            p.set(topic, i, Standing::Served);
        }
        p
    }

    #[test]
    fn metadata_follows_kafka() {
        assert_eq!(Metadata::of(0, -1), Metadata::Sessionless);
        assert_eq!(Metadata::of(5, -1), Metadata::Close(5));
        assert_eq!(Metadata::of(0, 0), Metadata::Open { replacing: None });
        assert_eq!(Metadata::of(5, 0), Metadata::Open { replacing: Some(5) });
        assert_eq!(
            Metadata::of(5, 3),
            Metadata::Incremental { id: 5, epoch: 3 }
        );
        assert_eq!(
            Metadata::of(0, 3),
            Metadata::Incremental { id: 0, epoch: 3 }
        );
        assert_eq!(
            Metadata::of(5, -7),
            Metadata::Incremental { id: 5, epoch: -7 }
        );
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(-1), -1);
    }

    #[test]
    fn a_session_exists_once_its_opening_is_answered() {
        let mut t = Table::default();
        let token = t.begin(parts("a", 2)).unwrap();
        assert_eq!(t.incremental(9, 1).unwrap_err(), SessionError::NotFound(9));
        assert!(t.established(token, 9));
        assert!(t.knows(9));
        assert_eq!(
            t.incremental(9, 2).unwrap_err(),
            SessionError::InvalidEpoch {
                id: 9,
                expected: 1,
                got: 2
            }
        );
        t.incremental(9, 1).unwrap();
        assert_eq!(t.session_mut(9).unwrap().partitions.len(), 2);
        assert_eq!(
            t.incremental(9, 1).unwrap_err().code(),
            INVALID_FETCH_SESSION_EPOCH
        );
        assert!(t.incremental(9, 2).is_ok());
        assert_eq!(SessionError::NotFound(1).code(), FETCH_SESSION_ID_NOT_FOUND);
        assert!(t.close(9));
        assert!(!t.close(9));
        assert!(!t.knows(9));
    }

    #[test]
    fn failed_or_sessionless_openings_make_no_session() {
        let mut t = Table::default();
        let token = t.begin(parts("a", 1)).unwrap();
        assert!(!t.established(token, NO_SESSION));
        assert_eq!(t.sessions(), 0);
        t.established(token, 4); // already settled
        assert_eq!(t.sessions(), 0);
        let token = t.begin(Partitions::default()).unwrap();
        assert!(
            t.established(token, 4),
            "the broker's id is tracked, even for an empty session"
        );
    }

    #[test]
    fn partitions_track_standing_and_weight() {
        let mut p = parts("abc", 3);
        p.set("abc", 1, Standing::Served);
        assert_eq!(p.weight(), (3, 3));
        assert_eq!(p.deny_topic("abc"), vec![0, 1, 2]);
        assert!(p.deny_topic("abc").is_empty());
        assert_eq!(p.denied(), vec![("abc".to_owned(), vec![0, 1, 2])]);
        assert!(!p.has_served());
        p.set("abc", 1, Standing::Served);
        assert!(p.has_served() && p.has_denied());
        p.remove("abc", 0);
        p.remove("abc", 2);
        p.remove("zz", 1);
        assert_eq!(p.weight(), (1, 3));
        assert!(p.contains("abc", 1));
        p.remove("abc", 1);
        assert_eq!(p.weight(), (0, 0));
        assert_eq!(p.topic_names().count(), 0);
    }

    #[test]
    fn memory_is_bounded() {
        let mut t = Table::default();
        assert!(t.begin(parts("a", MAX_PARTITIONS as i32 + 1)).is_none());
        let big = t.begin(parts("a", MAX_PARTITIONS as i32 - 10)).unwrap();
        t.established(big, 1);
        // A second big opening evicts the first session to make room.
        let next = t.begin(parts("b", MAX_PARTITIONS as i32 - 10)).unwrap();
        assert!(!t.knows(1));
        t.established(next, 2);
        assert!(t.knows(2));
        assert!(!t.make_room(2, (11, 0)));
        assert!(t.make_room(2, (10, 0)));
        for id in 10..30 {
            let token = t.begin(parts("c", 1)).unwrap();
            t.established(token, id);
        }
        assert!(t.sessions() <= MAX_SESSIONS);
        for _ in 0..30 {
            t.begin(parts("d", 1)).unwrap();
        }
        assert!(t.openings.len() <= MAX_OPENINGS);
        let mut long = Partitions::default();
        long.set(&"n".repeat(MAX_NAME_BYTES + 1), 0, Standing::Served);
        assert!(t.begin(long).is_none());
    }
}
