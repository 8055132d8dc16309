//! A principal builder as a sandboxed component: the client certificate's CN (when the client
//! sent a certificate and `certificate_cn` is set) or else the SASL name becomes `User:<name>`,
//! lower- or upper-cased; a name in `refuse` gets no principal, which fails its authentication
//! (Kafka's "No rules apply").
//!
//! ```toml
//! [principal]
//! plugin = "principal-mapping"      # the file principal-mapping.wasm
//!
//! [plugins.config.principal-mapping]
//! case = "upper"                    # "lower", "upper" or "keep" (the default)
//! certificate_cn = true             # the default: false
//! refuse = ["mallory"]              # the default: none
//! ```
use std::sync::OnceLock;

use exports::portcullis::plugin::principal_builder::{AuthenticationContext, BuildError, Guest};
use portcullis::plugin::types::Principal;

wit_bindgen::generate!({ path: "../../../plugins/wasm/wit", world: "principal-builder-plugin" });

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    case: Option<String>,
    certificate_cn: Option<bool>,
    #[serde(default)]
    refuse: Vec<String>,
}

enum Case {
    Keep,
    Lower,
    Upper,
}

struct Rules {
    case: Case,
    certificate_cn: bool,
    refuse: Vec<String>,
}

/// Set by `init`, once per instance (the host calls it before anything else).
static RULES: OnceLock<Rules> = OnceLock::new();

/// The CN of an RFC 2253 subject (`CN=svc,OU=apps,O=example`), if it has one.
fn common_name(subject: &str) -> Option<&str> {
    subject
        .split(',')
        .find_map(|part| part.trim().strip_prefix("CN="))
}

struct Mapping;

impl Guest for Mapping {
    fn init(config: String) -> Result<(), String> {
        let config: Config = toml::from_str(&config).map_err(|e| e.message().to_owned())?;
        let case = match config.case.as_deref() {
            None | Some("keep") => Case::Keep,
            Some("lower") => Case::Lower,
            Some("upper") => Case::Upper,
            Some(other) => return Err(format!("case: {other:?} is not lower, upper or keep")),
        };
        let rules = Rules {
            case,
            certificate_cn: config.certificate_cn.unwrap_or(false),
            refuse: config.refuse,
        };
        RULES.set(rules).map_err(|_| "init called twice".to_owned())
    }

    fn build(context: AuthenticationContext) -> Result<Principal, BuildError> {
        let rules = RULES
            .get()
            .ok_or_else(|| BuildError::Unavailable("not initialised".into()))?;
        let from_certificate = context
            .certificate_subject
            .as_deref()
            .filter(|_| rules.certificate_cn)
            .and_then(common_name);
        let name = from_certificate
            .or(context.authorization_id.as_deref())
            .ok_or_else(|| {
                BuildError::Unavailable("neither a SASL name nor a certificate".into())
            })?;
        if rules.refuse.iter().any(|refused| refused == name) {
            return Err(BuildError::NoRuleApplies(name.to_owned()));
        }
        let name = match rules.case {
            Case::Keep => name.to_owned(),
            Case::Lower => name.to_lowercase(),
            Case::Upper => name.to_uppercase(),
        };
        Ok(Principal {
            kind: "User".to_owned(),
            name,
        })
    }
}

export!(Mapping);
