//! The C layout of event subscriber plugins: the function that receives an encoded event and
//! the subscriber's table.

use std::ffi::c_void;

use super::common::AbiBytes;
use super::declaration::CreateFn;
#[cfg(doc)]
use super::declaration::PluginKind;

/// Hands one encoded event (`codec::encode_event`, borrowed for the call) to the subscriber;
/// returns a `STATUS_*`.
pub type OnEventFn = unsafe extern "C" fn(instance: *const c_void, event: AbiBytes) -> u32;

/// The functions of a [`PluginKind::EventSubscriber`] plugin.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct EventSubscriberTable {
    /// `size_of::<EventSubscriberTable>()` in the plugin's copy of the API.
    pub table_size: u32,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// See [`OnEventFn`].
    pub on_event: Option<OnEventFn>,
}
