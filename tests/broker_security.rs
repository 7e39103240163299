//! TLS and SASL between dedupd and the broker (issue 19, "Security"), set
//! through the `[kafka]` librdkafka pass-through, against brokers started
//! here: a Tansu of its own per test, on free ports.
//!
//! What the test broker allows (Tansu 0.6.0; details and the commands
//! tried in docs/security.md): no TLS of its own (`--cert` and `--key`
//! cannot be given together, and its listener never wraps a connection in
//! TLS), so TLS is `scripts/tls_proxy.py` (Python's ssl, i.e. OpenSSL)
//! in front of it, Tansu advertising the proxy's port; SASL/SCRAM with
//! `--authentication`, but its memory storage keeps no credentials (no user
//! can log in) and this build has no PLAIN mechanism. So SASL is tested on
//! its failure path: dedupd stops with the cause named, and the password
//! is in none of its output.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use support::*;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A throw-away CA `ca.pem` with a server certificate `server.pem` /
/// `server.key` for 127.0.0.1 and localhost, and an unrelated CA `other.pem`.
fn certificates() -> PathBuf {
    let dir = std::env::temp_dir().join(unique("dedupd-tls"));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"];
    openssl(&dir, &[&ca[..], &["-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=dedupd test CA"]].concat());
    openssl(&dir, &[&ca[..], &["-keyout", "other.key", "-out", "other.pem", "-subj", "/CN=another CA"]].concat());
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(dir.join("san.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "server.pem",
            "-extfile",
            "san.cnf",
        ],
    );
    dir
}

/// Tansu (with `tansu_args`) behind the TLS proxy: (broker, proxy, TLS port).
fn tls_broker(dir: &Path, tansu_args: &[&str]) -> (Proc, Proc, u16) {
    let tls_port = free_port();
    let (tansu, plain_port) = tansu(dir, Some(tls_port), tansu_args);
    let s = |p: PathBuf| p.to_string_lossy().into_owned();
    let proxy = start(
        Path::new("python3"),
        &[
            &s(root().join("scripts/tls_proxy.py")),
            "--listen",
            &tls_port.to_string(),
            "--to",
            &format!("127.0.0.1:{plain_port}"),
            "--cert",
            &s(dir.join("server.pem")),
            "--key",
            &s(dir.join("server.key")),
        ],
        &dir.join(format!("tls_proxy-{tls_port}.log")),
        tls_port,
    );
    (tansu, proxy, tls_port)
}

/// dedupd's environment for TLS to 127.0.0.1:`port`, trusting `ca`.
fn tls_env(port: u16, ca: &Path) -> Vec<(String, String)> {
    vec![
        ("DEDUPD__KAFKA__BROKERS".into(), format!("127.0.0.1:{port}")),
        ("DEDUPD__KAFKA__SECURITY_PROTOCOL".into(), "ssl".into()),
        ("DEDUPD__KAFKA__SSL_CA_LOCATION".into(), ca.to_string_lossy().into_owned()),
    ]
}

/// Waits for a daemon that cannot reach its broker to stop by itself, and
/// returns its log: it must stop (not hang) with an error, not a panic.
fn refused(d: &mut Daemon) -> String {
    let status = d.wait_exit(Duration::from_secs(60), "dedupd should stop when the broker refuses it");
    let log = d.log_text();
    assert!(!status.success(), "dedupd exited 0:\n{log}");
    assert!(!log.contains("panicked"), "dedupd panicked:\n{log}");
    log
}

/// The daemon's last line: its fatal error.
fn fatal_line(log: &str) -> &str {
    let last = log.lines().last().unwrap_or_default();
    assert!(last.starts_with("dedupd: "), "the last line is not the daemon's error:\n{log}");
    last
}

