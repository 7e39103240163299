//! `dedupd run` end to end on the real broker: exactly-once output across
//! SIGKILLs, router re-sends, scale-out, bad input, and the admin endpoint.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dedupd::engine::ReleasePos;
use dedupd::testkit::workload::Rng;
use support::*;

/// What an output record must keep identical between runs: key, value,
/// timestamp, slice offset and release position.
type Signature = (Option<Vec<u8>>, Option<Vec<u8>>, Option<i64>, Option<Vec<u8>>, Option<Vec<u8>>);

fn signature(r: &Rec) -> Signature {
    let header = |name| r.header(name).map(<[u8]>::to_vec);
    (r.key.clone(), r.value.clone(), r.timestamp, header("dedupd.slice.offset"), header("dedupd.release"))
}

fn by_partition(out: &BTreeMap<i32, Vec<Rec>>) -> BTreeMap<i32, Vec<Signature>> {
    out.iter().map(|(p, recs)| (*p, recs.iter().map(signature).collect())).collect()
}

/// Where two outputs part: the first record that differs, both ways.
fn first_difference(got: &[Signature], want: &[Signature]) -> String {
    let show = |s: Option<&Signature>| match s {
        None => "nothing".to_string(),
        Some((key, value, ts, offset, release)) => {
            let text = |b: &Option<Vec<u8>>| b.as_deref().map(String::from_utf8_lossy).unwrap_or_default().into_owned();
            format!(
                "key {} ts {ts:?} slice offset {} release {} value {}",
                text(key),
                text(offset),
                text(release),
                text(value)
            )
        }
    };
    match (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
        None => String::new(),
        Some(i) => format!("; first at record {i}:\n  got  {}\n  want {}", show(got.get(i)), show(want.get(i))),
    }
}

#[test]
fn crash_equivalence_and_scale_out() {
    crash_equivalence_and_scale_out_with("timer");
}

/// The same with the cuckoo kind: its tables restore from their snapshots
/// and replay to the same verdicts.
#[test]
fn crash_equivalence_and_scale_out_cuckoo() {
    crash_equivalence_and_scale_out_with("cuckoo");
}

