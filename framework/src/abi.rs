//! The dynamic plugin ABI (see docs/plugins.md). Filled in by the plugin-ABI work.
