//! The schema registry client (`--schema-registry` in the pipe mode,
//! `input.schema_registry` in the daemon): `GET <url>/schemas/ids/<id>`,
//! and `GET <url>/subjects/<subject>/versions/<version>` for the schemas
//! another refers to, over HTTP/1.1 or https (ureq with rustls: docs/dev/schema-registry-client.md),
//! with basic or bearer authentication, a CA file of its own and a client
//! certificate (mutual TLS). Every request has a total deadline
//! ([`DEADLINE`]: a slowly dripping answer cannot hold the record longer)
//! and its answer a size cap ([`MAX_ANSWER_BYTES`]); any bytes as an
//! answer are a schema or an error with a reason, never a panic.
//!
//! Only a definite answer is passed on as a failure: the registry has no
//! such id (HTTP 404). Anything else — no connection, a timeout, 5xx, 429,
//! refused credentials, a TLS failure, an answer that is not the registry's
//! — is a fault outside the record, not bad data: the fetch waits and asks
//! again with backoff, so the record waits and no verdict depends on when
//! the network failed (invariant 1). The daemon waits until the registry
//! answers (`/readyz` says so meanwhile, [`outage`]); the pipe mode gives
//! up after [`Waiting::Until`] and stops without judging the record.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::formats::{Asked, Fetch};

/// The `kind` label of `dedupd_schema_registry_errors_total`: every failed
/// request, the definite `not_found` and the faults that are waited out.
pub const ERROR_KINDS: [&str; 8] =
    ["unreachable", "timeout", "tls", "server_error", "throttled", "refused_credentials", "bad_answer", "not_found"];

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

/// Most bytes of an answer read (a schema is far smaller); a larger one is
/// an error (`bad_answer`).
pub const MAX_ANSWER_BYTES: u64 = 8 << 20;

/// Most time one request may take, connecting, TLS, sending and the whole
/// answer included.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Most time to connect (TCP and TLS).
const CONNECT: Duration = Duration::from_secs(5);

/// How the registry is reached, as the settings give it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Access<'a> {
    /// `http[s]://HOST[:PORT][/PATH]`.
    pub url: &'a str,
    /// Basic authentication: the user (and its password).
    pub user: Option<&'a str>,
    pub password: Option<&'a str>,
    /// Bearer authentication: the token (instead of a user).
    pub token: Option<&'a str>,
    /// PEM certificates of the CAs to trust instead of the public ones.
    pub ca_file: Option<&'a Path>,
    /// Mutual TLS: the client's PEM certificate chain and its PEM private key.
    pub cert_file: Option<&'a Path>,
    pub key_file: Option<&'a Path>,
}

/// Which of [`Access`]'s settings a refusal is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    Url,
    Token,
    CaFile,
    CertFile,
    KeyFile,
}

/// A schema registry.
#[derive(Debug)]
pub struct HttpRegistry {
    agent: ureq::Agent,
    /// The URL without a trailing `/`.
    base: String,
    /// The Authorization header's value, if any.
    auth: Option<String>,
    waiting: Waiting,
}

impl HttpRegistry {
    /// Checks the settings (at start-up: a wrong one names itself then,
    /// not per record): the URL's scheme and host, the files readable and
    /// holding what they should, one kind of authentication.
    pub fn new(access: &Access<'_>) -> Result<Self, (Setting, String)> {
        Self::with_deadline(access, DEADLINE)
    }

