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
    let producer = support::counting_producer();
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
    producer.context().assert_none_failed(&input);
    let total = all.len() as u64;
    wait_judged(&[&first, &second], &["distinct", "duplicates", "invalid", "resends"], total, Duration::from_secs(60));
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
        let status = d.terminate(Duration::from_secs(30));
        // The test broker can refuse an idempotent batch under load (its
        // sequence check is not atomic: docs/dev/broker.md, finding 12).
        // librdkafka makes that fatal; a router starts its producer again,
        // and a slice worker's output producer stops the daemon, as any
        // delivery failure does, for its replacement to resume from the
        // last snapshot. The verdicts above hold either way; only that
        // refusal may have stopped it.
        let log = d.log_text();
        let refused = log.lines().any(|l| l.starts_with("dedupd: slice workers: kafka: producing to"))
            && log.contains("Broker received an out of order sequence number");
        assert!(status.success() || refused, "{log}");
        d.assert_clean_log_but_router_restarts();
    }
}

/// A second process `name` joins, owns slices for `stay`, and leaves: by
/// SIGTERM (a clean hand-over, which must succeed) or, with `kill`, by
/// SIGKILL. Returns it, gone, for its log.
fn join_and_leave(name: &str, env: &[(String, String)], stay: Duration, kill: bool) -> Daemon {
    let mut second = Daemon::start(name, env);
    wait_for("the second process owns slices", Duration::from_secs(60), || {
        second.slices().and_then(|s| s.as_array().map(|a| !a.is_empty())).unwrap_or(false)
    });
    std::thread::sleep(stay);
    if kill {
        second.kill();
    } else {
        assert!(second.terminate(Duration::from_secs(30)).success(), "{}", second.log_text());
    }
    second
}

