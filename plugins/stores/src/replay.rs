//! Replaying the metadata log into the in-memory credential view that SASL mechanisms read.

use std::collections::HashMap;

use portcullis::credentials::{InMemoryCredentials, ScramCredential, ScramMechanism};
use portcullis::store::{MetadataRecord, MetadataStore, StoreError};

/// What one record means for the credential view.
enum CredentialChange<'a> {
    Set {
        user: &'a str,
        mechanism: ScramMechanism,
        credential: &'a ScramCredential,
    },
    Remove {
        user: &'a str,
        mechanism: ScramMechanism,
    },
    /// Not a credential record (record kinds added later, such as ACLs and tokens).
    None,
}

impl<'a> CredentialChange<'a> {
    fn of(record: &'a MetadataRecord) -> Self {
        match record {
            MetadataRecord::ScramCredential {
                user,
                mechanism,
                credential,
            } => CredentialChange::Set {
                user,
                mechanism: *mechanism,
                credential,
            },
            MetadataRecord::RemoveScramCredential { user, mechanism } => CredentialChange::Remove {
                user,
                mechanism: *mechanism,
            },
            _ => CredentialChange::None,
        }
    }
}

/// Applies one record to `creds`: a SCRAM credential record adds or replaces the user's
/// credential for that mechanism, a removal deletes it, and other records are ignored.
///
/// Feed it from a [`MetadataStore::subscribe`] subscription to keep a view current.
pub fn apply_record(creds: &InMemoryCredentials, record: &MetadataRecord) {
    match CredentialChange::of(record) {
        CredentialChange::Set {
            user,
            mechanism,
            credential,
        } => creds.upsert(user, mechanism, credential.clone()),
        CredentialChange::Remove { user, mechanism } => {
            creds.remove(user, mechanism);
        }
        CredentialChange::None => {}
    }
}

/// Applies a batch of records to `creds` in one swap (what a subscription should call: applying
/// record by record copies the whole view once per record).
pub fn apply_records<'a>(
    creds: &InMemoryCredentials,
    records: impl IntoIterator<Item = &'a MetadataRecord> + Clone,
) {
    let touches = records
        .clone()
        .into_iter()
        .any(|r| !matches!(CredentialChange::of(r), CredentialChange::None));
    if !touches {
        return;
    }
    creds.update(|users| {
        for record in records.clone() {
            match CredentialChange::of(record) {
                CredentialChange::Set {
                    user,
                    mechanism,
                    credential,
                } => {
                    users.insert((user.to_owned(), mechanism), credential.clone());
                }
                CredentialChange::Remove { user, mechanism } => {
                    users.remove(&(user.to_owned(), mechanism));
                }
                CredentialChange::None => {}
            }
        }
    });
}

/// Replays every record of `store` and replaces the contents of `creds` with the result, in one
/// atomic swap: readers see either the old view or the complete new one, and credentials that
/// are not in the log do not survive. Returns the number of records replayed.
///
/// # Errors
/// Whatever [`MetadataStore::snapshot`] returns.
pub fn load_credentials(
    store: &dyn MetadataStore,
    creds: &InMemoryCredentials,
) -> Result<usize, StoreError> {
    let records = store.snapshot()?;
    creds.replace_all(credentials_from(&records));
    Ok(records.len())
}

/// The credentials a sequence of records leaves in place (for example those of
/// [`FileMetadataStore::read_only`](crate::FileMetadataStore::read_only)).
pub fn credentials_from<'a>(
    records: impl IntoIterator<Item = &'a MetadataRecord>,
) -> HashMap<(String, ScramMechanism), ScramCredential> {
    let mut users = HashMap::new();
    for record in records {
        match CredentialChange::of(record) {
            CredentialChange::Set {
                user,
                mechanism,
                credential,
            } => {
                users.insert((user.to_owned(), mechanism), credential.clone());
            }
            CredentialChange::Remove { user, mechanism } => {
                users.remove(&(user.to_owned(), mechanism));
            }
            CredentialChange::None => {}
        }
    }
    users
}
