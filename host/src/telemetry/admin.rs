//! The admin endpoint: `GET /metrics` (Prometheus text format), `/healthz` (the process is up)
//! and `/readyz` (the upstream was discovered and the metadata store replayed), for scrapers,
//! load balancers and Kubernetes probes, and `POST /reload` (`portcullis reload`: the node reads
//! its configuration file again). A minimal HTTP/1.1 server: one request per connection, a
//! bounded request head, a read deadline; it never reads a body.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use prometheus::Encoder as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// Bytes of request head read at most; a longer head is answered 431.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

static UPSTREAM_DISCOVERED: AtomicBool = AtomicBool::new(false);
static STORE_REPLAYED: AtomicBool = AtomicBool::new(false);

/// Marks the upstream cluster as discovered (the listener accepts clients from now on).
pub fn set_upstream_discovered() {
    UPSTREAM_DISCOVERED.store(true, Ordering::Relaxed);
}

/// Marks the metadata store as replayed (the node was assembled).
pub fn set_store_replayed() {
    STORE_REPLAYED.store(true, Ordering::Relaxed);
}

/// The header naming the file `portcullis reload` was given: the node reloads only its own
/// file, and says so when the command names another.
pub const RELOAD_FILE_HEADER: &str = "x-portcullis-config";

/// What `POST /reload` does: the node's reloader, registered once it serves.
pub trait ReloadHandler: Send + Sync {
    /// Reloads (blocking), given the file the caller named, if any.
    fn reload(&self, named_file: Option<&str>) -> ReloadAnswer;
}

/// The answer to `POST /reload`.
#[derive(Debug)]
pub struct ReloadAnswer {
    /// Applied, refused, or not tried (another file was named).
    pub status: ReloadStatus,
    /// What changed or why nothing did, one line.
    pub text: String,
}

/// How a reload request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadStatus {
    /// The new configuration runs.
    Applied,
    /// Refused; the old configuration runs.
    Refused,
    /// The caller named a file this node does not run on.
    WrongFile,
}

static RELOAD: OnceLock<Arc<dyn ReloadHandler>> = OnceLock::new();

/// Registers what `POST /reload` runs (the first registration wins).
pub fn set_reload_handler(handler: Arc<dyn ReloadHandler>) {
    let _ = RELOAD.set(handler);
}

/// What `/readyz` answers: `None` when ready, else what is missing.
fn not_ready() -> Option<&'static str> {
    if !STORE_REPLAYED.load(Ordering::Relaxed) {
        Some("metadata store not replayed yet\n")
    } else if !UPSTREAM_DISCOVERED.load(Ordering::Relaxed) {
        Some("upstream cluster not discovered yet\n")
    } else {
        None
    }
}

/// Binds the admin endpoint on `address` (before the runtime serves clients, so that a port
/// conflict fails the start) and serves it until the runtime stops.
pub async fn serve(address: &str, registry: Option<prometheus::Registry>) -> anyhow::Result<()> {
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on telemetry.prometheus_address {address}"))?;
    let local = listener.local_addr()?;
    tracing::info!("admin endpoint on http://{local} (/metrics, /healthz, /readyz, POST /reload)");
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let registry = registry.clone();
                    tokio::spawn(async move {
                        if let Err(e) = answer(stream, registry.as_ref()).await {
                            tracing::debug!(error = %e, "admin request failed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "admin endpoint accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(())
}

/// Reads the request line (and the rest of the head, up to [`MAX_HEAD`]).
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(buf.get(..n).unwrap_or_default());
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(Some(head));
        }
        if head.len() > MAX_HEAD {
            return Ok(Some(Vec::new()));
        }
    }
}

async fn answer(
    mut stream: TcpStream,
    registry: Option<&prometheus::Registry>,
) -> anyhow::Result<()> {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(head) => head?,
        Err(_) => return Ok(()),
    };
    let Some(head) = head else { return Ok(()) };
    let (status, content_type, body) = match reload_request(&head) {
        Some(named) => reload(named).await,
        None => route(&head, registry),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.shutdown().await?;
    Ok(())
}

const TEXT: &str = "text/plain; charset=utf-8";

/// `Some(named file)` when the head is `POST /reload`.
fn reload_request(head: &[u8]) -> Option<Option<String>> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.lines();
    let mut parts = lines.next()?.split_whitespace();
    let (method, target) = (parts.next()?, parts.next()?);
    if method != "POST" || target.split('?').next() != Some("/reload") {
        return None;
    }
    let named = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case(RELOAD_FILE_HEADER)
            .then(|| value.trim().to_owned())
    });
    Some(named)
}

