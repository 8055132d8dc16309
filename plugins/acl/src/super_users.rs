//! `super_users` (Kafka's `super.users`): how entries are checked and compared. The list itself is
//! a [`LiveSuperUsers`](portcullis::registry::LiveSuperUsers) the host may replace on reload.

use portcullis::principal::Principal;

/// A `super_users` entry that is not `type:name`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid super user '{0}': expected 'type:name'")]
pub struct InvalidSuperUser(pub String);

/// The entries of a `super_users` list as the authorizer compares them: trimmed, empty ones
/// dropped, each a valid `type:name`.
///
/// # Errors
/// [`InvalidSuperUser`] for the first entry that is not `type:name`.
pub fn normalise(entries: &[String]) -> Result<Vec<String>, InvalidSuperUser> {
    let mut super_users = Vec::new();
    for entry in entries {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        Principal::parse(entry).map_err(|_| InvalidSuperUser(entry.to_owned()))?;
        super_users.push(entry.to_owned());
    }
    Ok(super_users)
}

/// Kafka compares `principal.toString()` with each super user string. Only the user principal
/// is compared: a `super_users` entry naming a group never matches.
pub(crate) fn contains(super_users: &[String], principal: &Principal) -> bool {
    super_users.iter().any(|s| {
        s.len() == principal.kind.len() + 1 + principal.name.len()
            && s.starts_with(principal.kind.as_str())
            && s.get(principal.kind.len()..principal.kind.len() + 1) == Some(":")
            && s.ends_with(principal.name.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_trimmed_checked_and_compared_whole() {
        let list = normalise(&[" User:admin ".into(), String::new()]).unwrap();
        assert_eq!(list, ["User:admin"]);
        assert!(contains(&list, &Principal::user("admin")));
        assert!(!contains(&list, &Principal::user("admi")));
        assert_eq!(
            normalise(&["admin".into()]),
            Err(InvalidSuperUser("admin".into()))
        );
    }
}
