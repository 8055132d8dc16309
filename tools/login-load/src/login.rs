//! One full login: connect, ApiVersions, SaslHandshake, SaslAuthenticate rounds, close.

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::net::TcpStream;

use crate::mechanisms::ClientFactory;
use crate::wire::{Connection, WireError, CLIENT_ID};

const API_VERSIONS_VERSION: i16 = 3;
const HANDSHAKE_VERSION: i16 = 1;
/// The newest SaslAuthenticate the tool speaks; the server's ApiVersions may lower it.
const MAX_AUTHENTICATE_VERSION: i16 = 2;
/// SCRAM needs two rounds, PLAIN one; more means the server is looping.
const MAX_ROUNDS: usize = 4;

/// Why a login failed. The `Display` text is the reason the report counts, so it holds no
/// per-login detail (no nonces, no addresses) and never any secret.
#[derive(Debug, thiserror::Error)]
pub enum LoginFailure {
    #[error("connect: {0:?}")]
    Connect(std::io::ErrorKind),
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("ApiVersions: {0}")]
    ApiVersions(String),
    #[error("server does not advertise SaslAuthenticate")]
    NoAuthenticate,
    #[error("SaslHandshake: {0}")]
    Handshake(String),
    #[error("SaslAuthenticate: {0}")]
    Authenticate(String),
    #[error("client: {0}")]
    Client(String),
    #[error("server did not finish the exchange in {MAX_ROUNDS} rounds")]
    TooManyRounds,
}

fn error_name(code: i16) -> String {
    ResponseError::try_from_code(code).map_or_else(|| "none".to_owned(), |e| e.to_string())
}

/// Keeps a server message short and on one line for the reason counts.
fn short(message: Option<&StrBytes>) -> String {
    message
        .map(|m| {
            m.as_str()
                .chars()
                .take(120)
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect::<String>()
        })
        .filter(|m| !m.is_empty())
        .map(|m| format!(" ({m})"))
        .unwrap_or_default()
}

pub async fn login(bootstrap: &str, clients: &ClientFactory) -> Result<(), LoginFailure> {
    let stream = TcpStream::connect(bootstrap)
        .await
        .map_err(|e| LoginFailure::Connect(e.kind()))?;
    // A login is a handful of small request/response pairs: Nagle would add delay.
    stream
        .set_nodelay(true)
        .map_err(|e| LoginFailure::Connect(e.kind()))?;
    let mut conn = Connection::new(stream);

    let versions = conn
        .round_trip(
            "ApiVersions",
            &ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str(CLIENT_ID))
                .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION"))),
            API_VERSIONS_VERSION,
        )
        .await?;
    if versions.error_code != 0 {
        return Err(LoginFailure::ApiVersions(error_name(versions.error_code)));
    }
    let authenticate_version = versions
        .api_keys
        .iter()
        .find(|v| v.api_key == ApiKey::SaslAuthenticate as i16)
        .map(|v| v.max_version.min(MAX_AUTHENTICATE_VERSION))
        .filter(|&v| v >= 0)
        .ok_or(LoginFailure::NoAuthenticate)?;

    let mut exchange = clients.start();
    let mechanism = clients.mechanism_name();
    let handshake = conn
        .round_trip(
            "SaslHandshake",
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism)),
            HANDSHAKE_VERSION,
        )
        .await?;
    if handshake.error_code != 0 {
        return Err(LoginFailure::Handshake(error_name(handshake.error_code)));
    }

    let mut token = exchange.initial().map_err(|e| LoginFailure::Client(e.0))?;
    for _ in 0..MAX_ROUNDS {
        let response = conn
            .round_trip(
                "SaslAuthenticate",
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
                authenticate_version,
            )
            .await?;
        if response.error_code != 0 {
            return Err(LoginFailure::Authenticate(format!(
                "{}{}",
                error_name(response.error_code),
                short(response.error_message.as_ref())
            )));
        }
        match exchange
            .step(&response.auth_bytes)
            .map_err(|e| LoginFailure::Client(e.0))?
        {
            Some(next) => token = next,
            None if exchange.is_complete() => {
                conn.close().await;
                return Ok(());
            }
            None => {
                return Err(LoginFailure::Client(
                    "exchange ended without completing".to_owned(),
                ))
            }
        }
    }
    Err(LoginFailure::TooManyRounds)
}
