//! Read-only credential views that mechanisms use during an exchange (from the plugin API), and
//! the in-memory view the host keeps up to date from the metadata store.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;

pub use portcullis_plugin_api::credentials::*;

/// The credentials of every user, swapped atomically when the metadata store changes. Readers
/// never wait for writers.
#[derive(Default)]
pub struct InMemoryCredentials {
    users: ArcSwap<HashMap<(String, ScramMechanism), ScramCredential>>,
}

impl InMemoryCredentials {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }
    /// Replaces every credential at once.
    pub fn replace_all(&self, users: HashMap<(String, ScramMechanism), ScramCredential>) {
        self.users.store(Arc::new(users));
    }
    /// Adds or replaces one credential.
    pub fn upsert(&self, user: &str, mechanism: ScramMechanism, credential: ScramCredential) {
        self.users.rcu(|current| {
            let mut next = HashMap::clone(current);
            next.insert((user.to_owned(), mechanism), credential.clone());
            next
        });
    }
    /// Changes many credentials in one swap: `change` edits a copy of the map. Use it for batches
    /// (one copy per batch instead of one per credential).
    pub fn update(&self, change: impl Fn(&mut HashMap<(String, ScramMechanism), ScramCredential>)) {
        self.users.rcu(|current| {
            let mut next = HashMap::clone(current);
            change(&mut next);
            next
        });
    }
    /// Removes one credential; returns whether it existed.
    pub fn remove(&self, user: &str, mechanism: ScramMechanism) -> bool {
        let mut existed = false;
        self.users.rcu(|current| {
            let mut next = HashMap::clone(current);
            existed = next.remove(&(user.to_owned(), mechanism)).is_some();
            next
        });
        existed
    }
    /// Every (user, mechanism) pair with a credential.
    pub fn users(&self) -> Vec<(String, ScramMechanism, u32)> {
        self.users
            .load()
            .iter()
            .map(|((u, m), c)| (u.clone(), *m, c.iterations))
            .collect()
    }
}

impl CredentialView for InMemoryCredentials {
    fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        self.users
            .load()
            .get(&(user.to_owned(), mechanism))
            .cloned()
    }
}

impl fmt::Debug for InMemoryCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryCredentials")
            .field("entries", &self.users.load().len())
            .finish()
    }
}
