//! The admin endpoint of a real `dedupd run` on the test broker: the key
//! endpoints need the bearer token (or are off), secrets never reach the log
//! or an answer, and slow or hostile clients (a slowloris, 500 idle or
//! half-sent connections, an 8 MB header) do not starve `/metrics`.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::*;

/// Known secret values; none may appear in the daemon's output or answers.
const TOKEN: &str = "admin-token-S3CRET-4a7f0c21e9";
const SASL_PASSWORD: &str = "sasl-S3CRET-password-77";
const KEY_PASSWORD: &str = "key-S3CRET-password-78";
const KEYSTORE_PASSWORD: &str = "keystore-S3CRET-password-79";
/// Too short for a token (under 16 characters).
const SHORT_TOKEN: &str = "S3CRET-short";
const SECRETS: [&str; 5] = [TOKEN, SASL_PASSWORD, KEY_PASSWORD, KEYSTORE_PASSWORD, SHORT_TOKEN];

fn assert_no_secret(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} shows the secret {secret}:\n{text}");
    }
    assert!(!text.contains("S3CRET"), "{what} shows part of a secret:\n{text}");
}

/// A daemon on a fresh input topic (2 partitions, input-partitions slicing) with `extra` settings.
fn daemon(name: &str, extra: &[(&str, &str)]) -> (Daemon, String) {
    let input = unique(&format!("clicks-{name}"));
    create_topic(&input, 2);
    let app = unique(name);
    let mut env = app_env(&app, &input, "input-partitions", 2);
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    (Daemon::start(name, &env), input)
}

/// A new directory with a file `token` holding `token` and a newline, as a
/// mounted Secret gives it: (the directory, the file's path).
fn token_file(token: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(unique("dedupd-admin-token"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    (dir, file.display().to_string())
}

#[test]
fn key_endpoints_need_the_token_and_no_secret_is_shown() {
    let (dir, token_path) = token_file(TOKEN);
    let (mut daemon, input) = daemon(
        "admin-auth",
        &[
            ("DEDUPD__ADMIN__TOKEN_FILE", &token_path),
            // librdkafka secrets, unused by the plaintext test broker but passed to every client.
            ("DEDUPD__KAFKA__SASL_PASSWORD", SASL_PASSWORD),
            ("DEDUPD__KAFKA__SSL_KEY_PASSWORD", KEY_PASSWORD),
            ("DEDUPD__KAFKA__SSL_KEYSTORE_PASSWORD", KEYSTORE_PASSWORD),
            // Everything dedupd and librdkafka log, including the configuration librdkafka dumps.
            ("RUST_LOG", "debug"),
            ("DEDUPD__KAFKA__DEBUG", "conf,security,generic"),
        ],
    );
    daemon.wait_ready(Duration::from_secs(60));
    let records: Vec<Rec> = (0..40u64)
        .map(|i| click(i, &format!("k{}", i % 20), BASE_TS + i as i64, partition_of(&format!("k{}", i % 20), 2)))
        .collect();
    produce(&input, &records);
    wait_for("records judged", Duration::from_secs(60), || slice_total(&[&daemon], &["distinct", "duplicates"]) >= 40);

    let port = daemon.admin_port;
    let mut answers = Vec::new();
    let mut ask = |path: &str, headers: &[(&str, &str)]| {
        let answer = http_request(port, "GET", path, headers).expect("an answer");
        answers.push(format!("{path}\n{}\n\n{}", answer.head, answer.body));
        answer
    };

    // Without a token, with a wrong one, with another scheme: 401 and a challenge.
    let none = ask("/v1/lookup?key=k1", &[]);
    assert_eq!(none.code, 401, "{}", none.body);
    assert!(none.head.contains("www-authenticate: Bearer realm=\"dedupd\""), "{}", none.head);
    let almost = format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]);
    let basic = format!("Basic {TOKEN}");
    for wrong in [almost.as_str(), "Bearer x", basic.as_str()] {
        let answer = ask("/v1/lookup?key=k1", &[("Authorization", wrong)]);
        assert_eq!(answer.code, 401, "{wrong}: {}", answer.body);
        assert!(!answer.body.contains("duplicate"), "{}", answer.body);
    }
    // With it: the verdict.
    let bearer = format!("Bearer {TOKEN}");
    let seen = ask("/v1/lookup?key=k1", &[("Authorization", &bearer)]);
    assert_eq!(seen.code, 200, "{}", seen.body);
    let seen: serde_json::Value = serde_json::from_str(&seen.body).unwrap();
    assert!(seen["results"].as_array().unwrap().iter().any(|r| r["duplicate"] == true), "{seen}");

    // The open endpoints need none.
    for path in ["/metrics", "/healthz", "/readyz", "/v1/slices"] {
        assert_eq!(ask(path, &[]).code, 200, "{path}");
    }
    assert_eq!(ask("/nowhere", &[]).code, 404);

    assert!(daemon.terminate(Duration::from_secs(30)).success());
    let log = daemon.log_text();
    assert!(log.contains("key endpoints such as /v1/lookup: bearer token required"), "{log}");
    // librdkafka did dump its configuration (so the check below looked at it) …
    assert!(log.contains("sasl.password"), "no configuration dump in the log:\n{log}");
    // … and neither it nor dedupd showed a secret, in the log or in any answer.
    assert_no_secret("the daemon's log", &log);
    assert_no_secret("the admin answers", &answers.join("\n"));
    daemon.assert_clean_log();
    std::fs::remove_dir_all(&dir).ok();
}

