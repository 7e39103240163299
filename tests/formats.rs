//! `dedupd run` on Avro and Protobuf records in the Confluent wire format,
//! on the local broker: the records confluent-kafka's Python serializers
//! wrote (tests/formats/, scripts/format_fixtures.py), deduplicated by a
//! composite key of nested fields with an RFC 3339 time; Avro schemas from
//! local files, Protobuf schemas fetched from a registry's REST path (a small
//! Python http.server); a record whose schema id is unknown, and a JSON
//! record on the Avro input, go to the dead letters with `bad_schema`.

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
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;
        let dir = root().join("tests/formats/registry");
        let mut child = Command::new("python3")
            .args(["-c", SERVER])
            .arg(dir)
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

fn run_format(format: &str, schemas: &[(&str, String)]) {
    let input = unique(&format!("{format}-in"));
    create_topic(&input, 1);
    let app = unique(&format!("{format}-app"));
    let mut env = app_env(&app, &input, "repartition", 2);
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
    assert!(daemon.terminate(Duration::from_secs(30)).success(), "{}", daemon.log_text());
}

#[test]
fn avro_records_with_schemas_from_files() {
    run_format("avro", &[("DEDUPD__INPUT__SCHEMAS", root().join("tests/formats/schemas").display().to_string())]);
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
    let (ok, err) = check(&[("DEDUPD__INPUT__FORMAT", "xml")]);
    assert!(!ok && err.contains("input.format = xml: unknown format"), "{err}");
    let (ok, err) = check(&[("DEDUPD__INPUT__FORMAT", "avro"), ("DEDUPD__INPUT__SCHEMA_REGISTRY", "https://r:8081")]);
    assert!(!ok && err.contains("input.schema_registry = https://r:8081"), "{err}");
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
