//! `dedupd run` with the counting stage (`[limit]`, `[flag]`; issue 15) on
//! the real broker. Clicks are deduplicated by click id and counted by IP
//! (`limit.count_key = "json:/ip"`); the checks are against exact counts
//! computed here from what was produced:
//! - no IP is delivered more than `max_per_window` times in any window of
//!   length W, and an IP with at most that many clicks is always delivered
//!   (the counters are sized far above the load: no collisions);
//! - every IP whose true count in some window reaches the threshold has a
//!   flag record with `dedupd.count` at least the threshold, and no record
//!   is flagged twice;
//! - `/v1/count` answers with the token, 401 without;
//! - a run SIGKILLed mid-stream and restarted writes exactly the output and
//!   the flags of an uninterrupted run.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dedupd::testkit::workload::Rng;
use support::*;

const TOKEN: &str = "limits-token-7c1e5a90b3d2";
const MAX: usize = 3;
const THRESHOLD: usize = 5;

/// A click `{"id","ip","ts","seq"}`.
fn ip_click(seq: u64, id: &str, ip: &str, ts: i64, partition: i32) -> Rec {
    let value = format!("{{\"id\":\"{id}\",\"ip\":\"{ip}\",\"ts\":{ts},\"seq\":{seq}}}");
    Rec::new(partition, id, &value, ts)
}