/// One variable for the token: `DEDUPD_ADMIN_TOKEN` gives the daemon its
/// token (as `DEDUPD__ADMIN__TOKEN` does) and `dedupd keys` the token it
/// sends; set beside `DEDUPD__ADMIN__TOKEN` to another token, it stops the
/// start naming both variables and neither token.
#[test]
fn one_token_variable_for_the_daemon_and_the_cli() {
    let (mut daemon, _) = daemon("admin-token-env", &[("DEDUPD_ADMIN_TOKEN", TOKEN)]);
    daemon.wait_ready(Duration::from_secs(60));
    let port = daemon.admin_port;
    let bearer = format!("Bearer {TOKEN}");
    let answer = http_request(port, "GET", "/v1/lookup?key=k1", &[("Authorization", &bearer)]).expect("an answer");
    assert_eq!(answer.code, 200, "{}", answer.body);
    assert_eq!(http_request(port, "GET", "/v1/lookup?key=k1", &[]).expect("an answer").code, 401);

    // `dedupd keys delete` sends the same variable's token: past the guard
    // (409: this filter cannot delete), and refused without it (401).
    let keys = |token: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_dedupd"));
        command.args(["keys", "delete", "k1", "--admin", &format!("http://127.0.0.1:{port}")]);
        command.env_remove("DEDUPD_ADMIN_TOKEN");
        if let Some(token) = token {
            command.env("DEDUPD_ADMIN_TOKEN", token);
        }
        let out = command.output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let with = keys(Some(TOKEN));
    assert!(with.contains("the key was not deleted (HTTP 409)"), "{with}");
    let without = keys(None);
    assert!(without.contains("the key was not deleted (HTTP 401)"), "{without}");
    assert!(daemon.terminate(Duration::from_secs(30)).success());
    assert_no_secret("the daemon's log", &daemon.log_text());
    daemon.assert_clean_log();
    // The delete that passed the token check is logged at INFO: the key by
    // its SHA-256 prefix (not the key), the caller's address, the outcome.
    // The one refused for want of the token is not (debug only).
    let log = daemon.log_text();
    let deletes: Vec<&str> = log.lines().filter(|l| l.contains("admin: DELETE /v1/keys")).collect();
    assert_eq!(deletes.len(), 1, "{deletes:#?}");
    let digest: String = {
        use sha2::Digest;
        sha2::Sha256::digest(b"k1")[..8].iter().map(|b| format!("{b:02x}")).collect()
    };
    let line = deletes[0];
    assert!(line.split_whitespace().nth(1) == Some("INFO"), "{line}");
    let want = format!("admin: DELETE /v1/keys key_sha256={digest} (2 bytes) from 127.0.0.1:");
    assert!(line.contains(&want), "want {want:?} in {line}");
    assert!(line.contains(" with the admin token: 409 not deleted: the filter is not deletable"), "{line}");
    assert!(!line.contains("k1"), "the key itself is logged: {line}");

    let env =
        [("DEDUPD_ADMIN_TOKEN".to_string(), TOKEN.to_string()), ("DEDUPD__ADMIN__TOKEN".into(), SASL_PASSWORD.into())];
    let mut both = Daemon::spawn("admin-two-tokens", &root(), &["run", "--config", "config/dedupd.toml"], &env);
    let status = both.child.wait().unwrap();
    let log = both.log_text();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains(
            "invalid setting admin.token = [redacted]: DEDUPD_ADMIN_TOKEN and DEDUPD__ADMIN__TOKEN are both set, to \
             different tokens"
        ),
        "{log}"
    );
    assert_no_secret("the refusal", &log);
}

