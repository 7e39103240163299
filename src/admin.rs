//! The HTTP admin endpoint: `/metrics` (Prometheus text), `/healthz`,
//! `/readyz` (ready once every assigned slice is restored) and `/v1/slices`
//! (JSON per slice). A deliberately small HTTP/1.1 server: GET only, one
//! request per connection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// What one slice looks like from outside.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SliceStatus {
    pub slice: u32,
    pub next_offset: u64,
    /// The release position up to which judgments are replayed silently.
    pub replaying_until: Option<String>,
    pub clock_ms: Option<u64>,
    pub generations: usize,
    pub density: f64,
    pub estimated_fpr: f64,
    pub memory_bytes: usize,
    pub distinct: u64,
    pub duplicates: u64,
    pub invalid: u64,
    pub resends: u64,
    /// Records judged after arriving more than input.lateness late.
    pub late: u64,
    /// Records waiting for the watermark.
    pub waiting: u64,
    pub last_checkpoint_offset: Option<u64>,
}

/// Answers `/v1/lookup` for a key.
pub type LookupFn = Box<dyn Fn(&[u8]) -> serde_json::Value + Send + Sync>;

/// Shared between the workers (writers) and the admin endpoint (reader).
#[derive(Default)]
pub struct Status {
    /// The group assignment happened and no restore is in progress.
    pub ready: AtomicBool,
    /// A fatal error stops the daemon; until then the endpoint reports it.
    pub healthy: AtomicBool,
    pub slices: Mutex<BTreeMap<u32, SliceStatus>>,
    /// Set by the slice workers once they run.
    pub lookup: Mutex<Option<LookupFn>>,
}

impl Status {
    pub fn new() -> Arc<Self> {
        let s = Status::default();
        s.healthy.store(true, Ordering::Relaxed);
        Arc::new(s)
    }
}

/// Serves until the task is dropped.
pub async fn serve(listener: TcpListener, status: Arc<Status>, metrics: Arc<Metrics>) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else { continue };
        let (status, metrics) = (status.clone(), metrics.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut len = 0;
            // Read the request head (we need only its first line).
            while len < buf.len() {
                match socket.read(&mut buf[len..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => len += n,
                }
                if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            let head = String::from_utf8_lossy(&buf[..len]);
            let mut parts = head.split_whitespace();
            let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let (code, ctype, body) = respond(method, target, &status, &metrics);
            let reply = format!(
                "HTTP/1.1 {code}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(reply.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
    }
}

fn respond(method: &str, target: &str, status: &Status, metrics: &Metrics) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != "GET" {
        return ("405 Method Not Allowed", TEXT, "GET only\n".into());
    }
    let path = target.split('?').next().unwrap_or("");
    match path {
        "/metrics" => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", metrics.render()),
        "/healthz" if status.healthy.load(Ordering::Relaxed) => ("200 OK", TEXT, "ok\n".into()),
        "/healthz" => ("503 Service Unavailable", TEXT, "failing\n".into()),
        "/readyz" if status.ready.load(Ordering::Relaxed) => ("200 OK", TEXT, "ready\n".into()),
        "/readyz" => ("503 Service Unavailable", TEXT, "not ready: joining the group or restoring slices\n".into()),
        "/v1/lookup" => {
            let key = target.split_once('?').and_then(|(_, q)| query_param(q, "key"));
            let Some(key) = key else {
                return ("400 Bad Request", TEXT, "usage: /v1/lookup?key=URL-ENCODED-KEY\n".into());
            };
            match status.lookup.lock().expect("status lock").as_ref() {
                Some(lookup) => {
                    ("200 OK", "application/json", serde_json::to_string_pretty(&lookup(&key)).expect("json"))
                }
                None => ("503 Service Unavailable", TEXT, "the slice workers are not running yet\n".into()),
            }
        }
        "/v1/slices" => {
            let slices: Vec<SliceStatus> = status.slices.lock().expect("status lock").values().cloned().collect();
            ("200 OK", "application/json", serde_json::to_string_pretty(&slices).expect("status serialises"))
        }
        _ => ("404 Not Found", TEXT, "try /metrics, /healthz, /readyz, /v1/slices or /v1/lookup?key=...\n".into()),
    }
}

/// The percent-decoded value of `name` in a query string.
fn query_param(query: &str, name: &str) -> Option<Vec<u8>> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], escaped) {
            (_, Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', None) => {
                out.push(b' ');
                i += 1;
            }
            (b, None) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_keys_are_percent_decoded() {
        assert_eq!(query_param("key=click%2D42&x=1", "key"), Some(b"click-42".to_vec()));
        assert_eq!(query_param("a=1&key=a+b%20c", "key"), Some(b"a b c".to_vec()));
        assert_eq!(query_param("key=%ff%", "key"), Some(vec![0xff, b'%']));
        assert_eq!(query_param("key=%4", "key"), Some(b"%4".to_vec()));
        assert_eq!(query_param("other=1", "key"), None);
    }
}
