//! portcullis-plugin-login
