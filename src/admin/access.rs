//! Who may use the key endpoints: `admin.key_endpoints` and the bearer token.
//!
//! The token is kept only as its SHA-256 digest, and a request's token is
//! compared digest to digest in constant time: the time a refusal takes
//! tells nothing about how much of a guess was right, nor about the token's
//! length (comparing the tokens themselves would stop at their first
//! difference, or at once on a length mismatch).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::KeyEndpoints;

use super::answer::text;

/// `admin.key_endpoints`, ready to check requests.
#[derive(Clone)]
pub enum Access {
    /// The key endpoints answer 404.
    Off,
    /// They need `Authorization: Bearer <token>`; this is the token's SHA-256.
    Token([u8; 32]),
}

impl From<&KeyEndpoints> for Access {
    fn from(setting: &KeyEndpoints) -> Self {
        match setting {
            KeyEndpoints::Off => Access::Off,
            KeyEndpoints::Token(token) => Access::Token(digest(token.expose().as_bytes())),
        }
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The token of an `Authorization: Bearer <token>` header (the scheme is
/// case-insensitive, RFC 7235), or None.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, token) = value.split_at(space);
    scheme.eq_ignore_ascii_case(b"bearer").then(|| token.trim_ascii())
}

fn unauthorized(challenge: &'static str, body: &str) -> Response {
    let mut response = text(StatusCode::UNAUTHORIZED, body);
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static(challenge));
    response
}

/// Middleware in front of every key endpoint.
pub async fn guard(State(access): State<Access>, request: Request, next: Next) -> Response {
    let Access::Token(want) = access else {
        return text(
            StatusCode::NOT_FOUND,
            "this endpoint reveals keys and is off: it needs a bearer token (admin.token_file) and \
             admin.key_endpoints = auto or token\n",
        );
    };
    match bearer(request.headers()) {
        None => unauthorized(
            r#"Bearer realm="dedupd""#,
            "this endpoint needs the admin token: Authorization: Bearer <admin.token>\n",
        ),
        Some(given) if bool::from(digest(given).ct_eq(&want)) => next.run(request).await.into_response(),
        Some(_) => {
            // Debug only: a client trying tokens must not be able to fill the log.
            log::debug!("admin: {} refused: wrong bearer token", request.uri().path());
            unauthorized(r#"Bearer realm="dedupd", error="invalid_token""#, "wrong admin token\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_others_are_not_bearer() {
        assert_eq!(bearer(&headers("Bearer abc")), Some(&b"abc"[..]));
        assert_eq!(bearer(&headers("bearer  abc ")), Some(&b"abc"[..]));
        assert_eq!(bearer(&headers("Basic YWJjOmRlZg==")), None);
        assert_eq!(bearer(&headers("Bearer")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
