//! CreateAcls (30), DescribeAcls (29) and DeleteAcls (31), served from the configured authorizer's
//! ACL store with Kafka's validation and error codes (kafka-security-semantics §6.5).

use std::sync::Arc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    ApiKey, CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{encode, Effect, LocalHandler, LocalRequest, Persist, PersistError, PersistOutcome};
use crate::acl::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation,
    PatternType, PermissionType, ResourcePattern, ResourcePatternFilter, ResourceType,
};
use crate::authorizer::{AclAdminError, Authorizer};
use crate::errors::ErrorCode;
use crate::protocol::api::{CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS};
use crate::protocol::reader::{Malformed, Reader};
use crate::store::{AppendBatch, Condition, MetadataRecord};

const NO_AUTHORIZER: &str = "No Authorizer is configured on the broker";

/// The three ACL APIs.
#[derive(Clone)]
pub struct AclApis {
    authorizer: Option<Arc<dyn Authorizer>>,
    api_key: i16,
}

impl AclApis {
    /// The handlers. Without an authorizer they answer SECURITY_DISABLED, as Kafka does.
    pub fn handlers(authorizer: Option<Arc<dyn Authorizer>>) -> [Arc<dyn LocalHandler>; 3] {
        [DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS].map(|api_key| {
            Arc::new(AclApis {
                authorizer: authorizer.clone(),
                api_key,
            }) as Arc<dyn LocalHandler>
        })
    }

    fn cluster_allowed(
        &self,
        authorizer: &dyn Authorizer,
        request: &LocalRequest<'_>,
        operation: AclOperation,
    ) -> bool {
        super::cluster_allowed(authorizer, request, operation)
    }

    fn describe(
        &self,
        request: &LocalRequest<'_>,
        flexible: bool,
    ) -> Result<DescribeAclsResponse, Malformed> {
        let filter = read_filter(&mut body_reader(request), flexible, true)?;
        let response = DescribeAclsResponse::default();
        let Some(authorizer) = self.authorizer.as_deref() else {
            return Ok(error_describe(
                response,
                ErrorCode::SECURITY_DISABLED,
                NO_AUTHORIZER,
            ));
        };
        let Some(filter) = filter else {
            return Ok(error_describe(
                response,
                ErrorCode::INVALID_REQUEST,
                "DescribeAclsRequest contains UNKNOWN elements",
            ));
        };
        if !self.cluster_allowed(authorizer, request, AclOperation::Describe) {
            return Ok(response.with_error_code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0));
        }
        let Some(admin) = authorizer.acl_admin() else {
            return Ok(error_describe(
                response,
                ErrorCode::SECURITY_DISABLED,
                NO_AUTHORIZER,
            ));
        };
        Ok(response.with_resources(group_by_resource(admin.describe_acls(&filter))))
    }

    fn create(
        &self,
        request: &LocalRequest<'_>,
        flexible: bool,
    ) -> Result<Outcome<CreateAclsResponse>, Malformed> {
        let mut r = body_reader(request);
        let count = r.any_array_len(flexible)?.unwrap_or(0);
        let mut creations = Vec::with_capacity(count);
        for _ in 0..count {
            let resource_type = ResourceType::from_code(r.i8()?);
            let name = r.any_string(flexible)?;
            let pattern_type = PatternType::from_code(r.i8()?);
            let principal = r.any_string(flexible)?;
            let host = r.any_string(flexible)?;
            let operation = AclOperation::from_code(r.i8()?);
            let permission = PermissionType::from_code(r.i8()?);
            if flexible {
                r.skip_tagged_fields()?;
            }
            creations.push(AclBinding {
                pattern: ResourcePattern::new(resource_type, name, pattern_type),
                entry: AccessControlEntry {
                    principal,
                    host,
                    operation,
                    permission,
                },
            });
        }
        finish(&mut r, flexible)?;
        let each = |code: ErrorCode, message: Option<&str>| -> Vec<AclCreationResult> {
            creations
                .iter()
                .map(|_| creation_result(code, message.map(str::to_owned)))
                .collect()
        };
        let response = CreateAclsResponse::default();
        let Some(authorizer) = self.authorizer.as_deref() else {
            return Ok(Outcome::Now(response.with_results(each(
                ErrorCode::SECURITY_DISABLED,
                Some(NO_AUTHORIZER),
            ))));
        };
        if !self.cluster_allowed(authorizer, request, AclOperation::Alter) {
            return Ok(Outcome::Now(response.with_results(each(
                ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
                None,
            ))));
        }
        let Some(authorizer) = self.authorizer.clone() else {
            return Ok(Outcome::Now(response.with_results(each(
                ErrorCode::SECURITY_DISABLED,
                Some(NO_AUTHORIZER),
            ))));
        };
        Ok(prepare_create(authorizer, creations))
    }

    fn delete(
        &self,
        request: &LocalRequest<'_>,
        flexible: bool,
    ) -> Result<Outcome<DeleteAclsResponse>, Malformed> {
        let mut r = body_reader(request);
        let count = r.any_array_len(flexible)?.unwrap_or(0);
        let mut filters = Vec::with_capacity(count);
        for _ in 0..count {
            filters.push(read_filter(&mut r, flexible, false)?);
        }
        finish(&mut r, flexible)?;
        let each = |code: ErrorCode, message: Option<&str>| -> Vec<DeleteAclsFilterResult> {
            filters
                .iter()
                .map(|_| filter_error(code, message))
                .collect()
        };
        let response = DeleteAclsResponse::default();
        let Some(authorizer) = self.authorizer.as_deref() else {
            return Ok(Outcome::Now(response.with_filter_results(each(
                ErrorCode::SECURITY_DISABLED,
                Some(NO_AUTHORIZER),
            ))));
        };
        if filters.iter().any(Option::is_none) {
            return Ok(Outcome::Now(response.with_filter_results(each(
                ErrorCode::INVALID_REQUEST,
                Some("DeleteAclsRequest contains UNKNOWN elements"),
            ))));
        }
        if !self.cluster_allowed(authorizer, request, AclOperation::Alter) {
            return Ok(Outcome::Now(response.with_filter_results(each(
                ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
                None,
            ))));
        }
        let Some(authorizer) = self.authorizer.clone() else {
            return Ok(Outcome::Now(response.with_filter_results(each(
                ErrorCode::SECURITY_DISABLED,
                Some(NO_AUTHORIZER),
            ))));
        };
        let filters: Vec<AclBindingFilter> = filters.into_iter().flatten().collect();
        Ok(prepare_delete(authorizer, filters))
    }
}

