//! The response side's half of a client's upstream connection ([`UpstreamReader`]), handed to it
//! through the connection's response queue.

use bytes::BytesMut;

use super::sockets::UpstreamRead;

/// The response side's half of a client's upstream connection.
#[derive(Debug)]
pub struct UpstreamReader {
    /// The address connected to (for errors).
    pub address: String,
    /// The socket's read half.
    pub read: UpstreamRead,
    /// Bytes read while the connection was opened but not consumed.
    pub buffer: BytesMut,
}
