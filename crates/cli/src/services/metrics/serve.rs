//! The `/metrics` endpoint of `--metrics-listen ADDR`: a minimal HTTP/1.x server on tokio.
//!
//! `GET` or `HEAD /metrics` answers the metrics (rendered on a blocking thread: it reads the
//! ledger) in the format the request's `Accept` header asks for, as Prometheus' own client
//! libraries do: OpenMetrics when it names `application/openmetrics-text` before `text/plain`
//! (as Prometheus does), else the Prometheus text format 0.0.4; any other path is 404, any other method 405, anything unreadable 400. Every answer
//! closes the connection. A request must arrive whole within `READ_TIMEOUT` and fit in
//! `MAX_REQUEST` bytes; at most `MAX_CONNECTIONS` are served at once (more are closed at
//! once). Nothing a client sends can panic it or stop the process it serves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::exposition::Format;
use crate::services::exit::{Code, fail};

/// What renders the metrics in a format (it may block: it reads the ledger).
pub type MetricsSource = Arc<dyn Fn(Format) -> anyhow::Result<String> + Send + Sync>;

const MAX_REQUEST: usize = 8 * 1024;
const READ_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_CONNECTIONS: usize = 16;
const LINGER: Duration = Duration::from_secs(1);
const MAX_LINGER_BYTES: usize = 64 * 1024;

/// Binds `addr` at once, before the process registers anywhere (a bad or busy address is
/// exit 2, naming it).
pub fn bind(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    let refused = |err: std::io::Error| {
        fail(
            Code::Usage,
            format!("--metrics-listen {addr}: cannot listen: {err}"),
        )
    };
    let listener = std::net::TcpListener::bind(addr).map_err(refused)?;
    listener.set_nonblocking(true).map_err(refused)?;
    Ok(listener)
}

