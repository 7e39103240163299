//! The command line's client of the admin endpoint (`dedupd keys`,
//! `dedupd status`): ureq, the schema registry client's HTTP client, over
//! plain HTTP, as the endpoint serves plain HTTP (behind a TLS proxy, use
//! that proxy's own client).

use std::time::Duration;

use anyhow::{Context, bail};

/// Most time to connect: a member that is gone must not hang the command
/// for the system's connect timeout.
const CONNECT: Duration = Duration::from_secs(5);

/// Most time one request may take, the whole answer included.
const DEADLINE: Duration = Duration::from_secs(30);

/// Most bytes of an answer read (the admin endpoint's JSON is far smaller).
const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// Sends one request and returns the status and body.
pub(super) fn request(base: &str, method: &str, path: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    let invalid = || format!("invalid --admin {base}: expected http://HOST:PORT");
    let Some(host) = base.strip_prefix("http://").map(|h| h.trim_end_matches('/')) else { bail!(invalid()) };
    if host.is_empty() || host.contains(['/', '@', '?', '#', ' ']) {
        bail!(invalid());
    }
    let mut request = ureq::http::Request::builder().method(method).uri(format!("http://{host}{path}"));
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let request = request.body(()).with_context(invalid)?;
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT))
        .timeout_global(Some(DEADLINE))
        .max_redirects(0)
        .user_agent(concat!("dedupd/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent();
    let mut answer = agent.run(request).with_context(|| format!("{method} {path} on {host}"))?;
    let status = answer.status().as_u16();
    let body = answer
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER_BYTES)
        .read_to_vec()
        .with_context(|| format!("reading the answer of {host}"))?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::request;

    #[test]
    fn addresses_are_checked_and_failures_named() {
        for base in ["https://a:1", "127.0.0.1:1", "http://", "http://a:1/x", "http://u@a:1"] {
            let err = request(base, "GET", "/healthz", None).unwrap_err().to_string();
            assert!(err.contains("expected http://HOST:PORT"), "{base}: {err}");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let err = format!("{:#}", request(&format!("http://127.0.0.1:{port}"), "GET", "/healthz", None).unwrap_err());
        assert!(err.starts_with(&format!("GET /healthz on 127.0.0.1:{port}: ")), "{err}");
    }
}