async fn reload(named: Option<String>) -> (&'static str, &'static str, Vec<u8>) {
    let Some(handler) = RELOAD.get().cloned() else {
        return (
            "503 Service Unavailable",
            TEXT,
            b"the node is not serving yet; try again\n".to_vec(),
        );
    };
    // A reload reads files: off the async workers.
    let answered = tokio::task::spawn_blocking(move || handler.reload(named.as_deref())).await;
    match answered {
        Ok(answer) => {
            let status = match answer.status {
                ReloadStatus::Applied => "200 OK",
                ReloadStatus::Refused => "422 Unprocessable Entity",
                ReloadStatus::WrongFile => "409 Conflict",
            };
            (status, TEXT, format!("{}\n", answer.text).into_bytes())
        }
        Err(e) => (
            "500 Internal Server Error",
            TEXT,
            format!("the reload did not finish: {e}\n").into_bytes(),
        ),
    }
}

/// The answer to a request head: status line, content type, body.
fn route(
    head: &[u8],
    registry: Option<&prometheus::Registry>,
) -> (&'static str, &'static str, Vec<u8>) {
    if head.is_empty() {
        return ("431 Request Header Fields Too Large", TEXT, Vec::new());
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" && method != "HEAD" {
        return (
            "405 Method Not Allowed",
            TEXT,
            b"only GET, and POST /reload\n".to_vec(),
        );
    }
    let path = target.split('?').next().unwrap_or("");
    match path {
        "/healthz" => ("200 OK", TEXT, b"ok\n".to_vec()),
        "/readyz" => match not_ready() {
            None => ("200 OK", TEXT, b"ready\n".to_vec()),
            Some(why) => ("503 Service Unavailable", TEXT, why.as_bytes().to_vec()),
        },
        "/metrics" => match registry {
            Some(registry) => {
                let encoder = prometheus::TextEncoder::new();
                let mut body = Vec::new();
                match encoder.encode(&registry.gather(), &mut body) {
                    Ok(()) => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body),
                    Err(e) => (
                        "500 Internal Server Error",
                        TEXT,
                        format!("{e}\n").into_bytes(),
                    ),
                }
            }
            None => ("404 Not Found", TEXT, b"no metrics registry\n".to_vec()),
        },
        _ => (
            "404 Not Found",
            TEXT,
            b"not found: try /metrics, /healthz, /readyz, POST /reload\n".to_vec(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route(b"GET /healthz HTTP/1.1\r\n\r\n", None).0, "200 OK");
        assert_eq!(
            route(b"POST /healthz HTTP/1.1\r\n\r\n", None).0,
            "405 Method Not Allowed"
        );
        assert_eq!(
            route(b"GET /nope HTTP/1.1\r\n\r\n", None).0,
            "404 Not Found"
        );
        assert_eq!(route(b"", None).0, "431 Request Header Fields Too Large");
        assert_eq!(route(b"\xff\xfe\r\n\r\n", None).0, "405 Method Not Allowed");
    }

    #[test]
    fn reload_requests_carry_the_named_file() {
        assert_eq!(reload_request(b"GET /reload HTTP/1.1\r\n\r\n"), None);
        assert_eq!(
            reload_request(b"POST /reload HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(None)
        );
        assert_eq!(
            reload_request(b"POST /reload HTTP/1.1\r\nX-Portcullis-Config: /etc/p.toml\r\n\r\n"),
            Some(Some("/etc/p.toml".to_owned()))
        );
    }

    #[test]
    fn metrics_render_prometheus_text() {
        let registry = prometheus::Registry::new();
        let counter = prometheus::IntCounter::new("x_total", "x").unwrap();
        registry.register(Box::new(counter.clone())).unwrap();
        counter.inc();
        let (status, _, body) = route(b"GET /metrics HTTP/1.1\r\n\r\n", Some(&registry));
        assert_eq!(status, "200 OK");
        assert!(String::from_utf8(body).unwrap().contains("x_total 1"));
    }
}
