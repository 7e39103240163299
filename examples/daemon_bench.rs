//! Broker limits and measurements for the daemon benchmark
//! (`scripts/bench_daemon.sh`):
//! - `produce BROKER TOPIC N PARTITIONS [RATE]` writes N small JSON records
//!   (half of them copies of a recent record) and reports records/s; with
//!   RATE > 0 it paces them at RATE records/s with real-time timestamps,
//!   otherwise as fast as it can with synthetic timestamps (10 000 records
//!   per second of event time); paced, it also reports the acknowledgement
//!   latencies (record timestamp → acknowledged);
//! - `consume BROKER TOPIC PARTITIONS` reads a topic to its end, reports records/s;
//! - `consume-live BROKER TOPIC PARTITIONS SECONDS` reads the records that
//!   arrive during SECONDS and reports record timestamp → consumed latencies
//!   (with a paced `produce`: the broker's own latency for one hop); with
//!   DUMP, also each record's payload hash and arrival time (ms) into DUMP;
//! - `paired RELAY_DUMP DEDUPD_DUMP`: for the input records in both dumps,
//!   the quantiles of (arrival in dedupd's output − arrival in the relay's);
//! - `relay BROKER IN OUT PARTITIONS SECONDS` copies the records that arrive
//!   in IN during SECONDS to the same partition of OUT, key, payload and
//!   timestamp unchanged: a bare consume → produce hop with dedupd's client
//!   settings (its consumer's fetch settings, an idempotent producer with
//!   acks=all), to measure latency against dedupd in the same run;
//! - `wait ADMIN_PORT N LABEL [PID]` polls a dedupd admin endpoint until N
//!   records are judged and reports records/s from the first verdict, and
//!   the resident memory of PID at the first verdict, 25/50/75% of the way
//!   and at the end;
//! - `latency ADMIN_PORT SECONDS LABEL` reports the end-to-end latency
//!   quantiles (dedupd_end_to_end_latency_seconds) of the outputs
//!   acknowledged during the next SECONDS.
//!
//! `cargo run --release --example daemon_bench -- produce|consume|wait|latency ...`

// The same allocator as the `dedupd` binary (see src/main.rs), so the bare
// relay that dedupd's latency is compared with is no slower for want of it.
#[cfg(target_os = "linux")]
use tikv_jemalloc_sys as _;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use dedupd::bench::workload::Rng;
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

/// Acknowledgement latencies (record timestamp → acknowledged), in ms.
#[derive(Default)]
struct AckTimes(std::sync::Mutex<Vec<f32>>);

impl ClientContext for AckTimes {}

impl ProducerContext for AckTimes {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Ok(m) = result
            && let Some(ts) = m.timestamp().to_millis()
        {
            self.0.lock().unwrap().push((now_ms() - ts) as f32);
        }
    }
}

/// "p50_ms=… p99_ms=… max_ms=…" of some latencies.
fn quantiles(mut ms: Vec<f32>) -> String {
    if ms.is_empty() {
        return "none".into();
    }
    ms.sort_by(f32::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q) as usize];
    format!("p50_ms={:.1} p99_ms={:.1} max_ms={:.1}", at(0.5), at(0.99), at(1.0))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64
}