/// Over TLS (`security.protocol = ssl`, the CA in `ssl.ca.location`):
/// records flow end to end with the verdicts of a plain run; a CA that did
/// not sign the broker's certificate stops the daemon with the cause named.
#[test]
fn tls_to_the_broker_carries_records_and_an_untrusted_ca_is_refused_by_name() {
    let dir = certificates();
    let (_tansu, _proxy, port) = tls_broker(&dir, &[]);
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", format!("127.0.0.1:{port}"))
        .set("security.protocol", "ssl")
        .set("ssl.ca.location", dir.join("ca.pem").to_string_lossy());
    let input = unique("tls-in");
    create_topic_on(&client, &input, 2);
    // 300 keys, each sent twice within the window: 300 distinct, 300 duplicates.
    let records: Vec<Rec> = (0..600u64)
        .map(|seq| {
            let id = format!("k{}", seq % 300);
            click(seq, &id, BASE_TS + seq as i64 * 10, partition_of(&id, 2))
        })
        .collect();
    produce_on(&client, &input, &records);

    let app = unique("tls");
    let mut env = app_env(&app, &input, "input-partitions", 2);
    env.extend(tls_env(port, &dir.join("ca.pem")));
    let mut d = Daemon::start("tls", &env);
    d.wait_ready(Duration::from_secs(90));
    wait_processed(&[&d], 600, Duration::from_secs(60));
    let out = read_all_on(&client, &format!("{app}.out"), Duration::from_secs(3));
    let mut seqs: Vec<u64> = out
        .values()
        .flatten()
        .map(|r| {
            serde_json::from_slice::<serde_json::Value>(r.value.as_deref().unwrap()).unwrap()["seq"].as_u64().unwrap()
        })
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..300).collect::<Vec<u64>>(), "the output should be each key's first record");
    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    d.assert_clean_log();

    // The same broker with a CA that did not sign its certificate.
    let mut env = app_env(&unique("tls-untrusted"), &input, "input-partitions", 2);
    env.extend(tls_env(port, &dir.join("other.pem")));
    let mut d = Daemon::start("tls-untrusted", &env);
    let log = refused(&mut d);
    let last = fatal_line(&log);
    assert!(last.contains("certificate verify failed"), "the error should name the refused certificate: {last}");
    assert!(last.contains("ssl.ca.location"), "the error should point at ssl.ca.location: {last}");
    std::fs::remove_dir_all(&dir).ok();
}

/// SASL/SCRAM-SHA-512 against a broker that requires authentication and
/// does not know the user: the daemon stops within the metadata timeout
/// with the broker's answer in its error, and the password — with
/// librdkafka's configuration, security and broker debug logs on — appears nowhere in its
/// output. Over TLS too (`SASL_SSL`).
#[test]
fn a_refused_sasl_login_stops_the_daemon_with_the_cause_and_never_shows_the_password() {
    const PASSWORD: &str = "pw-Kq8ZLr2vXw-0007";
    let dir = certificates();
    let (_tansu, port) = tansu(&dir, None, &["--authentication"]);
    let sasl = |protocol: &str, port: u16| {
        vec![
            ("DEDUPD__KAFKA__BROKERS".to_string(), format!("127.0.0.1:{port}")),
            ("DEDUPD__KAFKA__SECURITY_PROTOCOL".to_string(), protocol.to_string()),
            ("DEDUPD__KAFKA__SASL_MECHANISMS".to_string(), "SCRAM-SHA-512".to_string()),
            ("DEDUPD__KAFKA__SASL_USERNAME".to_string(), "dedupd".to_string()),
            ("DEDUPD__KAFKA__SASL_PASSWORD".to_string(), PASSWORD.to_string()),
            ("DEDUPD__KAFKA__DEBUG".to_string(), "conf,security,broker".to_string()),
            ("RUST_LOG".to_string(), "debug".to_string()),
        ]
    };
    let started = Instant::now();
    let mut env = app_env(&unique("sasl"), "clicks", "repartition", 2);
    env.extend(sasl("sasl_plaintext", port));
    let mut d = Daemon::start("sasl", &env);
    let log = refused(&mut d);
    let last = fatal_line(&log);
    assert!(
        last.contains("SASL authentication error") && last.contains("unknown-user"),
        "the error should name the refused login: {last}"
    );
    assert!(started.elapsed() < Duration::from_secs(45), "took {:?}", started.elapsed());
    assert!(log.contains("sasl.password"), "no librdkafka configuration dump in the debug log");
    assert!(!log.contains(PASSWORD), "the password is in the log:\n{log}");

    // SASL_SSL: the TLS proxy in front of the authenticating broker.
    let (_tansu, _proxy, tls_port) = tls_broker(&dir, &["--authentication"]);
    let mut env = app_env(&unique("sasl-ssl"), "clicks", "repartition", 2);
    env.extend(sasl("sasl_ssl", tls_port));
    env.push(("DEDUPD__KAFKA__SSL_CA_LOCATION".into(), dir.join("ca.pem").to_string_lossy().into_owned()));
    let mut d = Daemon::start("sasl-ssl", &env);
    let log = refused(&mut d);
    let last = fatal_line(&log);
    assert!(last.contains("sasl_ssl://") && last.contains("unknown-user"), "{last}");
    assert!(!log.contains(PASSWORD), "the password is in the log:\n{log}");
    std::fs::remove_dir_all(&dir).ok();
}
