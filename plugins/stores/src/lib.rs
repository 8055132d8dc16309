//! portcullis-plugin-stores