/// Serves `/metrics` on `listener` until the runtime ends (call it inside the runtime).
pub fn spawn(listener: std::net::TcpListener, source: MetricsSource) -> anyhow::Result<()> {
    let listener = TcpListener::from_std(listener).map_err(|err| {
        fail(
            Code::Usage,
            format!("--metrics-listen: cannot listen: {err}"),
        )
    })?;
    tracing::info!(addr = ?listener.local_addr().ok(), "serving /metrics");
    tokio::spawn(async move {
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!(error = %err, "cannot accept a metrics connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                continue;
            };
            let source = Arc::clone(&source);
            tokio::spawn(async move {
                let _slot = slot;
                if let Err(err) = answer(stream, source).await {
                    tracing::debug!(error = %err, "metrics connection ended");
                }
            });
        }
    });
    Ok(())
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET /metrics` (`head`: `HEAD`), answered in `format`.
    Metrics {
        head: bool,
        format: Format,
    },
    NotFound,
    MethodNotAllowed,
    Malformed,
}

/// Reads a request head: its first line decides, and its `Accept` headers the format.
pub fn parse(head: &[u8]) -> Request {
    let Ok(text) = std::str::from_utf8(head) else {
        return Request::Malformed;
    };
    let mut lines = text.lines();
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Request::Malformed;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Request::Malformed;
    }
    let path = target.split('?').next().unwrap_or(target);
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let accept: Vec<&str> = lines
                .filter_map(|l| l.split_once(':'))
                .filter(|(name, _)| name.trim().eq_ignore_ascii_case("accept"))
                .map(|(_, value)| value)
                .collect();
            Request::Metrics {
                head: method == "HEAD",
                format: negotiate(&accept.join(",")),
            }
        }
        ("GET" | "HEAD", _) => Request::NotFound,
        _ => Request::MethodNotAllowed,
    }
}

/// The format an `Accept` header asks for, as Prometheus' Go client library picks it: the
/// media ranges by falling quality (`q`, 1 when not given; 0 is never), the first that is
/// `application/openmetrics-text` (version 1.0.0 or 0.0.1, or none) or `text/plain` (version
/// 0.0.4, or none); the Prometheus text format when none is.
pub fn negotiate(accept: &str) -> Format {
    let mut ranges: Vec<(f64, Option<Format>)> = accept
        .split(',')
        .map(|range| {
            let mut params = range.split(';').map(str::trim);
            let media = params.next().unwrap_or("").to_ascii_lowercase();
            let (mut q, mut version) = (1.0, None);
            for (key, value) in params.filter_map(|p| p.split_once('=')) {
                let value = value.trim().trim_matches('"');
                match key.trim().to_ascii_lowercase().as_str() {
                    "q" => q = value.parse().unwrap_or(0.0),
                    "version" => version = Some(value.to_owned()),
                    _ => {}
                }
            }
            let format = match (media.as_str(), version.as_deref()) {
                ("application/openmetrics-text", None | Some("1.0.0" | "0.0.1")) => {
                    Some(Format::OpenMetrics)
                }
                ("text/plain", None | Some("0.0.4")) => Some(Format::Prometheus),
                _ => None,
            };
            (q, format)
        })
        .filter(|(q, _)| *q > 0.0)
        .collect();
    // A stable sort: of equal quality, the one named first.
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranges
        .into_iter()
        .find_map(|(_, format)| format)
        .unwrap_or(Format::Prometheus)
}

async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Ok(Some(head));
        }
        if head.len() > MAX_REQUEST {
            return Ok(Some(Vec::new()));
        }
    }
}

async fn answer(mut stream: TcpStream, source: MetricsSource) -> std::io::Result<()> {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(head))) => head,
        Ok(Ok(None)) => return Ok(()),
        Ok(Err(err)) => return Err(err),
        Err(_) => Vec::new(),
    };
    let (status, content_type, body, head_only) = match parse(&head) {
        Request::Metrics { head, format } => {
            match tokio::task::spawn_blocking(move || source(format)).await {
                Ok(Ok(text)) => ("200 OK", format.content_type(), text, head),
                Ok(Err(err)) => (
                    "503 Service Unavailable",
                    "text/plain; charset=utf-8",
                    format!("hermes: cannot read the ledger: {err:#}\n"),
                    head,
                ),
                Err(_) => (
                    "500 Internal Server Error",
                    "text/plain; charset=utf-8",
                    "hermes: rendering the metrics failed\n".to_owned(),
                    head,
                ),
            }
        }
        Request::NotFound => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: the metrics are at /metrics\n".to_owned(),
            false,
        ),
        Request::MethodNotAllowed => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET and HEAD\n".to_owned(),
            false,
        ),
        Request::Malformed => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "bad request\n".to_owned(),
            false,
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        body.len(),
        if status.starts_with("405") {
            "Allow: GET, HEAD\r\n"
        } else {
            ""
        }
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&out).await?;
    stream.shutdown().await?;
    // A lingering close: what the client still sends (a head too long) is read and dropped
    // for a moment, so closing with unread input does not reset the connection before the
    // client has read the answer.
    let _ = tokio::time::timeout(LINGER, async {
        let mut buf = [0u8; 4096];
        let mut total = 0;
        while total < MAX_LINGER_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_and_head_of_metrics_are_served_and_nothing_panics() {
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\nHost: x"),
            Request::Metrics {
                head: false,
                format: Format::Prometheus
            }
        );
        assert_eq!(
            parse(b"HEAD /metrics?x=1 HTTP/1.0"),
            Request::Metrics {
                head: true,
                format: Format::Prometheus
            }
        );
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\nACCEPT: application/openmetrics-text"),
            Request::Metrics {
                head: false,
                format: Format::OpenMetrics
            }
        );
        assert_eq!(parse(b"GET / HTTP/1.1"), Request::NotFound);
        assert_eq!(parse(b"POST /metrics HTTP/1.1"), Request::MethodNotAllowed);
        for bad in [
            &b""[..],
            b"GET",
            b"GET /metrics",
            b"GET metrics HTTP/1.1",
            b"GET /metrics SPDY/3",
            b"GET /metrics HTTP/1.1 extra",
            b"\xff\xfe GET",
        ] {
            assert_eq!(parse(bad), Request::Malformed, "{bad:?}");
        }
    }

    #[test]
    fn the_accept_header_picks_the_format_as_prometheus_client_libraries_do() {
        // What Prometheus 2.x sends.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let cases = [
            (prometheus, Format::OpenMetrics),
            ("application/openmetrics-text", Format::OpenMetrics),
            (
                "Application/OpenMetrics-Text; version=\"1.0.0\"",
                Format::OpenMetrics,
            ),
            ("text/plain;version=0.0.4", Format::Prometheus),
            (
                "text/plain;q=0.9, application/openmetrics-text;q=0.5",
                Format::Prometheus,
            ),
            (
                "text/plain;q=0.5, application/openmetrics-text",
                Format::OpenMetrics,
            ),
            ("application/openmetrics-text;q=0", Format::Prometheus),
            (
                "application/openmetrics-text;version=2.0.0",
                Format::Prometheus,
            ),
            ("*/*", Format::Prometheus),
            ("", Format::Prometheus),
            (";;;q=x,,,=;", Format::Prometheus),
            ("application/openmetrics-text;q=nan", Format::Prometheus),
        ];
        for (accept, want) in cases {
            assert_eq!(negotiate(accept), want, "{accept:?}");
        }
        // Two Accept headers read as one list.
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\naccept: text/plain;q=0.1\r\nAccept: application/openmetrics-text"),
            Request::Metrics {
                head: false,
                format: Format::OpenMetrics
            }
        );
    }
}
