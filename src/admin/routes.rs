//! The admin endpoint's routes and their handlers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::{BoxError, ServiceBuilder};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use super::access::{self, Access};
use super::answer::{json, text};
use super::status::{
    BROKER_SILENCE_NOT_READY, Busy, LOOKUP_WAIT, LookupFn, REGISTRY_OUTAGE_NOT_READY, SliceStatus, Status,
};
use super::{Limits, Peer};
use crate::metrics::Metrics;

/// What the handlers share.
#[derive(Clone)]
struct Shared {
    status: Arc<Status>,
    metrics: Arc<Metrics>,
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
    let keyed =
        key_routes(&status).route_layer(key_limit).route_layer(middleware::from_fn_with_state(access, access::guard));
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
    let routes =
        Router::new().route("/v1/lookup", get(lookup)).route("/v1/keys/{*key}", axum::routing::delete(delete_key));
    let names: Vec<&'static str> = status.feature_lookups.lock().expect("status lock").keys().copied().collect();
    names.into_iter().fold(routes, |routes, name| {
        let handler =
            move |State(shared): State<Shared>, RawQuery(query): RawQuery| feature_lookup(shared, query, name);
        routes.route(&format!("/v1/{name}"), get(handler))
    })
}

async fn metrics_text(State(shared): State<Shared>) -> Response {
    // Computed now: the worker that records contacts may itself be waiting for the broker.
    if let Some(silence) = shared.status.broker_silence() {
        shared.metrics.slices.broker_silence.set(silence.as_secs_f64());
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
    let workers_run = shared.status.lookup.lock().expect("status lock").is_some();
    let feature = shared.status.feature_lookups.lock().expect("status lock").get(name).cloned();
    if let Some(f) = &feature
        && workers_run
        && f.answer.is_none()
    {
        return text(StatusCode::NOT_FOUND, f.off);
    }
    key_answer(query, &format!("/v1/{name}"), feature.and_then(|f| f.answer)).await
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
pub(super) fn query_param(query: &str, name: &str) -> Option<Vec<u8>> {
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
