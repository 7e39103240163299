//! TLS and SASL between dedupd and the broker (issue 19, "Security"), set
//! through the `[kafka]` librdkafka pass-through, against brokers started
//! here: a Nisshi of its own per test, on free ports.
//!
//! The test broker serves TLS itself (`--cert`/`--key`) and SASL/SCRAM with
//! `--authentication`, whose users (`nisshi user create`, the Kafka API's
//! AlterUserScramCredentials) need a storage engine that keeps them: these
//! tests run it on SQLite (`--storage-engine sqlite://…`, the `libsql`
//! feature `scripts/broker.sh install` builds in). Details in docs/security.md.

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

/// A broker of its own serving TLS with the server certificate of
/// [`certificates`] (and `extra` arguments): (broker, port).
fn tls_broker(dir: &Path, extra: &[&str]) -> (Proc, u16) {
    let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
    let mut args = vec!["--cert", cert.to_str().unwrap(), "--key", key.to_str().unwrap()];
    args.extend_from_slice(extra);
    own_broker(dir, &args)
}

/// A broker of its own that requires a SASL/SCRAM login (`extra`: e.g.
/// TLS), on SQLite storage in `dir`, that knows the user `dedupd` /
/// `password` (SCRAM-SHA-512): (broker, port). A broker that requires a
/// login answers nothing before one, so the user is created first through
/// a broker without `--authentication` on the same storage (`nisshi user
/// create`, the Kafka API's AlterUserScramCredentials), which then stops.
fn scram_broker(dir: &Path, password: &str, extra: &[&str]) -> (Proc, u16) {
    let db = format!("sqlite://{}.db", unique("sasl"));
    let (setup, port) = own_broker(dir, &["--storage-engine", &db]);
    let out = Command::new(root().join("target/tools/nisshi"))
        .args(["user", "create", "--broker", &format!("tcp://127.0.0.1:{port}"), "--mechanism", "scram512"])
        .args(["dedupd", password])
        .output()
        .expect("run nisshi user create");
    assert!(out.status.success(), "nisshi user create: {}", String::from_utf8_lossy(&out.stderr));
    drop(setup);
    let mut args = vec!["--authentication", "--storage-engine", &db];
    args.extend_from_slice(extra);
    own_broker(dir, &args)
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
    let (_broker, port) = tls_broker(&dir, &[]);
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", format!("127.0.0.1:{port}"))
        .set("security.protocol", "ssl")
        .set("ssl.ca.location", dir.join("ca.pem").to_string_lossy());
    let input = clicks_through(&client, "tls-in");
    let app = unique("tls");
    let mut env = app_env(&app, &input, "input-partitions", 2);
    env.extend(tls_env(port, &dir.join("ca.pem")));
    let mut d = Daemon::start("tls", &env);
    d.wait_ready(Duration::from_secs(90));
    wait_processed(&[&d], 600, Duration::from_secs(60));
    assert_eq!(
        output_seqs(&client, &app),
        (0..300).collect::<Vec<u64>>(),
        "the output should be each key's first record"
    );
    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    d.assert_clean_log();

    // The same broker with a CA that did not sign its certificate.
    let mut env = app_env(&unique("tls-untrusted"), &input, "input-partitions", 2);
    env.extend(tls_env(port, &dir.join("other.pem")));
    let mut d = Daemon::start("tls-untrusted", &env);
    let log = refused(&mut d);
    let last = fatal_line(&log);
    assert!(last.contains("certificate verify failed"), "the error should name the refused certificate: {last}");
    assert!(last.contains("check ssl.ca.location"), "the error should point at ssl.ca.location: {last}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The 600 clicks of the end-to-end tests (300 keys, each sent twice within
/// the window) into a new 2-partition topic through `client`: the input's name.
fn clicks_through(client: &ClientConfig, name: &str) -> String {
    let input = unique(name);
    create_topic_on(client, &input, 2);
    let records: Vec<Rec> = (0..600u64)
        .map(|seq| {
            let id = format!("k{}", seq % 300);
            click(seq, &id, BASE_TS + seq as i64 * 10, partition_of(&id, 2))
        })
        .collect();
    produce_on(client, &input, &records);
    input
}

/// SASL/SCRAM-SHA-512 (`sasl.*` settings) for the user `dedupd`, with
/// librdkafka's configuration, security and broker debug logs on.
fn sasl_env(protocol: &str, port: u16, password: &str) -> Vec<(String, String)> {
    vec![
        ("DEDUPD__KAFKA__BROKERS".to_string(), format!("127.0.0.1:{port}")),
        ("DEDUPD__KAFKA__SECURITY_PROTOCOL".to_string(), protocol.to_string()),
        ("DEDUPD__KAFKA__SASL_MECHANISMS".to_string(), "SCRAM-SHA-512".to_string()),
        ("DEDUPD__KAFKA__SASL_USERNAME".to_string(), "dedupd".to_string()),
        ("DEDUPD__KAFKA__SASL_PASSWORD".to_string(), password.to_string()),
        ("DEDUPD__KAFKA__DEBUG".to_string(), "conf,security,broker".to_string()),
        ("RUST_LOG".to_string(), "debug,librdkafka=debug".to_string()),
    ]
}

/// A test client's settings for the same login.
fn sasl_client(protocol: &str, port: u16, password: &str, ca: Option<&Path>) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", format!("127.0.0.1:{port}"))
        .set("security.protocol", protocol)
        .set("sasl.mechanisms", "SCRAM-SHA-512")
        .set("sasl.username", "dedupd")
        .set("sasl.password", password);
    if let Some(ca) = ca {
        c.set("ssl.ca.location", ca.to_string_lossy());
    }
    c
}

/// SASL/SCRAM-SHA-512 against a broker that requires a login: with the
/// right password, records flow end to end (each key's first record out);
/// with a wrong one the daemon stops within the metadata timeout with the
/// broker's answer and the settings to check in its error. Neither password
/// appears anywhere in its output, although librdkafka's configuration,
/// security and broker debug logs are on. Then the same over TLS
/// (`SASL_SSL`): a login and a refusal.
#[test]
fn a_scram_login_carries_records_and_a_wrong_password_stops_the_daemon_without_showing_it() {
    const PASSWORD: &str = "pw-Kq8ZLr2vXw-0007";
    const WRONG: &str = "pw-wrong-Jd3mTq-0008";
    let dir = certificates();
    let ca = dir.join("ca.pem");
    let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
    let tls = ["--cert", cert.to_str().unwrap(), "--key", key.to_str().unwrap()];
    for (protocol, extra) in [("sasl_plaintext", &[][..]), ("sasl_ssl", &tls[..])] {
        let (_broker, port) = scram_broker(&dir, PASSWORD, extra);
        let ca = (protocol == "sasl_ssl").then_some(ca.as_path());
        let client = sasl_client(protocol, port, PASSWORD, ca);
        let input = clicks_through(&client, "sasl-in");
        let with_ca = |mut env: Vec<(String, String)>| {
            if let Some(ca) = ca {
                env.push(("DEDUPD__KAFKA__SSL_CA_LOCATION".into(), ca.to_string_lossy().into_owned()));
            }
            env
        };

        let app = unique("sasl");
        let mut env = app_env(&app, &input, "repartition", 2);
        env.extend(with_ca(sasl_env(protocol, port, PASSWORD)));
        let mut d = Daemon::start("sasl", &env);
        d.wait_ready(Duration::from_secs(90));
        wait_processed(&[&d], 600, Duration::from_secs(60));
        assert_eq!(output_seqs(&client, &app), (0..300).collect::<Vec<u64>>(), "{protocol}: each key's first record");
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
        let log = d.log_text();
        assert!(log.contains("sasl.password"), "{protocol}: no librdkafka configuration dump in the debug log");
        assert!(!log.contains(PASSWORD), "{protocol}: the password is in the log:\n{log}");

        let started = Instant::now();
        let mut env = app_env(&unique("sasl-wrong"), &input, "repartition", 2);
        env.extend(with_ca(sasl_env(protocol, port, WRONG)));
        let mut d = Daemon::start("sasl-wrong", &env);
        let log = refused(&mut d);
        let last = fatal_line(&log);
        assert!(
            last.contains(&format!("{protocol}://")) && last.contains("SASL authentication error"),
            "{protocol}: the error should name the refused login: {last}"
        );
        assert!(last.contains("check sasl.mechanisms, sasl.username and sasl.password"), "{last}");
        assert!(started.elapsed() < Duration::from_secs(45), "took {:?}", started.elapsed());
        assert!(!log.contains(WRONG) && !log.contains(PASSWORD), "{protocol}: a password is in the log:\n{log}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
