//! KIP-554: DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), with Kafka's
//! validation and error codes (kafka-security-semantics §3.6). The password never travels: the
//! client sends the salted password and the host derives the stored and server keys.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsResponse, ApiKey, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{encode, Effect, LocalHandler, LocalRequest, Persist, PersistOutcome};
use crate::acl::AclOperation;
use crate::authorizer::Authorizer;
use crate::credentials::ScramMechanism;
use crate::errors::ErrorCode;
use crate::protocol::api::{ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS};
use crate::protocol::reader::{Malformed, Reader};
use crate::store::{AppendBatch, MetadataRecord};

/// One change to apply.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialChange {
    /// Set a credential from a client-salted password.
    Upsert {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
        /// The iteration count.
        iterations: u32,
        /// The salt.
        salt: Vec<u8>,
        /// `Hi(password, salt, iterations)`, computed by the client.
        salted_password: Vec<u8>,
    },
    /// Remove a credential.
    Delete {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
    },
}

impl std::fmt::Debug for CredentialChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialChange::Upsert {
                user,
                mechanism,
                iterations,
                ..
            } => f
                .debug_struct("Upsert")
                .field("user", user)
                .field("mechanism", mechanism)
                .field("iterations", iterations)
                .finish_non_exhaustive(),
            CredentialChange::Delete { user, mechanism } => f
                .debug_struct("Delete")
                .field("user", user)
                .field("mechanism", mechanism)
                .finish(),
        }
    }
}

/// The host side: reads the credential view and turns changes into records (deriving the stored
/// and server keys from a salted password is the SCRAM plugin's job, not the framework's).
pub trait CredentialAdmin: Send + Sync {
    /// Every `(user, mechanism, iterations)` with a credential.
    fn list(&self) -> Vec<(String, ScramMechanism, u32)>;
    /// The records that make the changes, in order.
    fn records(&self, changes: &[CredentialChange]) -> Vec<MetadataRecord>;
}

/// Serves both KIP-554 APIs.
#[derive(Clone)]
pub struct ScramCredentialsApi {
    admin: Arc<dyn CredentialAdmin>,
    authorizer: Option<Arc<dyn Authorizer>>,
    api_key: i16,
    /// Refuse user names shaped like delegation token ids (when tokens are accepted without the
    /// `tokenauth` extension, such a name must mean a token).
    token_id_names_reserved: bool,
}

/// Why a user name is refused while token-id-shaped names are reserved.
pub const TOKEN_ID_SHAPED_NAME: &str =
    "The user name has the shape of a delegation token id, which is reserved for \
     tokens on this server (delegation_tokens.accept_token_without_extension)";

impl ScramCredentialsApi {
    /// The two handlers, sharing the admin service. Without an authorizer every authenticated
    /// principal may use them, as with a Kafka broker that has no `authorizer.class.name`.
    pub fn handlers(
        admin: Arc<dyn CredentialAdmin>,
        authorizer: Option<Arc<dyn Authorizer>>,
    ) -> [Arc<dyn LocalHandler>; 2] {
        Self::handlers_reserving_token_ids(admin, authorizer, false)
    }

    /// [`handlers`](Self::handlers); with `reserve` set, upserting a credential for a user name
    /// shaped like a delegation token id is refused with UNACCEPTABLE_CREDENTIAL.
    pub fn handlers_reserving_token_ids(
        admin: Arc<dyn CredentialAdmin>,
        authorizer: Option<Arc<dyn Authorizer>>,
        reserve: bool,
    ) -> [Arc<dyn LocalHandler>; 2] {
        let describe = Self {
            admin: admin.clone(),
            authorizer: authorizer.clone(),
            api_key: DESCRIBE_USER_SCRAM_CREDENTIALS,
            token_id_names_reserved: reserve,
        };
        let alter = Self {
            admin,
            authorizer,
            api_key: ALTER_USER_SCRAM_CREDENTIALS,
            token_id_names_reserved: reserve,
        };
        [Arc::new(describe), Arc::new(alter)]
    }

    fn cluster_allowed(&self, request: &LocalRequest<'_>, operation: AclOperation) -> bool {
        // Without an authorizer everything is allowed, as on a Kafka broker without one.
        self.authorizer
            .as_deref()
            .is_none_or(|a| super::cluster_allowed(a, request, operation))
    }