fn produce(broker: &str, topic: &str, n: u64, partitions: i32, rate: f64) {
    // Paced: librdkafka's default linger (5 ms), as a live client would send.
    let linger = if rate > 0.0 { "5" } else { "20" };
    let p: ThreadedProducer<AckTimes> = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("enable.idempotence", "true")
        .set("linger.ms", linger)
        .set("batch.num.messages", "10000")
        .create_with_context(AckTimes::default())
        .expect("producer");
    let mut rng = Rng::new(5);
    let start = Instant::now();
    let base: i64 = 1_760_000_000_000;
    let mut recent: Vec<u64> = Vec::with_capacity(4096);
    for i in 0..n {
        // Half new ids, half copies of one of the last 4096 ids.
        let id = if rng.next_f64() < 0.5 || recent.is_empty() {
            let id = rng.next_u64();
            if recent.len() < 4096 {
                recent.push(id);
            } else {
                recent[(i % 4096) as usize] = id;
            }
            id
        } else {
            recent[rng.below(recent.len() as u64) as usize]
        };
        let ts = if rate > 0.0 {
            // Wait until record i is due, then stamp it with the real time.
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            now_ms()
        } else {
            base + (i / 10) as i64 // 10 000 records per second of event time
        };
        let payload = format!("{{\"id\":\"{id:016x}\",\"ts\":{ts}}}");
        let mut rec = BaseRecord::<[u8], [u8]>::to(topic)
            .payload(payload.as_bytes())
            .timestamp(ts)
            .partition((i % partitions as u64) as i32);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    rec = back;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }
    p.flush(Duration::from_secs(120)).expect("flush");
    let s = start.elapsed().as_secs_f64();
    let label = if rate > 0.0 { "produce_paced" } else { "produce_only" };
    println!("{label} records={n} seconds={s:.2} records_per_second={:.0}", n as f64 / s);
    if rate > 0.0 {
        let acks = std::mem::take(&mut *p.context().0.lock().unwrap());
        println!("{label} ack_latency {}", quantiles(acks));
    }
}

fn consume(broker: &str, topic: &str, partitions: i32) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", format!("bench-{}", std::process::id()))
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "20")
        // As dedupd's consumers: librdkafka's 1 s default backoff once the
        // prefetch queue is full would stall this reader for seconds.
        .set("fetch.queue.backoff.ms", "10")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let start = Instant::now();
    let (mut n, mut ended) = (0u64, 0);
    while ended < partitions {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(_)) => n += 1,
            Some(Err(KafkaError::PartitionEOF(_))) => ended += 1,
            _ => {}
        }
    }
    let s = start.elapsed().as_secs_f64();
    println!("consume_only records={n} seconds={s:.2} records_per_second={:.0}", n as f64 / s);
}

fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text.split_once("\r\n\r\n")?.1.to_string())
}

/// Reads new records of a topic for `seconds`: record timestamp → consumed.
fn consume_live(broker: &str, topic: &str, partitions: i32, seconds: u64, dump: Option<&str>) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", format!("bench-live-{}", std::process::id()))
        .set("fetch.wait.max.ms", "20")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::End).unwrap();
    }
    c.assign(&tpl).unwrap();
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut ms = Vec::new();
    let mut seen: Vec<(u64, i64)> = Vec::new();
    while Instant::now() < end {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100))
            && let Some(ts) = m.timestamp().to_millis()
        {
            let now = now_ms();
            ms.push((now - ts) as f32);
            if dump.is_some() {
                seen.push((payload_id(m.payload().unwrap_or_default()), now));
            }
        }
    }
    if let Some(path) = dump {
        let text: String = seen.iter().map(|(id, at)| format!("{id} {at}\n")).collect();
        std::fs::write(path, text).expect("write the dump");
    }
    println!("consume_live records={} {}", ms.len(), quantiles(ms));
}

/// Names a record by its payload, to find the same input record in two outputs.
fn payload_id(payload: &[u8]) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(payload)
}

/// Per input record found in both dumps of `consume-live` (the first arrival
/// of each payload in each): when dedupd's output had it minus when the
/// relay's had it. Unlike the difference of two quantiles, the broker's
/// shared delays cancel record by record.
fn paired(relay_dump: &str, dedupd_dump: &str) {
    let read = |path: &str| -> std::collections::HashMap<u64, i64> {
        let mut first = std::collections::HashMap::new();
        for line in std::fs::read_to_string(path).expect("read a dump").lines() {
            let mut f = line.split(' ');
            let (Some(id), Some(at)) = (f.next(), f.next()) else { continue };
            let (id, at): (u64, i64) = (id.parse().expect("id"), at.parse().expect("time"));
            first.entry(id).and_modify(|t: &mut i64| *t = (*t).min(at)).or_insert(at);
        }
        first
    };
    let (relay, dedupd) = (read(relay_dump), read(dedupd_dump));
    let added: Vec<f32> = dedupd.iter().filter_map(|(id, at)| relay.get(id).map(|r| (at - r) as f32)).collect();
    println!(
        "paired records={} of dedupd={} relay={} added {}",
        added.len(),
        dedupd.len(),
        relay.len(),
        quantiles(added)
    );
}

