//! A dynamic event subscriber as an [`EventSubscriber`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use portcullis_plugin_api::abi::codec;

use super::super::tables::EventFunctions;
use super::super::{AbiBytes, STATUS_OK};
use super::Instance;
use crate::events::{Event, EventSubscriber};

/// An event subscriber provided by a dynamic plugin.
pub struct DynamicSubscriber {
    plugin: Arc<str>,
    functions: EventFunctions,
    instance: Instance,
    /// Events the plugin failed on (a panic, a broken answer).
    failures: AtomicU64,
}

impl std::fmt::Debug for DynamicSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicSubscriber")
            .field("plugin", &self.plugin)
            .finish_non_exhaustive()
    }
}

impl DynamicSubscriber {
    /// Wraps an instance.
    ///
    /// # Safety
    ///
    /// `functions` come from a validated table of a library that is never unloaded, and
    /// `instance` is what its `create` returned.
    pub(crate) unsafe fn new(
        plugin: Arc<str>,
        functions: EventFunctions,
        instance: Instance,
    ) -> Self {
        Self {
            plugin,
            functions,
            instance,
            failures: AtomicU64::new(0),
        }
    }

    /// How many events the plugin failed on.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

impl EventSubscriber for DynamicSubscriber {
    fn on_event(&self, event: &Event) {
        let encoded = codec::encode_event(event);
        // SAFETY: a validated function, our instance, and bytes that outlive the call.
        let status = unsafe {
            (self.functions.on_event)(self.instance.as_ptr(), AbiBytes::from_slice(&encoded))
        };
        if status != STATUS_OK {
            let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(plugin = %self.plugin, status, failures, kind = event.kind(), "event subscriber plugin failed on an event");
        }
    }
}
