//! The client against a real socket that answers as it is told: well, late,
//! cut, garbled or huge. Each answer is a schema or an error with a reason
//! within the deadline; none panics.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use super::*;

const ANSWER: &str = r#"{"schema":"{\"type\":\"record\",\"name\":\"É\",\"fields\":[]}"}"#;

/// A server on a free port that answers each connection with `parts`, in
/// order, `pause` between two of them, then closes it.
fn serve(parts: Vec<Vec<u8>>, pause: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let parts = parts.clone();
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    request.push(byte[0]);
                }
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        std::thread::sleep(pause);
                    }
                    if stream.write_all(part).is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

fn ask(url: &str, deadline: Duration) -> (Result<String, Failure>, Duration) {
    let registry = HttpRegistry::with_deadline(&Access { url, ..Access::default() }, deadline).unwrap();
    let started = Instant::now();
    let got = registry.ask(Asked::Id(7));
    (got, started.elapsed())
}

fn head(status: &str, extra: &str) -> Vec<u8> {
    format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}\r\n").into_bytes()
}

fn chunk(bytes: &[u8]) -> Vec<u8> {
    [format!("{:x}\r\n", bytes.len()).as_bytes(), bytes, b"\r\n"].concat()
}

fn transient(got: Result<String, Failure>) -> (&'static str, String) {
    match got {
        Err(Failure::Transient(kind, why)) => (kind, why),
        other => panic!("expected a transient failure, got {other:?}"),
    }
}

#[test]
fn answers_and_statuses() {
    let ok =
        serve(vec![head("200 OK", &format!("Content-Length: {}\r\n", ANSWER.len())), ANSWER.into()], Duration::ZERO);
    assert_eq!(ask(&ok, DEADLINE).0, Ok(ANSWER.to_string()));
    let missing = serve(vec![head("404 Not Found", "Content-Length: 2\r\n"), b"{}".to_vec()], Duration::ZERO);
    let got = ask(&missing, DEADLINE).0;
    assert!(matches!(&got, Err(Failure::Definite(why)) if why.contains("HTTP 404")), "{got:?}");
    for (status, kind) in [
        ("500 Internal Server Error", "server_error"),
        ("503 Service Unavailable", "server_error"),
        ("429 Too Many Requests", "throttled"),
        ("401 Unauthorized", "refused_credentials"),
        ("403 Forbidden", "refused_credentials"),
        ("302 Found", "bad_answer"),
    ] {
        let url = serve(vec![head(status, "Content-Length: 0\r\n")], Duration::ZERO);
        assert_eq!(transient(ask(&url, DEADLINE).0).0, kind, "{status}");
    }
    // A 200 that is not the registry's answer (a proxy's page) is no verdict.
    let page = serve(vec![head("200 OK", "Content-Length: 9\r\n"), b"<html>hi<".to_vec()], Duration::ZERO);
    let (kind, why) = transient(ask(&page, DEADLINE).0);
    assert_eq!(kind, "bad_answer");
    assert!(why.contains("not JSON"), "{why}");
    let json = serve(vec![head("200 OK", "Content-Length: 2\r\n"), b"[]".to_vec()], Duration::ZERO);
    assert!(transient(ask(&json, DEADLINE).0).1.contains("not a schema registry answer"));
    // Nobody listening.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    assert_eq!(transient(ask(&closed, DEADLINE).0).0, "unreachable");
}

/// Chunk boundaries inside a multibyte character are bytes like any other;
/// an answer cut inside one is an error, not a panic (the hand-written
/// client this replaces cut the text at byte offsets).
#[test]
fn chunks_cut_inside_a_character() {
    let at = ANSWER.find('É').unwrap() + 1;
    let (a, b) = ANSWER.as_bytes().split_at(at);
    let whole = serve(
        vec![head("200 OK", "Transfer-Encoding: chunked\r\n"), chunk(a), chunk(b), b"0\r\n\r\n".to_vec()],
        Duration::from_millis(20),
    );
    assert_eq!(ask(&whole, DEADLINE).0, Ok(ANSWER.to_string()));
    let cut = serve(vec![head("200 OK", "Transfer-Encoding: chunked\r\n"), chunk(a)], Duration::ZERO);
    let (kind, why) = transient(ask(&cut, DEADLINE).0);
    assert_eq!(kind, "bad_answer", "{why}");
    let short = serve(vec![head("200 OK", "Content-Length: 500\r\n"), a.to_vec()], Duration::ZERO);
    assert_eq!(transient(ask(&short, DEADLINE).0).0, "bad_answer");
}

