//! `DELETE /v1/keys/{key}` on the admin endpoint: the route, its answer
//! from the slice workers' key action ([`super::requests`]) and its log line.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use crate::admin::answer::{json, text};
use crate::admin::request::{Peer, percent_decode};
use crate::admin::status::Status;

/// The feature's name, under which the slice workers set its key action.
pub const NAME: &str = "deletes";

/// The route, behind the admin endpoint's key guard.
pub fn routes() -> Router<Arc<Status>> {
    Router::new().route("/v1/keys/{*key}", axum::routing::delete(delete_key))
}

/// `DELETE /v1/keys/{key}` (the key percent-encoded: keys are bytes): the
/// key's slice applies the delete at its place in the slice log; 200
/// `{"deleted": true}`, or 409 / 404 with the reason. Every request that
/// passed the token check is logged at INFO ([`log_delete`]).
async fn delete_key(State(status): State<Arc<Status>>, request: axum::extract::Request) -> Response {
    let peer = request.extensions().get::<Peer>().copied();
    let key = percent_decode(request.uri().path().strip_prefix("/v1/keys/").unwrap_or_default());
    if key.is_empty() {
        log_delete(&key, peer, StatusCode::BAD_REQUEST, "no key");
        return text(StatusCode::BAD_REQUEST, "usage: DELETE /v1/keys/URL-ENCODED-KEY\n");
    }
    // Off the async threads: it waits for the broker and the slice worker.
    // Taken out of the lock: deletes wait for the broker, not for each other.
    let delete = status.key_actions.lock().expect("status lock").get(NAME).cloned();
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
