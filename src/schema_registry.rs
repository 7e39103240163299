//! The schema registry client (`--schema-registry` in the pipe mode,
//! `input.schema_registry` in the daemon): `GET
//! <url>/schemas/ids/<id>` over plain HTTP/1.1, with basic authentication
//! when a user is given, and bounded waits (5 s to connect, 10 s for the
//! answer). TLS is not spoken: an `https://` registry is reached through a
//! local proxy, or its schemas saved as files (`--schemas`).
//!
//! Only a definite answer is passed on as a failure: the registry has no
//! such id (HTTP 404). Anything else — no connection, a timeout, 5xx, 429,
//! refused credentials, an answer that is not HTTP — is a fault outside the
//! record, not bad data: the fetch waits and asks again with backoff, so
//! the record waits and no verdict depends on when the network failed
//! (invariant 1). The daemon waits until the registry answers (`/readyz`
//! says so meanwhile, [`outage`]); the pipe mode gives up after
//! [`Waiting::Until`] and stops without judging the record.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::formats::Fetch;

/// The `kind` label of `dedupd_schema_registry_errors_total`: every failed
/// request, the definite `not_found` and the faults that are waited out.
pub const ERROR_KINDS: [&str; 7] =
    ["unreachable", "timeout", "server_error", "throttled", "refused_credentials", "bad_answer", "not_found"];

static ERRORS: [AtomicU64; ERROR_KINDS.len()] = [const { AtomicU64::new(0) }; ERROR_KINDS.len()];

/// Failed requests so far, by kind (in the order of [`ERROR_KINDS`]).
pub fn errors() -> [u64; ERROR_KINDS.len()] {
    std::array::from_fn(|i| ERRORS[i].load(Ordering::Relaxed))
}

fn count(kind: &str) {
    if let Some(i) = ERROR_KINDS.iter().position(|k| *k == kind) {
        ERRORS[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// Since when a fetch has been waiting for the registry, and why (None:
/// no fetch is waiting).
static OUTAGE: Mutex<Option<(Instant, String)>> = Mutex::new(None);

/// How long a fetch has been waiting for the registry to answer, and the
/// last fault, if one is waiting.
pub fn outage() -> Option<(Duration, String)> {
    let outage = OUTAGE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    outage.as_ref().map(|(since, why)| (since.elapsed(), why.clone()))
}

fn set_outage(why: Option<&str>) {
    let mut outage = OUTAGE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match why {
        None => *outage = None,
        Some(why) => *outage = Some((outage.take().map_or_else(Instant::now, |(since, _)| since), why.to_string())),
    }
}

static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// The daemon is stopping: a fetch waiting for the registry ends the
/// process instead of waiting on (its record is not judged; the next
/// start resumes from the last snapshot, as after a crash).
pub fn shutting_down() {
    SHUTTING_DOWN.store(true, Ordering::Relaxed);
}

/// How long a fetch waits for a registry that does not answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Until it answers (the daemon).
    Forever,
    /// This long, then the process stops with an error, the record not
    /// judged (the pipe mode; refused credentials stop it at once).
    Until(Duration),
}

/// First and longest pause between two requests while the registry does
/// not answer.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(5));

/// Why a request got no schema.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// The registry's own answer: it has no schema with this id.
    Definite(String),
    /// A fault outside the record, of the kind named (see [`ERROR_KINDS`]).
    Transient(&'static str, String),
}

/// Most bytes of an answer read (a schema is far smaller).
const MAX_ANSWER_BYTES: u64 = 8 << 20;

/// A registry at `http://HOST:PORT[/PATH]`.
#[derive(Debug)]
pub struct HttpRegistry {
    host: String,
    path: String,
    /// `Basic …` for the Authorization header.
    auth: Option<String>,
    waiting: Waiting,
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
        Ok(HttpRegistry { host: host.to_string(), path, auth, waiting: Waiting::Forever })
    }

    /// The same registry, waiting for it as `waiting` says.
    pub fn waiting(self, waiting: Waiting) -> Self {
        HttpRegistry { waiting, ..self }
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

impl HttpRegistry {
    /// One request for the schema of `id`.
    fn ask(&self, id: u32) -> Result<String, Failure> {
        let path = format!("{}/schemas/ids/{id}", self.path);
        let at = format!("{}{path}", self.host);
        let (status, body) = self.get(&path).map_err(|e| {
            let kind = if e.contains("timed out") || e.contains("WouldBlock") || e.contains("temporarily unavailable") {
                "timeout"
            } else if e.starts_with("connecting") || e.contains("resolve") {
                "unreachable"
            } else {
                "bad_answer"
            };
            Failure::Transient(kind, format!("registry {at}: {e}"))
        })?;
        let excerpt = || body.chars().take(120).collect::<String>();
        match status {
            200..=299 => Ok(body),
            404 => Err(Failure::Definite(format!("the registry has no schema with this id (HTTP 404 from {at})"))),
            401 | 403 => Err(Failure::Transient(
                "refused_credentials",
                format!("the registry refused the credentials (HTTP {status} from {at})"),
            )),
            429 => Err(Failure::Transient("throttled", format!("HTTP 429 from {at}: {}", excerpt()))),
            500..=599 => Err(Failure::Transient("server_error", format!("HTTP {status} from {at}: {}", excerpt()))),
            _ => Err(Failure::Transient("bad_answer", format!("HTTP {status} from {at}: {}", excerpt()))),
        }
    }
}

impl Fetch for HttpRegistry {
    /// The schema's answer, or the registry's definite "no such id"; other
    /// failures are waited out here (see the module's comment).
    fn fetch(&self, id: u32) -> Result<String, String> {
        let (started, mut pause) = (Instant::now(), BACKOFF.0);
        loop {
            let (kind, why) = match self.ask(id) {
                Ok(answer) => {
                    set_outage(None);
                    return Ok(answer);
                }
                Err(Failure::Definite(why)) => {
                    count("not_found");
                    set_outage(None);
                    return Err(why);
                }
                Err(Failure::Transient(kind, why)) => (kind, why),
            };
            count(kind);
            set_outage(Some(&why));
            if let Waiting::Until(limit) = self.waiting
                && (started.elapsed() >= limit || kind == "refused_credentials")
            {
                eprintln!(
                    "dedupd: schema id {id}: {why}; waited {} s for the registry: stopping without judging this \
                     record (fix the registry or its settings and run again)",
                    started.elapsed().as_secs()
                );
                std::process::exit(1);
            }
            log::warn!("schema id {id}: {why}; the record waits, asking again in {} ms", pause.as_millis());
            wait(pause);
            pause = (pause * 2).min(BACKOFF.1);
        }
    }
}

/// Sleeps `pause`, or ends the process if the daemon stops meanwhile.
fn wait(pause: Duration) {
    let until = Instant::now() + pause;
    while Instant::now() < until {
        if SHUTTING_DOWN.load(Ordering::Relaxed) {
            log::warn!(
                "stopping while a record waits for the schema registry: exiting without judging it (the next \
                 start resumes from the last snapshot)"
            );
            std::process::exit(75);
        }
        std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
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
