//! Group APIs.
use bytes::Bytes;

use super::check::Checker;
use super::wire::PlanError;
use super::{Outcome, Refusal, Request, Response};

macro_rules! stub { ($($f:ident),*) => { $(pub(crate) fn $f(_req: &Request<'_>, _chk: &mut Checker<'_>) -> Result<Outcome, Refusal> { Ok(Outcome::Close("not yet".into())) })* } }
stub!(membership, offset_commit, offset_fetch, describe_groups, list_groups, delete_groups, find_coordinator, offset_delete, consumer_group_heartbeat, consumer_group_describe);

#[derive(Clone, Debug, PartialEq, Eq)] pub(crate) struct OffsetCommitMerge {}
#[derive(Clone, Debug, PartialEq, Eq)] pub(crate) struct OffsetFetchPlan {}
#[derive(Clone, Debug, PartialEq, Eq)] pub(crate) struct DescribeGroupsMerge {}
#[derive(Clone, Debug, PartialEq, Eq)] pub(crate) struct DeleteGroupsMerge {}
#[derive(Clone, Debug, PartialEq, Eq)] pub(crate) struct FindCoordinatorMerge {}
impl OffsetCommitMerge { pub(crate) fn apply(&self, r: &Response<'_>) -> Result<Bytes, PlanError> { Ok(r.frame.clone()) } }
impl OffsetFetchPlan { pub(crate) fn apply(&self, r: &Response<'_>, _c: &mut Checker<'_>) -> Result<Bytes, PlanError> { Ok(r.frame.clone()) } }
impl DescribeGroupsMerge { pub(crate) fn apply_describe_groups(&self, r: &Response<'_>) -> Result<Bytes, PlanError> { Ok(r.frame.clone()) } pub(crate) fn apply_consumer_group_describe(&self, r: &Response<'_>) -> Result<Bytes, PlanError> { Ok(r.frame.clone()) } }
impl DeleteGroupsMerge { pub(crate) fn apply(&self, r: &Response<'_>) -> Result<Bytes, PlanError> { Ok(r.frame.clone()) } }
impl FindCoordinatorMerge { pub(crate) fn apply(&self, r: &Response<'_>) -> Result<Bytes, PlanError> { Ok(r.frame.clone()) } }
pub(crate) fn filter_list_groups(r: &Response<'_>, _c: &mut Checker<'_>) -> Result<Bytes, PlanError> { Ok(r.frame.clone()) }