/// An answer dripping a byte every 200 ms ends at the total deadline, not
/// at a per-read timeout that each byte would reset.
#[test]
fn a_dripping_answer_ends_at_the_deadline() {
    let mut parts = vec![head("200 OK", &format!("Content-Length: {}\r\n", ANSWER.len()))];
    parts.extend(ANSWER.bytes().map(|b| vec![b]));
    let drip = serve(parts, Duration::from_millis(200));
    let (got, took) = ask(&drip, Duration::from_secs(2));
    assert_eq!(transient(got).0, "timeout");
    assert!(took < Duration::from_secs(4), "held {took:?} past a 2 s deadline");
    let silent = serve(vec![Vec::new(), head("200 OK", "")], Duration::from_secs(30));
    let (got, took) = ask(&silent, Duration::from_secs(1));
    assert_eq!(transient(got).0, "timeout");
    assert!(took < Duration::from_secs(3), "held {took:?} past a 1 s deadline");
}

/// Garbage instead of HTTP, and 10 MB where a schema is expected.
#[test]
fn garbage_and_huge_answers() {
    for garbage in [&b"\x00\xff\xfe garbage\r\n\r\n"[..], b"HTTP/1.1 abc\r\n\r\n", b"SSH-2.0-OpenSSH_9.6\r\n", b""] {
        let url = serve(vec![garbage.to_vec()], Duration::ZERO);
        let (kind, why) = transient(ask(&url, DEADLINE).0);
        assert_eq!(kind, "bad_answer", "{garbage:?}: {why}");
    }
    let huge = vec![b'x'; 10 << 20];
    let url = serve(vec![head("200 OK", &format!("Content-Length: {}\r\n", huge.len())), huge], Duration::ZERO);
    let (kind, why) = transient(ask(&url, DEADLINE).0);
    assert_eq!(kind, "bad_answer");
    assert!(why.contains("8388608"), "{why}");
    let chunked =
        vec![head("200 OK", "Transfer-Encoding: chunked\r\n"), chunk(&vec![b'x'; 10 << 20]), b"0\r\n\r\n".to_vec()];
    let url = serve(chunked, Duration::ZERO);
    assert_eq!(transient(ask(&url, DEADLINE).0).0, "bad_answer");
}

#[test]
fn settings_are_checked() {
    let check = |access: Access<'_>| HttpRegistry::new(&access).map(|_| ()).map_err(|(s, _)| s);
    let url = |url| Access { url, ..Access::default() };
    assert_eq!(check(url("http://127.0.0.1:8081/sr/")), Ok(()));
    assert_eq!(check(url("https://registry.example.com")), Ok(()));
    for bad in ["http://", "ftp://r:8081", "r:8081", "https://user@r", ""] {
        assert_eq!(check(url(bad)), Err(Setting::Url), "{bad}");
    }
    let both = Access { url: "http://r", user: Some("u"), token: Some("t"), ..Access::default() };
    assert_eq!(check(both), Err(Setting::Token));
    let missing = Path::new("/nonexistent/ca.pem");
    assert_eq!(check(Access { url: "https://r", ca_file: Some(missing), ..Access::default() }), Err(Setting::CaFile));
    let not_pem = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let ca = Access { url: "https://r", ca_file: Some(&not_pem), ..Access::default() };
    assert_eq!(check(ca), Err(Setting::CaFile));
    let cert = Access { url: "https://r", cert_file: Some(&not_pem), ..Access::default() };
    assert_eq!(check(cert), Err(Setting::KeyFile));
    let registry =
        HttpRegistry::new(&Access { url: "http://r", user: Some("user"), password: Some("pw"), ..Access::default() });
    assert_eq!(registry.unwrap().auth.as_deref(), Some("Basic dXNlcjpwdw=="));
    let registry = HttpRegistry::new(&Access { url: "http://r", token: Some("t0k"), ..Access::default() });
    assert_eq!(registry.unwrap().auth.as_deref(), Some("Bearer t0k"));
    assert_eq!(base64(b"ab"), "YWI=");
}