fn crash_equivalence_and_scale_out_with(kind: &str) {
    let env = |app: &str, input: &str, partitions: u32| {
        let mut env = app_env(app, input, "input-partitions", partitions);
        if kind != "timer" {
            env.push(("DEDUPD__FILTER__KIND".to_string(), kind.to_string()));
        }
        env
    };
    let partitions = 4;
    let input = unique("clicks-keyed");
    create_topic(&input, partitions as i32);
    let stop = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicU64::new(0));
    let producer = keyed_stream(input.clone(), partitions, stop.clone(), produced.clone(), 7);

    // Reference: one process, never interrupted.
    let reference_app = unique("ref");
    let mut reference = Daemon::start("reference", &env(&reference_app, &input, partitions));
    reference.wait_ready(Duration::from_secs(60));

    // Crashing: killed with SIGKILL at random moments while input arrives.
    let crash_app = unique("crash");
    let crash_env = env(&crash_app, &input, partitions);
    let (mut crashing, mut crash_logs) = kill_storm("crashing", &crash_env, 5, Duration::from_millis(200), &produced);

    // Scale-out: three processes in one group, one killed and one added mid-stream.
    let scale_app = unique("scale");
    let scale_env = env(&scale_app, &input, partitions);
    let mut members: Vec<Daemon> = (0..3).map(|i| Daemon::start(&format!("member{i}"), &scale_env)).collect();
    std::thread::sleep(Duration::from_secs(4));
    members[1].kill();
    std::thread::sleep(Duration::from_secs(2));
    members.push(Daemon::start("member3", &scale_env));
    std::thread::sleep(Duration::from_secs(6));

    wait_produced(&produced, 3000);
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let total = produced.load(Ordering::Relaxed);

    let live_members: Vec<&Daemon> = members.iter().filter(|d| d.admin_port != members[1].admin_port).collect();
    wait_processed(&[&reference], total, Duration::from_secs(120));
    wait_processed(&[&crashing], total, Duration::from_secs(120));
    wait_processed(&live_members, total, Duration::from_secs(120));
    // Let the last outputs land.
    std::thread::sleep(Duration::from_secs(1));

    let expected = by_partition(&read_all(&format!("{reference_app}.out"), Duration::from_secs(3)));
    let distinct: usize = expected.values().map(Vec::len).sum();
    assert!(distinct > 1000 && (distinct as u64) < total, "{distinct} distinct of {total}");
    // Every output record carries its slice offset and its release
    // position; release positions strictly increase per partition, offsets
    // do not (records are judged in event-time order, not arrival order).
    let mut reordered = 0;
    for recs in expected.values() {
        let releases: Vec<ReleasePos> =
            recs.iter().map(|r| ReleasePos::parse(r.4.as_ref().unwrap()).unwrap()).collect();
        assert!(releases.windows(2).all(|w| w[0] < w[1]));
        let offsets: Vec<u64> =
            recs.iter().map(|r| String::from_utf8(r.3.clone().unwrap()).unwrap().parse().unwrap()).collect();
        reordered += offsets.windows(2).filter(|w| w[0] > w[1]).count();
    }
    assert!(reordered > 100, "the disordered input should be judged out of arrival order ({reordered} times)");
    let late = slice_total(&[&reference], &["late"]);
    assert!(late > 20, "1% of the records arrive later than the lateness, {late} counted");
    let dlq = read_all(&format!("{reference_app}.dlq"), Duration::from_secs(2));
    let jumps = dlq.values().flatten().filter(|r| r.header("dedupd.reason") == Some(b"time_jump")).count();
    assert!(jumps > 0, "the records a day ahead should be dead-lettered as time jumps");
    let crashed = by_partition(&read_all(&format!("{crash_app}.out"), Duration::from_secs(3)));
    for (p, want) in &expected {
        let got = &crashed[p];
        assert_eq!(
            got.len(),
            want.len(),
            "partition {p}: {} records after 5 SIGKILLs, {} uninterrupted",
            got.len(),
            want.len()
        );
        assert!(
            got == want,
            "partition {p}: the crashed run's output differs from the uninterrupted run's{}",
            first_difference(got, want)
        );
    }
    let scaled = by_partition(&read_all(&format!("{scale_app}.out"), Duration::from_secs(3)));
    for (p, want) in &expected {
        assert!(
            &scaled[p] == want,
            "partition {p}: the scaled-out run's output differs ({} vs {} records){}",
            scaled[p].len(),
            want.len(),
            first_difference(&scaled[p], want)
        );
    }
    crash_logs.push_str(&crashing.log_text());
    assert!(crash_logs.contains("restored from Snapshot"), "restarts should restore from snapshots:\n{crash_logs}");
    assert!(
        crash_logs.contains("silently up to"),
        "restarts should replay silently up to the last output:\n{crash_logs}"
    );

    for d in [&mut reference, &mut crashing] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }
    reference.assert_clean_log();
}

