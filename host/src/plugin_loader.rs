//! plugin_loader
