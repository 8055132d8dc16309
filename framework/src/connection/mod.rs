//! The sans-I/O connection state machine.
