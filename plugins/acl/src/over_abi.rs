//! The `acl` authorizer as a plugin of the C ABI: what the property test
//! (`tests/abi.rs`, decisions through the ABI identical to the linked authorizer's) and the
//! benchmark (`benches/abi.rs`, the cost of the crossing) run. The node itself links the authorizer
//! (it needs the node's metadata store, which a dynamic plugin never gets); here the ACLs come
//! from the plugin's configuration and live in a store in memory.

use std::sync::Arc;

use portcullis::acl::{AclBinding, AclOperation, ResourceType};
use portcullis::authorizer::{
    AclAdmin, Action, Authorization, Authorizer, Decision, RequestContext,
};
use portcullis::store::memory::MemoryStore;
use portcullis::store::{MetadataRecord, MetadataStore};
use portcullis::{Host, Plugin, PluginError};

use crate::{AclAuthorizer, AclAuthorizerConfig};

/// The configuration: `[authorizer]`'s settings and the ACLs to start with.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverAbiConfig {
    /// Kafka's `super.users`.
    #[serde(default)]
    pub super_users: Vec<String>,
    /// Kafka's `allow.everyone.if.no.acl.found`.
    #[serde(default)]
    pub allow_everyone_if_no_acl_found: bool,
    /// The ACLs.
    #[serde(default)]
    pub acls: Vec<AclBinding>,
}

/// [`AclAuthorizer`] with a [`Plugin`] constructor.
pub struct AclOverAbi(AclAuthorizer);

impl Plugin for AclOverAbi {
    const NAME: &'static str = "acl-over-abi";
    type Config = OverAbiConfig;

    fn new(config: OverAbiConfig, _host: &Host) -> Result<Self, PluginError> {
        let store = Arc::new(MemoryStore::new());
        let records: Vec<MetadataRecord> = config
            .acls
            .into_iter()
            .map(|binding| MetadataRecord::Acl { binding })
            .collect();
        store.append(&records).map_err(PluginError::startup)?;
        let settings =
            AclAuthorizerConfig::new(config.super_users, config.allow_everyone_if_no_acl_found);
        let authorizer = AclAuthorizer::open(&settings, store).map_err(PluginError::startup)?;
        Ok(Self(authorizer))
    }
}

impl Authorizer for AclOverAbi {
    fn authorize(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
    ) -> Vec<Authorization> {
        self.0.authorize(context, actions)
    }
    fn authorize_each(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
        decided: &mut dyn FnMut(usize, Authorization),
    ) {
        self.0.authorize_each(context, actions, decided);
    }
    fn authorize_by_resource_type(
        &self,
        context: &RequestContext<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> Decision {
        self.0
            .authorize_by_resource_type(context, operation, resource_type)
    }
    fn acl_admin(&self) -> Option<&dyn AclAdmin> {
        self.0.acl_admin()
    }
}