/// A second router joins and leaves, cleanly and by SIGKILL, again and
/// again while live records flow (partitions a quarter of a second apart in
/// event time): no record is held for good or lost when the groups move
/// partitions and slices between the two, none is judged late (the slices
/// wait for a partition whose router went until another resumes it), and
/// the output is the exact answer's. The filter is sized far beyond the
/// stream, so a false positive is not expected either.
#[test]
fn a_router_joining_and_leaving_while_records_flow() {
    let _one = serial();
    let partitions = 4u32;
    let input = unique("join-leave");
    create_topic(&input, partitions as i32);
    let app = unique("join-leave");
    let mut env = app_env(&app, &input, "repartition", 4);
    env.push(("DEDUPD__FILTER__FPR".into(), "0.000001".into()));
    env.push(("DEDUPD__OUTPUT__LATE_TOPIC".into(), format!("{app}.late")));
    let mut first = Daemon::start("join-leave-a", &env);
    first.wait_ready(Duration::from_secs(60));

    // ~600 records/s for 40 s: 20% repeat a recent id 50–400 ms after it,
    // 5% one of the last few thousand 1–20 s after it (all within the
    // 60 s window: every repeat is a duplicate). Partition p runs p/4 s
    // behind in event time.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producing = {
        let (input, stop) = (input.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = Rng::new(41);
            let producer = support::counting_producer();
            let started = Instant::now();
            let mut all: Vec<(u64, String, u64)> = Vec::new();
            let mut recent: Vec<(String, u64)> = Vec::new();
            let mut times: HashSet<(String, u64)> = HashSet::new();
            let mut due: std::collections::BinaryHeap<std::cmp::Reverse<(u64, i32, String)>> = Default::default();
            while started.elapsed() < Duration::from_secs(40) || !due.is_empty() {
                let now = BASE_TS as u64 + started.elapsed().as_millis() as u64;
                for _ in 0..(if started.elapsed() < Duration::from_secs(40) { 24 } else { 0 }) {
                    let r = rng.next_f64();
                    let (id, ts) = if r < 0.2 && !recent.is_empty() {
                        let (id, t) =
                            recent[recent.len() - 1 - rng.below(recent.len().min(100) as u64) as usize].clone();
                        (id, t.max(now - 200) + 50 + rng.below(350))
                    } else if r < 0.25 && !recent.is_empty() {
                        let (id, t) =
                            recent[recent.len() - 1 - rng.below(recent.len().min(3000) as u64) as usize].clone();
                        // Never behind the stream: a record more than the lateness
                        // behind its partition is late by design, not by a fault.
                        (id, (t + 1_000 + rng.below(19_000)).max(now))
                    } else {
                        (format!("j{}-{}", all.len() + due.len(), rng.below(1 << 30)), now)
                    };
                    // Two copies at one time would be ordered by their positions, not their seqs.
                    let mut ts = ts;
                    while !times.insert((id.clone(), ts)) {
                        ts += 1;
                    }
                    recent.push((id.clone(), ts));
                    due.push(std::cmp::Reverse((ts, rng.below(u64::from(partitions)) as i32, id)));
                }
                while let Some(std::cmp::Reverse((ts, p, _))) = due.peek() {
                    if ts + *p as u64 * 250 > now {
                        break;
                    }
                    let std::cmp::Reverse((ts, p, id)) = due.pop().unwrap();
                    let n = all.len() as u64;
                    let w = now - BASE_TS as u64;
                    let payload = format!("{{\"id\":\"{id}\",\"ts\":{ts},\"seq\":{n},\"p\":{p},\"w\":{w}}}");
                    let record = BaseRecord::<[u8], [u8]>::to(&input).partition(p).payload(payload.as_bytes());
                    producer.send(record).map_err(|(e, _)| e).expect("produce");
                    all.push((n, id, ts));
                }
                producer.poll(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(40));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            producer.flush(Duration::from_secs(30)).expect("flush");
            producer.context().assert_none_failed(&input);
            all
        })
    };

    // The second router joins, owns slices for a moment, and leaves: by
    // SIGTERM (a clean hand-over) and by SIGKILL (its partitions resumed
    // once the group notices), until the stream ends.
    let mut round = 0;
    let t0 = Instant::now();
    let mut gone = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && !producing.is_finished() {
        eprintln!("round {round}: starts at {:?}", t0.elapsed());
        let second = join_and_leave("join-leave-b", &env, Duration::from_secs(2), round % 2 == 1);
        eprintln!(
            "round {round}: the second process {} at {:?}",
            if round % 2 == 0 { "stopped" } else { "killed" },
            t0.elapsed()
        );
        gone.push(second);
        round += 1;
        std::thread::sleep(Duration::from_secs(2));
    }
    let mut all = producing.join().unwrap();
    let total = all.len() as u64;
    assert!(round >= 2, "the second router joined only {round} times");
    wait_judged(&[&first], &["distinct", "duplicates", "invalid"], total, Duration::from_secs(60));

    let delivered: Vec<u64> = delivered_seqs(&format!("{app}.out"));
    let once: HashSet<u64> = delivered.iter().copied().collect();
    assert_eq!(once.len(), delivered.len(), "a record delivered twice");
    all.sort_by_key(|(seq, _, ts)| (*ts, *seq));
    let mut oracle = ExactWindow::new(60_000);
    let mut c = Confusion::default();
    for (seq, id, ts) in &all {
        c.record(!once.contains(seq), oracle.observe(id, *ts));
    }
    let late = slice_total(&[&first], &["late"]);
    eprintln!("join and leave: {total} records, {round} rounds, {late} late, {c:?}");
    assert!(c.true_duplicates > total / 10, "the stream should have duplicates: {c:?}");
    if late > 0 {
        for r in read_all(&format!("{app}.late"), Duration::from_secs(3)).values().flatten().take(10) {
            let late_by = r.header("dedupd.late_by_ms").map(String::from_utf8_lossy);
            eprintln!("late by {late_by:?} ms: {}", r.value_str());
        }
    }
    assert_eq!(late, 0, "records judged late");
    assert_eq!((c.false_duplicates, c.false_distinct), (0, 0), "the exact answer's verdicts: {c:?}");
    assert!(first.terminate(Duration::from_secs(30)).success(), "{}", first.log_text());
}

