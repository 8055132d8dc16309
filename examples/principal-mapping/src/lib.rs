//! A principal builder with Kafka's `ssl.principal.mapping.rules` shape: the client certificate's
//! subject (on a TLS listener with a client certificate), or else the SASL name, goes through the
//! rules in order; the first that matches the whole name gives `User:<result>`. No match fails
//! the authentication.
//!
//! ```toml
//! [principal]
//! plugin = "principal-mapping"
//!
//! [plugins.config.principal-mapping]
//! rules = ["RULE:^CN=([^,]+),OU=apps,.*$/$1/L", "DEFAULT"]
//! ```
use portcullis_plugin_api::principal::{
    AuthenticationContext, Principal, PrincipalBuilder, PrincipalError,
};
use portcullis_plugin_api::{Host, Plugin, PluginError};
use regex::Regex;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    rules: Vec<String>,
}

/// `DEFAULT` keeps the name (no regex); `RULE:pattern/replacement/[L|U]` maps a name the pattern
/// matches whole, then lower- or upper-cases it.
struct Rule(Option<Regex>, String, String);

fn parse(rule: &str) -> Option<Rule> {
    let default = || Rule(None, String::new(), String::new());
    (rule == "DEFAULT").then(default).or_else(|| {
        let (pattern, rest) = rule.strip_prefix("RULE:")?.split_once('/')?;
        let (replacement, case) = rest.rsplit_once('/')?;
        let regex = Regex::new(&format!("^(?:{pattern})$")).ok()?;
        Some(Rule(Some(regex), replacement.into(), case.into()))
    })
}

impl Rule {
    fn apply(&self, name: &str) -> Option<String> {
        let Some(regex) = &self.0 else {
            return Some(name.to_owned());
        };
        let mapped = regex.is_match(name).then(|| regex.replace(name, &self.1))?;
        Some(match self.2.as_str() {
            "L" => mapped.to_lowercase(),
            "U" => mapped.to_uppercase(),
            _ => mapped.into_owned(),
        })
    }
}

pub struct PrincipalMapping(Vec<Rule>);

impl Plugin for PrincipalMapping {
    const NAME: &'static str = "principal-mapping";
    type Config = Config;

    fn new(config: Config, _host: &Host) -> Result<Self, PluginError> {
        let rules = config.rules.iter().map(|rule| {
            parse(rule)
                .ok_or_else(|| PluginError::invalid_value("rules", format!("bad rule `{rule}`")))
        });
        Ok(Self(rules.collect::<Result<_, _>>()?))
    }
}

impl PrincipalBuilder for PrincipalMapping {
    fn build(&self, context: &AuthenticationContext<'_>) -> Result<Principal, PrincipalError> {
        let sasl = context.sasl.map(|sasl| sasl.authorization_id.as_str());
        let name = context.certificate_subject().or(sasl).unwrap_or_default();
        let unmapped = || PrincipalError::NoRuleApplies { name: name.into() };
        let mapped = self.0.iter().find_map(|rule| rule.apply(name));
        Ok(Principal::user(mapped.ok_or_else(unmapped)?))
    }
}

portcullis_plugin_api::export_plugins!(principal_builder: PrincipalMapping);