#[test]
fn key_endpoints_are_off_without_a_token() {
    let (mut daemon, _) = daemon("admin-off", &[]);
    daemon.wait_ready(Duration::from_secs(60));
    let bearer = format!("Bearer {TOKEN}");
    for headers in [vec![], vec![("Authorization", bearer.as_str())]] {
        let answer = http_request(daemon.admin_port, "GET", "/v1/lookup?key=k1", &headers).unwrap();
        assert_eq!(answer.code, 404, "{}", answer.body);
        assert!(answer.body.contains("admin.key_endpoints"), "{}", answer.body);
    }
    assert_eq!(http_get(daemon.admin_port, "/metrics").unwrap().0, 200);
    assert!(daemon.terminate(Duration::from_secs(30)).success());
    assert!(daemon.log_text().contains("key endpoints such as /v1/lookup: off"));
    daemon.assert_clean_log();
}

/// Whether the server closed `s`: a read gives end-of-file or an error
/// within `wait` (a timeout means it is still open).
fn closed_within(mut s: &TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}

/// Whether the server has closed `s` by now (without waiting).
fn closed_now(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 256];
    let closed = match (&*s).read(&mut buf) {
        Ok(n) => n == 0,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    s.set_nonblocking(false).unwrap();
    closed
}

/// `/metrics` answers 200 within the bound of 1 s (a correctness
/// bound for a starved endpoint, not a speed measurement), asked from
/// 127.0.0.2: another peer than the hostile clients' 127.0.0.1.
fn assert_metrics_answer(port: u16, while_what: &str) {
    let started = Instant::now();
    let answer = get_from("127.0.0.2", port, "/metrics");
    let took = started.elapsed();
    assert!(
        answer.as_ref().is_some_and(|(code, body)| *code == 200 && body.contains("dedupd_build_info")),
        "{answer:?}"
    );
    assert!(took < Duration::from_secs(1), "/metrics took {took:?} {while_what}");
    eprintln!("/metrics answered in {took:?} {while_what}");
}