    fn describe(&self, request: &LocalRequest<'_>) -> Effect {
        let users = match decode_describe(request.body) {
            Ok(users) => users,
            Err(e) => return Effect::Close(e.into()),
        };
        let mut response = DescribeUserScramCredentialsResponse::default();
        if !self.cluster_allowed(request, AclOperation::Describe) {
            response = response.with_error_code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0);
        } else {
            response = response.with_results(describe_results(&self.admin.list(), users));
        }
        encode(
            ApiKey::DescribeUserScramCredentials,
            request.header.api_version,
            request.header.correlation_id,
            &response,
        )
    }

    fn alter(&self, request: &LocalRequest<'_>) -> Effect {
        let alterations = match decode_alter(request.body) {
            Ok(a) => a,
            Err(e) => return Effect::Close(e.into()),
        };
        let (version, correlation_id) = (request.header.api_version, request.header.correlation_id);
        if !self.cluster_allowed(request, AclOperation::Alter) {
            let results = alterations
                .iter()
                .map(|a| result(&a.user, ErrorCode::CLUSTER_AUTHORIZATION_FAILED, None))
                .collect();
            return alter_response(results, version, correlation_id);
        }
        let outcomes = self.validate_all(alterations);
        let changes: Vec<CredentialChange> = outcomes
            .iter()
            .filter_map(|(_, o)| o.as_ref().ok().cloned())
            .collect();
        if changes.is_empty() {
            return alter_response(results(outcomes, None), version, correlation_id);
        }
        let batch = AppendBatch::new(self.admin.records(&changes));
        Effect::Persist(Persist::new(batch, move |stored: PersistOutcome, _now| {
            let failure = stored.err().map(|e| {
                tracing::warn!(error = ?e, "storing SCRAM credential changes failed");
            });
            alter_response(results(outcomes, failure), version, correlation_id)
        }))
    }

    /// Kafka's checks for each alteration, in request order.
    fn validate_all(&self, alterations: Vec<Alteration>) -> Vec<(String, Validated)> {
        let existing: HashMap<(String, ScramMechanism), u32> = self
            .admin
            .list()
            .into_iter()
            .map(|(u, m, i)| ((u, m), i))
            .collect();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for a in &alterations {
            *seen.entry(a.user.as_str()).or_default() += 1;
        }
        let mut outcomes: Vec<(String, Validated)> = Vec::new();
        for a in &alterations {
            let outcome = if seen.get(a.user.as_str()).copied().unwrap_or(0) > 1 {
                Err((
                    ErrorCode::DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                ))
            } else if self.token_id_names_reserved
                && a.upsert.is_some()
                && crate::tokens::id::has_token_id_shape(&a.user)
            {
                Err((ErrorCode::UNACCEPTABLE_CREDENTIAL, TOKEN_ID_SHAPED_NAME))
            } else {
                validate(a, &existing)
            };
            outcomes.push((a.user.clone(), outcome));
        }
        outcomes
    }
}

/// One result per alteration; `store_failed` turns the valid ones into UNKNOWN_SERVER_ERROR.
fn results(
    outcomes: Vec<(String, Validated)>,
    store_failed: Option<()>,
) -> Vec<AlterUserScramCredentialsResult> {
    outcomes
        .into_iter()
        .map(|(user, outcome)| match (outcome, store_failed) {
            (Err((code, message)), _) => result(&user, code, Some(message.to_owned())),
            (Ok(_), Some(())) => result(
                &user,
                ErrorCode::UNKNOWN_SERVER_ERROR,
                Some("The credential store failed".into()),
            ),
            (Ok(_), None) => result(&user, ErrorCode::NONE, None),
        })
        .collect()
}

fn alter_response(
    results: Vec<AlterUserScramCredentialsResult>,
    version: i16,
    correlation_id: i32,
) -> Effect {
    let response = AlterUserScramCredentialsResponse::default().with_results(results);
    encode(
        ApiKey::AlterUserScramCredentials,
        version,
        correlation_id,
        &response,
    )
}

impl LocalHandler for ScramCredentialsApi {
    fn api_key(&self) -> i16 {
        self.api_key
    }

    fn versions(&self) -> (i16, i16) {
        (0, 0)
    }

    fn handle(&self, request: &LocalRequest<'_>) -> Effect {
        if request.header.api_key == DESCRIBE_USER_SCRAM_CREDENTIALS {
            self.describe(request)
        } else {
            self.alter(request)
        }
    }
}

