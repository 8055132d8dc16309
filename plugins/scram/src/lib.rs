//! portcullis-plugin-scram
