//! The schema registry client (`--schema-registry` in the pipe mode,
//! `input.schema_registry` in the daemon): `GET
//! <url>/schemas/ids/<id>` over plain HTTP/1.1, with basic authentication
//! when a user is given, and bounded waits (5 s to connect, 10 s for the
//! answer). TLS is not spoken: an `https://` registry is reached through a
//! local proxy, or its schemas saved as files (`--schemas`).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::engine::formats::Fetch;

/// Most bytes of an answer read (a schema is far smaller).
const MAX_ANSWER_BYTES: u64 = 8 << 20;

/// A registry at `http://HOST:PORT[/PATH]`.
#[derive(Debug)]
pub struct HttpRegistry {
    host: String,
    path: String,
    /// `Basic …` for the Authorization header.
    auth: Option<String>,
}

impl HttpRegistry {
    /// Checks the URL (at start-up: a wrong one names itself then, not
    /// per record).
    pub fn new(url: &str, user: Option<&str>, password: Option<&str>) -> Result<Self, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("{url}: expected http://HOST:PORT[/PATH] (https is not spoken: use a local proxy, or --schemas)")
        })?;
        let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
        if host.is_empty() || host.to_socket_addrs().is_err() {
            return Err(format!("{url}: the host {host:?} does not resolve (expected HOST:PORT)"));
        }
        let path = format!("/{}", path.trim_end_matches('/')).trim_end_matches('/').to_string();
        let auth = user.map(|u| format!("Basic {}", base64(format!("{u}:{}", password.unwrap_or("")).as_bytes())));
        Ok(HttpRegistry { host: host.to_string(), path, auth })
    }

    fn get(&self, path: &str) -> Result<(u16, String), String> {
        let addr = self.host.to_socket_addrs().ok().and_then(|mut a| a.next()).ok_or("the host does not resolve")?;
        let mut s =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| format!("connecting: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        let auth = self.auth.as_ref().map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/vnd.schemaregistry.v1+json, application/json\r\n\
             {auth}Connection: close\r\n\r\n",
            self.host
        );
        s.write_all(request.as_bytes()).map_err(|e| format!("sending: {e}"))?;
        let mut answer = Vec::new();
        s.take(MAX_ANSWER_BYTES).read_to_end(&mut answer).map_err(|e| format!("reading the answer: {e}"))?;
        let text = String::from_utf8_lossy(&answer);
        let (head, body) = text.split_once("\r\n\r\n").ok_or("not an HTTP answer")?;
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or("not an HTTP answer")?;
        let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            dechunk(body)
        } else {
            body.to_string()
        };
        Ok((status, body))
    }
}

impl Fetch for HttpRegistry {
    fn fetch(&self, id: u32) -> Result<String, String> {
        let path = format!("{}/schemas/ids/{id}", self.path);
        let (status, body) = self.get(&path).map_err(|e| format!("registry {}{path}: {e}", self.host))?;
        match status {
            200 => Ok(body),
            404 => Err(format!("the registry has no schema with this id (HTTP 404 from {}{path})", self.host)),
            401 | 403 => Err(format!("the registry refused the credentials (HTTP {status} from {}{path})", self.host)),
            _ => {
                let excerpt: String = body.chars().take(120).collect();
                Err(format!("HTTP {status} from {}{path}: {excerpt}", self.host))
            }
        }
    }
}

/// A chunked body's data.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_auth_and_chunks() {
        assert_eq!(base64(b"user:pw"), "dXNlcjpwdw==");
        assert_eq!(base64(b"ab"), "YWI=");
        let r = HttpRegistry::new("http://127.0.0.1:8081/sr/", Some("user"), Some("pw")).unwrap();
        assert_eq!((r.host.as_str(), r.path.as_str()), ("127.0.0.1:8081", "/sr"));
        assert_eq!(r.auth.as_deref(), Some("Basic dXNlcjpwdw=="));
        assert_eq!(HttpRegistry::new("http://127.0.0.1:8081", None, None).unwrap().path, "");
        assert!(HttpRegistry::new("https://r:8081", None, None).unwrap_err().contains("https is not spoken"));
        assert!(HttpRegistry::new("http://", None, None).is_err());
        assert_eq!(dechunk("4\r\nabcd\r\n2\r\nef\r\n0\r\n\r\n"), "abcdef");
    }
}
