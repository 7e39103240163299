//! The admin endpoint's answers: plain text and JSON.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

const TEXT: &str = "text/plain; charset=utf-8";

/// A plain-text answer.
pub fn text(code: StatusCode, body: impl Into<String>) -> Response {
    (code, [(header::CONTENT_TYPE, TEXT)], body.into()).into_response()
}

/// A JSON answer.
pub fn json(value: &impl Serialize) -> Response {
    let body = serde_json::to_string_pretty(value).expect("admin answers serialise");
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
