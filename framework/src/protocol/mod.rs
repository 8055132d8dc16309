//! Kafka wire handling for the security layer.
