//! Which keys a reloaded file changes, and whether each can change while the node runs.
//!
//! The two files are compared key by key (tables flattened to dotted keys, an array is one
//! value). Only the key names are reported, never a value: a value may be a secret. The
//! environment overrides are the same for both (they are the process's), so they cannot make
//! a difference.

use std::collections::BTreeMap;

/// Keys (and the tables under them) a reload applies to a running node. Everything else needs a
/// restart.
const LIVE: &[&str] = &[
    "listener.sasl_mechanisms",
    "listener.connections_max_reauth_ms",
    "listener.connections_max_reauth_ms_by_mechanism",
    "listener.failed_authentication_delay_ms",
    "listener.max_pre_auth_frame_bytes",
    "listener.max_frame_bytes",
    "listener.tls.cert_file",
    "listener.tls.key_file",
    "listener.tls.ca_file",
    "listener.tls.client_auth",
    "limits",
    "forwarding.deny_api_keys",
    "telemetry.trace_sample_ratio",
    "events.subscribers",
    // The forwarding policy screens the authorizer, so a new one builds the authorizer again
    // (see `needs_restart` for `delegated`); in a cluster the inter-node listener takes the new
    // authorizer and principal builder too.
    "authorizer.plugin",
    "principal.plugin",
    "forwarding.policy",
    // New upstream connections log in with them (and TLS); with the `kafka` store its clients
    // take them too (`KafkaMetadataStore::check_upstream`): a user and password in place, from
    // their next authentication, a mechanism or TLS by making the clients again.
    "upstream.username",
    "upstream.password",
    "upstream.sasl_mechanism",
    "upstream.login",
    "upstream.tls",
];

/// Live only while the built-in `acl` authorizer reads them (a plugin authorizer takes its
/// settings once, when it is built).
const LIVE_WITH_ACL: &[&str] = &[
    "authorizer.super_users",
    "authorizer.allow_everyone_if_no_acl_found",
];

/// The keys that make the upstream login (with the login plugin's own table).
pub const UPSTREAM_LOGIN: &[&str] = &[
    "upstream.login",
    "upstream.sasl_mechanism",
    "upstream.username",
    "upstream.password",
];

/// What the running node is, for the keys whose effect depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// The built-in `acl` authorizer is in use (before and after).
    pub acl: bool,
    /// OAUTHBEARER's validator runs (the node started with OAUTHBEARER enabled).
    pub oauth: bool,
}

/// Tables whose presence decides what the node runs (TLS or not, an authorizer or none):
/// adding or removing one needs a restart, whatever is inside.
const PRESENCE: &[&str] = &["listener.tls", "authorizer", "oauthbearer"];

/// Live (for new logins: the validator is built and started again) only while OAUTHBEARER's
/// validator runs; without it, the table is only read at start.
const LIVE_WITH_OAUTH: &[&str] = &["oauthbearer"];

/// Whether a changed key can be applied while the node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Applied by the reload.
    Live,
    /// Refused: the node must be restarted for it.
    Restart,
}

/// One changed key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The dotted key (`listener.tls.cert_file`).
    pub key: String,
    /// Whether a reload can apply it.
    pub effect: Effect,
}

