//! portcullis-plugin-plain
