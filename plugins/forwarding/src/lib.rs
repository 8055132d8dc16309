//! portcullis-plugin-forwarding
