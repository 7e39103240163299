//! The command line's client of the admin endpoint (`dedupd keys`,
//! `dedupd status`): plain HTTP/1.1 over a TCP connection, as the endpoint
//! serves plain HTTP (behind a TLS proxy, use that proxy's own client).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, bail};

/// Sends one request and returns the status and body.
pub(super) fn request(base: &str, method: &str, path: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    let Some(host) = base.strip_prefix("http://").map(|h| h.trim_end_matches('/')) else {
        bail!("invalid --admin {base}: expected http://HOST:PORT");
    };
    let addr = host
        .to_socket_addrs()
        .with_context(|| format!("invalid --admin {base}: expected http://HOST:PORT"))?
        .next()
        .with_context(|| format!("{host} resolves to no address"))?;
    // A member that is gone must not hang the command for the system's connect timeout.
    let mut stream =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).with_context(|| format!("connecting to {host}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\nContent-Length: 0\r\n\r\n")?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).with_context(|| format!("reading the answer of {host}"))?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("not an HTTP answer from {host}: {head:?}"))?;
    // Bodies of one chunk or with a length: the admin endpoint's JSON answers.
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body.split("\r\n").skip(1).step_by(2).collect::<Vec<_>>().join("")
    } else {
        body.to_string()
    };
    Ok((status, body))
}
