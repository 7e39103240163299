//! `dedupd run` on Avro, Protobuf and JSON Schema records in the Confluent
//! wire format, on the local broker: the records confluent-kafka's Python
//! serializers wrote (saved in tests/formats/ by scripts/format_fixtures.py,
//! or written during the test by tests/formats/serializers.py into a test
//! registry of its own, with schema references and Protobuf imports),
//! deduplicated by a composite key of nested fields with an RFC 3339 time;
//! schemas from local files or fetched from a registry's REST paths (small
//! Python servers, over HTTP and https); a record whose schema id is
//! unknown, or whose referenced schema is missing, and a JSON record on the
//! Avro input, go to the dead letters with `bad_schema`.

mod support;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::*;

/// The fixture records of `format`, in the order they were written.
fn fixture_records(format: &str) -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(root().join("tests/formats/records.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["format"] == format)
        .map(|v| {
            let hex = v["hex"].as_str().unwrap();
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
        })
        .collect()
}

/// Serves tests/formats/registry/<id>.json at `GET /schemas/ids/<id>` to
/// the basic-auth user `dedupd:pw` (401 to others; 404 for other ids).
struct Registry {
    child: std::process::Child,
    port: u16,
}

impl Registry {
    fn start() -> Registry {
        Registry::serve(&root().join("tests/formats/registry"), 0)
    }

    /// Serves `dir`'s `<id>.json` files on `port` (0: any free one).
    fn serve(dir: &std::path::Path, port: u16) -> Registry {
        const SERVER: &str = r#"
import base64, http.server, os, sys
DIR = sys.argv[1]
WANT = "Basic " + base64.b64encode(b"dedupd:pw").decode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Authorization") != WANT:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        parts = self.path.split("/")
        path = os.path.join(DIR, parts[-1] + ".json")
        ok = parts[:3] == ["", "schemas", "ids"] and parts[-1].isdigit() and os.path.exists(path)
        body = open(path, "rb").read() if ok else b'{"error_code":40403,"message":"Schema not found"}'
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;
        let mut child = Command::new("python3")
            .args(["-c", SERVER])
            .arg(dir)
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 for the test registry");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        Registry { child, port: line.trim().parse().expect("the test registry's port") }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `env` for the clicks of the fixtures in `format`: keyed by user and ad,
/// timed by `at` (RFC 3339), a window of 2 minutes; with the `schemas` settings.
fn clicks_env(mut env: Vec<(String, String)>, format: &str, schemas: &[(&str, String)]) -> Vec<(String, String)> {
    env.retain(|(k, _)| k != "DEDUPD__INPUT__KEY" && k != "DEDUPD__INPUT__TIME" && k != "DEDUPD__FILTER__WINDOW");
    for (k, v) in [
        ("DEDUPD__INPUT__FORMAT", format.to_string()),
        ("DEDUPD__INPUT__KEY", "json:/user/id+json:/ad/id".to_string()),
        ("DEDUPD__INPUT__TIME", "json:/at".to_string()),
        ("DEDUPD__FILTER__WINDOW", "2m".to_string()),
    ]
    .into_iter()
    .chain(schemas.iter().map(|(k, v)| (*k, v.clone())))
    {
        env.push((k.to_string(), v));
    }
    env
}

/// Runs the fixture records of `format` through `dedupd run`: the output is
/// the distinct ones, the dead letters the two unreadable ones. As a sparse
/// tree's root (`sparse_root`) it also publishes a verdict for each distinct
/// record, which reads the key from the decoded payload as the slice does.
fn run_format(format: &str, schemas: &[(&str, String)], sparse_root: bool) {
    let input = unique(&format!("{format}-in"));
    create_topic(&input, 1);
    let app = unique(&format!("{format}-app"));
    let mut env = clicks_env(app_env(&app, &input, "repartition", 2), format, schemas);
    let verdicts = format!("{app}.verdicts");
    if sparse_root {
        for (k, v) in [
            ("DEDUPD__TIER__ROLE", "root"),
            ("DEDUPD__TIER__TREE", "sparse"),
            ("DEDUPD__TIER__VERDICT_TOPIC", verdicts.as_str()),
        ] {
            env.push((k.into(), v.into()));
        }
    }
    let mut records = fixture_records(format);
    assert_eq!(records.len(), 6);
    let mut unknown = records[0].clone();
    unknown[1..5].copy_from_slice(&99u32.to_be_bytes());
    records.push(unknown);
    records.push(br#"{"user":{"id":"u1"},"ad":{"id":7},"at":"x"}"#.to_vec());
    let recs: Vec<Rec> = records
        .iter()
        .enumerate()
        .map(|(i, value)| Rec {
            partition: 0,
            offset: -1,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(value.clone()),
            timestamp: Some(BASE_TS + i as i64),
            headers: Vec::new(),
        })
        .collect();

    let mut daemon = Daemon::start(format, &env);
    daemon.wait_ready(Duration::from_secs(60));
    produce(&input, &recs);
    for (topic, want) in [(format!("{app}.dlq"), 2), (format!("{app}.out"), 5)] {
        let got = count_records(&topic, want, Duration::from_secs(60));
        assert!(got >= want, "{got} of {want} records in {topic} after 60 s:\n{}", daemon.log_text());
    }
    std::thread::sleep(Duration::from_secs(2));
    let out = read_all(&format!("{app}.out"), Duration::from_secs(2));
    let mut got: Vec<&[u8]> = out.values().flatten().map(|r| r.value.as_deref().unwrap()).collect();
    let mut want: Vec<&[u8]> = [0, 1, 2, 4, 5].iter().map(|&i| records[i].as_slice()).collect();
    got.sort();
    want.sort();
    assert!(got == want, "{format}: the output is not records 0, 1, 2, 4 and 5\n{}", daemon.log_text());
    let dlq = read_all(&format!("{app}.dlq"), Duration::from_secs(1));
    let mut dead: Vec<(String, String)> = dlq
        .values()
        .flatten()
        .map(|r| {
            let text = |h| String::from_utf8_lossy(r.header(h).unwrap_or(b"?")).into_owned();
            (text("dedupd.reason"), text("dedupd.detail"))
        })
        .collect();
    dead.sort();
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead.iter().all(|(reason, _)| reason == "bad_schema"), "{dead:?}");
    assert!(dead.iter().any(|(_, d)| d.starts_with("schema id 99: ")), "{dead:?}");
    assert!(dead.iter().any(|(_, d)| d.contains("starts with 0x7b")), "{dead:?}");
    let (_, metrics) = http_get(daemon.admin_port, "/metrics").unwrap();
    assert!(metrics.contains("dedupd_dead_letters_total{reason=\"bad_schema\"} "), "{metrics}");
    if sparse_root {
        let published = count_records(&verdicts, 5, Duration::from_secs(30));
        assert_eq!(published, 5, "{format}: a verdict for each of the 5 distinct records\n{}", daemon.log_text());
    }
    assert!(daemon.terminate(Duration::from_secs(30)).success(), "{}", daemon.log_text());
}

#[test]
fn avro_records_with_schemas_from_files() {
    run_format("avro", &[("DEDUPD__INPUT__SCHEMAS", root().join("tests/formats/schemas").display().to_string())], true);
}

#[test]
fn protobuf_records_with_schemas_from_a_registry() {
    let registry = Registry::start();
    run_format(
        "protobuf",
        &[
            ("DEDUPD__INPUT__SCHEMA_REGISTRY", format!("http://127.0.0.1:{}", registry.port)),
            ("DEDUPD__INPUT__SCHEMA_REGISTRY_USER", "dedupd".to_string()),
            ("DEDUPD__INPUT__SCHEMA_REGISTRY_PASSWORD", "pw".to_string()),
        ],
        false,
    );
}

#[test]
fn format_settings_are_checked_at_start_up() {
    let check = |env: &[(&str, &str)]| {
        let out = Command::new(env!("CARGO_BIN_EXE_dedupd"))
            .args(["check-config", "config/dedupd.toml"])
            .current_dir(root())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = check(&[("DEDUPD__INPUT__FORMAT", "avro")]);
    assert!(!ok && err.contains("invalid setting input.format = avro: needs input.schemas"), "{err}");
    let (ok, err) = check(&[("DEDUPD__INPUT__FORMAT", "json_schema")]);
    assert!(ok, "json_schema needs no schemas: {err}");
    let (ok, err) = check(&[("DEDUPD__INPUT__FORMAT", "xml")]);
    assert!(!ok && err.contains("input.format = xml: unknown format"), "{err}");
    let (ok, err) = check(&[("DEDUPD__INPUT__FORMAT", "avro"), ("DEDUPD__INPUT__SCHEMA_REGISTRY", "ftp://r:8081")]);
    assert!(!ok && err.contains("input.schema_registry = ftp://r:8081: expected http://HOST"), "{err}");
    let registry = [("DEDUPD__INPUT__FORMAT", "avro"), ("DEDUPD__INPUT__SCHEMA_REGISTRY", "https://r:8081")];
    let (ok, err) = check(&registry);
    assert!(ok, "https is spoken: {err}");
    let (ok, err) =
        check(&[&registry[..], &[("DEDUPD__INPUT__SCHEMA_REGISTRY_CA_FILE", "/nonexistent/ca.pem")]].concat());
    assert!(!ok && err.contains("input.schema_registry_ca_file = /nonexistent/ca.pem: cannot be read"), "{err}");
    let (ok, err) = check(&[&registry[..], &[("DEDUPD__INPUT__SCHEMA_REGISTRY_CA_FILE", "Cargo.toml")]].concat());
    assert!(!ok && err.contains("input.schema_registry_ca_file = Cargo.toml: holds no PEM certificate"), "{err}");
    let (ok, err) = check(&[&registry[..], &[("DEDUPD__INPUT__SCHEMA_REGISTRY_CERT_FILE", "Cargo.toml")]].concat());
    assert!(!ok && err.contains("input.schema_registry_key_file = : needed with a client certificate"), "{err}");
    let both = [("DEDUPD__INPUT__SCHEMA_REGISTRY_USER", "u"), ("DEDUPD__INPUT__SCHEMA_REGISTRY_TOKEN", "s3cr3t")];
    let (ok, err) = check(&[&registry[..], &both[..]].concat());
    assert!(!ok && err.contains("input.schema_registry_token = [redacted]: a token or a user, not both"), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
    let (ok, err) = check(&[("DEDUPD__INPUT__SCHEMA_REGISTRY_TOKEN", "s3cr3t")]);
    assert!(!ok && err.contains("input.schema_registry_token = [redacted]: needs input.schema_registry"), "{err}");
    let (ok, err) = check(&[("DEDUPD__INPUT__SCHEMAS", "tests/formats/schemas")]);
    assert!(!ok && err.contains("input.schemas = tests/formats/schemas: only for input.format"), "{err}");
    let (ok, err) =
        check(&[("DEDUPD__INPUT__FORMAT", "protobuf"), ("DEDUPD__INPUT__SCHEMAS", "tests/formats/schemas")]);
    assert!(ok, "{err}");
    let (ok, err) = check(&[("DEDUPD__INPUT__SCHEMA_REGISTRY_PASSWORD", "hunter2")]);
    assert!(
        !ok && err.contains("input.schema_registry_password = [redacted]: needs input.schema_registry_user"),
        "{err}"
    );
    assert!(!err.contains("hunter2"));
    let resolved = Command::new(env!("CARGO_BIN_EXE_dedupd"))
        .args(["check-config", "config/dedupd.toml", "--print-resolved"])
        .current_dir(root())
        .envs([
            ("DEDUPD__INPUT__FORMAT", "avro"),
            ("DEDUPD__INPUT__SCHEMA_REGISTRY", "http://127.0.0.1:1"),
            ("DEDUPD__INPUT__SCHEMA_REGISTRY_USER", "dedupd"),
            ("DEDUPD__INPUT__SCHEMA_REGISTRY_PASSWORD", "hunter2"),
        ])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&resolved.stdout), String::from_utf8_lossy(&resolved.stderr));
    assert!(resolved.status.success(), "{text}");
    assert!(text.contains("schema_registry_user") && !text.contains("hunter2"), "{text}");
}

/// A linked list as a legal recursive Avro schema: each event may hold the
/// next one (schema id 7 in a directory of its own).
const LINKED: &str = r#"{"type":"record","name":"Event","namespace":"deep","fields":[
    {"name":"id","type":"string"},{"name":"ts","type":"long"},{"name":"next","type":["null","Event"]}]}"#;

fn linked_schemas(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("dedupd-linked-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("7.avsc"), LINKED).unwrap();
    dir
}

fn zigzag(n: i64, out: &mut Vec<u8>) {
    let mut v = ((n << 1) ^ (n >> 63)) as u64;
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// An event `levels` events deep in the wire format: the outermost with
/// `id` and `ts`, those inside it empty (3 bytes each).
fn linked(id: &str, ts: i64, levels: usize) -> Vec<u8> {
    let mut out = vec![0, 0, 0, 0, 7];
    zigzag(id.len() as i64, &mut out);
    out.extend_from_slice(id.as_bytes());
    zigzag(ts, &mut out);
    for _ in 1..levels {
        out.extend_from_slice(&[2, 0, 0]); // the union's second branch, then id "" and ts 0
    }
    out.push(0); // the innermost `next` is null
    out
}

/// 100 ordinary events, one 100 levels deep (the limit) and three deeper
/// ones (101, 2 000 and 100 000 levels: 6 KB and 300 KB), in the order
/// they are fed; with what each should become.
fn deep_stream() -> Vec<(Vec<u8>, Option<usize>)> {
    let mut events: Vec<(Vec<u8>, Option<usize>)> =
        (0..100).map(|i| (linked(&format!("e{i}"), BASE_TS + i * 1000, 1), None)).collect();
    for (at, levels) in [(20, 100), (40, 101), (60, 2_000), (80, 100_000)] {
        let id = format!("deep{levels}");
        let over = (levels > 100).then_some(levels);
        events.insert(at, (linked(&id, BASE_TS + at as i64 * 1000, levels), over));
    }
    events
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

/// The pipe mode: records nested deeper than 100 levels are `bad_avro`
/// with their depth, the others are delivered, the exit status is 0 (it
/// was an abort by stack overflow, 134, delivering nothing).
#[test]
fn deeply_nested_avro_in_the_pipe_mode() {
    let events = deep_stream();
    let lines: Vec<String> = events.iter().map(|(e, _)| base64(e)).collect();
    let dir = linked_schemas("pipe");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dedupd"))
        .args(["filter", "--format", "avro", "--schemas", dir.to_str().unwrap(), "--key", "json:/id"])
        .args(["--time", "json:/ts", "--window", "2m", "--max-clock-jump", "10m", "--expected", "1000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = lines.join("\n") + "\n";
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let kept: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    let want: Vec<&str> =
        events.iter().zip(&lines).filter(|((_, over), _)| over.is_none()).map(|(_, l)| l.as_str()).collect();
    assert_eq!(kept.len(), 101, "{stderr}");
    assert!(kept == want, "the 100 ordinary events and the one 100 levels deep, in order\n{stderr}");
    for (line, (_, over)) in events.iter().enumerate() {
        if let Some(levels) = over {
            let want = format!("line {}: bad_avro: schema id 7: nested {levels} levels deep: at most 100", line + 1);
            assert!(stderr.contains(&want), "{want}\n{stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The daemon: the same stream on Kafka. The deep records are dead letters
/// `bad_avro` with their depth; the daemon keeps running and delivers the
/// rest (it was a crash loop: the same record aborted every restart).
#[test]
fn deeply_nested_avro_in_the_daemon() {
    let input = unique("deep-in");
    create_topic(&input, 1);
    let app = unique("deep-app");
    let dir = linked_schemas("daemon");
    let mut env = app_env(&app, &input, "input-partitions", 1);
    env.push(("DEDUPD__INPUT__FORMAT".into(), "avro".into()));
    env.push(("DEDUPD__INPUT__SCHEMAS".into(), dir.display().to_string()));
    let events = deep_stream();
    let recs: Vec<Rec> = events
        .iter()
        .map(|(value, _)| Rec {
            partition: 0,
            offset: -1,
            key: None,
            value: Some(value.clone()),
            timestamp: None,
            headers: Vec::new(),
        })
        .collect();
    let mut daemon = Daemon::start("deep", &env);
    daemon.wait_ready(Duration::from_secs(60));
    produce(&input, &recs);
    for (topic, want) in [(format!("{app}.dlq"), 3), (format!("{app}.out"), 101)] {
        let got = count_records(&topic, want, Duration::from_secs(60));
        assert!(got >= want, "{got} of {want} records in {topic} after 60 s:\n{}", daemon.log_text());
    }
    let out = read_all(&format!("{app}.out"), Duration::from_secs(2));
    let mut got: Vec<&[u8]> = out.values().flatten().map(|r| r.value.as_deref().unwrap()).collect();
    let mut want: Vec<&[u8]> = events.iter().filter(|(_, over)| over.is_none()).map(|(e, _)| e.as_slice()).collect();
    got.sort();
    want.sort();
    assert!(got == want, "the output is not the 101 events of at most 100 levels\n{}", daemon.log_text());
    let dlq = read_all(&format!("{app}.dlq"), Duration::from_secs(1));
    let mut dead: Vec<String> = dlq
        .values()
        .flatten()
        .map(|r| {
            assert_eq!(r.header("dedupd.reason"), Some(&b"bad_avro"[..]));
            String::from_utf8_lossy(r.header("dedupd.detail").unwrap()).into_owned()
        })
        .collect();
    dead.sort();
    assert_eq!(dead.len(), 3, "{dead:?}");
    for levels in [101, 2_000, 100_000] {
        let want = format!("schema id 7: nested {levels} levels deep");
        assert!(dead.iter().any(|d| d.starts_with(&want)), "{want}: {dead:?}");
    }
    let (status, _) = http_get(daemon.admin_port, "/healthz").unwrap();
    assert_eq!(status, 200, "still running");
    assert!(daemon.terminate(Duration::from_secs(30)).success(), "{}", daemon.log_text());
    let _ = std::fs::remove_dir_all(dir);
}

/// A registry outage is not bad data: with the registry down while 100
/// valid records arrive, the slice holds them (`/readyz` 503, the errors
/// counted) and delivers all 100 once it is up 10 s later, none a dead
/// letter; then an id the registry answers 404 for is `bad_schema` at once.
#[test]
fn a_registry_outage_makes_records_wait() {
    let input = unique("outage-in");
    create_topic(&input, 1);
    let app = unique("outage-app");
    let dir = linked_schemas("outage");
    let answer = serde_json::json!({ "schema": LINKED }).to_string();
    std::fs::write(dir.join("7.json"), answer).unwrap();
    let port = free_port();
    let mut env = app_env(&app, &input, "input-partitions", 1);
    for (k, v) in [
        ("DEDUPD__INPUT__FORMAT", "avro".to_string()),
        ("DEDUPD__INPUT__SCHEMA_REGISTRY", format!("http://127.0.0.1:{port}")),
        ("DEDUPD__INPUT__SCHEMA_REGISTRY_USER", "dedupd".to_string()),
        ("DEDUPD__INPUT__SCHEMA_REGISTRY_PASSWORD", "pw".to_string()),
    ] {
        env.push((k.to_string(), v));
    }
    let rec = |value: Vec<u8>| Rec {
        partition: 0,
        offset: -1,
        key: None,
        value: Some(value),
        timestamp: None,
        headers: Vec::new(),
    };
    let events: Vec<Vec<u8>> = (0..100).map(|i| linked(&format!("e{i}"), BASE_TS + i * 1000, 1)).collect();
    let mut daemon = Daemon::start("outage", &env);
    daemon.wait_ready(Duration::from_secs(60));
    produce(&input, &events.iter().cloned().map(rec).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_secs(10));
    let (status, body) = http_get(daemon.admin_port, "/readyz").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("records wait for the schema registry"), "{body}");
    let (_, metrics) = http_get(daemon.admin_port, "/metrics").unwrap();
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("dedupd_schema_registry_errors_total{kind=\"unreachable\"} "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(refused.is_some_and(|n| n > 0), "{metrics}");
    assert_eq!(count_records(&format!("{app}.out"), 1, Duration::from_millis(500)), 0, "nothing judged yet");
    assert_eq!(count_records(&format!("{app}.dlq"), 1, Duration::from_millis(500)), 0, "no dead letter");

    let _registry = Registry::serve(&dir, port);
    let got = count_records(&format!("{app}.out"), 100, Duration::from_secs(60));
    assert_eq!(got, 100, "{}", daemon.log_text());
    let out = read_all(&format!("{app}.out"), Duration::from_secs(1));
    let mut delivered: Vec<&[u8]> = out.values().flatten().map(|r| r.value.as_deref().unwrap()).collect();
    let mut want: Vec<&[u8]> = events.iter().map(Vec::as_slice).collect();
    delivered.sort();
    want.sort();
    assert!(delivered == want, "the 100 records, once each");
    assert_eq!(count_records(&format!("{app}.dlq"), 1, Duration::from_millis(500)), 0, "no dead letter");
    wait_for("/readyz 200", Duration::from_secs(30), || {
        http_get(daemon.admin_port, "/readyz").is_some_and(|(s, _)| s == 200)
    });

    // A definite answer: the registry has no schema 99.
    let mut unknown = linked("gone", BASE_TS + 200_000, 1);
    unknown[1..5].copy_from_slice(&99u32.to_be_bytes());
    produce(&input, &[rec(unknown)]);
    let dead = count_records(&format!("{app}.dlq"), 1, Duration::from_secs(30));
    assert_eq!(dead, 1, "{}", daemon.log_text());
    let dlq = read_all(&format!("{app}.dlq"), Duration::from_secs(1));
    let r = dlq.values().flatten().next().unwrap();
    assert_eq!(r.header("dedupd.reason"), Some(&b"bad_schema"[..]));
    let detail = String::from_utf8_lossy(r.header("dedupd.detail").unwrap()).into_owned();
    assert!(detail.starts_with("schema id 99: the registry has no schema with this id (HTTP 404"), "{detail}");
    assert!(daemon.terminate(Duration::from_secs(30)).success(), "{}", daemon.log_text());
    let _ = std::fs::remove_dir_all(dir);
}

/// SIGKILL while records wait for the registry, restart once it is back:
/// the output is that of an uninterrupted run, record for record (the
/// waiting records were never judged, so the restart judges them afresh).
#[test]
fn a_kill_during_a_registry_outage_changes_nothing() {
    let input = unique("outage-kill-in");
    create_topic(&input, 1);
    let app = unique("outage-kill-app");
    let dir = linked_schemas("outage-kill");
    std::fs::write(dir.join("7.json"), serde_json::json!({ "schema": LINKED }).to_string()).unwrap();
    let port = free_port();
    let mut env = app_env(&app, &input, "input-partitions", 1);
    for (k, v) in [
        ("DEDUPD__INPUT__FORMAT", "avro".to_string()),
        ("DEDUPD__INPUT__SCHEMA_REGISTRY", format!("http://127.0.0.1:{port}")),
        ("DEDUPD__INPUT__SCHEMA_REGISTRY_USER", "dedupd".to_string()),
        ("DEDUPD__INPUT__SCHEMA_REGISTRY_PASSWORD", "pw".to_string()),
    ] {
        env.push((k.to_string(), v));
    }
    // Every fifth event repeats an earlier key: the verdicts matter, not only delivery.
    let events: Vec<Vec<u8>> =
        (0..100).map(|i| linked(&format!("e{}", if i % 5 == 4 { i - 2 } else { i }), BASE_TS + i * 1000, 1)).collect();
    let recs: Vec<Rec> = events
        .iter()
        .map(|v| Rec {
            partition: 0,
            offset: -1,
            key: None,
            value: Some(v.clone()),
            timestamp: None,
            headers: Vec::new(),
        })
        .collect();
    let mut first = Daemon::start("outage-kill-1", &env);
    first.wait_ready(Duration::from_secs(60));
    produce(&input, &recs);
    std::thread::sleep(Duration::from_secs(6));
    first.kill();
    let _registry = Registry::serve(&dir, port);
    let mut second = Daemon::start("outage-kill-2", &env);
    second.wait_ready(Duration::from_secs(60));
    let got = count_records(&format!("{app}.out"), 80, Duration::from_secs(60));
    assert!(got >= 80, "{got} of 80\n{}", second.log_text());
    std::thread::sleep(Duration::from_secs(2));
    let out = read_all(&format!("{app}.out"), Duration::from_secs(1));
    let delivered: Vec<&[u8]> = out.values().flatten().map(|r| r.value.as_deref().unwrap()).collect();
    let want: Vec<&[u8]> = events.iter().enumerate().filter(|(i, _)| i % 5 != 4).map(|(_, e)| e.as_slice()).collect();
    assert!(
        delivered == want,
        "not the 80 distinct events in order: {} records\n{}",
        delivered.len(),
        second.log_text()
    );
    assert_eq!(count_records(&format!("{app}.dlq"), 1, Duration::from_millis(500)), 0, "no dead letter");
    assert!(second.terminate(Duration::from_secs(30)).success(), "{}", second.log_text());
    let _ = std::fs::remove_dir_all(dir);
}

/// A CA of its own, a server certificate for 127.0.0.1 and a client
/// certificate it signs, made with the openssl command: the file names in `dir`.
fn make_certificates(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("the openssl command");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=dedupd test CA"],
        ]
        .concat(),
    );
    for (name, ext) in [
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
        ("client", "extendedKeyUsage=clientAuth"),
    ] {
        openssl(
            &[
                &["req"][..],
                &ec,
                &["-keyout", &format!("{name}.key"), "-out", &format!("{name}.csr"), "-subj", &format!("/CN={name}")],
            ]
            .concat(),
        );
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ]);
    }
}

/// The daemon against an https registry with a CA of its own that wants a
/// client certificate (mutual TLS) and a bearer token, or basic
/// authentication, holding the schemas confluent-kafka's AvroSerializer
/// registered there (over the same https, with its own credentials): the
/// records are read with them and their reference; an id the registry
/// answers 404 for is `bad_schema`; no TLS error, no secret in the log.
#[test]
fn an_https_registry_with_its_own_ca_mutual_tls_and_a_token_or_a_password() {
    let dir = std::env::temp_dir().join(format!("dedupd-https-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    make_certificates(&dir);
    let bearer = [("DEDUPD__INPUT__SCHEMA_REGISTRY_TOKEN", "t0k3n")];
    let basic =
        [("DEDUPD__INPUT__SCHEMA_REGISTRY_USER", "dedupd"), ("DEDUPD__INPUT__SCHEMA_REGISTRY_PASSWORD", "t0k3n")];
    let missing = "the reference clicks.Ad (subject \"ad\" version 1): the registry has no such subject or version \
                   (HTTP 404 from https://127.0.0.1:";
    let unknown = "schema id 99: the registry has no schema with this id (HTTP 404 from https://";
    for (auth, credentials) in [("Bearer t0k3n", &bearer[..]), ("Basic ZGVkdXBkOnQwazNu", &basic[..])] {
        let tls = Tls { dir: &dir, auth, credentials };
        serialized_run_over("avro", &[missing, "starts with 0x7b", unknown], Some(&tls));
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// An https test registry: `dir` holds its certificates (`make_certificates`),
/// `auth` is the Authorization header it wants of dedupd, `credentials` the
/// settings that make dedupd send it.
struct Tls<'a> {
    dir: &'a std::path::Path,
    auth: &'a str,
    credentials: &'a [(&'a str, &'a str)],
}

/// `--format json_schema`: JSON in the wire format (as a JSON Schema
/// serializer writes it: `0x00`, the schema id, the JSON text), no schema
/// needed; fields by pointer as in JSON.
#[test]
fn json_schema_records_in_the_pipe_mode() {
    let record = |body: &str| base64(&[&[0u8, 0, 0, 0, 4][..], body.as_bytes()].concat());
    let lines = [
        record(r#"{"user":{"id":"u1"},"ts":1700000000000}"#),
        record(r#"{"user":{"id":"u2"},"ts":1700000001000}"#),
        record(r#"{"user":{"id":"u1"},"ts":1700000002000}"#),
        base64(br#"{"user":{"id":"u3"},"ts":1700000003000}"#),
        record(r#"{"user":"#),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_dedupd"))
        .args(["filter", "--format", "json_schema", "--key", "json:/user/id", "--time", "json:/ts", "--window", "2m"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), (lines.join("\n") + "\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let kept: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(kept, [lines[0].as_str(), lines[1].as_str()], "{stderr}");
    assert!(stderr.contains("line 4: bad_schema: not in the Confluent wire format"), "{stderr}");
    assert!(stderr.contains("line 5: bad_json"), "{stderr}");
}

/// Starts tests/formats/serializers.py: a schema registry in memory (over
/// https with `tls`), into which confluent-kafka's serializer of `format`
/// registered its schemas while it wrote the records to `topic`; with how
/// many it wrote.
fn serialized(format: &str, topic: &str, tls: Option<&Tls<'_>>) -> (Registry, usize) {
    let over_https: Vec<String> = tls.map_or(vec![], |t| vec![t.dir.display().to_string(), t.auth.to_string()]);
    let mut child = Command::new("python3")
        .arg(root().join("tests/formats/serializers.py"))
        .args([format, &broker(), topic])
        .args(&over_https)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 for the serializers");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let said: serde_json::Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("serializers.py {format}: {e}: {line:?} (confluent-kafka[avro,protobuf,json]?)"));
    let registry = Registry { child, port: u16::try_from(said["port"].as_u64().unwrap()).unwrap() };
    (registry, usize::try_from(said["records"].as_u64().unwrap()).unwrap())
}

/// The daemon on the records confluent-kafka's serializer of `format`
/// wrote (its schemas in the test registry), and a JSON record without the
/// wire format's header: records 0, 1, 2, 4 and 5 delivered in order
/// (3 is a copy of 0), the dead letters `bad_schema` with the details
/// `dead` names (the last one: the record without the header).
fn serialized_run(format: &str, dead: &[&str]) {
    serialized_run_over(format, dead, None)
}

/// [`serialized_run`], over https with `tls`: then also a record with
/// schema id 99, which the registry does not hold (its dead letter last in
/// `dead`), and the daemon must not log the secret or meet a TLS error.
fn serialized_run_over(format: &str, dead: &[&str], tls: Option<&Tls<'_>>) {
    let input = unique(&format!("serialized-{format}-in"));
    create_topic(&input, 1);
    let app = unique(&format!("serialized-{format}-app"));
    let (registry, written) = serialized(format, &input, tls);
    produce(&input, &[Rec::new(0, "plain", r#"{"user":{"id":"u1"},"ad":{"id":7},"at":"x"}"#, BASE_TS)]);
    if tls.is_some() {
        let mut unknown = vec![0u8];
        unknown.extend(99u32.to_be_bytes());
        unknown.extend(b"\x04u1");
        produce(&input, &[Rec { value: Some(unknown), ..Rec::new(0, "gone", "", BASE_TS) }]);
    }
    let values: Vec<Vec<u8>> =
        read_all(&input, Duration::from_secs(1)).remove(&0).unwrap().into_iter().map(|r| r.value.unwrap()).collect();
    assert_eq!(values.len(), written + 1 + usize::from(tls.is_some()));
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut registry_env = vec![("DEDUPD__INPUT__SCHEMA_REGISTRY", format!("{scheme}://127.0.0.1:{}", registry.port))];
    if let Some(t) = tls {
        let path = |f: &str| t.dir.join(f).display().to_string();
        registry_env.extend([
            ("DEDUPD__INPUT__SCHEMA_REGISTRY_CA_FILE", path("ca.pem")),
            ("DEDUPD__INPUT__SCHEMA_REGISTRY_CERT_FILE", path("client.pem")),
            ("DEDUPD__INPUT__SCHEMA_REGISTRY_KEY_FILE", path("client.key")),
        ]);
        registry_env.extend(t.credentials.iter().map(|(k, v)| (*k, v.to_string())));
    }
    let schemas = if format == "json_schema" { &[][..] } else { &registry_env[..] };
    let env = clicks_env(app_env(&app, &input, "input-partitions", 1), format, schemas);
    let mut daemon = Daemon::start(&format!("serialized-{format}"), &env);
    daemon.wait_ready(Duration::from_secs(60));
    for (topic, want) in [(format!("{app}.dlq"), dead.len()), (format!("{app}.out"), 5)] {
        let got = count_records(&topic, want, Duration::from_secs(60));
        assert!(got >= want, "{got} of {want} records in {topic} after 60 s:\n{}", daemon.log_text());
    }
    std::thread::sleep(Duration::from_secs(1));
    let out = read_all(&format!("{app}.out"), Duration::from_secs(1));
    let got: Vec<&[u8]> = out.values().flatten().map(|r| r.value.as_deref().unwrap()).collect();
    let want: Vec<&[u8]> = [0, 1, 2, 4, 5].iter().map(|&i| values[i].as_slice()).collect();
    assert!(got == want, "{format}: the output is not records 0, 1, 2, 4 and 5 in order\n{}", daemon.log_text());
    let dlq = read_all(&format!("{app}.dlq"), Duration::from_secs(1));
    let details: Vec<String> = dlq
        .values()
        .flatten()
        .map(|r| {
            assert_eq!(r.header("dedupd.reason"), Some(&b"bad_schema"[..]), "{format}");
            String::from_utf8_lossy(r.header("dedupd.detail").unwrap()).into_owned()
        })
        .collect();
    assert_eq!(details.len(), dead.len(), "{details:?}");
    for (detail, want) in details.iter().zip(dead) {
        assert!(detail.contains(want), "{want}: {details:?}");
    }
    if tls.is_some() {
        let (_, metrics) = http_get(daemon.admin_port, "/metrics").unwrap();
        assert!(metrics.contains("dedupd_schema_registry_errors_total{kind=\"tls\"} 0"), "{metrics}");
        assert!(!daemon.log_text().contains("t0k3n"), "the secret is never logged");
    }
    assert!(daemon.terminate(Duration::from_secs(30)).success(), "{}", daemon.log_text());
}

/// Avro written by confluent-kafka's AvroSerializer with a schema that
/// refers to a named type registered under another subject: read with the
/// referenced schema; a schema whose referenced subject was deleted is
/// `bad_schema` with the reference named.
#[test]
fn avro_records_with_a_schema_reference() {
    let missing = "the reference clicks.Ad (subject \"ad\" version 1): the registry has no such subject or version \
                   (HTTP 404 from http://127.0.0.1:";
    serialized_run("avro", &[missing, "starts with 0x7b"]);
}

/// Protobuf written by confluent-kafka's ProtobufSerializer with a schema
/// that imports another registered file (the serializer registers the
/// import under its own subject and refers to it).
#[test]
fn protobuf_records_with_an_import() {
    serialized_run("protobuf", &["starts with 0x7b"]);
}

/// `json_schema` records written by confluent-kafka's JSONSerializer:
/// deduplicated by nested fields of the JSON body, no schema fetched.
#[test]
fn json_schema_records_in_the_daemon() {
    serialized_run("json_schema", &["starts with 0x7b"]);
}
