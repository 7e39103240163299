//! Operations: the metrics match their documentation, `/v1/lookup` answers
//! (with the admin token), and every Grafana panel's query returns data
//! from a real Prometheus scraping a running dedupd; the alert rules pass
//! promtool.

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use support::*;

/// `name → type` from the "# TYPE" lines of a Prometheus exposition.
fn exposed(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' ').map(|(n, t)| (n.to_string(), t.to_string())))
        .collect()
}

/// `name → type` from the table in docs/metrics.md.
fn documented() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(root().join("docs/metrics.md")).unwrap();
    doc.lines()
        .filter(|l| l.starts_with("| `dedupd_"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[2].to_string())
        })
        .collect()
}

fn run_script(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(root().join("scripts/prometheus_check.sh"))
        .args(args)
        .output()
        .expect("run prometheus_check.sh");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "prometheus_check.sh {args:?} failed:\n{text}");
    text
}

#[test]
fn metrics_lookup_and_dashboard_against_a_real_prometheus() {
    let input = unique("clicks-ops");
    create_topic(&input, 2);
    let app = unique("ops");
    let mut env = app_env(&app, &input, "input-partitions", 2);
    env.push(("DEDUPD__OUTPUT__DUPLICATES_TOPIC".into(), format!("{app}.dups")));
    // /v1/lookup answers only with the admin token (tests/admin.rs tests the refusals).
    const TOKEN: &str = "ops-test-token-0123456789";
    env.push(("DEDUPD__ADMIN__TOKEN".into(), TOKEN.into()));
    let auth = format!("Bearer {TOKEN}");
    let mut daemon = Daemon::start("ops", &env);
    daemon.wait_ready(Duration::from_secs(60));

    // A stream that keeps arriving while Prometheus scrapes: 25 s at ~100 records/s,
    // half of them copies, with a bad record now and then.
    let producer = {
        let input = input.clone();
        std::thread::spawn(move || {
            let mut seq = 0u64;
            for round in 0..25u64 {
                let now =
                    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
                let mut batch: Vec<Rec> = (0..100u64)
                    .map(|i| {
                        let id = format!("ops-{}", (round * 50 + i / 2) % 3000);
                        seq += 1;
                        click(seq, &id, now + i as i64, partition_of(&id, 2))
                    })
                    .collect();
                if round % 10 == 0 {
                    batch.push(Rec::new(0, "bad", "{not json", now));
                }
                produce(&input, &batch);
                std::thread::sleep(Duration::from_millis(1000));
            }
        })
    };
    wait_for("records processed", Duration::from_secs(60), || slice_total(&[&daemon], &["distinct"]) >= 100);

    // Every documented metric is exposed, with its type, and nothing undocumented is.
    let (code, text) = http_get(daemon.admin_port, "/metrics").unwrap();
    assert_eq!(code, 200);
    let (got, want) = (exposed(&text), documented());
    assert!(want.len() >= 20, "docs/metrics.md lists only {} metrics", want.len());
    assert_eq!(got, want, "/metrics and docs/metrics.md disagree");

    // Lookup: a key seen in the window is a duplicate, an unseen one is not; nothing is inserted.
    let lookup = |path: &str| {
        let answer = http_request(daemon.admin_port, "GET", path, &[("Authorization", &auth)]).unwrap();
        (answer.code, answer.body)
    };
    let (code, seen) = lookup("/v1/lookup?key=ops-0");
    assert_eq!(code, 200, "{seen}");
    let seen: serde_json::Value = serde_json::from_str(&seen).unwrap();
    assert!(seen["results"].as_array().unwrap().iter().any(|r| r["duplicate"] == true), "{seen}");
    for _ in 0..2 {
        let (_, unseen) = lookup("/v1/lookup?key=never%20seen");
        let unseen: serde_json::Value = serde_json::from_str(&unseen).unwrap();
        assert!(unseen["results"].as_array().unwrap().iter().all(|r| r["duplicate"] == false), "{unseen}");
        assert_eq!(unseen["key"], "never seen");
    }
    assert_eq!(lookup("/v1/lookup").0, 400);

    // Alert rules: syntax and unit tests with promtool.
    run_script(&["rules"]);
    // Every dashboard panel's query returns series from a real Prometheus scraping this daemon.
    let report = run_script(&["live", &format!("127.0.0.1:{}", daemon.admin_port)]);
    eprintln!("{report}");

    producer.join().unwrap();
    assert!(daemon.terminate(Duration::from_secs(30)).success());
    daemon.wait_joined("slice workers", &app, Duration::from_secs(1));
    daemon.assert_clean_log();
}

