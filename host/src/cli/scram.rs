//! `scram add|list|delete`: the offline SCRAM credential tools on the file store.

use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::{bail, Context as _};
use portcullis::credentials::{CredentialView, InMemoryCredentials};
use portcullis::store::{MetadataRecord, MetadataStore, StoreError};
use portcullis_plugin_stores::{credentials_from, load_credentials, FileMetadataStore};

use crate::config::{self, Config};
use crate::node::{self};

use super::args::{ScramAdd, ScramDelete};
use super::load::{file_store_only, load_config};

/// The longest password `scram add` reads from stdin.
const MAX_PASSWORD_BYTES: u64 = 64 * 1024;

/// Reads the password: the first line of `input`, without its line ending.
pub(super) fn read_password(input: impl BufRead) -> anyhow::Result<String> {
    let mut line = String::new();
    let read = input
        .take(MAX_PASSWORD_BYTES)
        .read_line(&mut line)
        .context("cannot read the password from stdin")?;
    if read == 0 {
        bail!("no password on stdin (--password-stdin reads one line)");
    }
    let password = line
        .strip_suffix('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or(&line);
    if password.is_empty() {
        bail!("the password is empty");
    }
    Ok(password.to_owned())
}

/// Opens the store for an offline change, explaining a lock held by a running node.
fn open_store(config: &Config) -> anyhow::Result<FileMetadataStore> {
    let dir = &config.node.data_dir;
    FileMetadataStore::open(dir).map_err(|e| match e {
        StoreError::Locked(_) => anyhow::Error::new(e).context(format!(
            "cannot change credentials in {} while a node is running on it: stop the node first",
            dir.display()
        )),
        other => anyhow::Error::new(other).context("cannot open the metadata store"),
    })
}

fn check_user(user: &str) -> anyhow::Result<()> {
    if user.is_empty() {
        bail!("the user name is empty");
    }
    if user.chars().any(char::is_control) {
        bail!("the user name contains control characters");
    }
    Ok(())
}

/// `scram add`: derives the credential and appends it to the store (durable when this returns).
pub(super) fn scram_add(
    args: &ScramAdd,
    password: &str,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    check_user(&args.user)?;
    let config = load_config(&args.config.config)?;
    if config.delegation_tokens.accept_token_without_extension
        && portcullis::tokens::id::has_token_id_shape(&args.user)
    {
        bail!(
            "the user name '{}' has the shape of a delegation token id, which \
             delegation_tokens.accept_token_without_extension reserves for tokens",
            args.user
        );
    }
    let salt = portcullis_plugin_scram::random_salt();
    let credential = portcullis_plugin_scram::derive_credential(
        args.mechanism,
        password,
        &salt,
        args.iterations,
    );
    let record = MetadataRecord::ScramCredential {
        user: args.user.clone(),
        mechanism: args.mechanism,
        credential,
    };
    if config.store.kind == config::StoreKind::Kafka {
        // The cluster's topic, written as its writer would (which fences a running writer: it
        // is elected again at once). Meant for setting a cluster up before its nodes start;
        // on a running cluster, AlterUserScramCredentials (kafka-configs) is the way.
        let settings = node::kafka_store_settings(&config, false)?;
        portcullis_plugin_kafka_store::write_offline(&settings, &[record])
            .context("cannot write the credential to the cluster's topic")?;
    } else {
        let store = open_store(&config)?;
        store
            .append(&[record])
            .context("cannot write the credential")?;
    }
    writeln!(
        out,
        "added {} credential for user '{}'",
        args.mechanism, args.user
    )?;
    Ok(())
}

/// `scram list`: one line per (user, mechanism), sorted. Reads the store without locking or
/// writing it, so it also works while a node runs.
pub(super) fn scram_list(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(path)?;
    file_store_only(&config, "scram list")?;
    let log = FileMetadataStore::read_only(&config.node.data_dir)
        .context("cannot read the metadata store")?;
    let creds = InMemoryCredentials::new();
    creds.replace_all(credentials_from(log.records.iter().map(|r| &r.record)));
    let mut users = creds.users();
    if users.is_empty() {
        writeln!(out, "no SCRAM credentials")?;
        return Ok(());
    }
    users.sort();
    let width = users
        .iter()
        .map(|(u, _, _)| u.len())
        .max()
        .unwrap_or(0)
        .max(4);
    writeln!(out, "{:<width$}  {:<13}  ITERATIONS", "USER", "MECHANISM")?;
    for (user, mechanism, iterations) in users {
        writeln!(
            out,
            "{user:<width$}  {:<13}  {iterations}",
            mechanism.mechanism_name()
        )?;
    }
    Ok(())
}

/// `scram delete`: appends a removal; an absent credential is an error.
pub(super) fn scram_delete(args: &ScramDelete, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = load_config(&args.config.config)?;
    file_store_only(&config, "scram delete")?;
    let store = open_store(&config)?;
    let creds = InMemoryCredentials::new();
    load_credentials(&store, &creds).context("cannot read the metadata store")?;
    if creds.scram(&args.user, args.mechanism).is_none() {
        bail!("user '{}' has no {} credential", args.user, args.mechanism);
    }
    store
        .append(&[MetadataRecord::RemoveScramCredential {
            user: args.user.clone(),
            mechanism: args.mechanism,
        }])
        .context("cannot write the removal")?;
    writeln!(
        out,
        "deleted {} credential for user '{}'",
        args.mechanism, args.user
    )?;
    Ok(())
}