#[test]
fn slow_and_hostile_clients_do_not_starve_metrics() {
    let (mut daemon, _) = daemon("admin-hostile", &[]);
    daemon.wait_ready(Duration::from_secs(60));
    let port = daemon.admin_port;
    let header_timeout = Duration::from_secs(2); // admin::Limits::default().header_read_timeout

    // 500 connections held open: half say nothing, half send part of a request head.
    let opened = Instant::now();
    let held: Vec<TcpStream> = (0..500)
        .map(|i| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            if i % 2 == 1 {
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Half: ").unwrap();
            }
            s
        })
        .collect();
    eprintln!("500 connections opened in {:?}", opened.elapsed());
    for round in 0..3 {
        assert_metrics_answer(port, &format!("with 500 connections held open (round {round})"));
        assert_eq!(get_from("127.0.0.2", port, "/healthz").unwrap().0, 200);
    }
    // One peer holds at most 256 (admin::Limits::default().max_connections_per_peer): the rest
    // were closed at once; those held are still open (within the header timeout).
    let still_open = held.iter().filter(|s| !closed_now(s)).count();
    eprintln!("{still_open} of one peer's 500 connections open after {:?}", opened.elapsed());
    assert!(still_open > 0, "the connections took too long to open to test them held");
    assert!(still_open <= 256, "one peer holds {still_open} connections, over its cap of 256");

    // A slowloris: the head one byte at a time, a byte every 200 ms; cut off at the header timeout.
    // From another peer than the held connections' (whose cap they fill).
    let mut slow = connect_from("127.0.0.3", port).unwrap();
    let started = Instant::now();
    let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let mut cut = false;
    for byte in head.iter().cycle().take(100) {
        if slow.write_all(&[*byte]).is_err() || closed_within(&slow, Duration::from_millis(200)) {
            cut = true;
            break;
        }
        if started.elapsed() < header_timeout {
            assert_metrics_answer(port, "while a slowloris trickles its head");
        }
    }
    let lasted = started.elapsed();
    eprintln!("the slowloris was cut off after {lasted:?}");
    assert!(cut, "the slowloris was still connected after {lasted:?}");
    assert!(lasted >= header_timeout - Duration::from_millis(500), "cut off after only {lasted:?}");

    // The held connections are closed by the same timeout.
    let still_open = held.iter().filter(|s| !closed_within(s, Duration::from_millis(10))).count();
    assert_eq!(still_open, 0, "{still_open} of 500 held connections still open after {:?}", opened.elapsed());
    drop(held);

    // An 8 MB header: 431 as soon as the head passes the limit (16 KiB).
    let started = Instant::now();
    let mut big = connect_from("127.0.0.3", port).unwrap();
    let mut reader = big.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let mut sent = 0usize;
        let chunk = vec![b'a'; 64 << 10];
        if big.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ").is_ok() {
            while sent < 8 << 20 && big.write_all(&chunk).is_ok() {
                sent += chunk.len();
            }
            let _ = big.write_all(b"\r\n\r\n");
        }
        sent
    });
    reader.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = reader.read(&mut buf) {
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
    }
    let refused_after = started.elapsed();
    let sent = writer.join().unwrap();
    eprintln!("an 8 MB header was refused after {refused_after:?}, {sent} bytes of it sent");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 431 Request Header Fields Too Large"), "{reply:?}");
    // Refused by its size, not by the header timeout (the client's socket
    // buffers take a few MB before the server's refusal resets the connection).
    assert!(refused_after < header_timeout, "refused only after {refused_after:?}");
    assert_metrics_answer(port, "after an 8 MB header");

    assert!(daemon.terminate(Duration::from_secs(30)).success());
    daemon.assert_clean_log();
}

/// A connection to `port` on loopback from the address `source` (another
/// loopback address is another peer to the daemon).
fn connect_from(source: &str, port: u16) -> std::io::Result<TcpStream> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(format!("{source}:0").parse().unwrap())?;
        let stream = socket.connect(([127, 0, 0, 1], port).into()).await?.into_std()?;
        stream.set_nonblocking(false)?;
        Ok(stream)
    })
}

/// `GET path` from the loopback address `source`: (status code, body).
fn get_from(source: &str, port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = connect_from(source, port).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, text.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string())))
}