/// A partition announced idle is waited for while a rebalance pauses it or
/// hands it over: in every rebalance each router announces the partitions
/// it owns not idle, so the slices hold until one is read to its end again.
/// One partition gets a record every 1.2 s (idle most of the time, lateness
/// 0.5 s), the other one every 40 ms; a second router joins and leaves
/// cleanly, again and again, taking one of the two each time. No record
/// may be late.
#[test]
fn an_idle_partition_changing_hands_is_waited_for() {
    let _one = serial();
    let input = unique("idle-hands");
    create_topic(&input, 2);
    let app = unique("idle-hands");
    let mut env = app_env(&app, &input, "repartition", 2);
    env.push(("DEDUPD__INPUT__LATENESS".into(), "500ms".into()));
    env.push(("DEDUPD__OUTPUT__LATE_TOPIC".into(), format!("{app}.late")));
    let mut first = Daemon::start("idle-hands-a", &env);
    first.wait_ready(Duration::from_secs(60));

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producing = {
        let (input, stop) = (input.clone(), stop.clone());
        std::thread::spawn(move || {
            let producer = support::counting_producer();
            let started = Instant::now();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let ts = BASE_TS as u64 + started.elapsed().as_millis() as u64;
                let p = if n % 30 == 29 { 1 } else { 0 };
                let payload = format!("{{\"id\":\"h{n}\",\"ts\":{ts},\"seq\":{n}}}");
                let record = BaseRecord::<[u8], [u8]>::to(&input).partition(p).payload(payload.as_bytes());
                producer.send(record).map_err(|(e, _)| e).expect("produce");
                producer.poll(Duration::ZERO);
                n += 1;
                std::thread::sleep(Duration::from_millis(40));
            }
            producer.flush(Duration::from_secs(30)).expect("flush");
            producer.context().assert_none_failed(&input);
            n
        })
    };

    let t0 = Instant::now();
    let mut rounds = 0;
    while t0.elapsed() < Duration::from_secs(24) {
        eprintln!("round {rounds}: starts at {:?}", t0.elapsed());
        join_and_leave("idle-hands-b", &env, Duration::from_millis(1500), false);
        eprintln!("round {rounds}: stopped at {:?}", t0.elapsed());
        rounds += 1;
        std::thread::sleep(Duration::from_millis(1500));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let total = producing.join().unwrap();
    wait_judged(&[&first], &["distinct", "duplicates", "invalid"], total, Duration::from_secs(60));
    let late = slice_total(&[&first], &["late"]);
    eprintln!("idle hands: {total} records, {rounds} rounds, {late} late");
    for r in read_all(&format!("{app}.late"), Duration::from_secs(3)).values().flatten().take(10) {
        let late_by = r.header("dedupd.late_by_ms").map(String::from_utf8_lossy);
        eprintln!("late by {late_by:?} ms: {}", r.value_str());
    }
    assert!(rounds >= 3, "the second router joined only {rounds} times");
    assert_eq!(late, 0, "records judged late");
    assert_eq!(slice_total(&[&first], &["distinct"]), total, "every record is distinct");
    assert!(first.terminate(Duration::from_secs(30)).success(), "{}", first.log_text());
}

/// A repartition-mode daemon (2 slices, 2 input partitions) on a broker of
/// its own behind a proxy in `mode`, and `burst(from, n)`, which produces
/// clicks `from..from + n`: 300 keys, each sent again and again 10 ms
/// apart, so the first copy of each key is the distinct one.
struct Proxied {
    proxy: ProduceProxy,
    app: String,
    d: Daemon,
    burst: Box<dyn Fn(u64, u64)>,
}

fn proxied(name: &str, mode: ProxyMode, extra: &[(&str, &str)]) -> Proxied {
    let dir = std::env::temp_dir().join(unique(&format!("dedupd-{name}")));
    std::fs::create_dir_all(&dir).unwrap();
    let proxy = ProduceProxy::with_mode(&dir, "-", mode);
    let input = unique(&format!("clicks-{name}"));
    create_topic_on(&proxy.client, &input, 2);
    let app = unique(name);
    let mut env = app_env(&app, &input, "repartition", 2);
    env.push(("DEDUPD__KAFKA__BROKERS".into(), proxy.brokers()));
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut d = Daemon::start(name, &env);
    d.wait_ready(Duration::from_secs(60));
    let client = proxy.client.clone();
    let record = |seq: u64| click(seq, &format!("k{}", seq % 300), BASE_TS + seq as i64 * 10, (seq % 2) as i32);
    let burst = Box::new(move |from: u64, n: u64| {
        produce_on(&client, &input, &(from..from + n).map(record).collect::<Vec<_>>());
    });
    Proxied { proxy, app, d, burst }
}

