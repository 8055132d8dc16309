//! Reading a client's next request: before authentication, a large frame is read only once the
//! node's pre-authentication buffer budget covers it.

use std::sync::Arc;

use super::admission::{Admission, PreAuthReservation, PRE_AUTH_UNRESERVED_BYTES};
use super::frames::{FrameError, FrameReader, ReadOutcome, ReadSource, BURST_READ, MIN_READ};

/// What reading the client produced.
pub(super) enum Incoming {
    Read(ReadOutcome),
    /// A large pre-authentication frame the budget cannot cover (its announced size).
    OverBudget(usize),
}

/// Reads the next client frame. Before authentication a frame over
/// [`PRE_AUTH_UNRESERVED_BYTES`] is read only once its size is reserved from the node's
/// pre-authentication budget (kept in `reservation` until the frame is handled). Cancel-safe: the
/// reader keeps what it read, and a reservation made before a cancellation stays held.
pub(super) async fn read_request<R: ReadSource>(
    reader: &mut FrameReader<R>,
    max_frame: usize,
    pre_auth: bool,
    admission: &Arc<Admission>,
    reservation: &mut Option<PreAuthReservation>,
) -> Result<Incoming, FrameError> {
    // Before authentication reads stay small: an unauthenticated connection holds its buffer.
    let burst = if pre_auth { MIN_READ } else { BURST_READ };
    if !pre_auth || max_frame <= PRE_AUTH_UNRESERVED_BYTES || reservation.is_some() {
        return reader
            .next_frame(max_frame, burst)
            .await
            .map(Incoming::Read);
    }
    match reader.next_frame(PRE_AUTH_UNRESERVED_BYTES, burst).await? {
        ReadOutcome::TooLarge(size) if size <= max_frame => {
            match admission.reserve_pre_auth(size) {
                Some(reserved) => {
                    *reservation = Some(reserved);
                    reader
                        .next_frame(max_frame, burst)
                        .await
                        .map(Incoming::Read)
                }
                None => Ok(Incoming::OverBudget(size)),
            }
        }
        other => Ok(Incoming::Read(other)),
    }
}
