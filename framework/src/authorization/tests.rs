//! Cross-API tests: the mapping covers every forwarded key; malformed bodies close.
