//! The HTTP admin endpoint, one port (`admin.listen`), one [`router`],
//! and optionally a health port (`admin.health_listen`, [`health_router`]:
//! `/healthz` and `/readyz` alone, with slots of their own):
//!
//! - open to anyone who reaches the port, revealing no keys: `/metrics`
//!   (Prometheus text), `/healthz`, `/readyz` (ready once every assigned
//!   slice is restored, and not while no broker answers), `/v1/slices`
//!   (JSON per slice);
//! - the key endpoints, which reveal whether a key was seen (or, later,
//!   change keys): `/v1/lookup`. They answer 404 unless
//!   `admin.key_endpoints` allows them, and then only with the bearer token
//!   ([`access`]). The other key endpoints — `DELETE /v1/keys/{key}` and
//!   each feature's `/v1/<name>` ([`FeatureLookup`]) — go into `key_routes`.
//!
//! The limits ([`Limits`]) are tower layers here and hyper settings in
//! [`server`]; docs/security.md lists them.

pub mod access;
pub mod server;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use tokio::net::TcpListener;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::{BoxError, ServiceBuilder};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use crate::config::KeyEndpoints;
use crate::metrics::Metrics;
use access::Access;

/// What one slice looks like from outside (`/v1/slices`, `dedupd status`).
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct SliceStatus {
    pub slice: u32,
    pub next_offset: u64,
    /// Records of the slice log not yet taken in (`dedupd_consumer_lag`).
    pub lag: i64,
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

/// Answers `/v1/lookup` (or a feature's `/v1/<name>`) for a key, or
/// [`Busy`] when the slice workers did not let it in within [`LOOKUP_WAIT`].
/// An `Arc`: a request clones it out of [`Status`] and holds no lock of
/// [`Status`] while it runs.
pub type LookupFn = Arc<dyn Fn(&[u8]) -> Result<serde_json::Value, Busy> + Send + Sync>;

/// A feature's key endpoint: its answer, set by the slice workers when the
/// feature is on, and what it answers (404) while off.
#[derive(Clone, Default)]
pub struct FeatureLookup {
    pub answer: Option<LookupFn>,
    pub off: &'static str,
}

/// A key lookup that could not take the slice workers' lock in time: they
/// hold it for as long as they wait for the broker (an idle flush during
/// an outage) or run a rebalance callback, minutes at worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy;

/// How long a key lookup waits for the slice workers' lock before it
/// answers 503 busy: long enough to get in between two batches of a busy
/// worker, short enough that lookups never pile up on a worker stuck on
/// the broker.
pub const LOOKUP_WAIT: Duration = Duration::from_secs(2);

/// Locks `mutex` if it comes free within `wait` (tried every few
/// milliseconds), else `None`. A poisoned lock panics, as `lock().expect()`
/// does.
pub fn lock_within<T>(mutex: &Mutex<T>, wait: Duration) -> Option<std::sync::MutexGuard<'_, T>> {
    let deadline = Instant::now() + wait;
    loop {
        match mutex.try_lock() {
            Ok(guard) => return Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => panic!("lock poisoned: {e}"),
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() >= deadline => return None,
            Err(std::sync::TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// The address a request came from, put into its extensions by [`server`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub std::net::SocketAddr);

/// Answers `DELETE /v1/keys/{key}`: an HTTP status and a JSON body. Blocks
/// until the slice applied the delete (or a time limit).
pub type DeleteFn = Arc<dyn Fn(&[u8]) -> (StatusCode, serde_json::Value) + Send + Sync>;

/// The outcomes of delete requests, by (slice, slice offset of the request),
/// posted by the slice worker that applied them and taken by the request
/// waiting for them.
#[derive(Default)]
pub struct DeleteBoard {
    /// Each outcome with the time it was posted.
    outcomes: Mutex<BTreeMap<(u32, u64), (DeleteOutcome, Instant)>>,
    posted: std::sync::Condvar,
}

type DeleteOutcome = Result<(), crate::filter::DeleteRefusal>;

/// Outcomes nobody came for (a request that timed out, a replay after a
/// restart, a delete another member's request wrote) are dropped by age: a
/// waiting request takes its outcome within seconds, so one this old has no
/// taker left. A burst is bounded by count too, dropping the oldest posted
/// (not the lowest slice or offset: a fresh outcome must outlive stale ones).
const DELETE_OUTCOME_TTL: Duration = Duration::from_secs(60);
const DELETE_OUTCOMES_KEPT: usize = 1024;

impl DeleteBoard {
    pub fn post(&self, slice: u32, offset: u64, outcome: DeleteOutcome) {
        self.post_at(slice, offset, outcome, Instant::now());
    }

    fn post_at(&self, slice: u32, offset: u64, outcome: DeleteOutcome, now: Instant) {
        let mut outcomes = self.outcomes.lock().expect("delete board lock");
        outcomes.retain(|_, (_, at)| now.saturating_duration_since(*at) < DELETE_OUTCOME_TTL);
        outcomes.insert((slice, offset), (outcome, now));
        while outcomes.len() > DELETE_OUTCOMES_KEPT {
            let oldest = *outcomes.iter().min_by_key(|(_, (_, at))| *at).expect("not empty").0;
            outcomes.remove(&oldest);
        }
        self.posted.notify_all();
    }

    /// Waits at most `timeout` for the outcome of the request at `offset` of `slice`.
    pub fn wait(&self, slice: u32, offset: u64, timeout: Duration) -> Option<DeleteOutcome> {
        let deadline = Instant::now() + timeout;
        let mut outcomes = self.outcomes.lock().expect("delete board lock");
        loop {
            if let Some((outcome, _)) = outcomes.remove(&(slice, offset)) {
                return Some(outcome);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            outcomes = self.posted.wait_timeout(outcomes, left).expect("delete board lock").0;
        }
    }

    /// Outcomes held (taken or dropped ones are not).
    pub fn len(&self) -> usize {
        self.outcomes.lock().expect("delete board lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

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
    /// Set by the slice workers once they run.
    pub delete: Mutex<Option<DeleteFn>>,
    pub deletes: DeleteBoard,
    /// The features' key endpoints (`/v1/<name>`), by name: listed before
    /// the endpoint starts (it routes those), answered once the slice
    /// workers run with the feature on.
    pub feature_lookups: Mutex<BTreeMap<&'static str, FeatureLookup>>,
    /// When the slice consumer last received anything from a broker, as
    /// librdkafka's statistics tell (None before the first statistics).
    /// A stopped or unreachable broker keeps its connections open without
    /// answering, so neither the assignment nor an error says so; this does.
    pub broker_contact: Mutex<Option<Instant>>,
}

/// Silence of every broker connection this long makes `/readyz` answer 503:
/// a healthy consumer hears from its broker at least every
/// `fetch.wait.max.ms` (500 ms) and statistics come every 2 s.
pub const BROKER_SILENCE_NOT_READY: Duration = Duration::from_secs(10);

/// A record waiting this long for the schema registry makes `/readyz`
/// answer 503 (the slice holds its input meanwhile).
pub const REGISTRY_OUTAGE_NOT_READY: Duration = Duration::from_secs(5);

impl Status {
    pub fn new() -> Arc<Self> {
        let s = Status::default();
        s.healthy.store(true, Ordering::Relaxed);
        Arc::new(s)
    }

    /// Records that a broker was heard from at `at` (never moves back).
    pub fn heard_from_broker(&self, at: Instant) {
        let mut contact = self.broker_contact.lock().expect("status lock");
        if contact.is_none_or(|c| c < at) {
            *contact = Some(at);
        }
    }

    /// How long no broker has been heard from, if known.
    pub fn broker_silence(&self) -> Option<Duration> {
        self.broker_contact.lock().expect("status lock").map(|c| c.elapsed())
    }
}

/// The bounds of the admin endpoint. [`Limits::default`] is what `dedupd
/// run` uses (docs/security.md); tests shorten them.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest time a client may take to send a request head, counted from
    /// the connection's start or the end of its previous response.
    pub header_read_timeout: Duration,
    /// Longest time a request may take to be answered (503 after it).
    pub request_timeout: Duration,
    /// Longest life of a connection, however busy (a slow reader included).
    pub connection_lifetime: Duration,
    /// Connections served at once; more are closed as soon as accepted.
    pub max_connections: usize,
    /// Connections of one peer address served at once; more of its are
    /// closed as soon as accepted, while other peers are served.
    pub max_connections_per_peer: usize,
    /// Largest request head (request line and headers); larger: 431.
    pub max_header_bytes: usize,
    /// Most header fields in a request; more: 431.
    pub max_headers: usize,
    /// Largest request body; larger: 413.
    pub max_body_bytes: usize,
    /// Key-endpoint requests answered at once (over all key endpoints);
    /// more are answered 503 at once, so lookups, which take the slice
    /// workers' lock, cannot pile up.
    pub key_concurrency: usize,
    /// At shutdown, how long requests in flight may still take.
    pub drain: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // Any client on a network sends a request head within this; a
            // half-sent one holds its slot no longer.
            header_read_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            connection_lifetime: Duration::from_secs(60),
            max_connections: 1024,
            max_connections_per_peer: 256,
            max_header_bytes: 16 << 10,
            max_headers: 64,
            max_body_bytes: 64 << 10,
            key_concurrency: 4,
            drain: Duration::from_secs(2),
        }
    }
}

impl Limits {
    /// The health listener's (`admin.health_listen`): it answers two cheap
    /// requests, so a few slots, a short head and a short life suffice, and
    /// its per-peer cap keeps a peer other than the prober from filling them.
    pub fn health() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(2),
            connection_lifetime: Duration::from_secs(10),
            max_connections: 64,
            max_connections_per_peer: 16,
            max_header_bytes: 8 << 10,
            max_headers: 32,
            max_body_bytes: 1 << 10,
            key_concurrency: 1,
            drain: Duration::from_secs(1),
        }
    }
}

/// A running admin endpoint: the admin port, and the health port if set.
pub struct Admin {
    servers: Vec<(tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
}

impl Admin {
    /// Serves [`router`] on `listener` with the default [`Limits`], and
    /// [`health_router`] on `health` (if any) with [`Limits::health`].
    pub fn start(
        listener: TcpListener,
        health: Option<TcpListener>,
        status: Arc<Status>,
        metrics: Arc<Metrics>,
        key_endpoints: &KeyEndpoints,
    ) -> Admin {
        let limits = Limits::default();
        let app = router(status.clone(), metrics.clone(), Access::from(key_endpoints), limits);
        let mut servers = vec![Self::serve(listener, app, limits)];
        if let Some(health) = health {
            let limits = Limits::health();
            servers.push(Self::serve(health, health_router(status, metrics, limits), limits));
        }
        Admin { servers }
    }

    fn serve(
        listener: TcpListener,
        app: Router,
        limits: Limits,
    ) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server::serve(listener, app, limits, async {
            let _ = stopped.await;
        }));
        (stop, task)
    }

    /// Stops accepting, lets the requests in flight finish (at most
    /// [`Limits::drain`]) and returns.
    pub async fn stop(self) {
        let mut tasks = Vec::new();
        for (stop, task) in self.servers {
            let _ = stop.send(());
            tasks.push(task);
        }
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// What the handlers share.
#[derive(Clone)]
struct Shared {
    status: Arc<Status>,
    metrics: Arc<Metrics>,
}

const TEXT: &str = "text/plain; charset=utf-8";

/// A plain-text answer.
fn text(code: StatusCode, body: impl Into<String>) -> Response {
    (code, [(header::CONTENT_TYPE, TEXT)], body.into()).into_response()
}

fn json(value: &impl Serialize) -> Response {
    let body = serde_json::to_string_pretty(value).expect("admin answers serialise");
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The whole admin endpoint: the open routes, `key_routes` behind
/// [`access::guard`], and the limits of every request.
pub fn router(status: Arc<Status>, metrics: Arc<Metrics>, access: Access, limits: Limits) -> Router {
    let open = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/slices", get(slices));
    // One limit shared by every key endpoint; requests over it are shed
    // (503) rather than queued, so they hold no connection task waiting.
    let key_limit = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(|_: BoxError| async {
            let mut busy = text(StatusCode::SERVICE_UNAVAILABLE, "too many key lookups at once: retry\n");
            busy.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            busy
        }))
        .load_shed()
        .layer(GlobalConcurrencyLimitLayer::new(limits.key_concurrency));
    // The guard is the outer layer: a request without the token takes no slot.
    let keyed = key_routes(&status).route_layer(key_limit).route_layer(middleware::from_fn_with_state(access, access::guard));
    let routes = open.merge(keyed).fallback(|| async {
        text(StatusCode::NOT_FOUND, "try /metrics, /healthz, /readyz, /v1/slices or /v1/lookup?key=...\n")
    });
    finish(routes, Shared { status, metrics }, &limits)
}

/// What every admin listener ends with: GET only, its state, and the
/// limits on a request's body and time.
fn finish(routes: Router<Shared>, shared: Shared, limits: &Limits) -> Router {
    routes
        .method_not_allowed_fallback(|| async { text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n") })
        .with_state(shared)
        .layer(
            ServiceBuilder::new()
                .layer(RequestBodyLimitLayer::new(limits.max_body_bytes))
                .layer(TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, limits.request_timeout)),
        )
}

/// The health listener's endpoints: `/healthz` and `/readyz` only, so that
/// a port of their own answers the probes however busy the admin port is.
pub fn health_router(status: Arc<Status>, metrics: Arc<Metrics>, limits: Limits) -> Router {
    let routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(|| async { text(StatusCode::NOT_FOUND, "the health port answers /healthz and /readyz\n") });
    finish(routes, Shared { status, metrics }, &limits)
}

/// The endpoints that reveal or change keys, the features' among them
/// (`/v1/<name>`, as listed in `status`). [`router`] puts them behind
/// the token check and the key-endpoint concurrency limit.
fn key_routes(status: &Status) -> Router<Shared> {
    let routes = Router::new()
        .route("/v1/lookup", get(lookup))
        .route("/v1/keys/{*key}", axum::routing::delete(delete_key));
    let names: Vec<&'static str> = status.feature_lookups.lock().expect("status lock").keys().copied().collect();
    names.into_iter().fold(routes, |routes, name| {
        let handler = move |State(shared): State<Shared>, RawQuery(query): RawQuery| feature_lookup(shared, query, name);
        routes.route(&format!("/v1/{name}"), get(handler))
    })
}

async fn metrics_text(State(shared): State<Shared>) -> Response {
    // Computed now: the worker that records contacts may itself be waiting for the broker.
    if let Some(silence) = shared.status.broker_silence() {
        shared.metrics.broker_silence.set(silence.as_secs_f64());
    }
    let body = shared.metrics.render();
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

async fn healthz(State(shared): State<Shared>) -> Response {
    if shared.status.healthy.load(Ordering::Relaxed) {
        text(StatusCode::OK, "ok\n")
    } else {
        text(StatusCode::SERVICE_UNAVAILABLE, "failing\n")
    }
}

async fn readyz(State(shared): State<Shared>) -> Response {
    let silence = shared.status.broker_silence().filter(|s| *s >= BROKER_SILENCE_NOT_READY);
    let registry = crate::schema_registry::outage().filter(|(d, _)| *d >= REGISTRY_OUTAGE_NOT_READY);
    // A record waiting for the registry holds its slice's thread, which
    // then polls no statistics either: the registry is the cause to name.
    if let Some((waited, why)) = registry {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: records wait for the schema registry, unanswered for {} s: {why}\n", waited.as_secs()),
        )
    } else if let Some(silence) = silence {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: no answer from the broker for {} s\n", silence.as_secs()),
        )
    } else if shared.status.ready.load(Ordering::Relaxed) {
        text(StatusCode::OK, "ready\n")
    } else {
        text(StatusCode::SERVICE_UNAVAILABLE, "not ready: joining the group or restoring slices\n")
    }
}

async fn slices(State(shared): State<Shared>) -> Response {
    let slices: Vec<SliceStatus> = shared.status.slices.lock().expect("status lock").values().cloned().collect();
    json(&slices)
}

async fn lookup(State(shared): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let answer = shared.status.lookup.lock().expect("status lock").clone();
    key_answer(query, "/v1/lookup", answer).await
}

/// A feature's key endpoint `/v1/<name>`: 404 with what turns it on while
/// the slice workers run without the feature.
async fn feature_lookup(shared: Shared, query: Option<String>, name: &'static str) -> Response {
    let off = {
        let workers_run = shared.status.lookup.lock().expect("status lock").is_some();
        let features = shared.status.feature_lookups.lock().expect("status lock");
        let feature = features.get(name).filter(|f| workers_run && f.answer.is_none());
        feature.map(|f| f.off)
    };
    if let Some(off) = off {
        return text(StatusCode::NOT_FOUND, off);
    }
    let path = format!("/v1/{name}");
    let answer = shared.status.feature_lookups.lock().expect("status lock").get(name).and_then(|f| f.answer.clone());
    key_answer(query, &path, answer).await
}

/// Answers a key endpoint with `answer` (`None`: the slice workers do not
/// run yet). The answer is cloned out of its lock by the caller: a lookup
/// waiting for the slice workers holds no lock that /healthz, /readyz or
/// another request takes.
async fn key_answer(query: Option<String>, path: &str, answer: Option<LookupFn>) -> Response {
    // Keys are bytes: the query is percent-decoded here, not as UTF-8 text.
    let Some(key) = query.as_deref().and_then(|q| query_param(q, "key")) else {
        return text(StatusCode::BAD_REQUEST, format!("usage: {path}?key=URL-ENCODED-KEY\n"));
    };
    let Some(answer) = answer else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "the slice workers are not running yet\n");
    };
    // The answer waits (at most LOOKUP_WAIT) for the slice workers' lock:
    // off the async threads, which serve /metrics and /healthz.
    match tokio::task::spawn_blocking(move || answer(&key)).await {
        Ok(Ok(value)) => json(&value),
        Ok(Err(Busy)) => busy(),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "the lookup failed\n"),
    }
}

