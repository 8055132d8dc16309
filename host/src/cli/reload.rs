//! `reload`: asks a running node to read its configuration file again, over its admin endpoint
//! (`[telemetry] prometheus_address`, `POST /reload`), and prints what changed or why the
//! reload was refused.

use std::io::{Read as _, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

/// How long the node may take to answer (a reload reads and checks files).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// The override of the admin address, as `serve` reads it.
const ADMIN_ENV: &str = "PORTCULLIS_TELEMETRY__PROMETHEUS_ADDRESS";

/// Why `portcullis reload` failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReloadCommandError {
    /// The file names no admin endpoint.
    #[error("{}: no [telemetry] prometheus_address: the node has no admin endpoint to ask (pass --admin HOST:PORT, or reload with SIGHUP)", .0.display())]
    NoAdmin(std::path::PathBuf),
    /// The admin address is not `IP:PORT`.
    #[error("telemetry.prometheus_address `{0}` is not IP:PORT")]
    BadAddress(String),
    /// The node could not be reached or did not answer.
    #[error("cannot reach the node's admin endpoint at {address}: {source}")]
    Unreachable {
        /// Where.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The node answered with a refusal (the old configuration keeps running).
    #[error("{0}")]
    Refused(String),
    /// The answer is not HTTP.
    #[error("the admin endpoint at {0} answered something that is not HTTP")]
    NotHttp(SocketAddr),
}

/// `portcullis reload --config FILE [--admin HOST:PORT]`.
pub(super) fn reload(
    path: &Path,
    admin: Option<&str>,
    out: &mut impl Write,
) -> Result<(), ReloadCommandError> {
    let address = match admin {
        Some(address) => address.to_owned(),
        None => admin_address(path)?,
    };
    let mut address: SocketAddr = address
        .parse()
        .map_err(|_| ReloadCommandError::BadAddress(address.clone()))?;
    // A node listening on every address is asked on loopback.
    if address.ip().is_unspecified() {
        address.set_ip(if address.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    let named = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let unreachable = |source| ReloadCommandError::Unreachable { address, source };
    let mut stream =
        TcpStream::connect_timeout(&address, Duration::from_secs(5)).map_err(unreachable)?;
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .map_err(unreachable)?;
    // The path goes in a header: HTTP header values must be one line.
    let named = named.display().to_string().replace(['\r', '\n'], " ");
    let request = format!(
        "POST /reload HTTP/1.1\r\nHost: {address}\r\nX-Portcullis-Config: {named}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(unreachable)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).map_err(unreachable)?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or(ReloadCommandError::NotHttp(address))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .ok_or(ReloadCommandError::NotHttp(address))?;
    if status == "200" {
        // A failed write to stdout is not the node's refusal; the reload happened.
        let _ = write!(out, "{body}");
        Ok(())
    } else {
        Err(ReloadCommandError::Refused(body.trim_end().to_owned()))
    }
}

/// The node's admin address: the environment override, else the file's
/// `[telemetry] prometheus_address`. A file that no longer parses (the reload the node will
/// refuse) is still searched for the key, so that the node can say why it refuses.
fn admin_address(path: &Path) -> Result<String, ReloadCommandError> {
    if let Ok(address) = std::env::var(ADMIN_ENV) {
        return Ok(address.trim_matches('"').to_owned());
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let parsed = toml::from_str::<toml::Table>(&text).ok().and_then(|table| {
        table
            .get("telemetry")?
            .get("prometheus_address")?
            .as_str()
            .map(str::to_owned)
    });
    parsed
        .or_else(|| {
            text.lines().find_map(|line| {
                let one: toml::Table = toml::from_str(line.trim()).ok()?;
                one.get("prometheus_address")?.as_str().map(str::to_owned)
            })
        })
        .ok_or_else(|| ReloadCommandError::NoAdmin(path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_address_is_found_in_a_broken_file_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(
            &path,
            "[telemetry]\nprometheus_address = \"127.0.0.1:9464\"\n[listener\n",
        )
        .unwrap();
        if std::env::var(ADMIN_ENV).is_err() {
            assert_eq!(admin_address(&path).unwrap(), "127.0.0.1:9464");
        }
        std::fs::write(&path, "[node]\nid = 1\n").unwrap();
        if std::env::var(ADMIN_ENV).is_err() {
            assert!(matches!(
                admin_address(&path),
                Err(ReloadCommandError::NoAdmin(_))
            ));
        }
    }
}
