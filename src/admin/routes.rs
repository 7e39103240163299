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

use super::Limits;
use super::access::{self, Access};
use super::answer::{json, text};
use super::request::percent_decode;
use super::status::{
    BROKER_SILENCE_NOT_READY, Busy, LOOKUP_WAIT, LookupFn, REGISTRY_OUTAGE_NOT_READY, SliceStatus, Status,
};
use crate::metrics::Metrics;

/// What the handlers share.
#[derive(Clone)]
struct AdminState {
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
    finish(routes, AdminState { status, metrics }, &limits)
}

/// What every admin listener ends with: GET only, its state, and the
/// limits on a request's body and time.
fn finish(routes: Router<AdminState>, state: AdminState, limits: &Limits) -> Router {
    routes
        .method_not_allowed_fallback(|| async { text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n") })
        .with_state(state)
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
    finish(routes, AdminState { status, metrics }, &limits)
}

/// The endpoints that reveal or change keys, the features' among them
/// (`/v1/<name>`, as listed in `status`). [`router`] puts them behind
/// the token check and the key-endpoint concurrency limit.
fn key_routes(status: &Arc<Status>) -> Router<AdminState> {
    let routes = Router::new().route("/v1/lookup", get(lookup)).merge(crate::features::admin_routes(status));
    let names: Vec<&'static str> = status.feature_lookups.lock().expect("status lock").keys().copied().collect();
    names.into_iter().fold(routes, |routes, name| {
        let handler =
            move |State(state): State<AdminState>, RawQuery(query): RawQuery| feature_lookup(state, query, name);
        routes.route(&format!("/v1/{name}"), get(handler))
    })
}

async fn metrics_text(State(state): State<AdminState>) -> Response {
    // Computed now: the worker that records contacts may itself be waiting for the broker.
    if let Some(silence) = state.status.broker_silence() {
        state.metrics.slices.broker_silence.set(silence.as_secs_f64());
    }
    let body = state.metrics.render();
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

async fn healthz(State(state): State<AdminState>) -> Response {
    if state.status.healthy.load(Ordering::Relaxed) {
        text(StatusCode::OK, "ok\n")
    } else {
        text(StatusCode::SERVICE_UNAVAILABLE, "failing\n")
    }
}

async fn readyz(State(state): State<AdminState>) -> Response {
    let silence = state.status.broker_silence().filter(|s| *s >= BROKER_SILENCE_NOT_READY);
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
    } else if state.status.ready.load(Ordering::Relaxed) {
        text(StatusCode::OK, "ready\n")
    } else {
        text(StatusCode::SERVICE_UNAVAILABLE, "not ready: joining the group or restoring slices\n")
    }
}

async fn slices(State(state): State<AdminState>) -> Response {
    let slices: Vec<SliceStatus> = state.status.slices.lock().expect("status lock").values().cloned().collect();
    json(&slices)
}

async fn lookup(State(state): State<AdminState>, RawQuery(query): RawQuery) -> Response {
    let answer = state.status.lookup.lock().expect("status lock").clone();
    key_answer(query, "/v1/lookup", answer).await
}

/// A feature's key endpoint `/v1/<name>`: 404 with what turns it on while
/// the slice workers run without the feature.
async fn feature_lookup(state: AdminState, query: Option<String>, name: &'static str) -> Response {
    let workers_run = state.status.lookup.lock().expect("status lock").is_some();
    let feature = state.status.feature_lookups.lock().expect("status lock").get(name).cloned();
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

/// The percent-decoded value of `name` in a query string.
pub(super) fn query_param(query: &str, name: &str) -> Option<Vec<u8>> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| percent_decode(v))
    })
}