/// The test broker can skip a batch of the slice log: it numbers a batch
/// before it stores it, and answers a reader standing at a numbered batch
/// not stored yet with the next stored one (docs/dev/broker.md, finding 12;
/// two routers writing one slice partition under load). A proxy takes the
/// first batch out of one fetch answer to the slice consumer, as the broker
/// does, deterministically: the slice sees its offsets jump, reads the gap
/// again, and judges every record; the output is the exact answer's (the
/// first copy of each key).
#[test]
fn a_batch_the_broker_skips_in_the_slice_log_is_read_again() {
    let _one = serial();
    // Fetch answers that wait for more than one batch (the routers' progress
    // records alone are a batch every 100 ms).
    let waiting_fetches = [("DEDUPD__KAFKA__FETCH_MIN_BYTES", "1000000"), ("DEDUPD__KAFKA__FETCH_WAIT_MAX_MS", "300")];
    let Proxied { proxy, app, mut d, burst } = proxied("skip", ProxyMode::SkipBatch("-slices"), &waiting_fetches);
    burst(0, 100);
    wait_processed(&[&d], 100, Duration::from_secs(60));
    proxy.hold();
    let mut sent = 100;
    // Bursts until one fetch answer holds two batches of a slice and loses the first.
    while !proxy.log().contains("skipped the batch") {
        assert!(sent < 5_000, "no fetch answer held two batches:\n{}", proxy.log());
        burst(sent, 50);
        sent += 50;
    }
    proxy.release();
    // Every key sent again after the gap: 400 records at least.
    loop {
        burst(sent, 50);
        sent += 50;
        if sent >= 400 {
            break;
        }
    }
    wait_judged(&[&d], &["distinct", "duplicates", "invalid", "resends"], sent, Duration::from_secs(60));
    let (code, metrics) = http_get(d.admin_port, "/metrics").expect("/metrics answers");
    assert_eq!(code, 200);
    let gaps = |outcome: &str| {
        metrics
            .lines()
            .filter(|l| l.starts_with("dedupd_slice_log_gaps_total{") && l.contains(&format!("outcome=\"{outcome}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    assert!(gaps("waited") >= 1.0 && gaps("skipped") == 0.0, "the gap should be waited out:\n{metrics}");
    let seqs = output_seqs(&proxy.client, &app);
    assert_eq!(seqs, (0..300).collect::<Vec<_>>(), "the first copy of every key, once");
    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
}

/// The test broker can answer a router's produce request with
/// OUT_OF_ORDER_SEQUENCE_NUMBER under load (docs/dev/broker.md, finding 12),
/// which is fatal to an idempotent producer; a proxy gives that answer once,
/// deterministically (the broker stored the records). The router starts
/// again with a new producer from the committed input positions, the slices
/// drop what it sends again as exact re-sends, the process keeps running and
/// the output is the exact answer's (the first copy of each key, once).
#[test]
fn a_router_whose_producer_fails_starts_again_and_loses_nothing() {
    let _one = serial();
    let Proxied { proxy, app, mut d, burst } = proxied("fail-produce", ProxyMode::FailProduce("-router"), &[]);
    burst(0, 100);
    wait_processed(&[&d], 100, Duration::from_secs(60));
    proxy.hold();
    burst(100, 100);
    wait_for("the router's produce request answered with the error", Duration::from_secs(30), || {
        proxy.log().contains("answered a produce request with OUT_OF_ORDER_SEQUENCE_NUMBER")
    });
    proxy.release();
    d.wait_log("router: its producer failed", Duration::from_secs(30));
    burst(200, 200);
    wait_judged(&[&d], &["distinct", "duplicates", "invalid", "resends"], 400, Duration::from_secs(60));
    let (code, metrics) = http_get(d.admin_port, "/metrics").expect("/metrics answers");
    assert_eq!(code, 200);
    assert!(metrics.lines().any(|l| l == "dedupd_router_restarts_total 1"), "one restart:\n{metrics}");
    assert_eq!(output_seqs(&proxy.client, &app), (0..300).collect::<Vec<_>>(), "the first copy of every key, once");
    assert!(d.child.try_wait().unwrap().is_none(), "the process keeps running:\n{}", d.log_text());
    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
}
