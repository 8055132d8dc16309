//! The plugin side of the host services: a [`HostServices`] backed by the host's versioned
//! [`AbiHostServices`] table. A service the host's table does not have (an older host) is a no-op.

use std::sync::Arc;

use super::codec;
use super::layout::{
    AbiBytes, AbiHostServices, LEVEL_DEBUG, LEVEL_ERROR, LEVEL_INFO, LEVEL_TRACE, LEVEL_WARN,
    METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM, SERVICES_SIZE,
};
use super::sink::Parts;
use crate::credentials::{
    CredentialView, ScramCredential, ScramMechanism, TokenCredential, TokenView,
};
use crate::host::{HostServices, Level, MetricKind};

/// The host's table, as much of it as both sides know.
#[derive(Clone, Copy)]
struct Table(AbiHostServices);

// SAFETY: the host promises its functions may be called from any thread with its context
// (`AbiHostServices` documents it), and the table itself is a copy that nothing mutates.
unsafe impl Send for Table {}
// SAFETY: as for `Send`.
unsafe impl Sync for Table {}

/// A table with no services: every function `None`.
const NONE: AbiHostServices = AbiHostServices {
    version: 0,
    size: 0,
    context: std::ptr::null(),
    log: None,
    log_enabled: None,
    now_ms: None,
    scram_credential: None,
    token: None,
    token_without_extension: None,
    publish_metric: None,
    span_enter: None,
    span_exit: None,
};

/// The host services behind `table`, copying only the prefix both this plugin and the host know.
///
/// # Safety
///
/// `table` is null or points to an [`AbiHostServices`] of at least its `size` (and at least 8)
/// readable bytes that stays valid, and whose functions may be called from any thread, for the
/// rest of the process.
pub(crate) unsafe fn import(table: *const AbiHostServices) -> Arc<dyn HostServices> {
    let mut copy = NONE;
    if !table.is_null() {
        // SAFETY: non-null and (caller) at least the 8-byte version/size prefix is readable.
        let size = unsafe { std::ptr::addr_of!((*table).size).read_unaligned() };
        let len = size.min(SERVICES_SIZE) as usize;
        // SAFETY: the host's table has `size` readable bytes, ours `SERVICES_SIZE`; `len` is the
        // smaller. Every bit pattern of the copied prefix is valid (integers, a raw pointer,
        // `Option`s of function pointers where null is `None`), and the rest keeps `NONE`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                table.cast::<u8>(),
                (&mut copy as *mut AbiHostServices).cast::<u8>(),
                len,
            );
        }
    }
    Arc::new(Imported(Arc::new(Table(copy))))
}

/// [`HostServices`] over the host's table.
struct Imported(Arc<Table>);

fn level_code(level: Level) -> u32 {
    match level {
        Level::Error => LEVEL_ERROR,
        Level::Warn => LEVEL_WARN,
        Level::Info => LEVEL_INFO,
        Level::Debug => LEVEL_DEBUG,
        Level::Trace => LEVEL_TRACE,
    }
}

impl HostServices for Imported {
    fn log(&self, level: Level, message: &str) {
        let table = &self.0 .0;
        if let Some(log) = table.log {
            // SAFETY: the host's function with its context; the message outlives the call.
            unsafe {
                log(
                    table.context,
                    level_code(level),
                    AbiBytes::from_text(message),
                )
            };
        }
    }

    fn log_enabled(&self, level: Level) -> bool {
        let table = &self.0 .0;
        match (table.log_enabled, table.log) {
            // SAFETY: the host's function with its context.
            (Some(enabled), _) => unsafe { enabled(table.context, level_code(level)) != 0 },
            (None, Some(_)) => true,
            (None, None) => false,
        }
    }

    fn now_ms(&self) -> i64 {
        let table = &self.0 .0;
        match table.now_ms {
            // SAFETY: the host's function with its context.
            Some(now) => unsafe { now(table.context) },
            None => 0,
        }
    }

    fn credentials(&self) -> Arc<dyn CredentialView> {
        Arc::new(ImportedCredentials(Arc::clone(&self.0)))
    }

    fn tokens(&self) -> Arc<dyn TokenView> {
        Arc::new(ImportedCredentials(Arc::clone(&self.0)))
    }

    fn publish_metric(&self, kind: MetricKind, name: &str, value: f64) {
        let table = &self.0 .0;
        let code = match kind {
            MetricKind::Counter => METRIC_COUNTER,
            MetricKind::Gauge => METRIC_GAUGE,
            MetricKind::Histogram => METRIC_HISTOGRAM,
        };
        if let Some(publish) = table.publish_metric {
            // SAFETY: the host's function with its context; the name outlives the call.
            unsafe { publish(table.context, code, AbiBytes::from_text(name), value) };
        }
    }

    fn span_enter(&self, name: &str) -> u64 {
        let table = &self.0 .0;
        match table.span_enter {
            // SAFETY: the host's function with its context; the name outlives the call.
            Some(enter) => unsafe { enter(table.context, AbiBytes::from_text(name)) },
            None => 0,
        }
    }

    fn span_exit(&self, handle: u64) {
        let table = &self.0 .0;
        if let Some(exit) = table.span_exit {
            // SAFETY: the host's function with its context.
            unsafe { exit(table.context, handle) };
        }
    }
}

/// The credential and token views over the host's table.
struct ImportedCredentials(Arc<Table>);

impl CredentialView for ImportedCredentials {
    fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        let table = &self.0 .0;
        let lookup = table.scram_credential?;
        let mut parts = Parts::new();
        let sink = parts.sink();
        // SAFETY: the host's function with its context; the name and the sink outlive the call.
        let found = unsafe {
            lookup(
                table.context,
                AbiBytes::from_text(user),
                codec::scram_code(mechanism),
                &sink,
            )
        };
        if found == 0 {
            return None;
        }
        codec::decode_scram_credential(&parts.value?).ok()
    }
}

impl TokenView for ImportedCredentials {
    fn token(&self, token_id: &str, mechanism: ScramMechanism) -> Option<TokenCredential> {
        let table = &self.0 .0;
        let lookup = table.token?;
        let mut parts = Parts::new();
        let sink = parts.sink();
        // SAFETY: as for `scram`.
        let found = unsafe {
            lookup(
                table.context,
                AbiBytes::from_text(token_id),
                codec::scram_code(mechanism),
                &sink,
            )
        };
        if found == 0 {
            return None;
        }
        codec::decode_token_credential(&parts.value?).ok()
    }

    fn accepts_token_without_extension(&self, name: &str) -> bool {
        let table = &self.0 .0;
        match table.token_without_extension {
            // SAFETY: the host's function with its context; the name outlives the call.
            Some(check) => unsafe { check(table.context, AbiBytes::from_text(name)) != 0 },
            None => false,
        }
    }
}