/// 503 for a lookup the slice workers did not let in within [`LOOKUP_WAIT`].
fn busy() -> Response {
    let mut response = text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the slice workers are busy (waiting for the broker, or in a rebalance) and did not let the lookup in \
             within {} s: try again\n",
            LOOKUP_WAIT.as_secs()
        ),
    );
    response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
    response
}

/// `DELETE /v1/keys/{key}` (the key percent-encoded: keys are bytes): the
/// key's slice applies the delete at its place in the slice log; 200
/// `{"deleted": true}`, or 409 / 404 with the reason. Every request that
/// passed the token check is logged at INFO ([`log_delete`]).
async fn delete_key(State(shared): State<Shared>, request: axum::extract::Request) -> Response {
    let peer = request.extensions().get::<Peer>().copied();
    let key = percent_decode(request.uri().path().strip_prefix("/v1/keys/").unwrap_or_default());
    if key.is_empty() {
        log_delete(&key, peer, StatusCode::BAD_REQUEST, "no key");
        return text(StatusCode::BAD_REQUEST, "usage: DELETE /v1/keys/URL-ENCODED-KEY\n");
    }
    let status = shared.status;
    // Off the async threads: it waits for the broker and the slice worker.
    // Taken out of the lock: deletes wait for the broker, not for each other.
    let delete = status.delete.lock().expect("status lock").clone();
    let logged_key = key.clone();
    let answer = tokio::task::spawn_blocking(move || delete.map(|f| f(&key)));
    let (code, outcome, response) = match answer.await {
        Ok(Some((code, body))) => {
            // `deleted` is true, false, or null (202: it may still apply).
            let reason = body["reason"].as_str().unwrap_or("no reason given");
            let outcome = match &body["deleted"] {
                serde_json::Value::Bool(true) => "deleted".to_string(),
                serde_json::Value::Bool(false) => format!("not deleted: {reason}"),
                _ => format!("pending: {reason}"),
            };
            let mut response = json(&body);
            *response.status_mut() = code;
            (code, outcome, response)
        }
        Ok(None) => {
            let why = "the slice workers are not running yet";
            (
                StatusCode::SERVICE_UNAVAILABLE,
                why.to_string(),
                text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
            )
        }
        Err(_) => {
            let why = "the delete failed";
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                why.to_string(),
                text(StatusCode::INTERNAL_SERVER_ERROR, format!("{why}\n")),
            )
        }
    };
    log_delete(&logged_key, peer, code, &outcome);
    response
}

