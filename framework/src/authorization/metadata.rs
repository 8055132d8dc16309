//! Metadata (API 3).
use bytes::Bytes;

use super::check::Checker;
use super::wire::PlanError;
use super::{Outcome, Refusal, Request, Response};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {}

pub(crate) fn enforce(_req: &Request<'_>, _chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    Ok(Outcome::Close("Metadata: not yet".into()))
}

impl Plan {
    pub(crate) fn apply(&self, r: &Response<'_>, _chk: &mut Checker<'_>) -> Result<Bytes, PlanError> {
        Ok(r.frame.clone())
    }
}
