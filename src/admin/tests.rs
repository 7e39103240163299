use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use tower::ServiceExt;

use super::routes::query_param;
use super::*;
use crate::config::Secret;

const TOKEN: &str = "test-token-0123456789";

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
    feature(&status, "example", None);
    (router(status, Arc::new(Metrics::new(3)), Access::from(&key_endpoints), limits), done)
}

/// Lists the feature endpoint `/v1/<name>`, answered by `answer` (`None`: off).
fn feature(status: &Status, name: &'static str, answer: Option<LookupFn>) {
    let off = "no example stage: set example.level to turn it on\n";
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
    for wrong in [format!("Bearer {TOKEN}x"), "Bearer test-token".to_string(), format!("Basic {TOKEN}"), String::new()]
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

/// A feature's endpoint `/v1/<name>` needs the token; while the feature is
/// off (the workers set no answer for it) it is 404 naming its settings;
/// without `key`, 400.
#[tokio::test]
async fn a_feature_endpoint_is_not_found_while_its_feature_is_off() {
    let app = app(token(), Duration::ZERO);
    let auth = format!("Bearer {TOKEN}");
    assert_eq!(call(&app, "GET", "/v1/example?key=a", None).await.0, StatusCode::UNAUTHORIZED);
    let (code, _, body) = call(&app, "GET", "/v1/example?key=a", Some(&auth)).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(body.contains("set example.level"), "{body}");
    let status = Status::new();
    *status.lookup.lock().unwrap() = Some(Arc::new(|_: &[u8]| Ok(serde_json::json!({}))));
    feature(&status, "example", Some(Arc::new(|k: &[u8]| Ok(serde_json::json!({ "estimate": k.len() })))));
    let app = router(status, Arc::new(Metrics::new(3)), Access::from(&token()), Limits::default());
    let (code, _, body) = call(&app, "GET", "/v1/example?key=abc", Some(&auth)).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap(), serde_json::json!({ "estimate": 3 }));
    assert_eq!(call(&app, "GET", "/v1/example", Some(&auth)).await.0, StatusCode::BAD_REQUEST);
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
    feature(&status, "example", Some(answer(worker.clone())));
    feature(&status, "other", Some(answer(worker.clone())));
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
    let calls: Vec<_> = ["/v1/lookup?key=a", "/v1/example?key=b", "/v1/other?key=c", "/v1/example?key=d"]
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