/// The external client: Python's confluent-kafka via scripts/kafka_client.py.
fn python_produce(topic: &str, lines: &[serde_json::Value]) {
    let mut child = Command::new("python3")
        .arg(root().join("scripts/kafka_client.py"))
        .args(["produce", "--broker", &broker(), "--topic", topic])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 scripts/kafka_client.py");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        for l in lines {
            writeln!(stdin, "{l}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "kafka_client.py produce failed: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn repartition_external_client_resends_and_bad_input() {
    let input = unique("clicks-raw");
    // Room for the 1.1 MB record below (over the broker's default limit).
    create_topic_with(&input, 3, &[("max.message.bytes", "5000000")]);
    let app = unique("rep");
    let slices = 4;
    let env = app_env(&app, &input, "repartition", slices);

    // 4000 distinct clicks, each sent 1 to 3 times within a few seconds (double
    // clicks and retries), all inside one 60 s window; spread over 3 partitions
    // without regard to the key.
    let mut rng = Rng::new(11);
    let mut lines = Vec::new();
    let mut pending: Vec<(u64, i64)> = Vec::new();
    for i in 0..4000u64 {
        let ts = BASE_TS + i as i64 * 5;
        for _ in 0..1 + rng.below(3) {
            pending.push((i, ts + rng.below(3000) as i64));
        }
    }
    pending.sort_by_key(|&(_, ts)| ts);
    for (n, (i, ts)) in pending.iter().enumerate() {
        let value = serde_json::json!({"id": format!("click-{i}"), "ts": ts, "n": n}).to_string();
        lines.push(serde_json::json!({"key": null, "value": value, "timestamp": ts, "partition": n % 3, "headers": {"src": "py"}}));
    }
    let copies = lines.len();

    let mut daemon = Daemon::start("repartition", &env);
    daemon.wait_ready(Duration::from_secs(60));
    // Input arrives in three parts; the daemon is SIGKILLed after the first two.
    let third = copies / 3;
    python_produce(&input, &lines[..third]);
    std::thread::sleep(Duration::from_millis(1500));
    daemon.kill();
    daemon = Daemon::start("repartition", &env);
    python_produce(&input, &lines[third..2 * third]);
    std::thread::sleep(Duration::from_millis(800));
    daemon.kill();
    daemon = Daemon::start("repartition", &env);
    python_produce(&input, &lines[2 * third..]);

    // Bad input, each with its reason.
    let big = "x".repeat(1_100_000);
    let bad = vec![
        serde_json::json!({"key": "a", "value": "{not json", "timestamp": BASE_TS, "partition": 0}),
        serde_json::json!({"key": "b", "value": "{\"ts\": 5}", "timestamp": BASE_TS, "partition": 1}),
        serde_json::json!({"key": "c", "value": "", "timestamp": BASE_TS, "partition": 2}),
        serde_json::json!({"key": "d", "value": format!("{{\"id\":\"{big}\",\"ts\":1}}"), "timestamp": BASE_TS, "partition": 0}),
        serde_json::json!({"key_b64": "//79", "value_b64": "eyJpZCI6Iv/+IiwidHMiOjF9", "timestamp": BASE_TS, "partition": 1}),
        serde_json::json!({"key": "f", "value": "{\"id\":\"ok-but-no-time\"}", "timestamp": BASE_TS, "partition": 2}),
    ];
    let mut child = Command::new("python3")
        .arg(root().join("scripts/kafka_client.py"))
        .args(["produce", "--broker", &broker(), "--topic", &input, "--config", "message.max.bytes=5000000"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        for l in &bad {
            writeln!(stdin, "{l}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    daemon.wait_ready(Duration::from_secs(60));
    wait_for("all distinct clicks out", Duration::from_secs(120), || {
        slice_total(&[&daemon], &["distinct"]) >= 4000 - 40
    });
    let dlq_reasons = |dlq: &BTreeMap<i32, Vec<Rec>>| -> Vec<String> {
        let mut r: Vec<String> = dlq
            .values()
            .flatten()
            .map(|r| String::from_utf8_lossy(r.header("dedupd.reason").unwrap_or(b"?")).into_owned())
            .collect();
        r.sort();
        r
    };
    let dead = count_records(&format!("{app}.dlq"), 6, Duration::from_secs(60));
    assert!(dead >= 6, "{dead} of 6 dead letters after 60 s");
    std::thread::sleep(Duration::from_secs(2));

    let out = read_all(&format!("{app}.out"), Duration::from_secs(3));
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (p, recs) in &out {
        for r in recs {
            let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
            *seen.entry(v["id"].as_str().unwrap().to_string()).or_default() += 1;
            assert_eq!(r.header("src"), Some(&b"py"[..]), "headers are kept");
            assert!(r.header("dedupd.slice.offset").is_some());
            assert_eq!(r.timestamp, v["ts"].as_i64(), "the record timestamp is kept");
            assert!((*p as u32) < slices);
        }
    }
    let repeated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "records delivered more than once: {:?}", &repeated[..repeated.len().min(10)]);
    let missing = (0..4000).filter(|i| !seen.contains_key(&format!("click-{i}"))).count();
    // Missing distinct clicks are filter false positives: well under the 1% target here.
    assert!(missing <= 40, "{missing} of 4000 distinct clicks are missing");
    assert!(!seen.keys().any(|k| !k.starts_with("click-")));

    let dlq = read_all(&format!("{app}.dlq"), Duration::from_secs(2));
    let reasons = dlq_reasons(&dlq);
    for want in ["bad_json", "missing_key", "too_large", "missing_time"] {
        assert!(reasons.iter().any(|r| r == want), "no dead letter with reason {want}: {reasons:?}");
    }
    assert_eq!(
        reasons.iter().filter(|r| *r == "bad_json").count(),
        3,
        "invalid JSON, the empty payload and non-UTF-8 JSON: {reasons:?}"
    );
    for r in dlq.values().flatten() {
        let source = String::from_utf8(r.header("dedupd.source").unwrap().to_vec()).unwrap();
        assert!(source.starts_with(&format!("{input}/")), "{source}");
        assert!(r.header("dedupd.detail").is_some_and(|d| !d.is_empty()));
    }

    // The admin endpoint.
    assert_eq!(http_get(daemon.admin_port, "/healthz").unwrap().0, 200);
    assert_eq!(http_get(daemon.admin_port, "/readyz").unwrap().0, 200);
    let (code, metrics) = http_get(daemon.admin_port, "/metrics").unwrap();
    assert_eq!(code, 200);
    for needle in [
        "dedupd_records_total{result=\"distinct\",slice=\"",
        "dedupd_records_total{result=\"duplicate\",slice=\"",
        "dedupd_dead_letters_total{reason=\"bad_json\"}",
    ] {
        assert!(metrics.contains(needle), "/metrics lacks {needle}:\n{metrics}");
    }
    // The outputs this process had acknowledged are timed (those of the
    // processes killed before it are not in its metrics), and so are the
    // slice-log records its router wrote.
    let count = |series: &str| {
        metrics.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse::<usize>().ok()).unwrap_or(0)
    };
    let timed = count("dedupd_end_to_end_latency_seconds_count");
    assert!(timed > 0 && timed <= out.values().map(Vec::len).sum(), "{timed} outputs timed:\n{metrics}");
    assert!(count("dedupd_stage_latency_seconds_count{stage=\"router_acked\"}") > 0, "{metrics}");
    let slices_json = daemon.slices().unwrap();
    let owned: HashSet<u64> = slices_json.as_array().unwrap().iter().map(|s| s["slice"].as_u64().unwrap()).collect();
    assert_eq!(owned.len(), slices as usize);
    assert!(daemon.terminate(Duration::from_secs(30)).success(), "{}", daemon.log_text());
    assert!(daemon.log_text().contains("stopped cleanly"));
    daemon.wait_joined("router", &format!("{app}.router"), Duration::from_secs(1));
    daemon.wait_joined("slice workers", &app, Duration::from_secs(1));
    let _ = Instant::now();
}

#[test]
fn incompatible_snapshots_follow_the_policy() {
    let input = unique("clicks-policy");
    create_topic(&input, 2);
    let records: Vec<Rec> = (0..600u64)
        .map(|i| {
            let id = format!("p{}", i % 400);
            click(i, &id, BASE_TS + i as i64 * 10, partition_of(&id, 2))
        })
        .collect();
    produce(&input, &records);
    let app = unique("policy");
    let env = app_env(&app, &input, "input-partitions", 2);
    let mut first = Daemon::start("policy-first", &env);
    first.wait_ready(Duration::from_secs(60));
    wait_processed(&[&first], 600, Duration::from_secs(60));
    assert!(first.terminate(Duration::from_secs(30)).success(), "{}", first.log_text());
    first.assert_clean_log();
    let before: usize = read_all(&format!("{app}.out"), Duration::from_secs(2)).values().map(Vec::len).sum();
    assert_eq!(before, 400);

    // Other timer width: the snapshots no longer fit.
    let mut changed = env.clone();
    changed.push(("DEDUPD__FILTER__TIMER_BITS".into(), "16".into()));
    let mut failing = changed.clone();
    failing.push(("DEDUPD__CHECKPOINT__ON_CORRUPT".into(), "fail".into()));
    let mut strict = Daemon::start("policy-fail", &failing);
    let status = strict.wait_exit(Duration::from_secs(60), "on_corrupt = fail should stop the daemon");
    assert!(!status.success());
    let log = strict.log_text();
    assert!(
        log.contains("cannot be used") && log.contains("timer_bits=8") && log.contains("on_corrupt = fail"),
        "{log}"
    );

    // cold-start: rebuild from the log, silently up to the last output; nothing is emitted twice.
    let mut lenient = Daemon::start("policy-cold", &changed);
    lenient.wait_ready(Duration::from_secs(60));
    let (_, metrics) = http_get(lenient.admin_port, "/metrics").unwrap();
    assert!(metrics.contains("dedupd_restores_total{source=\"corrupt\"} 2"), "{metrics}");
    let more: Vec<Rec> = (600..700u64)
        .map(|i| {
            // 50 new keys, then 50 copies of keys seen inside the window.
            let id = if i < 650 { format!("q{i}") } else { format!("p{}", i % 400) };
            click(i, &id, BASE_TS + i as i64 * 10, partition_of(&id, 2))
        })
        .collect();
    produce(&input, &more);
    wait_processed(&[&lenient], 700, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(1));
    let out = read_all(&format!("{app}.out"), Duration::from_secs(2));
    let ids: Vec<String> = out.values().flatten().map(|r| String::from_utf8(r.key.clone().unwrap()).unwrap()).collect();
    let unique_ids: HashSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), unique_ids.len(), "a key was emitted twice after the cold start");
    assert_eq!(ids.len(), 450, "q600..q649 are new, everything else was seen inside the window");
    assert!(lenient.terminate(Duration::from_secs(30)).success());
}