/// Works out a CreateAcls on the current view. The new bindings are written only if they are
/// still absent when the write happens (`Condition::Latest` with no offset); if another writer
/// created one first, the request is decided again on the new view (the duplicate is then
/// accepted without a record, as Kafka accepts it).
fn prepare_create(
    authorizer: Arc<dyn Authorizer>,
    creations: Vec<AclBinding>,
) -> Outcome<CreateAclsResponse> {
    let response = CreateAclsResponse::default();
    let Some(admin) = authorizer.acl_admin() else {
        return Outcome::Now(
            response.with_results(
                creations
                    .iter()
                    .map(|_| {
                        creation_result(
                            ErrorCode::SECURITY_DISABLED,
                            Some(NO_AUTHORIZER.to_owned()),
                        )
                    })
                    .collect(),
            ),
        );
    };
    let Some(prepared) = admin.prepare_create_acls(&creations) else {
        return Outcome::Now(
            response.with_results(creation_results(admin.create_acls(&creations))),
        );
    };
    let records: Vec<MetadataRecord> = prepared.changes.into_iter().map(Into::into).collect();
    if records.is_empty() {
        return Outcome::Now(response.with_results(creation_results(prepared.outcome)));
    }
    let conditions = records
        .iter()
        .map(|r| Condition::Latest {
            key: r.key(),
            offset: None,
        })
        .collect();
    let batch = AppendBatch::new(records).with_conditions(conditions);
    let outcome = prepared.outcome;
    Outcome::Later(
        batch,
        Box::new(move |stored: PersistOutcome| match stored {
            Ok(_) => {
                Outcome::Now(CreateAclsResponse::default().with_results(creation_results(outcome)))
            }
            Err(PersistError::Conflict) => prepare_create(authorizer, creations),
            Err(e) => {
                tracing::error!(error = ?e, "storing ACLs failed");
                Outcome::Now(
                    CreateAclsResponse::default()
                        .with_results(creation_results(fail_stored(outcome))),
                )
            }
        }),
    )
}

