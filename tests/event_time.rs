//! Event time under disorder on the real broker (design invariant 7): the
//! demo's own figures, a record's Kafka timestamp that differs from its
//! event time, an idle tail, and two routers whose partitions run up to 1 s
//! apart in event time.

mod support;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dedupd::testkit::clicks::{Click, clicks, confusion, truth};
use dedupd::testkit::oracle::{Confusion, ExactWindow};
use dedupd::testkit::workload::Rng;
use rdkafka::producer::{BaseRecord, Producer};
use support::*;

/// The tests here time things and run daemons: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The demo's settings (scripts/demo.sh), repartition mode, for `app`.
fn demo_env(app: &str, input: &str, expected_keys: u64) -> Vec<(String, String)> {
    let mut env = app_env(app, input, "repartition", 4);
    env.retain(|(k, _)| !k.starts_with("DEDUPD__CHECKPOINT__INTERVAL") && !k.starts_with("DEDUPD__INPUT__KEY"));
    env.push(("DEDUPD__INPUT__KEY".into(), "json:/click_id".into()));
    env.retain(|(k, _)| k != "DEDUPD__FILTER__EXPECTED_KEYS");
    env.push(("DEDUPD__FILTER__EXPECTED_KEYS".into(), expected_keys.to_string()));
    env
}

/// The `seq` of every output record.
fn delivered_seqs(topic: &str) -> Vec<u64> {
    read_all(topic, Duration::from_secs(3))
        .values()
        .flatten()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap_or_default()).unwrap();
            v["seq"].as_u64().expect("seq in the output")
        })
        .collect()
}

fn judged(d: &Daemon) -> u64 {
    slice_total(&[d], &["distinct", "duplicates", "invalid", "resends"])
}

/// Runs the demo's pipeline on `stream` (3 input partitions, 4 slices),
/// each record produced with the Kafka timestamp `create_time` gives it.
fn run_demo(name: &str, stream: &[Click], create_time: impl Fn(&Click, &mut Rng) -> i64) -> Confusion {
    let input = unique(&format!("{name}-clicks"));
    create_topic(&input, 3);
    let mut rng = Rng::new(3);
    let records: Vec<Rec> = stream
        .iter()
        .enumerate()
        .map(|(i, c)| Rec::new((i % 3) as i32, &c.click_id, &c.payload(), create_time(c, &mut rng)))
        .collect();
    produce(&input, &records);
    let app = unique(name);
    let mut d = Daemon::start(name, &demo_env(&app, &input, stream.len() as u64));
    d.wait_ready(Duration::from_secs(60));
    wait_for("every record judged", Duration::from_secs(180), || judged(&d) >= stream.len() as u64);
    let delivered: HashSet<u64> = delivered_seqs(&format!("{app}.out")).into_iter().collect();
    let c = confusion(stream, &truth(stream, 60_000), |seq| delivered.contains(&seq));
    eprintln!("{name}: {} records, FPR {:.5}, FNR {:.5}, {c:?}", stream.len(), c.fpr(), c.fnr());
    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    d.assert_clean_log();
    c
}

/// Issue 14's last point and issue 20's first: the demo at a smaller size
/// meets its targets against the event-time answer, and so it does when
/// every record's Kafka timestamp is random (the router orders by the
/// event time the slices judge by, `json:/ts`, not by the timestamp).
#[test]
fn the_demo_meets_its_targets_whatever_the_kafka_timestamps() {
    let _one = serial();
    let stream = clicks(40_000, 42);
    let c = run_demo("demo-ts", &stream, |c, _| c.ts);
    assert!(c.fpr() <= 0.01, "FPR {} > 0.01 ({c:?})", c.fpr());
    assert!(c.fnr() <= 0.005, "FNR {} > 0.005 ({c:?})", c.fnr());
    let random = run_demo("demo-random-ts", &stream, |c, rng| c.ts - 1_000_000 + rng.below(2_000_000) as i64);
    assert!(random.fpr() <= 0.02, "random CreateTimes: FPR {} > 0.02 ({random:?})", random.fpr());
    assert!(random.fnr() <= 0.01, "random CreateTimes: FNR {} > 0.01 ({random:?})", random.fnr());
}

/// When input stops, the records waiting for the watermark are judged and
/// delivered within the lateness + 2 s; a restart after that idle flush
/// neither repeats nor loses an output.
#[test]
fn an_idle_tail_is_released_and_survives_a_restart() {
    let _one = serial();
    let input = unique("tail-clicks");
    create_topic(&input, 2);
    let app = unique("tail");
    let env = app_env(&app, &input, "input-partitions", 2);
    let mut d = Daemon::start("tail", &env);
    d.wait_ready(Duration::from_secs(60));
    let batch = |from: u64, n: u64| -> Vec<Rec> {
        (from..from + n)
            .map(|seq| {
                let id = format!("tail-{seq}");
                click(seq, &id, BASE_TS + seq as i64 * 3, partition_of(&id, 2))
            })
            .collect()
    };
    produce(&input, &batch(0, 300));
    let produced = Instant::now();
    let out = format!("{app}.out");
    let seen = count_records(&out, 300, Duration::from_secs(4).saturating_sub(produced.elapsed()));
    assert!(
        seen >= 300,
        "{seen} of 300 records delivered {:?} after the input stopped (lateness 2 s)",
        produced.elapsed()
    );
    eprintln!("idle tail delivered {:?} after the input stopped", produced.elapsed());
    let metrics = http_get(d.admin_port, "/metrics").unwrap().1;
    assert!(
        metrics.lines().any(|l| l.starts_with("dedupd_idle_flushes_total") && !l.ends_with(" 0")),
        "no idle flush counted"
    );
    // SIGKILL after the flush, more input, a restart: every record once.
    d.kill();
    produce(&input, &batch(300, 100));
    let mut d = Daemon::start("tail-restarted", &env);
    d.wait_ready(Duration::from_secs(60));
    let delivered = count_records(&out, 400, Duration::from_secs(30));
    assert!(delivered >= 400, "{delivered} of 400 records delivered after 30 s");
    std::thread::sleep(Duration::from_secs(1));
    let mut seqs = delivered_seqs(&out);
    seqs.sort_unstable();
    assert_eq!(seqs, (0..400).collect::<Vec<u64>>(), "each record exactly once");
    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
}

