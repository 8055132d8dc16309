//! Cluster APIs.
use bytes::Bytes;

use super::check::Checker;
use super::wire::PlanError;
use super::{Outcome, Refusal, Request, Response};

pub(crate) fn enforce(_req: &Request<'_>, _chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    Ok(Outcome::Close("not yet".into()))
}
pub(crate) fn unchecked(req: &Request<'_>, _chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    Ok(req.unchanged())
}
pub(crate) fn describe_cluster_response(r: &Response<'_>, _ops: bool, _c: &mut Checker<'_>) -> Result<Bytes, PlanError> { Ok(r.frame.clone()) }