/// The port of the log line "health endpoint on http://127.0.0.1:PORT".
fn health_port(daemon: &Daemon) -> u16 {
    const LINE: &str = "health endpoint on http://127.0.0.1:";
    let text = daemon.log_text();
    let at = text.find(LINE).unwrap_or_else(|| panic!("no {LINE:?} in the log:\n{text}"));
    text[at + LINE.len()..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

/// 1 100 connections that send half a request to the admin port, each
/// reopened as soon as it is closed (by the header timeout, or at once over
/// the per-peer cap), held until `stop`. Returns how many connections it opened.
fn flood(port: u16, stop: Arc<AtomicBool>, opened: Arc<AtomicUsize>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut held: Vec<Option<TcpStream>> = (0..1100).map(|_| None).collect();
        while !stop.load(Ordering::Relaxed) {
            for slot in &mut held {
                let closed = slot.as_ref().is_none_or(|s| {
                    let mut buf = [0u8; 64];
                    match (&*s).read(&mut buf) {
                        Ok(0) => true,
                        // An answer (a 408) before the server closes: reopened too.
                        Ok(n) => buf[..n].starts_with(b"HTTP/1.1 "),
                        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                    }
                });
                if closed {
                    *slot = TcpStream::connect(("127.0.0.1", port)).ok().filter(|s| {
                        s.set_nonblocking(true).is_ok()
                            && (&*s).write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Half: ").is_ok()
                    });
                    if slot.is_some() {
                        opened.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

/// The probe: while 1 100 half-sent connections to the admin port
/// are held and reopened as they close, `/healthz` on the health port
/// (`admin.health_listen`) answers 200 within 2 s at least 29 of 30 times,
/// as does `/readyz`; the admin port's per-peer cap leaves another peer
/// (another loopback address) its `/metrics`. A correctness bound for a
/// starved endpoint, not a speed measurement.
#[test]
fn health_is_answered_while_half_sent_connections_flood_the_admin_port() {
    let (mut daemon, _) = daemon("admin-flood", &[("DEDUPD__ADMIN__HEALTH_LISTEN", "127.0.0.1:0")]);
    daemon.wait_ready(Duration::from_secs(60));
    let health = health_port(&daemon);
    assert_ne!(health, daemon.admin_port);
    let (stop, opened) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let flooding = flood(daemon.admin_port, stop.clone(), opened.clone());
    wait_for("1 100 connections opened", Duration::from_secs(30), || opened.load(Ordering::Relaxed) >= 1100);

    let (mut healthy, mut ready, mut slowest) = (0, 0, Duration::ZERO);
    for _ in 0..30 {
        for (path, count) in [("/healthz", &mut healthy), ("/readyz", &mut ready)] {
            let started = Instant::now();
            let answer = http_get(health, path);
            let took = started.elapsed();
            slowest = slowest.max(took);
            if answer.is_some_and(|(code, _)| code == 200) && took < Duration::from_secs(2) {
                *count += 1;
            } else {
                eprintln!("{path} on the health port: {:?} after {took:?}", http_get(health, path));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let other_peer = get_from("127.0.0.2", daemon.admin_port, "/metrics");
    let refused_over_cap = opened.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    flooding.join().unwrap();
    eprintln!(
        "/healthz 200 within 2 s {healthy} of 30, /readyz {ready} of 30 (slowest {slowest:?}); the flood opened \
         {refused_over_cap} connections"
    );
    assert!(healthy >= 29, "/healthz answered 200 within 2 s only {healthy} of 30 times");
    assert!(ready >= 29, "/readyz answered 200 within 2 s only {ready} of 30 times");
    assert!(refused_over_cap > 1100, "the flood's connections were never closed and reopened");
    assert!(
        other_peer.as_ref().is_some_and(|(code, body)| *code == 200 && body.contains("dedupd_build_info")),
        "another peer's /metrics during the flood: {other_peer:?}"
    );
    // The health port answers nothing else.
    assert_eq!(http_get(health, "/metrics").map(|(c, _)| c), Some(404));
    assert!(daemon.terminate(Duration::from_secs(30)).success());
}

#[test]
fn bad_secret_settings_are_named_without_their_values() {
    let (dir, bad_token) = token_file(SHORT_TOKEN);
    let cases = [
        // A mistyped librdkafka password setting: librdkafka refuses it, the value is not shown.
        (
            ("DEDUPD__KAFKA__SASL_PASWORD", SASL_PASSWORD),
            "invalid setting kafka.sasl.pasword = [redacted]: librdkafka refuses it",
        ),
        (("DEDUPD__ADMIN__TOKEN_FILE", bad_token.as_str()), "invalid setting admin.token_file = "),
        (("DEDUPD__ADMIN__TOKEN", SHORT_TOKEN), "invalid setting admin.token = [redacted] (12 bytes): 16 to 4096"),
    ];
    for ((name, value), want) in cases {
        let env = [(name.to_string(), value.to_string())];
        let mut daemon = Daemon::spawn("admin-bad", &root(), &["run", "--config", "config/dedupd.toml"], &env);
        let status = daemon.child.wait().unwrap();
        let log = daemon.log_text();
        assert!(!status.success(), "{name}: {log}");
        assert!(log.contains(want), "{name}: want {want:?} in\n{log}");
        assert_no_secret(name, &log);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Key lookups during a broker outage. The broker (one of this test's own,
/// so that stopping it stops no other test) is stopped (SIGSTOP: its
/// connections stay open, unanswered) while records wait for the
/// watermark; the slice worker's idle flush then waits for the broker
/// holding the worker lock. Lookups, `/v1/provenance` included, answer 503
/// "busy" with a Retry-After within a few seconds, and meanwhile every
/// `/healthz` and `/readyz` answers within 1 s; once the broker is back,
/// lookups answer 200 again.
#[test]
fn lookups_during_a_broker_outage_never_hold_up_the_health_endpoints() {
    let dir = std::env::temp_dir().join(unique("dedupd-admin-outage"));
    std::fs::create_dir_all(&dir).unwrap();
    let (broker, broker_port) = own_broker(&dir, &[]);
    let address = format!("127.0.0.1:{broker_port}");
    let mut client = rdkafka::config::ClientConfig::new();
    client.set("bootstrap.servers", &address);
    let input = unique("clicks-outage");
    create_topic_on(&client, &input, 2);
    let app = unique("admin-outage");
    let mut env = app_env(&app, &input, "input-partitions", 2);
    env.extend(
        [
            ("DEDUPD__KAFKA__BROKERS", address.as_str()),
            ("DEDUPD_ADMIN_TOKEN", TOKEN),
            ("DEDUPD__PROVENANCE__SOURCE", "topic"),
            // Records wait for the watermark, then for an idle flush 3 s after the last one came.
            ("DEDUPD__INPUT__LATENESS", "3s"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let mut daemon = Daemon::start("admin-outage", &env);
    daemon.wait_ready(Duration::from_secs(60));
    let port = daemon.admin_port;
    let bearer = format!("Bearer {TOKEN}");
    let ask = |path: &str| http_request(port, "GET", path, &[("Authorization", &bearer)]);
    assert_eq!(ask("/v1/lookup?key=k1").map(|a| a.code), Some(200));

    let records: Vec<Rec> = (0..40u64)
        .map(|i| click(i, &format!("k{}", i % 20), BASE_TS + i as i64, partition_of(&format!("k{}", i % 20), 2)))
        .collect();
    produce_on(&client, &input, &records);
    // All 40 wait for the watermark (they span 40 ms of a 3 s lateness).
    wait_for("records waiting", Duration::from_secs(30), || slice_total(&[&daemon], &["waiting"]) >= 40);
    let stop = std::process::Command::new("kill").args(["-STOP", &broker.0.id().to_string()]).status().unwrap();
    assert!(stop.success());

    // The idle flush is due 3 s after the last record: from then on the
    // worker holds its lock until the broker answers.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = ask("/v1/lookup?key=k1");
        if answer.as_ref().is_none_or(|a| a.code != 200) {
            break; // busy (or, without the bound on the wait, no answer)
        }
        assert!(Instant::now() < deadline, "the worker never got busy: {}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }

    let lookups: Vec<_> = ["/v1/lookup?key=k1", "/v1/provenance?key=k2", "/v1/provenance?key=k3", "/v1/lookup?key=k4"]
        .into_iter()
        .map(|path| {
            let bearer = bearer.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                let answer = http_request(port, "GET", path, &[("Authorization", &bearer)]);
                (path, answer, started.elapsed())
            })
        })
        .collect();
    let watching = Instant::now();
    let mut asked = 0;
    while watching.elapsed() < Duration::from_secs(6) {
        for path in ["/healthz", "/readyz"] {
            let started = Instant::now();
            let answer = http_get(port, path);
            let took = started.elapsed();
            assert!(took < Duration::from_secs(1), "{path} took {took:?} while lookups waited: {answer:?}");
            assert!(answer.is_some(), "{path} did not answer while lookups waited");
            if path == "/healthz" {
                assert_eq!(answer.unwrap().0, 200);
            }
            asked += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{asked} health requests answered within 1 s each during the outage");
    for lookup in lookups {
        let (path, answer, took) = lookup.join().unwrap();
        let answer = answer.unwrap_or_else(|| panic!("{path}: no answer within 5 s"));
        assert_eq!(answer.code, 503, "{path}: {}", answer.body);
        assert!(answer.head.to_ascii_lowercase().contains("retry-after: "), "{path}: {}", answer.head);
        assert!(
            answer.body.contains("busy") || answer.body.contains("too many key lookups"),
            "{path}: {}",
            answer.body
        );
        assert!(took < Duration::from_secs(4), "{path} took {took:?}");
        eprintln!("{path}: 503 after {took:?}: {}", answer.body.trim_end());
    }

    // The broker back, the worker lets lookups in again.
    let resume = std::process::Command::new("kill").args(["-CONT", &broker.0.id().to_string()]).status().unwrap();
    assert!(resume.success());
    wait_for("lookups answered again", Duration::from_secs(90), || {
        ask("/v1/lookup?key=k1").is_some_and(|a| a.code == 200)
    });
    daemon.kill();
    drop(broker);
    std::fs::remove_dir_all(&dir).ok();
}

/// `dedupd status` shows each member's health, readiness and slices (owner,
/// offset, lag, clock) from the admin endpoints, and exits non-zero naming
/// a member it cannot reach.
#[test]
fn status_shows_the_members_and_their_slices() {
    let (mut daemon, input) = daemon("admin-status", &[]);
    daemon.wait_ready(Duration::from_secs(60));
    let records: Vec<Rec> =
        (0..40).map(|i| click(i, &format!("k{}", i % 30), 1_700_000_000_000 + i as i64, (i % 2) as i32)).collect();
    produce(&input, &records);
    wait_processed(&[&daemon], 40, Duration::from_secs(60));
    let member = format!("http://127.0.0.1:{}", daemon.admin_port);
    let gone = format!("http://127.0.0.1:{}", free_port());
    let status = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dedupd")).arg("status").args(args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, text, err) = status(&["--admin", &member]);
    assert!(ok, "{text}{err}");
    let line = text.lines().find(|l| l.starts_with(&member)).unwrap_or_else(|| panic!("no member row:\n{text}"));
    assert!(line.contains(" ok ") && line.contains(" ready ") && line.ends_with("0,1"), "{line}");
    for slice in ["0", "1"] {
        let row = text.lines().find(|l| l.split_whitespace().next() == Some(slice) && l.contains(&member));
        let row = row.unwrap_or_else(|| panic!("no row for slice {slice}:\n{text}"));
        assert!(row.contains(" 2023-11-14T22:13:"), "the event-time clock: {row}");
    }

    // The lag is published with the other slice figures: it reaches 0.
    let json_status = || {
        let (ok, json, err) = status(&["--admin", &member, "--admin", &gone, "--json"]);
        assert!(!ok && err.contains(&format!("not healthy or not reachable: {gone}")), "{err}");
        (serde_json::from_str::<serde_json::Value>(&json).unwrap(), json)
    };
    wait_for("every slice's lag 0", Duration::from_secs(30), || {
        json_status().0["members"][0]["slices"].as_array().unwrap().iter().all(|s| s["lag"].as_i64() == Some(0))
    });
    let (doc, json) = json_status();
    let members = doc["members"].as_array().unwrap();
    assert!(members[1]["health"].as_str().unwrap().starts_with("unreachable"), "{json}");
    let slices = members[0]["slices"].as_array().unwrap();
    assert_eq!(slices.len(), 2, "{json}");
    let next: u64 = slices.iter().map(|s| s["next_offset"].as_u64().unwrap()).sum();
    assert_eq!(next, 40, "{json}");
    assert!(daemon.terminate(Duration::from_secs(30)).success());
}