/// A bare relay: IN → OUT, partition for partition, with the client settings
/// dedupd's group consumers and producers use (src/kafka/clients.rs).
fn relay(broker: &str, input: &str, output: &str, partitions: i32, seconds: u64) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", format!("bench-relay-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "20")
        .set("fetch.queue.backoff.ms", "10")
        .set("queued.max.messages.kbytes", "16384")
        .create()
        .expect("consumer");
    let p: ThreadedProducer<AckTimes> = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("queue.buffering.max.messages", "100000")
        .create_with_context(AckTimes::default())
        .expect("producer");
    let mut tpl = TopicPartitionList::new();
    for part in 0..partitions {
        tpl.add_partition_offset(input, part, Offset::End).unwrap();
    }
    c.assign(&tpl).unwrap();
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut n = 0u64;
    while Instant::now() < end {
        let Some(Ok(m)) = c.poll(Duration::from_millis(100)) else { continue };
        let mut rec = BaseRecord::<[u8], [u8]>::to(output).partition(m.partition());
        if let Some(k) = m.key() {
            rec = rec.key(k);
        }
        if let Some(v) = m.payload() {
            rec = rec.payload(v);
        }
        if let Some(ts) = m.timestamp().to_millis() {
            rec = rec.timestamp(ts);
        }
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    rec = back;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        n += 1;
    }
    p.flush(Duration::from_secs(30)).expect("flush");
    println!("relay records={n}");
}

fn judged(port: u16) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(&get(port, "/v1/slices")?).ok()?;
    Some(
        v.as_array()?
            .iter()
            .map(|s| {
                ["distinct", "duplicates", "invalid", "resends"]
                    .iter()
                    .map(|f| s[*f].as_u64().unwrap_or(0))
                    .sum::<u64>()
            })
            .sum(),
    )
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn wait(port: u16, n: u64, label: &str, pid: Option<u32>) {
    let mut first: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(1800);
    // Resident memory when 0, 25, 50, 75 and 100% of the records are judged.
    let mut rss: [Option<u64>; 5] = [None; 5];
    // … and at every tenth.
    let mut tenths: [Option<u64>; 11] = [None; 11];
    let mut peak = 0;
    loop {
        let done = judged(port).unwrap_or(0);
        if done > 0 && first.is_none() {
            first = Some(Instant::now());
        }
        if let Some(kib) = pid.and_then(rss_kib) {
            peak = peak.max(kib);
            if done > 0 {
                let step = ((done.min(n) * 4) / n) as usize;
                rss[step].get_or_insert(kib);
                tenths[((done.min(n) * 10) / n) as usize].get_or_insert(kib);
            }
        }
        if done >= n {
            break;
        }
        assert!(Instant::now() < deadline, "{label}: only {done} of {n} judged after 30 minutes");
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = first.expect("some progress").elapsed().as_secs_f64();
    println!("{label} records={n} seconds={s:.2} records_per_second={:.0}", n as f64 / s);
    if pid.is_some() {
        let mib = |k: Option<u64>| k.map_or("-".to_string(), |k| format!("{:.0}", k as f64 / 1024.0));
        println!(
            "{label} rss_mib at_0%={} at_25%={} at_50%={} at_75%={} at_100%={} peak={}",
            mib(rss[0]),
            mib(rss[1]),
            mib(rss[2]),
            mib(rss[3]),
            mib(rss[4]),
            mib(Some(peak))
        );
        let all: Vec<String> = tenths.iter().map(|k| mib(*k)).collect();
        println!("{label} rss_mib_at_each_10% {}", all.join(" "));
    }
}

/// The cumulative buckets `(le, count)` of a histogram in Prometheus text;
/// with `label` (e.g. `stage="router_sent"`), of the series that has it.
fn buckets(metrics: &str, name: &str, label: Option<&str>) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (labels, count) = rest.split_once("} ")?;
            if label.is_some_and(|want| !labels.split(',').any(|l| l == want)) {
                return None;
            }
            let le = labels.split(',').find_map(|l| l.strip_prefix("le=\""))?.trim_end_matches('"');
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, count.trim().parse().ok()?))
        })
        .collect()
}

