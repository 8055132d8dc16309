//! Loading a corpus into an [`AclAuthorizer`] for the benchmark and the decision dump.
#![allow(dead_code)]

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::{Arc, Mutex};

use portcullis::authorizer::{Action, Authorizer, Decision, RequestContext};
use portcullis::store::{MetadataRecord, MetadataStore, Offset, StoreError};
use portcullis_plugin_acl::corpus::{self, Case, CaseKind};
use portcullis_plugin_acl::{AclAuthorizer, AclAuthorizerConfig};

/// Hands the corpus to the authorizer's replay once, without keeping a second copy of a
/// 12-million-ACL log in memory; appends are discarded. Benchmarks only: a node uses the
/// durable FileMetadataStore.
pub struct OneShotStore(Mutex<Vec<MetadataRecord>>);

impl MetadataStore for OneShotStore {
    fn append(&self, _records: &[MetadataRecord]) -> Result<Offset, StoreError> {
        Ok(0)
    }
    fn snapshot(&self) -> Result<Vec<MetadataRecord>, StoreError> {
        Ok(std::mem::take(
            &mut *self.0.lock().unwrap_or_else(|p| p.into_inner()),
        ))
    }
}

/// The authorizer loaded with the corpus at `path`, and the corpus's cases.
pub fn load(path: &Path) -> (AclAuthorizer, Vec<Case>) {
    let file = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let corpus = corpus::read(BufReader::with_capacity(1 << 20, file))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let records = corpus
        .acls
        .into_iter()
        .map(|binding| MetadataRecord::Acl { binding })
        .collect();
    let store = Arc::new(OneShotStore(Mutex::new(records)));
    let authorizer = AclAuthorizer::open(&AclAuthorizerConfig::default(), store)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (authorizer, corpus.cases)
}

pub fn context(case: &Case) -> RequestContext<'_> {
    RequestContext::new(case.principal.clone(), case.host, "PLAIN", 0, 9, 1)
}

pub fn action(case: &Case) -> Option<Action<'_>> {
    match &case.kind {
        CaseKind::Authorize {
            operation,
            resource_type,
            name,
        } => Some(Action::new(*operation, *resource_type, name.as_str())),
        CaseKind::ByResourceType { .. } => None,
    }
}

/// The decision for a case, through the plugin API.
pub fn decide(authorizer: &AclAuthorizer, case: &Case) -> Decision {
    let ctx = context(case);
    match &case.kind {
        CaseKind::Authorize { .. } => {
            let action = action(case).expect("an authorize case");
            authorizer.authorize(&ctx, &[action])[0].decision
        }
        CaseKind::ByResourceType {
            operation,
            resource_type,
        } => authorizer.authorize_by_resource_type(&ctx, *operation, *resource_type),
    }
}
