//! Kafka framing over one TCP connection: size-prefixed request out, size-prefixed response in.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The client id sent in every request header.
pub const CLIENT_ID: &str = "portcullis-login-load";

/// The largest response accepted. Pre-authentication responses are small (Kafka's ApiVersions
/// answer is under 1 KiB); a larger size field means a broken or hostile peer.
const MAX_RESPONSE: usize = 1 << 20;

/// What went wrong on the wire.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("i/o: {0}")]
    Io(std::io::ErrorKind),
    #[error("connection closed by the server")]
    Closed,
    #[error("response size {0} out of range")]
    Size(i32),
    #[error("cannot encode {0}")]
    Encode(&'static str),
    #[error("cannot decode {0}")]
    Decode(&'static str),
    #[error("{api} response has correlation id {got}, expected {expected}")]
    Correlation {
        api: &'static str,
        got: i32,
        expected: i32,
    },
}

impl From<std::io::Error> for WireError {
    fn from(e: std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::UnexpectedEof => WireError::Closed,
            kind => WireError::Io(kind),
        }
    }
}

/// One client connection.
pub struct Connection {
    stream: TcpStream,
    next_correlation_id: i32,
    out: BytesMut,
}

impl Connection {
    pub fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            next_correlation_id: 1,
            out: BytesMut::with_capacity(512),
        }
    }

    /// Sends `request` at `version` and reads its response.
    pub async fn round_trip<R: Request>(
        &mut self,
        api: &'static str,
        request: &R,
        version: i16,
    ) -> Result<R::Response, WireError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));

        self.out.clear();
        self.out.extend_from_slice(&[0; 4]);
        header
            .encode(&mut self.out, R::header_version(version))
            .map_err(|_| WireError::Encode(api))?;
        request
            .encode(&mut self.out, version)
            .map_err(|_| WireError::Encode(api))?;
        let size = i32::try_from(self.out.len() - 4).map_err(|_| WireError::Encode(api))?;
        if let Some(prefix) = self.out.get_mut(..4) {
            prefix.copy_from_slice(&size.to_be_bytes());
        }
        self.stream.write_all(&self.out).await?;

        let mut body = self.read_frame().await?;
        let response_header =
            ResponseHeader::decode(&mut body, R::Response::header_version(version))
                .map_err(|_| WireError::Decode(api))?;
        if response_header.correlation_id != correlation_id {
            return Err(WireError::Correlation {
                api,
                got: response_header.correlation_id,
                expected: correlation_id,
            });
        }
        R::Response::decode(&mut body, version).map_err(|_| WireError::Decode(api))
    }

    async fn read_frame(&mut self) -> Result<Bytes, WireError> {
        let size = self.stream.read_i32().await?;
        let len = usize::try_from(size)
            .ok()
            .filter(|&n| n <= MAX_RESPONSE)
            .ok_or(WireError::Size(size))?;
        let mut body = BytesMut::zeroed(len);
        self.stream.read_exact(&mut body).await?;
        Ok(body.freeze())
    }

    /// Ends the connection the way a client does after its work: a FIN, then the socket closes.
    pub async fn close(mut self) {
        // The login is already complete; a failing shutdown changes nothing for the result.
        let _ = self.stream.shutdown().await;
    }
}
