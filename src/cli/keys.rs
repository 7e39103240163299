//! `dedupd keys delete KEY --admin URL`: a client of the daemon's key
//! endpoints, so that an operator needs no HTTP tool. Plain HTTP/1.1 over a
//! TCP connection (the admin endpoint serves plain HTTP; put a TLS proxy in
//! front of it and use that proxy's own client if needed).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Forget a key (`DELETE /v1/keys/{key}`): a copy of it sent next inside
    /// the window is delivered again. Needs `filter.deletable = true`.
    /// Prints the JSON answer; exits non-zero unless the key was deleted.
    Delete(DeleteArgs),
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The dedup key, as the daemon extracts it (`input.key`).
    pub key: String,
    /// The admin endpoint, e.g. `http://127.0.0.1:9464`.
    #[arg(long)]
    pub admin: String,
    /// The bearer token of the key endpoints; default: $DEDUPD_ADMIN_TOKEN.
    /// (An environment variable keeps it out of the process list.)
    #[arg(long)]
    pub token: Option<String>,
}

pub fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Delete(args) => {
            let path = format!("/v1/keys/{}", percent_encode(args.key.as_bytes()));
            let token = args.token.or_else(|| std::env::var(crate::config::ADMIN_TOKEN_ENV).ok());
            let (status, body) = request(&args.admin, "DELETE", &path, token.as_deref())?;
            println!("{}", body.trim_end());
            if status != 200 {
                bail!("the key was not deleted (HTTP {status})");
            }
            Ok(())
        }
    }
}

/// Sends one request and returns the status and body.
fn request(base: &str, method: &str, path: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    let Some(host) = base.strip_prefix("http://").map(|h| h.trim_end_matches('/')) else {
        bail!("invalid --admin {base}: expected http://HOST:PORT");
    };
    let mut stream = TcpStream::connect(host).with_context(|| format!("connecting to {host}"))?;
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

/// Every byte but unreserved ones as %XX (keys are arbitrary bytes).
fn percent_encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_are_percent_encoded() {
        assert_eq!(super::percent_encode(b"a b/c%"), "a%20b%2Fc%25");
    }
}