/// Works out a DeleteAcls on the current view. Each removal is written only if its binding is
/// still live (`Condition::Live`): of two deletions decided on the same view, the first is
/// written and reports the binding; the second is decided again and finds nothing, as Kafka's
/// serialised controller would answer.
fn prepare_delete(
    authorizer: Arc<dyn Authorizer>,
    filters: Vec<AclBindingFilter>,
) -> Outcome<DeleteAclsResponse> {
    let count = filters.len();
    let response = DeleteAclsResponse::default();
    let Some(admin) = authorizer.acl_admin() else {
        return Outcome::Now(
            response.with_filter_results(
                (0..count)
                    .map(|_| filter_error(ErrorCode::SECURITY_DISABLED, Some(NO_AUTHORIZER)))
                    .collect(),
            ),
        );
    };
    let Some(prepared) = admin.prepare_delete_acls(&filters) else {
        return Outcome::Now(
            response.with_filter_results(deletion_results(admin.delete_acls(&filters), count)),
        );
    };
    let records: Vec<MetadataRecord> = prepared.changes.into_iter().map(Into::into).collect();
    if records.is_empty() {
        return Outcome::Now(
            response.with_filter_results(deletion_results(Ok(prepared.outcome), count)),
        );
    }
    let conditions = records
        .iter()
        .map(|r| Condition::Live { key: r.key() })
        .collect();
    let batch = AppendBatch::new(records).with_conditions(conditions);
    let outcome = prepared.outcome;
    Outcome::Later(
        batch,
        Box::new(move |stored: PersistOutcome| match stored {
            Ok(_) => Outcome::Now(
                DeleteAclsResponse::default()
                    .with_filter_results(deletion_results(Ok(outcome), count)),
            ),
            Err(PersistError::Conflict) => prepare_delete(authorizer, filters),
            Err(e) => {
                tracing::error!(error = ?e, "storing ACL deletions failed");
                Outcome::Now(
                    DeleteAclsResponse::default().with_filter_results(deletion_results(
                        Err(AclAdminError::Store(STORE_FAILED.to_owned())),
                        count,
                    )),
                )
            }
        }),
    )
}

/// A response now, or records to persist first and what to do once they are: answer, or (after
/// a conflict) decide again on the new view.
enum Outcome<T> {
    Now(T),
    Later(
        AppendBatch,
        Box<dyn FnOnce(PersistOutcome) -> Outcome<T> + Send>,
    ),
}

/// What the client is told when the ACL records could not be stored (details go to the log).
const STORE_FAILED: &str = "The ACL store failed";

fn creation_results(outcome: Vec<Result<(), AclAdminError>>) -> Vec<AclCreationResult> {
    outcome
        .into_iter()
        .map(|outcome| match outcome {
            Ok(()) => creation_result(ErrorCode::NONE, None),
            Err(e) => creation_result(error_code(&e), Some(e.to_string())),
        })
        .collect()
}

/// The creations that were to be stored fail with the store's error; invalid ones keep theirs.
fn fail_stored(outcome: Vec<Result<(), AclAdminError>>) -> Vec<Result<(), AclAdminError>> {
    outcome
        .into_iter()
        .map(|r| r.and(Err(AclAdminError::Store(STORE_FAILED.to_owned()))))
        .collect()
}

fn deletion_results(
    deleted: Result<Vec<Vec<AclBinding>>, AclAdminError>,
    filters: usize,
) -> Vec<DeleteAclsFilterResult> {
    match deleted {
        Ok(per_filter) => per_filter
            .into_iter()
            .map(|deleted| {
                DeleteAclsFilterResult::default()
                    .with_matching_acls(deleted.iter().map(matching_acl).collect())
            })
            .collect(),
        Err(e) => (0..filters)
            .map(|_| filter_error(error_code(&e), Some(&e.to_string())))
            .collect(),
    }
}

impl LocalHandler for AclApis {
    fn api_key(&self) -> i16 {
        self.api_key
    }

    fn versions(&self) -> (i16, i16) {
        // Kafka 4 removed v0 of the ACL APIs (KIP-896).
        (1, 3)
    }

    fn handle(&self, request: &LocalRequest<'_>) -> Effect {
        let version = request.header.api_version;
        let flexible = version >= 2;
        let (api_version, correlation_id) = (version, request.header.correlation_id);
        let result = match self.api_key {
            DESCRIBE_ACLS => self
                .describe(request, flexible)
                .map(|b| encode(ApiKey::DescribeAcls, api_version, correlation_id, &b)),
            CREATE_ACLS => self
                .create(request, flexible)
                .map(|o| finish_outcome(o, ApiKey::CreateAcls, api_version, correlation_id)),
            _ => self
                .delete(request, flexible)
                .map(|o| finish_outcome(o, ApiKey::DeleteAcls, api_version, correlation_id)),
        };
        match result {
            Ok(effect) => effect,
            Err(e) => Effect::Close(e.into()),
        }
    }
}