/// Logs a delete request at INFO: which key — by the first 16 hex digits of
/// its SHA-256, as keys are data and stay out of logs like out of metrics
/// (`printf %s KEY | sha256sum` finds a key's requests) — who asked (the
/// remote address: the one admin token names nobody) and the outcome.
fn log_delete(key: &[u8], peer: Option<Peer>, code: StatusCode, outcome: &str) {
    use sha2::{Digest, Sha256};
    let digest: String = Sha256::digest(key)[..8].iter().map(|b| format!("{b:02x}")).collect();
    let from = peer.map_or_else(|| "an unknown address".to_string(), |p| p.0.to_string());
    log::info!(
        "admin: DELETE /v1/keys key_sha256={digest} ({} bytes) from {from} with the admin token: {} {outcome}",
        key.len(),
        code.as_u16()
    );
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
    use crate::config::Secret;
    use axum::body::Body;
    use axum::http::Request;
    use std::sync::atomic::AtomicUsize;
    use tower::ServiceExt;

    const TOKEN: &str = "test-token-0123456789";

    /// The board drops outcomes by age and, over its size bound, the oldest
    /// posted — never a fresh one for having a low slice or offset.
    #[test]
    fn delete_board_evicts_by_age_not_by_position() {
        use crate::filter::DeleteRefusal;
        let board = DeleteBoard::default();
        let now = Instant::now();
        // A full board of stale-ish outcomes of a high slice...
        for offset in 0..DELETE_OUTCOMES_KEPT as u64 {
            board.post_at(7, 1000 + offset, Err(DeleteRefusal::Absent), now - Duration::from_secs(5));
        }
        // ...then a fresh outcome of slice 0 at a low offset: it is kept.
        board.post_at(0, 3, Ok(()), now);
        assert_eq!(board.len(), DELETE_OUTCOMES_KEPT);
        assert_eq!(board.wait(0, 3, Duration::ZERO), Some(Ok(())));
        assert_eq!(board.wait(7, 1000, Duration::ZERO), None, "the oldest posted was dropped");
        assert_eq!(board.wait(7, 1001, Duration::ZERO), Some(Err(DeleteRefusal::Absent)));
        // Outcomes older than the TTL go at the next post, whatever their key.
        board.post_at(9, 1, Ok(()), now + DELETE_OUTCOME_TTL);
        assert_eq!(board.len(), 1);
        assert_eq!(board.wait(9, 1, Duration::ZERO), Some(Ok(())));
    }

    /// A router whose lookup answers `{"key": KEY}` after `delay`, and the
    /// count of lookups it answered.
    fn counted_app(key_endpoints: KeyEndpoints, delay: Duration) -> (Router, Arc<AtomicUsize>) {
        limited_app(key_endpoints, delay, Limits::default())
    }

    fn limited_app(key_endpoints: KeyEndpoints, delay: Duration, limits: Limits) -> (Router, Arc<AtomicUsize>) {
        let status = Status::new();
        let done = Arc::new(AtomicUsize::new(0));
        let counter = done.clone();
        let lookup: LookupFn = Arc::new(move |key: &[u8]| {
            std::thread::sleep(delay);
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(serde_json::json!({ "key": String::from_utf8_lossy(key) }))
        });
        *status.lookup.lock().unwrap() = Some(lookup);
        feature(&status, "count", None);
        (router(status, Arc::new(Metrics::new(3)), Access::from(&key_endpoints), limits), done)
    }

    /// Lists the feature endpoint `/v1/<name>`, answered by `answer` (`None`: off).
    fn feature(status: &Status, name: &'static str, answer: Option<LookupFn>) {
        let off = "no counting stage: set limit.max_per_window or flag.threshold to turn it on\n";
        status.feature_lookups.lock().unwrap().insert(name, FeatureLookup { answer, off });
    }

    fn app(key_endpoints: KeyEndpoints, delay: Duration) -> Router {
        counted_app(key_endpoints, delay).0
    }

    fn token() -> KeyEndpoints {
        KeyEndpoints::Token(Secret::new(TOKEN))
    }

    async fn call(app: &Router, method: &str, uri: &str, auth: Option<&str>) -> (StatusCode, Option<String>, String) {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(auth) = auth {
            request = request.header(header::AUTHORIZATION, auth);
        }
        let response = app.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
        let code = response.status();
        let challenge = response.headers().get(header::WWW_AUTHENTICATE).map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (code, challenge, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn the_open_endpoints_answer_without_a_token() {
        let app = app(token(), Duration::ZERO);
        for (path, code, body) in [
            ("/healthz", StatusCode::OK, "ok\n"),
            ("/readyz", StatusCode::SERVICE_UNAVAILABLE, "not ready: joining the group or restoring slices\n"),
            ("/v1/slices", StatusCode::OK, "[]"),
        ] {
            assert_eq!(call(&app, "GET", path, None).await, (code, None, body.to_string()), "{path}");
        }
        let (code, _, metrics) = call(&app, "GET", "/metrics", None).await;
        assert_eq!(code, StatusCode::OK);
        assert!(metrics.contains("# TYPE dedupd_build_info gauge"), "{metrics}");
        assert_eq!(call(&app, "GET", "/nowhere", None).await.0, StatusCode::NOT_FOUND);
        assert_eq!(call(&app, "POST", "/metrics", None).await.2, "GET only\n");
    }

    /// A broker that stops answering (SIGSTOPped: its connections stay
    /// open) makes a ready daemon not ready, and shows in the gauge.
    #[tokio::test]
    async fn a_silent_broker_makes_the_daemon_not_ready() {
        let status = Status::new();
        let metrics = Arc::new(Metrics::new(3));
        let app = router(status.clone(), metrics.clone(), Access::from(&token()), Limits::default());
        status.ready.store(true, Ordering::Relaxed);
        assert_eq!(call(&app, "GET", "/readyz", None).await.0, StatusCode::OK, "no statistics yet");
        status.heard_from_broker(Instant::now() - Duration::from_secs(3));
        assert_eq!(call(&app, "GET", "/readyz", None).await.0, StatusCode::OK, "3 s of silence");
        let (_, _, text) = call(&app, "GET", "/metrics", None).await;
        let gauge = |text: &str| -> f64 {
            let line = text.lines().find(|l| l.starts_with("dedupd_broker_silence_seconds ")).expect("the gauge");
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert!((3.0..4.0).contains(&gauge(&text)), "{text}");
        // Contacts never move back: an older one changes nothing.
        status.heard_from_broker(Instant::now() - Duration::from_secs(30));
        assert!(status.broker_silence().unwrap() < Duration::from_secs(4));
        *status.broker_contact.lock().unwrap() = Some(Instant::now() - Duration::from_secs(12));
        let (code, _, body) = call(&app, "GET", "/readyz", None).await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "not ready: no answer from the broker for 12 s\n")
        );
        assert!(gauge(&call(&app, "GET", "/metrics", None).await.2) >= 12.0);
        status.heard_from_broker(Instant::now());
        assert_eq!(call(&app, "GET", "/readyz", None).await.0, StatusCode::OK, "the broker answers again");
    }

    #[tokio::test]
    async fn lookup_needs_the_bearer_token() {
        let app = app(token(), Duration::ZERO);
        let (code, challenge, _) = call(&app, "GET", "/v1/lookup?key=a", None).await;
        assert_eq!((code, challenge.as_deref()), (StatusCode::UNAUTHORIZED, Some(r#"Bearer realm="dedupd""#)));
        for wrong in
            [format!("Bearer {TOKEN}x"), "Bearer test-token".to_string(), format!("Basic {TOKEN}"), String::new()]
        {
            let (code, challenge, body) = call(&app, "GET", "/v1/lookup?key=a", Some(&wrong)).await;
            assert_eq!(code, StatusCode::UNAUTHORIZED, "{wrong:?}");
            assert!(challenge.is_some() && !body.contains("\"key\""), "{wrong:?}: {body}");
        }
        let (code, _, body) = call(&app, "GET", "/v1/lookup?key=click%2D1", Some(&format!("bearer {TOKEN}"))).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["key"], "click-1");
        let auth = format!("Bearer {TOKEN}");
        assert_eq!(call(&app, "GET", "/v1/lookup", Some(&auth)).await.0, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn large_bodies_and_slow_answers_are_cut_short() {
        let limits = Limits { request_timeout: Duration::from_millis(100), ..Limits::default() };
        let (app, _) = limited_app(token(), Duration::from_millis(400), limits);
        let auth = format!("Bearer {TOKEN}");
        let (code, _, body) = call(&app, "GET", "/v1/lookup?key=a", Some(&auth)).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        let big = Request::post("/metrics")
            .header(header::CONTENT_LENGTH, limits.max_body_bytes + 1)
            .body(Body::from(vec![b'x'; limits.max_body_bytes + 1]))
            .unwrap();
        assert_eq!(app.oneshot(big).await.unwrap().status(), StatusCode::PAYLOAD_TOO_LARGE);
    }

    /// `/v1/count` needs the token; without a counting stage (the workers
    /// set no answer for it) it is 404 naming the settings; without `key`, 400.
    #[tokio::test]
    async fn count_is_not_found_without_a_counting_stage() {
        let app = app(token(), Duration::ZERO);
        let auth = format!("Bearer {TOKEN}");
        assert_eq!(call(&app, "GET", "/v1/count?key=a", None).await.0, StatusCode::UNAUTHORIZED);
        let (code, _, body) = call(&app, "GET", "/v1/count?key=a", Some(&auth)).await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(body.contains("limit.max_per_window or flag.threshold"), "{body}");
        let status = Status::new();
        *status.lookup.lock().unwrap() = Some(Arc::new(|_: &[u8]| Ok(serde_json::json!({}))));
        feature(&status, "count", Some(Arc::new(|k: &[u8]| Ok(serde_json::json!({ "estimate": k.len() })))));
        let app = router(status, Arc::new(Metrics::new(3)), Access::from(&token()), Limits::default());
        let (code, _, body) = call(&app, "GET", "/v1/count?key=abc", Some(&auth)).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap(), serde_json::json!({ "estimate": 3 }));
        assert_eq!(call(&app, "GET", "/v1/count", Some(&auth)).await.0, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn lookup_is_not_found_when_off() {
        let app = app(KeyEndpoints::Off, Duration::ZERO);
        for auth in [None, Some("Bearer anything-at-all-0123")] {
            let (code, _, body) = call(&app, "GET", "/v1/lookup?key=a", auth).await;
            assert_eq!(code, StatusCode::NOT_FOUND);
            assert!(body.contains("admin.key_endpoints"), "{body}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lookups_over_the_limit_are_shed_and_health_still_answers() {
        // Lookups run one at a time (the real ones take the workers' lock):
        // the admitted ones take 4 × 500 ms, within the request timeout.
        let (app, lookups_done) = counted_app(token(), Duration::from_millis(500));
        let auth = format!("Bearer {TOKEN}");
        let n = Limits::default().key_concurrency + 3;
        let calls: Vec<_> = (0..n)
            .map(|i| {
                let (app, auth) = (app.clone(), auth.clone());
                tokio::spawn(async move { call(&app, "GET", &format!("/v1/lookup?key={i}"), Some(&auth)).await.0 })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The slow lookups hold no async thread: /healthz answers before any of them.
        assert_eq!(call(&app, "GET", "/healthz", None).await.0, StatusCode::OK);
        assert!(lookups_done.load(Ordering::SeqCst) < 2, "/healthz waited for the lookups");
        let mut codes = Vec::new();
        for c in calls {
            codes.push(c.await.unwrap());
        }
        let ok = codes.iter().filter(|c| **c == StatusCode::OK).count();
        let shed = codes.iter().filter(|c| **c == StatusCode::SERVICE_UNAVAILABLE).count();
        assert_eq!((ok, shed), (Limits::default().key_concurrency, 3), "{codes:?}");
    }

    /// Lookups stuck on the slice workers' lock (held by a worker waiting
    /// for the broker) hold no lock of the status: `/healthz`, `/readyz`
    /// and the checks of the features' endpoints answer at once,
    /// and each lookup answers 503 busy with a Retry-After after
    /// [`LOOKUP_WAIT`], not when the worker lets go.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lookups_on_a_busy_worker_answer_busy_and_hold_up_nothing() {
        let worker = Arc::new(Mutex::new(()));
        let status = Status::new();
        let answer = |worker: Arc<Mutex<()>>| -> LookupFn {
            Arc::new(move |_: &[u8]| {
                let _held = lock_within(&worker, LOOKUP_WAIT).ok_or(Busy)?;
                Ok(serde_json::json!({}))
            })
        };
        *status.lookup.lock().unwrap() = Some(answer(worker.clone()));
        feature(&status, "count", Some(answer(worker.clone())));
        feature(&status, "sources", Some(answer(worker.clone())));
        let app = router(status, Arc::new(Metrics::new(3)), Access::from(&token()), Limits::default());
        let auth = format!("Bearer {TOKEN}");
        // The worker: a thread holding its lock until told to let go.
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (locked, is_locked) = std::sync::mpsc::channel::<()>();
        let holder = {
            let worker = worker.clone();
            std::thread::spawn(move || {
                let _held = worker.lock().unwrap();
                locked.send(()).unwrap();
                let _ = released.recv();
            })
        };
        is_locked.recv().unwrap();
        let started = Instant::now();
        let calls: Vec<_> = ["/v1/lookup?key=a", "/v1/count?key=b", "/v1/sources?key=c", "/v1/count?key=d"]
            .into_iter()
            .map(|path| {
                let (app, auth) = (app.clone(), auth.clone());
                tokio::spawn(async move {
                    let response = app
                        .oneshot(Request::get(path).header(header::AUTHORIZATION, auth).body(Body::empty()).unwrap())
                        .await
                        .unwrap();
                    (response.status(), response.headers().get(header::RETRY_AFTER).cloned(), started.elapsed())
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        for path in ["/healthz", "/readyz", "/v1/slices", "/metrics"] {
            let asked = Instant::now();
            let code = tokio::time::timeout(Duration::from_secs(1), call(&app, "GET", path, None)).await;
            assert!(code.is_ok(), "{path} did not answer within 1 s while lookups waited for the worker");
            assert!(asked.elapsed() < Duration::from_secs(1), "{path}: {:?}", asked.elapsed());
        }
        for c in calls {
            let (code, retry_after, took) = c.await.unwrap();
            assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(retry_after.as_ref().and_then(|v| v.to_str().ok()), Some("5"));
            assert!(took >= LOOKUP_WAIT && took < LOOKUP_WAIT + Duration::from_secs(2), "{took:?}");
        }
        let (code, _, body) = call(&app, "GET", "/v1/lookup?key=a", Some(&auth)).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("busy") && body.contains("try again"), "{body}");
        // Once the worker lets go, lookups answer again.
        release.send(()).unwrap();
        holder.join().unwrap();
        assert_eq!(call(&app, "GET", "/v1/lookup?key=a", Some(&auth)).await.0, StatusCode::OK);
    }

    #[test]
    fn query_keys_are_percent_decoded() {
        assert_eq!(query_param("key=click%2D42&x=1", "key"), Some(b"click-42".to_vec()));
        assert_eq!(query_param("a=1&key=a+b%20c", "key"), Some(b"a b c".to_vec()));
        assert_eq!(query_param("key=%ff%", "key"), Some(vec![0xff, b'%']));
        assert_eq!(query_param("key=%4", "key"), Some(b"%4".to_vec()));
        assert_eq!(query_param("other=1", "key"), None);
    }
}