/// The stages of dedupd_stage_latency_seconds, in pipeline order.
const STAGES: [&str; 4] = ["router_received", "router_sent", "router_acked", "slice_received"];

fn latency(port: u16, seconds: u64, label: &str) {
    const NAME: &str = "dedupd_end_to_end_latency_seconds";
    const STAGE: &str = "dedupd_stage_latency_seconds";
    let series = |text: &str| {
        let mut all: Vec<(String, Vec<(f64, f64)>)> =
            STAGES.iter().map(|s| (s.to_string(), buckets(text, STAGE, Some(&format!("stage=\"{s}\""))))).collect();
        all.push(("output_acked".to_string(), buckets(text, NAME, None)));
        all
    };
    let before = series(&get(port, "/metrics").expect("metrics"));
    std::thread::sleep(Duration::from_secs(seconds));
    let after = series(&get(port, "/metrics").expect("metrics"));
    for ((stage, after), (_, before)) in after.iter().zip(&before) {
        if !after.is_empty() {
            report(&format!("{label} {stage}"), after, before, stage == "output_acked", seconds);
        }
    }
}

/// Quantiles of the observations between two readings of a histogram.
fn report(label: &str, after: &[(f64, f64)], before: &[(f64, f64)], required: bool, seconds: u64) {
    let diff: Vec<(f64, f64)> = after.iter().zip(before).map(|(a, b)| (a.0, a.1 - b.1)).collect();
    let total = diff.last().map_or(0.0, |d| d.1);
    if total <= 0.0 {
        assert!(!required, "{label}: no output acknowledged in {seconds} s");
        println!("{label} none");
        return;
    }
    // Linear interpolation inside the bucket, as Prometheus' histogram_quantile.
    let quantile = |q: f64| {
        let rank = q * total;
        let mut lower = (0.0, 0.0);
        for &(le, count) in &diff {
            if count >= rank {
                if le.is_infinite() {
                    return lower.0;
                }
                return lower.0 + (le - lower.0) * (rank - lower.1) / (count - lower.1).max(1.0);
            }
            lower = (le, count);
        }
        f64::NAN
    };
    // The smallest bucket bound holding at least 99% (a bound, not an estimate).
    let p99_bound = diff.iter().find(|(_, c)| *c >= 0.99 * total).map_or(f64::NAN, |d| d.0);
    let max_bound = diff.iter().find(|(_, c)| *c >= total).map_or(f64::NAN, |d| d.0);
    println!(
        "{label} count={total:.0} p50_ms={:.1} p99_ms={:.1} p99_at_most_ms={:.0} max_at_most_ms={:.0}",
        quantile(0.5) * 1000.0,
        quantile(0.99) * 1000.0,
        p99_bound * 1000.0,
        max_bound * 1000.0
    );
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(String::as_str) {
        Some("produce") => produce(
            &a[2],
            &a[3],
            a[4].parse().unwrap(),
            a[5].parse().unwrap(),
            a.get(6).map_or(0.0, |r| r.parse().unwrap()),
        ),
        Some("consume") => consume(&a[2], &a[3], a[4].parse().unwrap()),
        Some("consume-live") => {
            consume_live(&a[2], &a[3], a[4].parse().unwrap(), a[5].parse().unwrap(), a.get(6).map(String::as_str))
        }
        Some("paired") => paired(&a[2], &a[3]),
        Some("relay") => relay(&a[2], &a[3], &a[4], a[5].parse().unwrap(), a[6].parse().unwrap()),
        Some("wait") => wait(a[2].parse().unwrap(), a[3].parse().unwrap(), &a[4], a.get(5).map(|p| p.parse().unwrap())),
        Some("latency") => latency(a[2].parse().unwrap(), a[3].parse().unwrap(), &a[4]),
        _ => {
            eprintln!(
                "usage: daemon_bench produce BROKER TOPIC N PARTITIONS [RATE] | consume BROKER TOPIC PARTITIONS \
                 | consume-live BROKER TOPIC PARTITIONS SECONDS | relay BROKER IN OUT PARTITIONS SECONDS | wait ADMIN_PORT N LABEL [PID] | latency ADMIN_PORT SECONDS LABEL"
            );
            std::process::exit(2);
        }
    }
}