/// Settings: dedup by click id, count by IP, at most [`MAX`] per window,
/// flags at [`THRESHOLD`], counters for 200 000 IPs (the test has ~300: no
/// collisions, so the estimates are the exact counts but for the
/// sub-window granularity).
fn limit_env(app: &str, input: &str, mode: &str, window: &str, lateness: &str) -> Vec<(String, String)> {
    let mut env = app_env(app, input, mode, 2);
    env.extend(
        [
            ("DEDUPD__FILTER__WINDOW", window.to_string()),
            ("DEDUPD__INPUT__LATENESS", lateness.to_string()),
            ("DEDUPD__LIMIT__MAX_PER_WINDOW", MAX.to_string()),
            ("DEDUPD__LIMIT__COUNT_KEY", "json:/ip".to_string()),
            ("DEDUPD__LIMIT__COUNT_EXPECTED", "200000".to_string()),
            ("DEDUPD__FLAG__THRESHOLD", THRESHOLD.to_string()),
            ("DEDUPD__FLAG__TOPIC", format!("{app}.flags")),
            ("DEDUPD__OUTPUT__DUPLICATES_TOPIC", format!("{app}.dups")),
            ("DEDUPD__ADMIN__TOKEN", TOKEN.to_string()),
            // Far from the load: no click is taken for a replay by mistake.
            ("DEDUPD__FILTER__FPR", "0.0001".to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    env
}

fn field<'a>(value: &'a serde_json::Value, name: &str) -> &'a str {
    value[name].as_str().unwrap_or_default()
}

fn json(r: &Rec) -> serde_json::Value {
    serde_json::from_slice(r.value.as_deref().unwrap_or_default()).expect("a JSON click")
}

/// Whether some `n` of the sorted times lie within one window of length
/// `window` (`(t - W, t]`).
fn n_within(times: &[i64], n: usize, window: i64) -> bool {
    n > 0 && times.len() >= n && times.windows(n).any(|w| w[n - 1] - w[0] < window)
}

/// A ready daemon `name` in repartition mode, W = 10 s, over a new input
/// topic of one partition (the router reads it in order, so the stream's
/// disorder is its jitter, within the lateness; two partitions produced at
/// once may be read one after the other, far beyond it), with
/// [`limit_env`] changed by `adjust`. Returns it, its input and its app id.
fn one_partition_daemon(name: &str, adjust: impl FnOnce(&mut Vec<(String, String)>)) -> (Daemon, String, String) {
    let input = unique(&format!("clicks-{name}"));
    create_topic(&input, 1);
    let app = unique(name);
    let mut env = limit_env(&app, &input, "repartition", "10s", "2s");
    adjust(&mut env);
    let mut daemon = Daemon::start(name, &env);
    daemon.wait_ready(Duration::from_secs(60));
    (daemon, input, app)
}

/// (a), (b), (d) in repartition mode: the router routes by the count key.
#[test]
fn limits_and_flags_hold_against_exact_counts() {
    let window = 10_000i64;
    let (mut daemon, input, app) = one_partition_daemon("limits", |_| {});

    // 6000 clicks, 20 ms apart (jittered by up to 1 s, within the lateness),
    // over 300 IPs with a skew (a few IPs click hundreds of times, most a
    // handful), 2% exact replays of a recent click, a few without an IP.
    let mut rng = Rng::new(42);
    let mut records = Vec::new();
    let mut clicks: Vec<(String, String, i64)> = Vec::new(); // distinct: id, ip, ts
    let mut no_ip = 0;
    for seq in 0..6_000u64 {
        let ts = BASE_TS + seq as i64 * 20 + rng.below(1_000) as i64;
        if seq % 50 == 7 && !clicks.is_empty() {
            let (id, ip, ts) = clicks[clicks.len() - 1 - rng.below(clicks.len().min(100) as u64) as usize].clone();
            records.push(ip_click(seq, &id, &ip, ts, 0));
            continue;
        }
        let id = format!("c{seq}");
        if seq % 1000 == 999 {
            let value = format!("{{\"id\":\"{id}\",\"ts\":{ts}}}");
            records.push(Rec::new(0, &id, &value, ts));
            no_ip += 1;
            continue;
        }
        let spread = rng.below(300) + 1;
        let ip = format!("ip{}", rng.below(spread));
        records.push(ip_click(seq, &id, &ip, ts, 0));
        clicks.push((id, ip, ts));
    }
    produce(&input, &records);
    wait_processed(&[&daemon], records.len() as u64 - no_ip, Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(1));

    // Exact counts: each IP's distinct clicks, in time order.
    let mut times: HashMap<&str, Vec<i64>> = HashMap::new();
    for (_, ip, ts) in &clicks {
        times.entry(ip.as_str()).or_default().push(*ts);
    }
    times.values_mut().for_each(|t| t.sort_unstable());

    let out: Vec<Rec> = read_all(&format!("{app}.out"), Duration::from_secs(3)).into_values().flatten().collect();
    let ids: Vec<String> = out.iter().map(|r| field(&json(r), "id").to_string()).collect();
    let mut by_id: HashMap<&str, Vec<String>> = HashMap::new();
    for (id, r) in ids.iter().zip(&out) {
        by_id.entry(id).or_default().push(format!(
            "p{} {} {:?}",
            r.partition,
            r.value_str(),
            r.header("dedupd.release").map(String::from_utf8_lossy)
        ));
    }
    let twice: Vec<_> = by_id.values().filter(|v| v.len() > 1).take(5).collect();
    assert!(twice.is_empty(), "click ids delivered twice: {twice:#?}");
    let mut delivered: HashMap<String, Vec<i64>> = HashMap::new();
    for r in &out {
        let v = json(r);
        delivered.entry(field(&v, "ip").to_string()).or_default().push(v["ts"].as_i64().unwrap());
    }
    for (ip, t) in delivered.iter_mut() {
        t.sort_unstable();
        assert!(!n_within(t, MAX + 1, window), "{ip}: more than {MAX} delivered within one window: {t:?}");
    }
    let heavy = times.iter().filter(|(_, t)| n_within(t, MAX + 1, window)).count();
    assert!(heavy > 10, "the stream should have IPs over the limit ({heavy})");
    for (ip, t) in &times {
        if t.len() <= MAX {
            assert_eq!(delivered.get(*ip).map_or(0, Vec::len), t.len(), "{ip}: {} clicks, under the limit", t.len());
        }
    }
    let limited: usize = read_all(&format!("{app}.dups"), Duration::from_secs(2))
        .into_values()
        .flatten()
        .filter(|r| r.header("dedupd.rule").is_some_and(|h| h.starts_with(b"limit;count=")))
        .count();
    assert_eq!(out.len() + limited, clicks.len(), "every distinct click is delivered or limited");

    // Flags: every IP that reaches the threshold in a window, with a count
    // at least the threshold; no record flagged twice.
    let flags: Vec<Rec> = read_all(&format!("{app}.flags"), Duration::from_secs(2)).into_values().flatten().collect();
    let mut flagged: HashMap<String, u64> = HashMap::new();
    let mut seen = HashSet::new();
    for f in &flags {
        let count: u64 = std::str::from_utf8(f.header("dedupd.count").expect("dedupd.count")).unwrap().parse().unwrap();
        assert!(count >= THRESHOLD as u64, "flag count {count}");
        assert!(f.header("dedupd.release").is_some() && f.header("dedupd.slice.offset").is_some());
        assert!(seen.insert((f.partition, f.header("dedupd.slice.offset").unwrap().to_vec())), "flagged twice");
        flagged.insert(field(&json(f), "ip").to_string(), count);
    }
    let must: Vec<&&str> = times.iter().filter(|(_, t)| n_within(t, THRESHOLD, window)).map(|(ip, _)| ip).collect();
    assert!(must.len() > 5, "{} IPs reach the threshold", must.len());
    for ip in must {
        assert!(flagged.contains_key(*ip), "{ip} reached {THRESHOLD} in a window and was not flagged");
    }
    // Clicks without the count key are dead letters.
    let dlq = read_all(&format!("{app}.dlq"), Duration::from_secs(2)).into_values().flatten().count();
    assert_eq!(dlq as u64, no_ip);

    // /v1/count: the token is needed; the busiest IP has a count.
    let busiest = times.iter().max_by_key(|(_, t)| t.len()).map(|(ip, _)| ip.to_string()).unwrap();
    let path = format!("/v1/count?key={busiest}");
    assert_eq!(http_request(daemon.admin_port, "GET", &path, &[]).unwrap().code, 401);
    let bearer = format!("Bearer {TOKEN}");
    let answer = http_request(daemon.admin_port, "GET", &path, &[("Authorization", &bearer)]).unwrap();
    assert_eq!(answer.code, 200, "{}", answer.body);
    let v: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    eprintln!("GET {path}: {v}");
    // The ring covers W plus one sub-window before the newest sub-window's
    // end; without collisions (counters far above the load) the estimate is
    // the exact count of the IP's distinct clicks there.
    let r = &v["results"][0];
    let end = r["window_end_ms"].as_i64().unwrap();
    let start = end - r["window_ms"].as_i64().unwrap() - r["subwindow_ms"].as_i64().unwrap();
    let exact = times[busiest.as_str()].iter().filter(|&&t| t >= start && t < end).count() as u64;
    assert!(exact >= 1);
    assert_eq!(v["estimate"].as_u64(), Some(exact), "{v}");
    assert_eq!(v["results"][0]["window_ms"], 10_000, "{v}");
    assert!(v["slice"].as_u64().is_some(), "{v}");
    let none = http_request(daemon.admin_port, "GET", "/v1/count?key=never-seen", &[("Authorization", &bearer)]);
    let v: serde_json::Value = serde_json::from_str(&none.unwrap().body).unwrap();
    assert_eq!(v["estimate"], 0, "{v}");
    assert_eq!(http_request(daemon.admin_port, "GET", "/v1/count", &[("Authorization", &bearer)]).unwrap().code, 400);

    assert!(daemon.terminate(Duration::from_secs(30)).success(), "{}", daemon.log_text());
    daemon.assert_clean_log();
}

/// Counting by the dedup key (`limit.count_key` empty): the stage replaces
/// the timer filter, so a key is delivered up to N times per window
/// (copies included), exactly as an exact limiter over all its arrivals.
#[test]
fn counting_by_the_dedup_key_lets_n_copies_through() {
    let window = 10_000i64;
    let (mut daemon, input, app) = one_partition_daemon("limits-key", |env| {
        env.retain(|(k, _)| k != "DEDUPD__LIMIT__COUNT_KEY");
        env.push(("DEDUPD__INPUT__KEY".into(), "json:/ip".into()));
    });
    // 3000 records, 20 ms apart, in time order, over 100 skewed IPs.
    let mut rng = Rng::new(9);
    let mut times: HashMap<String, Vec<i64>> = HashMap::new();
    let records: Vec<Rec> = (0..3_000u64)
        .map(|seq| {
            let spread = rng.below(100) + 1;
            let ip = format!("ip{}", rng.below(spread));
            let ts = BASE_TS + seq as i64 * 20;
            times.entry(ip.clone()).or_default().push(ts);
            ip_click(seq, &format!("c{seq}"), &ip, ts, 0)
        })
        .collect();
    produce(&input, &records);
    wait_processed(&[&daemon], records.len() as u64, Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(1));
    // The exact limiter: a record passes iff fewer than N arrivals of its
    // key lie in the window before it. The ring holds up to W + W/16, so
    // the daemon may block a record the exact limiter passes (never the
    // other way); both are checked.
    let mut exact_passes = 0;
    let mut delivered: HashMap<String, Vec<i64>> = HashMap::new();
    for r in read_all(&format!("{app}.out"), Duration::from_secs(3)).into_values().flatten() {
        let v = json(&r);
        delivered.entry(field(&v, "ip").to_string()).or_default().push(v["ts"].as_i64().unwrap());
    }
    for (ip, t) in &times {
        let passes = t.iter().enumerate().filter(|&(i, &x)| t[..i].iter().filter(|&&y| x - y < window).count() < MAX);
        exact_passes += passes.count();
        let mut d = delivered.get(ip).cloned().unwrap_or_default();
        d.sort_unstable();
        assert!(!n_within(&d, MAX + 1, window), "{ip}: more than {MAX} delivered within one window: {d:?}");
        if t.len() <= MAX {
            assert_eq!(d.len(), t.len(), "{ip}: {} records, under the limit", t.len());
        }
    }
    let got: usize = delivered.values().map(Vec::len).sum();
    assert!(got <= exact_passes && got * 100 >= exact_passes * 90, "{got} delivered, the exact limiter {exact_passes}");
    assert!(got < records.len() / 2, "the limit should bind: {got} of {}", records.len());
    assert!(daemon.terminate(Duration::from_secs(30)).success(), "{}", daemon.log_text());
    daemon.assert_clean_log();
}

/// What must be identical between runs, per partition: key, value,
/// timestamp, slice offset, release position and count of every record.
type Topic = BTreeMap<i32, Vec<(Option<Vec<u8>>, Option<Vec<u8>>, Option<i64>, Vec<Vec<u8>>)>>;

fn topic(name: &str) -> Topic {
    read_all(name, Duration::from_secs(3))
        .into_iter()
        .map(|(p, recs)| {
            let sig = |r: &Rec| {
                let hs = ["dedupd.slice.offset", "dedupd.release", "dedupd.count"]
                    .map(|h| r.header(h).map(<[u8]>::to_vec).unwrap_or_default());
                (r.key.clone(), r.value.clone(), r.timestamp, hs.to_vec())
            };
            (p, recs.iter().map(sig).collect())
        })
        .collect()
}

/// (c) With input-partitions slicing (the slice log is the input, so two
/// runs see the same order; the input is partitioned by IP, as that mode
/// requires): three SIGKILLs and restarts give exactly the output and the
/// flags of an uninterrupted run, none twice.
#[test]
fn a_killed_run_writes_the_uninterrupted_output_and_flags() {
    let input = unique("clicks-limits-crash");
    create_topic(&input, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicU64::new(0));
    let producer = {
        let (input, stop, produced) = (input.clone(), stop.clone(), produced.clone());
        std::thread::spawn(move || {
            let mut rng = Rng::new(7);
            let (mut seq, mut last) = (0u64, (String::new(), String::new(), 0i64));
            while !stop.load(Ordering::Relaxed) {
                let batch: Vec<Rec> = (0..150)
                    .map(|_| {
                        // Every 40th click is an exact copy of the one before it.
                        if seq % 40 != 1 {
                            let spread = rng.below(200) + 1;
                            let ip = format!("ip{}", rng.below(spread));
                            last = (format!("c{seq}"), ip, BASE_TS + seq as i64 * 10 + rng.below(1_000) as i64);
                        }
                        let (id, ip, ts) = &last;
                        let r = ip_click(seq, id, ip, *ts, partition_of(ip, 2));
                        seq += 1;
                        r
                    })
                    .collect();
                produce(&input, &batch);
                produced.fetch_add(batch.len() as u64, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    // A lateness of 10 s: no idle flush mid-stream in either run (see
    // tests/stream_kinds.rs: two separate runs flush wherever the producer paused).
    let env = |app: &str| limit_env(app, &input, "input-partitions", "30s", "10s");
    let reference_app = unique("limits-ref");
    let mut reference = Daemon::start("limits-reference", &env(&reference_app));
    let crash_app = unique("limits-crash");
    let (mut crashing, mut crash_logs) =
        kill_storm("limits-crashing", &env(&crash_app), 3, Duration::from_secs(1), &produced);
    std::thread::sleep(Duration::from_secs(3));
    wait_produced(&produced, 2000);
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let total = produced.load(Ordering::Relaxed);
    for d in [&reference, &crashing] {
        wait_processed(&[d], total, Duration::from_secs(120));
    }
    std::thread::sleep(Duration::from_secs(1));

    for suffix in ["out", "flags"] {
        let want = topic(&format!("{reference_app}.{suffix}"));
        let got = topic(&format!("{crash_app}.{suffix}"));
        let n: usize = want.values().map(Vec::len).sum();
        assert!(n > 50, "{suffix}: only {n} records");
        for (p, w) in &want {
            assert_eq!(got[p].len(), w.len(), "{suffix} partition {p}: records after 3 SIGKILLs vs uninterrupted");
            assert!(got[p] == *w, "{suffix} partition {p}: the killed run's records differ");
        }
    }
    crash_logs.push_str(&crashing.log_text());
    assert!(crash_logs.contains("restored from Snapshot"), "restarts should restore from snapshots");
    for d in [&mut reference, &mut crashing] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }
    reference.assert_clean_log();
}

/// A skewed stream at the documented sizing (`limit.count_expected` = the
/// stream's distinct keys per window, default sub-windows), counting by the
/// dedup key: Zipf(1.2) keys, 50 000 records per 10 s window of event time.
/// No key is delivered more than N times in any window, and at most 5% of
/// what an exact limiter (every arrival in `(t − W, t]`) delivers is lost.
#[test]
fn a_skewed_stream_at_the_documented_sizing_loses_little() {
    const RECORDS: u64 = 120_000;
    let window = 10_000i64;
    let zipf = dedupd::testkit::workload::Zipf::new(100_000, 1.2);
    let mut rng = Rng::new(12);
    // Five records per ms of event time, in time order.
    let keys: Vec<u64> = (0..RECORDS).map(|_| zipf.sample(&mut rng)).collect();
    let ts = |seq: u64| BASE_TS + (seq / 5) as i64;
    let mut per_window: HashMap<i64, HashSet<u64>> = HashMap::new();
    for (seq, &k) in keys.iter().enumerate() {
        per_window.entry((ts(seq as u64) - BASE_TS) / window).or_default().insert(k);
    }
    let whole = (RECORDS as i64 / 5) / window;
    let distinct = (0..whole).map(|w| per_window[&w].len()).sum::<usize>() / whole as usize;
    let (mut daemon, input, app) = one_partition_daemon("limits-skew", |env| {
        env.retain(|(k, _)| !k.starts_with("DEDUPD__FLAG__") && k != "DEDUPD__LIMIT__COUNT_KEY");
        env.retain(|(k, _)| k != "DEDUPD__LIMIT__COUNT_EXPECTED");
        env.push(("DEDUPD__INPUT__KEY".into(), "json:/ip".into()));
        env.push(("DEDUPD__LIMIT__COUNT_EXPECTED".into(), distinct.to_string()));
    });
    let records: Vec<Rec> = keys
        .iter()
        .enumerate()
        .map(|(seq, k)| ip_click(seq as u64, &format!("c{seq}"), &format!("k{k}"), ts(seq as u64), 0))
        .collect();
    for chunk in records.chunks(20_000) {
        produce(&input, chunk);
    }
    wait_processed(&[&daemon], RECORDS, Duration::from_secs(300));
    std::thread::sleep(Duration::from_secs(1));

    let mut delivered: HashSet<u64> = HashSet::new();
    let mut delivered_times: HashMap<String, Vec<i64>> = HashMap::new();
    for r in read_all(&format!("{app}.out"), Duration::from_secs(3)).into_values().flatten() {
        let v = json(&r);
        delivered.insert(v["seq"].as_u64().unwrap());
        delivered_times.entry(field(&v, "ip").to_string()).or_default().push(v["ts"].as_i64().unwrap());
    }
    for (key, t) in delivered_times.iter_mut() {
        t.sort_unstable();
        assert!(!n_within(t, MAX + 1, window), "{key}: more than {MAX} delivered within one window");
    }
    // The exact limiter: a record passes iff fewer than N arrivals of its
    // key lie in (t − W, t] before it.
    let mut arrivals: HashMap<u64, std::collections::VecDeque<i64>> = HashMap::new();
    let (mut exact, mut lost) = (0u64, 0u64);
    for (seq, &k) in keys.iter().enumerate() {
        let t = ts(seq as u64);
        let q = arrivals.entry(k).or_default();
        while q.front().is_some_and(|&s| s + window <= t) {
            q.pop_front();
        }
        if q.len() < MAX {
            exact += 1;
            lost += u64::from(!delivered.contains(&(seq as u64)));
        }
        q.push_back(t);
    }
    let share = lost as f64 / exact as f64;
    eprintln!("{distinct} distinct keys per window: {lost} of {exact} exact deliveries lost ({:.2}%)", share * 100.0);
    assert!(exact > 10_000 && delivered.len() as u64 <= RECORDS / 2, "{exact} {}", delivered.len());
    assert!(share <= 0.05, "{lost} of {exact} exact deliveries lost");
    assert!(daemon.terminate(Duration::from_secs(30)).success(), "{}", daemon.log_text());
    daemon.assert_clean_log();
}
