//! The Portcullis host: configuration, plugin loading, Kafka listeners, the connection driver,
//! upstream forwarding and the CLI. Everything Kafka-specific that decides security lives in the
//! `portcullis` framework; this crate does the I/O around it.

pub mod append_queue;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod delegated_config;
pub mod node;
pub mod oauth;
pub mod oauth_login;
pub mod plugin_config;
pub mod plugin_loader;
pub mod reload;
pub mod server;
pub mod services;
pub mod store_writer;
pub mod telemetry;
pub mod tls_peer;
pub mod views;
pub mod wasm_plugins;
