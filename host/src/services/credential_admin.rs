//! SCRAM credential admin (KIP-554) over the metadata store: changes become records.

use std::sync::Arc;

use portcullis::credentials::{CredentialView, InMemoryCredentials, ScramMechanism};
use portcullis::local::scram_credentials::{CredentialAdmin, CredentialChange};
use portcullis::store::MetadataRecord;
use portcullis_plugin_scram::credential_from_salted_password;

/// KIP-554 changes turned into metadata records. The handler persists them through the store
/// writer; the node's view of the log (see `node/mod.rs`) updates the in-memory credentials and
/// publishes `CredentialChanged`, which revokes the sessions that used a changed credential.
pub struct StoreCredentialAdmin {
    credentials: Arc<InMemoryCredentials>,
}

impl StoreCredentialAdmin {
    /// Creates the admin service over the node's credential view.
    pub fn new(credentials: Arc<InMemoryCredentials>) -> Self {
        Self { credentials }
    }
}

impl CredentialAdmin for StoreCredentialAdmin {
    fn list(&self) -> Vec<(String, ScramMechanism, u32)> {
        let mut users = self.credentials.users();
        users.sort();
        users
    }

    fn records(&self, changes: &[CredentialChange]) -> Vec<MetadataRecord> {
        changes
            .iter()
            .filter_map(|change| match change {
                CredentialChange::Upsert {
                    user,
                    mechanism,
                    iterations,
                    salt,
                    salted_password,
                } => {
                    let credential = credential_from_salted_password(
                        *mechanism,
                        salted_password,
                        salt,
                        *iterations,
                    );
                    // The same credential again (a request retried after its first answer was
                    // lost, e.g. by a forwarding node whose writer died) changes nothing: no
                    // record, so that a mutation is never applied twice.
                    let unchanged = self
                        .credentials
                        .scram(user, *mechanism)
                        .is_some_and(|current| current == credential);
                    (!unchanged).then(|| MetadataRecord::ScramCredential {
                        user: user.clone(),
                        mechanism: *mechanism,
                        credential,
                    })
                }
                CredentialChange::Delete { user, mechanism } => {
                    Some(MetadataRecord::RemoveScramCredential {
                        user: user.clone(),
                        mechanism: *mechanism,
                    })
                }
                _ => None,
            })
            .collect()
    }
}