/// Issue 14: two processes in one group in repartition mode, each routing
/// some of the input partitions, fed live with partitions up to 1 s apart
/// in event time (and random Kafka timestamps): the event-time answer.
#[test]
fn two_routers_with_partitions_a_second_apart() {
    let _one = serial();
    let partitions = 4u32;
    let input = unique("two-routers");
    create_topic(&input, partitions as i32);
    let app = unique("two");
    let env = app_env(&app, &input, "repartition", 4);
    let mut first = Daemon::start("router-a", &env);
    first.wait_ready(Duration::from_secs(60));
    let mut second = Daemon::start("router-b", &env);
    second.wait_ready(Duration::from_secs(60));
    // Both groups (routers, slice workers) settled: each process owns slices.
    wait_for("both processes own slices", Duration::from_secs(60), || {
        [&first, &second].iter().all(|d| d.slices().and_then(|s| s.as_array().map(|a| !a.is_empty())).unwrap_or(false))
    });
    std::thread::sleep(Duration::from_secs(3));

    // 25 s of live clicks at ~1500/s: 20% are double-clicks 50–400 ms
    // after a recent click, 5% retries 1–20 s after one. Each record is
    // written when the wall clock reaches its time plus its partition's
    // delay: partition p runs p/3 s behind (so the partitions are up to 1 s
    // apart in event time).
    let mut rng = Rng::new(17);
    let producer = support::producer();
    let started = Instant::now();
    let mut all: Vec<(u64, String, u64)> = Vec::new();
    let mut recent: Vec<(String, u64)> = Vec::new();
    // (time, partition, id), written when due.
    let mut due: std::collections::BinaryHeap<std::cmp::Reverse<(u64, i32, String)>> = Default::default();
    let mut seq = 0u64;
    while started.elapsed() < Duration::from_secs(25) {
        let now = BASE_TS as u64 + started.elapsed().as_millis() as u64;
        for _ in 0..60 {
            let r = rng.next_f64();
            let (id, ts) = if r < 0.2 && !recent.is_empty() {
                let (id, t) = recent[recent.len() - 1 - rng.below(recent.len().min(200) as u64) as usize].clone();
                (id, t + 50 + rng.below(350))
            } else if r < 0.25 && !recent.is_empty() {
                let (id, t) = recent[rng.below(recent.len() as u64) as usize].clone();
                (id, t + 1_000 + rng.below(19_000))
            } else {
                (format!("c{seq}-{}", rng.below(1 << 30)), now)
            };
            recent.push((id.clone(), ts));
            due.push(std::cmp::Reverse((ts, rng.below(u64::from(partitions)) as i32, id)));
            seq += 1;
        }
        if recent.len() > 40_000 {
            recent.drain(..20_000);
        }
        while let Some(std::cmp::Reverse((ts, p, _))) = due.peek() {
            if ts + *p as u64 * 333 > now {
                break;
            }
            let std::cmp::Reverse((ts, p, id)) = due.pop().unwrap();
            let n = all.len() as u64;
            let payload = format!("{{\"id\":\"{id}\",\"ts\":{ts},\"seq\":{n}}}");
            // A random Kafka timestamp: the event time is json:/ts.
            let record = BaseRecord::<[u8], [u8]>::to(&input)
                .partition(p)
                .payload(payload.as_bytes())
                .timestamp(rng.below(1 << 40) as i64);
            producer.send(record).map_err(|(e, _)| e).expect("produce");
            all.push((n, id, ts));
        }
        producer.poll(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(40));
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let total = all.len() as u64;
    wait_for("every record judged", Duration::from_secs(120), || {
        slice_total(&[&first, &second], &["distinct", "duplicates", "invalid", "resends"]) >= total
    });
    let delivered: HashSet<u64> = delivered_seqs(&format!("{app}.out")).into_iter().collect();
    all.sort_by_key(|(seq, _, ts)| (*ts, *seq));
    let mut oracle = ExactWindow::new(60_000);
    let mut c = Confusion::default();
    for (seq, id, ts) in &all {
        c.record(!delivered.contains(seq), oracle.observe(id, *ts));
    }
    let late = slice_total(&[&first, &second], &["late"]);
    eprintln!("two routers: {total} records, {late} late, FPR {:.5}, FNR {:.5}, {c:?}", c.fpr(), c.fnr());
    assert!(c.true_duplicates > total / 10, "the stream should have duplicates: {c:?}");
    assert!(c.fpr() <= 0.02, "FPR {} > 0.02 ({c:?})", c.fpr());
    assert!(c.fnr() <= 0.01, "FNR {} > 0.01 ({c:?})", c.fnr());
    for d in [&mut first, &mut second] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
        d.assert_clean_log();
    }
}