/// The keys that differ between `old` and `new` (added, removed or changed), in key order.
pub fn changes(old: &toml::Table, new: &toml::Table, context: Context) -> Vec<Change> {
    let (mut before, mut after) = (BTreeMap::new(), BTreeMap::new());
    flatten("", old, &mut before);
    flatten("", new, &mut after);
    let mut out = Vec::new();
    for table in PRESENCE {
        if has_table(old, table) != has_table(new, table) {
            out.push(Change {
                key: (*table).to_owned(),
                effect: Effect::Restart,
            });
        }
    }
    let present_in_one = |key: &str| {
        out.iter()
            .any(|c: &Change| key.starts_with(&format!("{}.", c.key)))
    };
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let mut changed = Vec::new();
    for key in keys {
        if before.get(key) == after.get(key) || present_in_one(key) {
            continue;
        }
        changed.push(Change {
            key: key.clone(),
            effect: effect_of(key, context),
        });
    }
    out.extend(changed);
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// Makes `[plugins.config.NAME]` changes live for the plugins named in `loaded`: plugins this
/// reload created from new or changed libraries, with the reloaded tables. Any other plugin
/// keeps the table it was created with, so a change to it still needs a restart.
pub fn plugin_tables_live(changes: &mut [Change], loaded: &[&str]) {
    for change in changes {
        let table = change.key.strip_prefix("plugins.config.");
        let name = table.map(|t| t.split('.').next().unwrap_or(t));
        if name.is_some_and(|n| loaded.contains(&n)) {
            change.effect = Effect::Live;
        }
    }
}

/// Marks `key`, when it changed, as needing a restart: for reasons only the parsed
/// configurations show (another forwarding policy that starts or stops the `delegated`
/// machinery, which the node builds at start).
pub fn needs_restart(changes: &mut [Change], key: &str) {
    for change in changes.iter_mut().filter(|c| c.key == key) {
        change.effect = Effect::Restart;
    }
}

/// Whether `key` is `prefix` or a key of its table.
pub fn is_under(key: &str, prefix: &str) -> bool {
    key.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

fn effect_of(key: &str, context: Context) -> Effect {
    let under = |prefix: &&str| is_under(key, prefix);
    if LIVE.iter().any(under)
        || (context.acl && LIVE_WITH_ACL.iter().any(under))
        || (context.oauth && LIVE_WITH_OAUTH.iter().any(under))
    {
        Effect::Live
    } else {
        Effect::Restart
    }
}

fn has_table(root: &toml::Table, dotted: &str) -> bool {
    let mut table = root;
    for part in dotted.split('.') {
        match table.get(part) {
            Some(toml::Value::Table(inner)) => table = inner,
            _ => return false,
        }
    }
    true
}

/// `table` as dotted keys and their values (tables flattened, an array is one value).
pub fn flat(table: &toml::Table) -> BTreeMap<String, &toml::Value> {
    let mut out = BTreeMap::new();
    flatten("", table, &mut out);
    out
}

fn flatten<'a>(prefix: &str, table: &'a toml::Table, out: &mut BTreeMap<String, &'a toml::Value>) {
    for (key, value) in table {
        let dotted = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) => flatten(&dotted, inner, out),
            other => {
                out.insert(dotted, other);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[node]
id = 1
data_dir = "data"
[listener]
address = "127.0.0.1:9092"
sasl_mechanisms = ["SCRAM-SHA-512", "PLAIN"]
[listener.tls]
cert_file = "a.pem"
key_file = "a.key"
[upstream]
password = "s3cret"
[authorizer]
super_users = ["User:admin"]
"#;

    fn diff(new: &str, acl: bool) -> Vec<(String, Effect)> {
        let old: toml::Table = toml::from_str(BASE).unwrap();
        let new: toml::Table = toml::from_str(new).unwrap();
        let context = Context { acl, oauth: false };
        changes(&old, &new, context)
            .into_iter()
            .map(|c| (c.key, c.effect))
            .collect()
    }

    #[test]
    fn a_plugin_table_is_live_only_for_a_plugin_this_reload_loaded() {
        let new =
            format!("{BASE}\n[plugins.config.X-NEW]\nmode = 1\n[plugins.config.X-OLD]\nmode = 2\n");
        let old: toml::Table = toml::from_str(BASE).unwrap();
        let new: toml::Table = toml::from_str(&new).unwrap();
        let context = Context {
            acl: true,
            oauth: false,
        };
        let mut found = changes(&old, &new, context);
        plugin_tables_live(&mut found, &["X-NEW", "X-NE"]);
        let found: Vec<_> = found.into_iter().map(|c| (c.key, c.effect)).collect();
        assert_eq!(
            found,
            vec![
                ("plugins.config.X-NEW.mode".to_owned(), Effect::Live),
                ("plugins.config.X-OLD.mode".to_owned(), Effect::Restart),
            ]
        );
    }

    #[test]
    fn the_deny_list_and_the_policy_are_live_unless_the_reload_says_otherwise() {
        let new = format!("{BASE}\n[forwarding]\npolicy = \"delegated\"\ndeny_api_keys = [20]\n");
        let mut found = changes(
            &toml::from_str(BASE).unwrap(),
            &toml::from_str(&new).unwrap(),
            Context {
                acl: true,
                oauth: false,
            },
        );
        let effects = |found: &[Change]| -> Vec<(String, Effect)> {
            found.iter().map(|c| (c.key.clone(), c.effect)).collect()
        };
        assert_eq!(
            effects(&found),
            vec![
                ("forwarding.deny_api_keys".to_owned(), Effect::Live),
                ("forwarding.policy".to_owned(), Effect::Live),
            ]
        );
        // The reload marks the policy for a restart when `delegated` starts or stops.
        needs_restart(&mut found, "forwarding.policy");
        assert_eq!(
            effects(&found),
            vec![
                ("forwarding.deny_api_keys".to_owned(), Effect::Live),
                ("forwarding.policy".to_owned(), Effect::Restart),
            ]
        );
    }

    #[test]
    fn oauthbearer_is_live_only_while_its_validator_runs_and_cannot_come_or_go() {
        let with = |audience: &str| {
            format!("{BASE}\n[oauthbearer]\nexpected_audience = [\"{audience}\"]\n")
        };
        let (old, new): (toml::Table, toml::Table) = (
            toml::from_str(&with("kafka")).unwrap(),
            toml::from_str(&with("other")).unwrap(),
        );
        let effect = |oauth| {
            let context = Context { acl: true, oauth };
            changes(&old, &new, context)
                .into_iter()
                .map(|c| (c.key, c.effect))
                .collect::<Vec<_>>()
        };
        let key = "oauthbearer.expected_audience".to_owned();
        assert_eq!(effect(true), vec![(key.clone(), Effect::Live)]);
        assert_eq!(effect(false), vec![(key, Effect::Restart)]);
        assert_eq!(
            diff(&with("kafka"), true),
            vec![("oauthbearer".to_owned(), Effect::Restart)]
        );
    }

    #[test]
    fn the_upstream_login_and_tls_are_live_but_not_where_the_upstream_is() {
        let context = Context {
            acl: false,
            oauth: false,
        };
        for key in [
            "upstream.sasl_mechanism",
            "upstream.login.plugin",
            "upstream.login.token_endpoint_url",
            "upstream.username",
            "upstream.password",
            "upstream.tls.ca_file",
        ] {
            assert_eq!(effect_of(key, context), Effect::Live, "{key}");
        }
        for key in ["upstream.bootstrap_servers", "upstream.security_protocol"] {
            assert_eq!(effect_of(key, context), Effect::Restart, "{key}");
        }
        // A key that only starts with the same letters is not one of the table's.
        assert_eq!(effect_of("upstream.usernames", context), Effect::Restart);
        assert!(is_under("upstream.login", "upstream.login"));
        assert!(!is_under("upstream.login_x", "upstream.login"));
    }

    #[test]
    fn the_authorizer_principal_builder_and_policy_choice_is_live() {
        let single = Context {
            acl: true,
            oauth: false,
        };
        for key in ["authorizer.plugin", "principal.plugin", "forwarding.policy"] {
            assert_eq!(effect_of(key, single), Effect::Live, "{key}");
        }
        // allow_everyone_if_no_acl_found: live while the built-in authorizer reads it.
        assert_eq!(
            effect_of("authorizer.allow_everyone_if_no_acl_found", single),
            Effect::Live
        );
        assert_eq!(
            effect_of(
                "authorizer.allow_everyone_if_no_acl_found",
                Context {
                    acl: false,
                    ..single
                }
            ),
            Effect::Restart
        );
        assert_eq!(
            effect_of("telemetry.trace_sample_ratio", single),
            Effect::Live
        );
        // Event subscribers run per node: replaced live on any node.
        assert_eq!(effect_of("events.subscribers", single), Effect::Live);
        assert_eq!(
            effect_of("telemetry.otlp_endpoint", single),
            Effect::Restart
        );
    }

    #[test]
    fn the_same_file_changes_nothing() {
        assert!(diff(BASE, true).is_empty());
    }

    #[test]
    fn live_keys_are_applied_and_others_need_a_restart() {
        let new = BASE
            .replace("a.pem", "b.pem")
            .replace(r#"["SCRAM-SHA-512", "PLAIN"]"#, r#"["SCRAM-SHA-512"]"#)
            .replace("id = 1", "id = 2")
            .replace("127.0.0.1:9092", "127.0.0.1:9093");
        assert_eq!(
            diff(&new, true),
            [
                ("listener.address".to_owned(), Effect::Restart),
                ("listener.sasl_mechanisms".to_owned(), Effect::Live),
                ("listener.tls.cert_file".to_owned(), Effect::Live),
                ("node.id".to_owned(), Effect::Restart),
            ]
        );
    }

    #[test]
    fn an_added_or_removed_key_is_a_change() {
        let new = BASE.replace("[upstream]\npassword = \"s3cret\"\n", "[upstream]\n")
            + "[limits]\nmax_connections = 5\n";
        assert_eq!(
            diff(&new, true),
            [
                ("limits.max_connections".to_owned(), Effect::Live),
                // Live with the file store: new upstream connections log in without it.
                ("upstream.password".to_owned(), Effect::Live),
            ]
        );
    }

    #[test]
    fn super_users_are_live_only_with_the_built_in_authorizer() {
        let new = BASE.replace(r#"["User:admin"]"#, r#"["User:admin", "User:bob"]"#);
        assert_eq!(
            diff(&new, true),
            [("authorizer.super_users".to_owned(), Effect::Live)]
        );
        assert_eq!(
            diff(&new, false),
            [("authorizer.super_users".to_owned(), Effect::Restart)]
        );
    }

    #[test]
    fn switching_tls_or_the_authorizer_on_or_off_needs_a_restart() {
        let start = BASE.find("[listener.tls]").unwrap();
        let end = BASE.find("[upstream]").unwrap();
        let without_tls = format!("{}{}", &BASE[..start], &BASE[end..]);
        assert_eq!(
            diff(&without_tls, true),
            [("listener.tls".to_owned(), Effect::Restart)]
        );
        let start = BASE.find("[authorizer]").unwrap();
        let without_authorizer = &BASE[..start];
        assert_eq!(
            diff(without_authorizer, true),
            [("authorizer".to_owned(), Effect::Restart)]
        );
    }

    #[test]
    fn a_prefix_is_not_a_parent_key() {
        let context = Context {
            acl: true,
            oauth: false,
        };
        // `limits_x` is not under `limits`.
        assert_eq!(effect_of("limitsx.max", context), Effect::Restart);
        assert_eq!(
            effect_of("limits.failed_authentication.max_delay_ms", context),
            Effect::Live
        );
    }
}