/// A valid change, or the error code and message for the user.
type Validated = Result<CredentialChange, (ErrorCode, &'static str)>;

fn validate(a: &Alteration, existing: &HashMap<(String, ScramMechanism), u32>) -> Validated {
    if a.user.is_empty() {
        return Err((
            ErrorCode::UNACCEPTABLE_CREDENTIAL,
            "Username must not be empty",
        ));
    }
    let mechanism = ScramMechanism::from_type_byte(a.mechanism).ok_or((
        ErrorCode::UNSUPPORTED_SASL_MECHANISM,
        "Unknown SCRAM mechanism",
    ))?;
    match &a.upsert {
        None => {
            if existing.contains_key(&(a.user.clone(), mechanism)) {
                Ok(CredentialChange::Delete {
                    user: a.user.clone(),
                    mechanism,
                })
            } else {
                Err((
                    ErrorCode::RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist",
                ))
            }
        }
        Some(u) => {
            if u.iterations < ScramMechanism::MIN_ITERATIONS as i32 {
                return Err((ErrorCode::UNACCEPTABLE_CREDENTIAL, "Too few iterations"));
            }
            if u.iterations > ScramMechanism::MAX_ITERATIONS as i32 {
                return Err((ErrorCode::UNACCEPTABLE_CREDENTIAL, "Too many iterations"));
            }
            Ok(CredentialChange::Upsert {
                user: a.user.clone(),
                mechanism,
                iterations: u.iterations as u32,
                salt: u.salt.clone(),
                salted_password: u.salted_password.clone(),
            })
        }
    }
}

fn describe_results(
    all: &[(String, ScramMechanism, u32)],
    users: Option<Vec<String>>,
) -> Vec<DescribeUserScramCredentialsResult> {
    let mut by_user: BTreeMap<&str, Vec<CredentialInfo>> = BTreeMap::new();
    for (user, mechanism, iterations) in all {
        by_user.entry(user.as_str()).or_default().push(
            CredentialInfo::default()
                .with_mechanism(mechanism.type_byte())
                .with_iterations(*iterations as i32),
        );
    }
    let info = |user: &str, infos: Vec<CredentialInfo>| {
        DescribeUserScramCredentialsResult::default()
            .with_user(StrBytes::from_string(user.to_owned()))
            .with_credential_infos(infos)
    };
    match users.filter(|u| !u.is_empty()) {
        None => by_user
            .into_iter()
            .map(|(user, infos)| info(user, infos))
            .collect(),
        Some(requested) => {
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for u in &requested {
                *counts.entry(u.as_str()).or_default() += 1;
            }
            let mut reported_duplicate: std::collections::HashSet<&str> = Default::default();
            let mut out = Vec::new();
            for user in &requested {
                if counts.get(user.as_str()).copied().unwrap_or(0) > 1 {
                    if reported_duplicate.insert(user.as_str()) {
                        out.push(describe_error(
                            user,
                            ErrorCode::DUPLICATE_RESOURCE,
                            format!("Cannot describe SCRAM credentials for the same user twice in a single request: {user}"),
                        ));
                    }
                    continue;
                }
                match by_user.get(user.as_str()) {
                    Some(infos) => out.push(info(user, infos.clone())),
                    None => out.push(describe_error(
                        user,
                        ErrorCode::RESOURCE_NOT_FOUND,
                        format!(
                            "Attempt to describe a user credential that does not exist: {user}"
                        ),
                    )),
                }
            }
            out
        }
    }
}

fn describe_error(
    user: &str,
    code: ErrorCode,
    message: String,
) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user.to_owned()))
        .with_error_code(code.0)
        .with_error_message(Some(StrBytes::from_string(message)))
}

fn result(user: &str, code: ErrorCode, message: Option<String>) -> AlterUserScramCredentialsResult {
    AlterUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user.to_owned()))
        .with_error_code(code.0)
        .with_error_message(message.map(StrBytes::from_string))
}

/// One alteration in request order (deletions first, then upsertions).
#[derive(Debug)]
struct Alteration {
    user: String,
    mechanism: i8,
    upsert: Option<Upsert>,
}

#[derive(Debug)]
struct Upsert {
    iterations: i32,
    salt: Vec<u8>,
    salted_password: Vec<u8>,
}

/// DescribeUserScramCredentials v0 (flexible): `Users: [{Name}]`, nullable.
fn decode_describe(body: &[u8]) -> Result<Option<Vec<String>>, Malformed> {
    let mut r = Reader::new(body);
    let users = match r.compact_array_len()? {
        None => None,
        Some(n) => {
            let mut users = Vec::with_capacity(n);
            for _ in 0..n {
                users.push(r.compact_string()?);
                r.skip_tagged_fields()?;
            }
            Some(users)
        }
    };
    r.skip_tagged_fields()?;
    r.end_of_request();
    Ok(users)
}

/// AlterUserScramCredentials v0 (flexible).
fn decode_alter(body: &[u8]) -> Result<Vec<Alteration>, Malformed> {
    let mut r = Reader::new(body);
    let mut out = Vec::new();
    for _ in 0..r.compact_array_len()?.unwrap_or(0) {
        let user = r.compact_string()?;
        let mechanism = r.i8()?;
        r.skip_tagged_fields()?;
        out.push(Alteration {
            user,
            mechanism,
            upsert: None,
        });
    }
    for _ in 0..r.compact_array_len()?.unwrap_or(0) {
        let user = r.compact_string()?;
        let mechanism = r.i8()?;
        let iterations = r.i32()?;
        let salt = r.compact_bytes()?.to_vec();
        let salted_password = r.compact_bytes()?.to_vec();
        r.skip_tagged_fields()?;
        out.push(Alteration {
            user,
            mechanism,
            upsert: Some(Upsert {
                iterations,
                salt,
                salted_password,
            }),
        });
    }
    r.skip_tagged_fields()?;
    r.end_of_request();
    Ok(out)
}

#[cfg(test)]
mod tests;