    /// [`HttpRegistry::new`] with another total deadline per request.
    pub fn with_deadline(access: &Access<'_>, deadline: Duration) -> Result<Self, (Setting, String)> {
        let url = access.url.trim_end_matches('/');
        let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
        let host = rest.map(|r| r.split('/').next().unwrap_or_default()).unwrap_or_default();
        if host.is_empty() || host.contains(['@', '?', '#', ' ']) || url.parse::<ureq::http::Uri>().is_err() {
            return Err((Setting::Url, "expected http://HOST[:PORT][/PATH] or https://HOST[:PORT][/PATH]".into()));
        }
        let auth = match (access.user.filter(|u| !u.is_empty()), access.token.filter(|t| !t.is_empty())) {
            (Some(_), Some(_)) => return Err((Setting::Token, "a token or a user, not both".into())),
            (Some(user), None) => {
                Some(format!("Basic {}", base64(format!("{user}:{}", access.password.unwrap_or("")).as_bytes())))
            }
            (None, Some(token)) => Some(format!("Bearer {token}")),
            (None, None) => None,
        };
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(deadline))
            .timeout_connect(Some(CONNECT.min(deadline)))
            .max_redirects(0)
            .user_agent(concat!("dedupd/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls(access)?)
            .build()
            .new_agent();
        Ok(HttpRegistry { agent, base: url.to_string(), auth, waiting: Waiting::Forever })
    }

    /// The same registry, waiting for it as `waiting` says.
    pub fn waiting(self, waiting: Waiting) -> Self {
        HttpRegistry { waiting, ..self }
    }
}

/// The TLS settings: the CAs to trust and the client certificate, if given.
fn tls(access: &Access<'_>) -> Result<ureq::tls::TlsConfig, (Setting, String)> {
    use ureq::tls::{ClientCert, PemItem, RootCerts, TlsConfig};
    let pem = |setting: Setting, path: &Path| -> Result<Vec<PemItem<'static>>, (Setting, String)> {
        let bytes = std::fs::read(path).map_err(|e| (setting, format!("cannot be read: {e}")))?;
        ureq::tls::parse_pem(&bytes).collect::<Result<_, _>>().map_err(|e| (setting, format!("not PEM: {e}")))
    };
    let mut config = TlsConfig::builder();
    if let Some(path) = access.ca_file {
        let certs: Vec<_> = pem(Setting::CaFile, path)?
            .into_iter()
            .filter_map(|i| if let PemItem::Certificate(c) = i { Some(c) } else { None })
            .collect();
        if certs.is_empty() {
            return Err((Setting::CaFile, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()));
        }
        config = config.root_certs(RootCerts::new_with_certs(&certs));
    }
    match (access.cert_file, access.key_file) {
        (None, None) => {}
        (Some(_), None) => return Err((Setting::KeyFile, "needed with a client certificate".into())),
        (None, Some(_)) => return Err((Setting::CertFile, "needed with a client key".into())),
        (Some(cert), Some(key)) => {
            let chain: Vec<_> = pem(Setting::CertFile, cert)?
                .into_iter()
                .filter_map(|i| if let PemItem::Certificate(c) = i { Some(c) } else { None })
                .collect();
            if chain.is_empty() {
                return Err((Setting::CertFile, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()));
            }
            let key = pem(Setting::KeyFile, key)?
                .into_iter()
                .find_map(|i| if let PemItem::PrivateKey(k) = i { Some(k) } else { None })
                .ok_or((Setting::KeyFile, "holds no PEM private key (-----BEGIN PRIVATE KEY-----)".to_string()))?;
            config = config.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
    }
    Ok(config.build())
}

impl HttpRegistry {
    /// One request for a schema.
    fn ask(&self, asked: Asked<'_>) -> Result<String, Failure> {
        let at = match asked {
            Asked::Id(id) => format!("{}/schemas/ids/{id}", self.base),
            Asked::Version { subject, version } => {
                format!("{}/subjects/{}/versions/{version}", self.base, crate::url::percent_encode(subject.as_bytes()))
            }
        };
        let mut request =
            self.agent.get(&at).header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
        if let Some(auth) = &self.auth {
            request = request.header("Authorization", auth);
        }
        let transient = |e: ureq::Error| {
            let kind = match &e {
                ureq::Error::Timeout(_) => "timeout",
                ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => "unreachable",
                ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => "unreachable",
                ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::Pem(_) => "tls",
                _ => "bad_answer",
            };
            Failure::Transient(kind, format!("registry {at}: {e}"))
        };
        let mut answer = request.call().map_err(transient)?;
        let status = answer.status().as_u16();
        let body = answer.body_mut().with_config().limit(MAX_ANSWER_BYTES).read_to_vec().map_err(transient)?;
        let text = String::from_utf8_lossy(&body);
        let excerpt = || text.chars().take(120).collect::<String>();
        match status {
            200 => registry_answer(&text).map_err(|why| Failure::Transient("bad_answer", format!("{at}: {why}"))),
            404 => Err(Failure::Definite(match asked {
                Asked::Id(_) => format!("the registry has no schema with this id (HTTP 404 from {at})"),
                Asked::Version { .. } => format!("the registry has no such subject or version (HTTP 404 from {at})"),
            })),
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

/// The answer's text if it has the shape of the registry's answer (a JSON
/// object with a `schema` string): what the engine parses, and a definite
/// answer from then on. Anything else came from something that is not the
/// registry (a proxy's error page, a cut answer) and is waited out.
fn registry_answer(text: &str) -> Result<String, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) if v.get("schema").is_some_and(serde_json::Value::is_string) => Ok(text.to_string()),
        Ok(_) => Err("HTTP 200, but not a schema registry answer (no \"schema\" text in it)".to_string()),
        Err(e) => Err(format!("HTTP 200, but not JSON ({e}): {}", text.chars().take(120).collect::<String>())),
    }
}

impl Fetch for HttpRegistry {
    /// The schema's answer, or the registry's definite "no such id"; other
    /// failures are waited out here (see the module's comment).
    fn fetch(&self, asked: Asked<'_>) -> Result<String, String> {
        let (started, mut pause) = (Instant::now(), BACKOFF.0);
        loop {
            let (kind, why) = match self.ask(asked) {
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
                    "dedupd: {asked}: {why}; waited {} s for the registry: stopping without judging this \
                     record (fix the registry or its settings and run again)",
                    started.elapsed().as_secs()
                );
                std::process::exit(1);
            }
            log::warn!("{asked}: {why}; the record waits, asking again in {} ms", pause.as_millis());
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
mod tests;