/// Encodes an outcome now, or once its records are durable.
fn finish_outcome<T: kafka_protocol::protocol::Encodable + Send + 'static>(
    outcome: Outcome<T>,
    key: ApiKey,
    api_version: i16,
    correlation_id: i32,
) -> Effect {
    match outcome {
        Outcome::Now(body) => encode(key, api_version, correlation_id, &body),
        Outcome::Later(batch, then) => Effect::Persist(Persist::new(batch, move |stored, _now| {
            finish_outcome(then(stored), key, api_version, correlation_id)
        })),
    }
}

fn body_reader<'a>(request: &LocalRequest<'a>) -> Reader<'a> {
    Reader::new(request.body)
}

fn finish(r: &mut Reader<'_>, flexible: bool) -> Result<(), Malformed> {
    if flexible {
        r.skip_tagged_fields()?;
    }
    r.end_of_request();
    Ok(())
}

/// Reads one ACL filter. `None` when it contains an UNKNOWN element (Kafka rejects the request).
fn read_filter(
    r: &mut Reader<'_>,
    flexible: bool,
    top_level: bool,
) -> Result<Option<AclBindingFilter>, Malformed> {
    let resource_type = ResourceType::from_code(r.i8()?);
    let name = r.any_nullable_string(flexible)?;
    let pattern_type = PatternType::from_code(r.i8()?);
    let principal = r.any_nullable_string(flexible)?;
    let host = r.any_nullable_string(flexible)?;
    let operation = AclOperation::from_code(r.i8()?);
    let permission = PermissionType::from_code(r.i8()?);
    if flexible {
        r.skip_tagged_fields()?;
    }
    if top_level {
        r.end_of_request();
    }
    let unknown = resource_type == ResourceType::Unknown
        || pattern_type == PatternType::Unknown
        || operation == AclOperation::Unknown
        || permission == PermissionType::Unknown;
    if unknown {
        return Ok(None);
    }
    Ok(Some(AclBindingFilter {
        pattern: ResourcePatternFilter {
            resource_type,
            name,
            pattern_type,
        },
        entry: AccessControlEntryFilter {
            principal,
            host,
            operation,
            permission,
        },
    }))
}

fn group_by_resource(mut bindings: Vec<AclBinding>) -> Vec<DescribeAclsResource> {
    bindings.sort();
    let mut out: Vec<DescribeAclsResource> = Vec::new();
    let mut current: Option<ResourcePattern> = None;
    for b in bindings {
        let acl = AclDescription::default()
            .with_principal(StrBytes::from_string(b.entry.principal))
            .with_host(StrBytes::from_string(b.entry.host))
            .with_operation(b.entry.operation.code())
            .with_permission_type(b.entry.permission.code());
        if current.as_ref() != Some(&b.pattern) {
            out.push(
                DescribeAclsResource::default()
                    .with_resource_type(b.pattern.resource_type.code())
                    .with_resource_name(StrBytes::from_string(b.pattern.name.clone()))
                    .with_pattern_type(b.pattern.pattern_type.code()),
            );
            current = Some(b.pattern);
        }
        if let Some(last) = out.last_mut() {
            last.acls.push(acl);
        }
    }
    out
}

fn matching_acl(b: &AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl::default()
        .with_resource_type(b.pattern.resource_type.code())
        .with_resource_name(StrBytes::from_string(b.pattern.name.clone()))
        .with_pattern_type(b.pattern.pattern_type.code())
        .with_principal(StrBytes::from_string(b.entry.principal.clone()))
        .with_host(StrBytes::from_string(b.entry.host.clone()))
        .with_operation(b.entry.operation.code())
        .with_permission_type(b.entry.permission.code())
}

fn error_describe(
    response: DescribeAclsResponse,
    code: ErrorCode,
    message: &str,
) -> DescribeAclsResponse {
    response
        .with_error_code(code.0)
        .with_error_message(Some(StrBytes::from_string(message.to_owned())))
}

fn creation_result(code: ErrorCode, message: Option<String>) -> AclCreationResult {
    AclCreationResult::default()
        .with_error_code(code.0)
        .with_error_message(message.map(StrBytes::from_string))
}

fn filter_error(code: ErrorCode, message: Option<&str>) -> DeleteAclsFilterResult {
    DeleteAclsFilterResult::default()
        .with_error_code(code.0)
        .with_error_message(message.map(|m| StrBytes::from_string(m.to_owned())))
}

fn error_code(e: &AclAdminError) -> ErrorCode {
    match e {
        AclAdminError::Invalid(_) => ErrorCode::INVALID_REQUEST,
        _ => ErrorCode::UNKNOWN_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests;
