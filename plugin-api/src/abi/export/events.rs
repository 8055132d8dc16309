//! Event subscribers: a panic loses that event (the host counts it); the next one is delivered.
//! An event kind this copy of the API does not know (a newer host) is skipped.

use std::ffi::c_void;

use super::super::codec::{self, CodecError};
use super::super::layout::{
    AbiBytes, AbiHostServices, AbiSink, EventSubscriberTable, PluginExport, PluginKind,
    STATUS_ERROR, STATUS_OK, STATUS_PANICKED,
};
use super::{contain, export, instance};
use crate::events::EventSubscriber;
use crate::host::Host;
use crate::plugin::Plugin;

/// Plugin `T`'s export entry.
pub const fn entry<T: Plugin + EventSubscriber>() -> PluginExport {
    export::<T>(
        PluginKind::EventSubscriber,
        (Tables::<T>::TABLE as *const EventSubscriberTable).cast::<c_void>(),
    )
}

struct Tables<T>(std::marker::PhantomData<T>);

impl<T: Plugin + EventSubscriber> Tables<T> {
    const TABLE: &'static EventSubscriberTable = &EventSubscriberTable {
        table_size: super::super::layout::table_size(PluginKind::EventSubscriber),
        create: Some(create::<T>),
        on_event: Some(on_event::<T>),
    };
}

unsafe extern "C" fn create<T: Plugin + EventSubscriber>(
    config: AbiBytes,
    services: *const AbiHostServices,
    out: *mut *const c_void,
    error: *const AbiSink,
) -> u32 {
    // SAFETY: the ABI's `create` arguments, forwarded.
    unsafe { super::create::<T, T>(config, services, out, error, |plugin, _host: Host| plugin) }
}

unsafe extern "C" fn on_event<T: Plugin + EventSubscriber>(
    instance_ptr: *const c_void,
    event: AbiBytes,
) -> u32 {
    contain(
        || {
            // SAFETY: what `create::<T>` returned, or null.
            let Some(subscriber) = (unsafe { instance::<T>(instance_ptr) }) else {
                return STATUS_ERROR;
            };
            // SAFETY: the host lends the event's bytes for the call.
            let Some(bytes) = (unsafe { event.as_slice() }) else {
                return STATUS_ERROR;
            };
            match codec::decode_event(bytes) {
                Ok(event) => {
                    subscriber.on_event(&event);
                    STATUS_OK
                }
                Err(CodecError::UnknownCode(_)) => STATUS_OK,
                Err(_) => STATUS_ERROR,
            }
        },
        |_| STATUS_PANICKED,
    )
}
