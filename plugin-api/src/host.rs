//! The services the host hands every plugin: logging through the host's own logger (with the
//! plugin's name), read-only views of SCRAM credentials and delegation tokens, the time, and
//! metrics publication.
//!
//! Built-in plugins get a [`Host`] backed by the host itself; a dynamic plugin gets one backed
//! by the versioned services table of the C ABI ([`crate::abi::AbiHostServices`]). A plugin
//! cannot tell them apart. Services a host does not offer (an older host, an older table)
//! degrade to no-ops: nothing is logged, no credential is found, metrics go nowhere.

use std::fmt;
use std::sync::Arc;

use crate::credentials::{CredentialView, NoCredentials, NoTokens, TokenView};

/// A log level; a host maps it onto its logger's levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Level {
    /// Something failed.
    Error,
    /// Something is wrong but the plugin carries on.
    Warn,
    /// A notable event.
    Info,
    /// Detail for whoever debugs the plugin.
    Debug,
    /// Even more detail.
    Trace,
}

/// How a published metric value is to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MetricKind {
    /// A monotonic count: the value is added.
    Counter,
    /// A current value: the value replaces the previous one.
    Gauge,
    /// One observation of a distribution (a latency, a size).
    Histogram,
}

/// What a host provides to its plugins. Plugins use it through [`Host`].
pub trait HostServices: Send + Sync {
    /// Logs `message` at `level`, attributed to the plugin.
    fn log(&self, level: Level, message: &str);
    /// Whether a message at `level` would be logged (so a plugin skips formatting it otherwise).
    fn log_enabled(&self, level: Level) -> bool {
        let _ = level;
        true
    }
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// The SCRAM credentials of every user (read-only, answered from memory).
    fn credentials(&self) -> Arc<dyn CredentialView>;
    /// The delegation tokens (read-only, answered from memory).
    fn tokens(&self) -> Arc<dyn TokenView>;
    /// Publishes a metric value under the plugin's name.
    fn publish_metric(&self, kind: MetricKind, name: &str, value: f64);
    /// Opens a span `name` under the host's current span (the request, the authorization, the
    /// SASL exchange the plugin was called for) and makes it current on this thread; returns its
    /// handle, 0 when the host traces nothing. Plugins use [`Host::span`].
    fn span_enter(&self, name: &str) -> u64 {
        let _ = name;
        0
    }
    /// Closes the span `handle` (and any span opened inside it and left open).
    fn span_exit(&self, handle: u64) {
        let _ = handle;
    }
}

/// A span a plugin opened with [`Host::span`]: current on this thread until dropped, so the
/// plugin's log lines and any span it opens inside belong to it. Not `Send`: a span is entered
/// on one thread and must be left there.
#[must_use = "the span closes when this is dropped"]
pub struct PluginSpan {
    services: Arc<dyn HostServices>,
    handle: u64,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl fmt::Debug for PluginSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginSpan")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl Drop for PluginSpan {
    fn drop(&mut self) {
        if self.handle != 0 {
            self.services.span_exit(self.handle);
        }
    }
}

/// The host, as a plugin sees it. Cheap to clone; keep one if the plugin needs services after
/// [`crate::Plugin::new`].
#[derive(Clone)]
pub struct Host {
    services: Arc<dyn HostServices>,
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

impl Host {
    /// A host backed by `services`.
    pub fn new(services: Arc<dyn HostServices>) -> Self {
        Self { services }
    }

    /// A host that offers nothing: logs go nowhere, no credential or token exists, the clock
    /// reads 0. For unit tests of a plugin.
    pub fn detached() -> Self {
        Self::with_views(Arc::new(NoCredentials), Arc::new(NoTokens))
    }

    /// A host that offers these credential and token views and nothing else (logs go nowhere,
    /// the clock reads 0). For unit tests of a plugin, and tools.
    pub fn with_views(credentials: Arc<dyn CredentialView>, tokens: Arc<dyn TokenView>) -> Self {
        Self::new(Arc::new(Detached {
            credentials,
            tokens,
        }))
    }

    /// Logs a message at `level` (formatted only if the host would log it).
    pub fn log(&self, level: Level, message: fmt::Arguments<'_>) {
        if self.services.log_enabled(level) {
            match message.as_str() {
                Some(text) => self.services.log(level, text),
                None => self.services.log(level, &message.to_string()),
            }
        }
    }
    /// Logs at [`Level::Error`].
    pub fn error(&self, message: impl fmt::Display) {
        self.log(Level::Error, format_args!("{message}"));
    }
    /// Logs at [`Level::Warn`].
    pub fn warn(&self, message: impl fmt::Display) {
        self.log(Level::Warn, format_args!("{message}"));
    }
    /// Logs at [`Level::Info`].
    pub fn info(&self, message: impl fmt::Display) {
        self.log(Level::Info, format_args!("{message}"));
    }
    /// Logs at [`Level::Debug`].
    pub fn debug(&self, message: impl fmt::Display) {
        self.log(Level::Debug, format_args!("{message}"));
    }
    /// Milliseconds since the Unix epoch, from the host's clock.
    pub fn now_ms(&self) -> i64 {
        self.services.now_ms()
    }
    /// The SCRAM credential view.
    pub fn credentials(&self) -> Arc<dyn CredentialView> {
        self.services.credentials()
    }
    /// The delegation token view.
    pub fn tokens(&self) -> Arc<dyn TokenView> {
        self.services.tokens()
    }
    /// Adds `increment` to the counter `name`.
    pub fn counter(&self, name: &str, increment: u64) {
        self.services
            .publish_metric(MetricKind::Counter, name, increment as f64);
    }
    /// Sets the gauge `name`.
    pub fn gauge(&self, name: &str, value: f64) {
        self.services.publish_metric(MetricKind::Gauge, name, value);
    }
    /// Records one observation of the histogram `name`.
    pub fn histogram(&self, name: &str, value: f64) {
        self.services
            .publish_metric(MetricKind::Histogram, name, value);
    }
    /// Opens a span `name` under the host's current span; it stays current on this thread until
    /// the returned guard is dropped. Without a tracing host this costs one call and nothing is
    /// recorded. Never put a secret in a span's name.
    pub fn span(&self, name: &str) -> PluginSpan {
        PluginSpan {
            services: Arc::clone(&self.services),
            handle: self.services.span_enter(name),
            _not_send: std::marker::PhantomData,
        }
    }
    /// The services behind this handle.
    pub fn services(&self) -> &Arc<dyn HostServices> {
        &self.services
    }
}

/// The services of [`Host::detached`] and [`Host::with_views`].
struct Detached {
    credentials: Arc<dyn CredentialView>,
    tokens: Arc<dyn TokenView>,
}

impl HostServices for Detached {
    fn log(&self, _level: Level, _message: &str) {}
    fn log_enabled(&self, _level: Level) -> bool {
        false
    }
    fn now_ms(&self) -> i64 {
        0
    }
    fn credentials(&self) -> Arc<dyn CredentialView> {
        Arc::clone(&self.credentials)
    }
    fn tokens(&self) -> Arc<dyn TokenView> {
        Arc::clone(&self.tokens)
    }
    fn publish_metric(&self, _kind: MetricKind, _name: &str, _value: f64) {}
}
