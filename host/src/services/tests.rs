use std::net::IpAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use portcullis::events::Event;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use portcullis::credentials::{InMemoryCredentials, ScramMechanism};
use portcullis::events::{EventBus, EventSubscriber};
use portcullis::local::scram_credentials::{CredentialAdmin, CredentialChange};
use portcullis::store::MetadataRecord;

use super::*;

fn event(i: u8) -> Event {
    Event::AuthenticationFailed {
        mechanism: None,
        client_address: IpAddr::from([10, 0, 0, i]),
        reason: "x".into(),
    }
}

/// Blocks in its first `on_event` until released, then records what it gets.
struct Slow {
    entered: Mutex<mpsc::Sender<()>>,
    release: Mutex<mpsc::Receiver<()>>,
    seen: Mutex<Vec<Event>>,
}

impl EventSubscriber for Slow {
    fn on_event(&self, event: &Event) {
        let first = self.seen.lock().unwrap().is_empty();
        if first {
            let _ = self.entered.lock().unwrap().send(());
            let _ = self.release.lock().unwrap().recv();
        }
        self.seen.lock().unwrap().push(event.clone());
    }
}

#[test]
fn a_slow_subscriber_loses_events_and_counts_them_but_never_blocks_publishing() {
    let bus = EventBus::new();
    let stats = PluginStats::default();
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let slow = Arc::new(Slow {
        entered: Mutex::new(entered_tx),
        release: Mutex::new(release_rx),
        seen: Mutex::new(Vec::new()),
    });
    let counts = spawn_subscriber("slow", slow.clone(), &bus, 4, &stats).unwrap();
    bus.publish(event(0));
    entered
        .recv_timeout(Duration::from_secs(30))
        .expect("the subscriber got the first event");
    // The subscriber is stuck: if publishing waited for it, this loop would never end.
    for i in 1..=200 {
        bus.publish(event(i));
    }
    assert_eq!(
        counts.stats.dropped.load(Ordering::Relaxed),
        196,
        "4 fit in its queue"
    );
    release.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while counts.stats.delivered.load(Ordering::Relaxed) < 5 {
        assert!(
            Instant::now() < deadline,
            "the queued events were not delivered"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let seen = slow.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        (0..=4).map(event).collect::<Vec<_>>(),
        "in order, the first ones"
    );
    let json = stats.subscribers_json();
    assert_eq!(json["slow"]["dropped"], 196);
    assert_eq!(json["slow"]["delivered"], 5);
}

/// A subscriber that panics on every event keeps being delivered to (a built-in one: the
/// thread catches it; a dynamic one's panic is caught by the ABI already).
#[test]
fn a_panicking_subscriber_keeps_its_thread() {
    struct Panics;
    impl EventSubscriber for Panics {
        fn on_event(&self, _: &Event) {
            std::panic::panic_any("test: a subscriber panics");
        }
    }
    let bus = EventBus::new();
    let stats = PluginStats::default();
    let counts = spawn_subscriber("panics", Arc::new(Panics), &bus, 16, &stats).unwrap();
    for i in 0..3 {
        bus.publish(event(i));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while counts.stats.delivered.load(Ordering::Relaxed) < 3 {
        assert!(Instant::now() < deadline, "delivery stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(counts.stats.failed.load(Ordering::Relaxed), 3);
}

#[test]
fn plugin_metrics_are_kept_per_plugin() {
    let context = HostContext::offline();
    let host = context.host_for("p");
    host.counter("requests", 2);
    host.counter("requests", 3);
    host.gauge("level", 7.0);
    host.gauge("level", 4.0);
    host.histogram("latency", 1.5);
    host.histogram("latency", 2.5);
    let stats = context.stats();
    assert_eq!(stats.metric("p", "requests"), Some(5.0));
    assert_eq!(stats.metric("p", "level"), Some(4.0));
    let json = stats.metrics_json();
    assert_eq!(json["p"]["latency"]["count"], 2);
    assert_eq!(json["p"]["latency"]["sum"], 4.0);
    assert_eq!(stats.metric("other", "requests"), None);
}

/// An upsert of the credential a user already has writes nothing: a request retried after
/// its answer was lost (a forwarding node whose writer died) is not applied twice.
#[test]
fn an_unchanged_credential_needs_no_record() {
    let credentials = Arc::new(InMemoryCredentials::new());
    let admin = StoreCredentialAdmin::new(Arc::clone(&credentials));
    let upsert = |salt: &[u8]| CredentialChange::Upsert {
        user: "alice".into(),
        mechanism: ScramMechanism::Sha256,
        iterations: 4096,
        salt: salt.to_vec(),
        salted_password: vec![7; 32],
    };
    let records = admin.records(&[upsert(b"salt-1")]);
    assert_eq!(records.len(), 1);
    if let MetadataRecord::ScramCredential { credential, .. } = &records[0] {
        credentials.upsert("alice", ScramMechanism::Sha256, credential.clone());
    }
    assert!(admin.records(&[upsert(b"salt-1")]).is_empty());
    assert_eq!(admin.records(&[upsert(b"salt-2")]).len(), 1);
}

/// Records every event it gets.
#[derive(Default)]
struct Records(Mutex<Vec<Event>>);

impl EventSubscriber for Records {
    fn on_event(&self, event: &Event) {
        self.0.lock().unwrap().push(event.clone());
    }
}

fn wait_for_count(records: &Records, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while records.0.lock().unwrap().len() < n {
        assert!(Instant::now() < deadline, "not delivered");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn replacing_subscribers_hands_each_event_to_the_old_set_or_the_new_one() {
    let bus = EventBus::new();
    let stats = PluginStats::default();
    let old = Arc::new(Records::default());
    let running = spawn_subscriber("old", old.clone(), &bus, 64, &stats).unwrap();
    for i in 0..3 {
        bus.publish(event(i));
    }
    let new = Arc::new(Records::default());
    let started = replace_subscribers(
        &bus,
        &[running],
        vec![(
            "new".to_owned(),
            new.clone() as Arc<dyn EventSubscriber>,
            64,
        )],
        &stats,
    )
    .unwrap();
    for i in 3..5 {
        bus.publish(event(i));
    }
    wait_for_count(&old, 3);
    wait_for_count(&new, 2);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        *old.0.lock().unwrap(),
        (0..3).map(event).collect::<Vec<_>>()
    );
    assert_eq!(
        *new.0.lock().unwrap(),
        (3..5).map(event).collect::<Vec<_>>()
    );
    let names: Vec<String> = stats.subscribers().into_iter().map(|s| s.plugin).collect();
    assert_eq!(names, ["new"]);
    assert_eq!(started.len(), 1);
}