/// `dedupd_input_lag` and `dedupd_input_lag_seconds` seen by a real
/// Prometheus: a repartition-mode daemon started on a backlog shows its
/// router's lag on the input, in records and in seconds of record time, rise
/// above 0 and come back to 0 once the backlog is read (the Prometheus
/// check's `lag`); the seconds never exceed the backlog's span of record
/// time (its timestamps are 1 ms apart: 1 200 s);
/// the lag tools' view, the groups' committed offsets read with
/// confluent-kafka's AdminClient, does the same: the router group's on the
/// input, the slice group's on the slice log (from the snapshots).
/// Prometheus scrapes the daemon's admin port from before the daemon starts,
/// so that no part of the backlog's reading escapes it.
#[test]
fn the_input_lag_rises_under_a_backlog_and_returns_to_zero() {
    use std::io::BufRead;
    const RECORDS: u64 = 1_200_000;
    let input = unique("clicks-lag");
    create_topic(&input, 2);
    let app = unique("lag");
    let port = free_port();
    let mut check = Command::new("bash")
        .arg(root().join("scripts/prometheus_check.sh"))
        .args(["lag", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run prometheus_check.sh lag");
    let mut report = std::io::BufReader::new(check.stdout.take().unwrap()).lines();
    let first = report.next().expect("a line").unwrap();
    assert!(first.contains("scraping"), "{first}");

    let backlog: Vec<Rec> = (0..RECORDS)
        .map(|i| click(i, &format!("lag-{}", i % 50_000), 1_700_000_000_000 + i as i64, (i % 2) as i32))
        .collect();
    produce(&input, &backlog);
    let mut env = app_env(&app, &input, "repartition", 2);
    env.push(("DEDUPD__ADMIN__LISTEN".into(), format!("127.0.0.1:{port}")));
    // Statistics every 250 ms: the backlog is read in seconds.
    env.push(("DEDUPD__KAFKA__STATISTICS_INTERVAL_MS".into(), "250".into()));
    let mut daemon = Daemon::start("lag", &env);
    // The lag tools' view meanwhile: the groups' committed offsets (confluent-kafka's AdminClient).
    let groups = [app.clone(), format!("{app}.router")];
    let probe = std::thread::spawn(move || {
        let mut samples = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        while std::time::Instant::now() < deadline {
            let lags: Vec<Option<i64>> = groups.iter().map(|g| committed_lag(g)).collect();
            // The slice log keeps growing by the routers' progress records (every 100 ms),
            // committed at each snapshot (every second here): its lag stays a handful.
            let caught_up = lags[1] == Some(0) && lags[0].is_some_and(|l| l < 100);
            samples.push(lags);
            if caught_up {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        samples
    });
    let rest: Vec<String> = report.map(Result::unwrap).collect();
    let status = check.wait().unwrap();
    let rest = rest.join("\n");
    assert!(status.success(), "{first}\n{rest}");
    assert!(rest.contains("ok: sum(dedupd_input_lag{job=\"dedupd\"}) rose to"), "{rest}");
    let seconds_peak: f64 = rest
        .lines()
        .find_map(|l| l.strip_prefix("ok: max(dedupd_input_lag_seconds{job=\"dedupd\"}) rose to "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no rise and fall of dedupd_input_lag_seconds: {rest}"));
    assert!(seconds_peak > 0.0 && seconds_peak <= RECORDS as f64 / 1000.0, "{rest}");
    eprintln!("{rest}");
    wait_processed(&[&daemon], RECORDS, Duration::from_secs(120));
    let samples = probe.join().unwrap();
    eprintln!("committed lag of the slice and router groups: {samples:?}");
    let last = samples.last().unwrap();
    assert!(last[1] == Some(0) && last[0].is_some_and(|l| l < 100), "the groups' lag falls to 0: {samples:?}");
    // Seen under the backlog, before both caught up: the input's lag counts
    // records; the slice log's counts its records, which with the batched
    // form are batches (a few hundred for this backlog, not thousands).
    let before = &samples[..samples.len() - 1];
    for (group, name, least) in [(1, "router (input)", 1_000), (0, "slice (slice log)", 0)] {
        let lags: Vec<i64> = before.iter().filter_map(|s| s[group]).collect();
        assert!(lags.iter().any(|&l| l > least), "the {name} group's lag was seen under the backlog: {samples:?}");
    }
    assert!(daemon.terminate(Duration::from_secs(30)).success());
    daemon.assert_clean_log();
}

/// The lag a Kafka lag tool shows for `group`: the sum over the partitions
/// it has committed offsets for of (end − committed offset), read with
/// confluent-kafka's AdminClient; `None` while it has committed none.
fn committed_lag(group: &str) -> Option<i64> {
    const PROBE: &str = r#"
import sys
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
broker, group = sys.argv[1:3]
admin = AdminClient({"bootstrap.servers": broker})
# Connected first: the test broker leaves a fresh admin client's first group request unanswered.
admin.list_topics(timeout=10)
answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
ends = Consumer({"bootstrap.servers": broker, "group.id": group + ".probe"})
lag = [ends.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)[1] - tp.offset
       for tp in answer.topic_partitions if tp.offset >= 0]
print(sum(lag) if lag else "none")
"#;
    let out = Command::new("python3").args(["-c", PROBE, &broker(), group]).output().expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the lag probe: {}", String::from_utf8_lossy(&out.stderr));
    text.trim().parse().ok()
}
