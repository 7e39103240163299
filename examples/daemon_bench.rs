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
//! - `relay-group BROKER IN OUT GROUP PROGRESS_FILE`: the same hop as the
//!   peer benchmark's bare relay (`scripts/bench_peer.sh`): joins GROUP,
//!   reads IN from the start, copies every record, and keeps the count of
//!   records acknowledged in OUT in PROGRESS_FILE for `wait file:PATH`;
//! - `produce-text BROKER TOPIC N TRUTH_FILE` writes the peer
//!   benchmark's stream (`scripts/bench_peer.sh`): N records whose keys are
//!   real text (Brown Corpus sentences), ~35% copies, partitioned by key,
//!   then a tail of 5 s of event time that moves every waiting system past
//!   the N records; TRUTH_FILE gets the exact event-time verdict of each of
//!   the N records (one byte each, 1 = duplicate);
//! - `produce-zipf BROKER TOPIC N TRUTH_FILE ALPHA` writes the same kind of
//!   stream with skewed keys (issue 18's acceptance run for shared mode):
//!   each record's key is drawn from Zipf(ALPHA) over 1 000 000 sentences
//!   (rank r → the r-th text key), so a few keys make most of the stream
//!   and, partitioned by key, most of one partition;
//! - `wait PROGRESS N LABEL [PID]` polls how many records a system has judged
//!   (PROGRESS: a dedupd admin port, or `file:PATH` holding a count) until N
//!   and reports records/s between the first reading that shows progress and
//!   the first that shows N (see `wait`); with PID, the resident
//!   memory of PID at the first verdict, 25/50/75% of the way and at the end,
//!   and the CPU of PID's process tree between the first and the N-th
//!   verdict, with its peak resident memory (VmHWM);
//! - `check BROKER TOPIC TRUTH_FILE LABEL` reads an output topic written from
//!   the `produce-text` stream and reports FPR / FNR of its distinct records
//!   against TRUTH_FILE;
//! - `latency ADMIN_PORT SECONDS LABEL` reports the end-to-end latency
//!   quantiles (dedupd_end_to_end_latency_seconds) of the outputs
//!   acknowledged during the next SECONDS.
//!
//! `cargo run --release --example daemon_bench -- produce|produce-text|consume|wait|check|latency ...`

// The same allocator as the `dedupd` binary (see src/main.rs), so the bare
// relay that dedupd's latency is compared with is no slower for want of it.
#[cfg(target_os = "linux")]
use tikv_jemalloc_sys as _;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dedupd::testkit::oracle::{Confusion, ExactWindow};
use dedupd::testkit::text::TextCorpus;
use dedupd::testkit::workload::{KeyDist, RateProfile, Rng, Stream};
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
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

/// The load generator's producer: idempotent, batches of up to 10 000 records.
/// `DEDUPD_BENCH_LINGER_MS` and `DEDUPD_BENCH_COMPRESSION` override its
/// `linger.ms` and `compression.type` (the soak sends large compressed batches:
/// the memory broker's fetch cost grows with the number of batches in a partition).
fn load_producer(broker: &str, linger_ms: &str) -> ThreadedProducer<AckTimes> {
    let linger_ms = std::env::var("DEDUPD_BENCH_LINGER_MS").unwrap_or_else(|_| linger_ms.to_string());
    let compression = std::env::var("DEDUPD_BENCH_COMPRESSION").unwrap_or_else(|_| "none".to_string());
    ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("enable.idempotence", "true")
        .set("linger.ms", linger_ms)
        .set("compression.type", compression)
        .set("batch.num.messages", "10000")
        .create_with_context(AckTimes::default())
        .expect("producer")
}

/// Sends a record, waiting while the producer's queue is full.
fn send<C: ProducerContext<DeliveryOpaque = ()> + 'static>(
    p: &ThreadedProducer<C>,
    mut rec: BaseRecord<'_, [u8], [u8]>,
) {
    loop {
        match p.send(rec) {
            Ok(()) => return,
            Err((_, back)) => {
                rec = back;
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

fn produce(broker: &str, topic: &str, n: u64, partitions: i32, rate: f64) {
    // Paced: librdkafka's default linger (5 ms), as a live client would send.
    let p = load_producer(broker, if rate > 0.0 { "5" } else { "20" });
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
        let rec = BaseRecord::<[u8], [u8]>::to(topic)
            .payload(payload.as_bytes())
            .timestamp(ts)
            .partition((i % partitions as u64) as i32);
        send(&p, rec);
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

/// The peer benchmark's stream: records per second of event time, share of new keys (the
/// rest copy an earlier record 100 ms to 90 s back, log-uniform), which give ~35% duplicates
/// and ~39 000 distinct keys per 60 s window.
const TEXT_RATE: u64 = 1000;
const TEXT_P_NEW: f64 = 0.63;
const TEXT_WINDOW_MS: u64 = 60_000;
/// Event time written after the N measured records: more than dedupd's lateness (2 s), so its
/// watermark passes every measured record without waiting for the idle flush, as a live
/// stream's next records would.
const TEXT_TAIL_MS: u64 = 5_000;

/// Writes the peer benchmark's stream (module doc) and the exact verdicts of its first `n`
/// records to `truth_path`.
fn produce_text(broker: &str, topic: &str, n: u64, truth_path: &str) {
    let dist = KeyDist::Recurring { p_new: TEXT_P_NEW, min_gap_ms: 100, max_gap_ms: 90_000 };
    produce_keyed(broker, topic, n, truth_path, dist, |id| id, "produce_text")
}

/// Keys of the Zipf stream: 1 000 000 ranks.
const ZIPF_UNIVERSE: usize = 1_000_000;

/// `produce-zipf`: the text stream's records with Zipf(`alpha`) keys.
fn produce_zipf(broker: &str, topic: &str, n: u64, truth_path: &str, alpha: f64) {
    let dist = KeyDist::Zipf(dedupd::testkit::workload::Zipf::new(ZIPF_UNIVERSE, alpha));
    // Rank 0 is the most frequent key; text keys are numbered from 1.
    produce_keyed(broker, topic, n, truth_path, dist, |rank| rank + 1, "produce_zipf")
}

/// Writes `n` records with keys drawn from `dist` (`key_id` maps a draw to
/// a text key's number), 1 000 per second of event time, then the tail,
/// and the exact verdicts of the `n` to `truth_path`.
fn produce_keyed(
    broker: &str,
    topic: &str,
    n: u64,
    truth_path: &str,
    dist: KeyDist,
    key_id: impl Fn(u64) -> u64,
    label: &str,
) {
    let corpus = TextCorpus::load().unwrap_or_else(|e| {
        eprintln!("daemon_bench: {e}");
        std::process::exit(2)
    });
    let p = load_producer(broker, "20");
    let seconds = n.div_ceil(TEXT_RATE) + TEXT_TAIL_MS / 1000 + 1;
    let base: i64 = 1_760_000_000_000; // never 0: librdkafka stamps a timestamp of 0 with "now"
    let mut oracle = ExactWindow::new(TEXT_WINDOW_MS);
    let mut truth = Vec::with_capacity(n as usize);
    let (mut in_window, mut last_measured, mut sent) = (Vec::new(), 0, 0u64);
    let start = Instant::now();
    for (seq, (id, t)) in Stream::new(20, dist, RateProfile::steady(1000, TEXT_RATE), seconds).enumerate() {
        let seq = seq as u64;
        if seq >= n && t > last_measured + TEXT_TAIL_MS {
            break;
        }
        let key = corpus.key(key_id(id));
        // The stream comes in time order, so this is the event-time answer (invariant 7).
        let duplicate = oracle.observe(&key, t);
        if seq < n {
            truth.push(duplicate as u8);
            last_measured = t;
            if seq % 1000 == 0 && t >= TEXT_WINDOW_MS {
                in_window.push(oracle.keys_in_window());
            }
        }
        let ts = base + t as i64;
        let payload = serde_json::json!({"seq": seq, "id": key, "ts": ts}).to_string();
        // No partition: librdkafka's partitioner hashes the key, so every copy of a key lands
        // in one partition (what dedupd's input-partitions mode and Quix's state require).
        send(&p, BaseRecord::to(topic).key(key.as_bytes()).payload(payload.as_bytes()).timestamp(ts));
        sent += 1;
    }
    p.flush(Duration::from_secs(120)).expect("flush");
    let s = start.elapsed().as_secs_f64();
    assert_eq!(truth.len() as u64, n, "the stream ended before {n} records");
    std::fs::write(truth_path, &truth).unwrap_or_else(|e| panic!("write {truth_path}: {e}"));
    let duplicates = truth.iter().filter(|&&d| d == 1).count();
    let window_mean = in_window.iter().sum::<usize>() as f64 / in_window.len().max(1) as f64;
    println!(
        "{label} records={n} tail={} seconds={s:.2} records_per_second={:.0} duplicate_share={:.3} \
         distinct_keys_per_window={window_mean:.0}",
        sent - n,
        sent as f64 / s,
        duplicates as f64 / n as f64
    );
}

/// Reads every partition of a topic (all of them when `partitions` is None) from the
/// beginning to its end, handing each record to `f`.
fn read_to_end(broker: &str, topic: &str, partitions: Option<i32>, mut f: impl FnMut(&BorrowedMessage<'_>)) {
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
    let partitions = partitions.unwrap_or_else(|| {
        let md = c.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
        md.topics().first().map_or(0, |t| t.partitions().len() as i32)
    });
    assert!(partitions > 0, "topic {topic} has no partitions");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut ended = 0;
    while ended < partitions {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => f(&m),
            Some(Err(KafkaError::PartitionEOF(_))) => ended += 1,
            // librdkafka retries what it reports here (e.g. a dropped connection).
            Some(Err(e)) => eprintln!("reading {topic}: {e}"),
            None => {}
        }
    }
}

fn consume(broker: &str, topic: &str, partitions: i32) {
    let start = Instant::now();
    let mut n = 0u64;
    read_to_end(broker, topic, Some(partitions), |_| n += 1);
    let s = start.elapsed().as_secs_f64();
    println!("consume_only records={n} seconds={s:.2} records_per_second={:.0}", n as f64 / s);
}

/// FPR / FNR of the distinct records in `topic` (each holds the `seq` of a `produce-text`
/// record) against the exact verdicts in `truth_path`. A record written twice (an
/// at-least-once re-send) counts once, and is reported; the tail is not judged.
fn check(broker: &str, topic: &str, truth_path: &str, label: &str) {
    let truth = std::fs::read(truth_path).unwrap_or_else(|e| panic!("read {truth_path}: {e}"));
    let mut delivered = vec![false; truth.len()];
    let (mut outputs, mut repeated, mut tail, mut unreadable) = (0u64, 0u64, 0u64, 0u64);
    read_to_end(broker, topic, None, |m| {
        outputs += 1;
        let seq = m
            .payload()
            .and_then(|p| serde_json::from_slice::<serde_json::Value>(p).ok())
            .and_then(|v| v["seq"].as_u64());
        match seq {
            Some(seq) if (seq as usize) < delivered.len() => {
                repeated += delivered[seq as usize] as u64;
                delivered[seq as usize] = true;
            }
            Some(_) => tail += 1,
            None => unreadable += 1,
        }
    });
    let mut confusion = Confusion::default();
    for (said_distinct, truth) in delivered.iter().zip(&truth) {
        confusion.record(!said_distinct, *truth == 1);
    }
    println!(
        "{label} outputs={outputs} repeated={repeated} tail={tail} unreadable={unreadable} fpr={:.5} fnr={:.5} \
         false_duplicates={} false_distinct={}",
        confusion.fpr(),
        confusion.fnr(),
        confusion.false_duplicates,
        confusion.false_distinct
    );
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

/// dedupd's group consumer settings (src/kafka/clients.rs `group_consumer`, with the memory
/// budget's prefetch without a limit and the session timeout scripts/bench_lib.sh gives dedupd).
fn daemon_consumer(broker: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "6000")
        .set("fetch.wait.max.ms", "20")
        .set("fetch.queue.backoff.ms", "10")
        .set("queued.max.messages.kbytes", "16384")
        .create()
        .expect("consumer")
}

/// dedupd's producer settings (src/kafka/clients.rs `producer`, with the memory budget's
/// queue and largest record without a limit): idempotent, acks=all, librdkafka's defaults
/// otherwise (linger, batching, no compression).
fn daemon_producer<C: ProducerContext + 'static>(broker: &str, context: C) -> ThreadedProducer<C> {
    ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.max.bytes", "104857600")
        .set("queue.buffering.max.kbytes", "103424")
        .set("queue.buffering.max.messages", "100000")
        .create_with_context(context)
        .expect("producer")
}

/// Copies `m` to the same partition of `output`: key, payload and timestamp unchanged.
fn relay_one<C: ProducerContext<DeliveryOpaque = ()> + 'static>(
    p: &ThreadedProducer<C>,
    output: &str,
    m: &BorrowedMessage<'_>,
) {
    let mut rec = BaseRecord::<[u8], [u8], ()>::to(output).partition(m.partition());
    if let Some(k) = m.key() {
        rec = rec.key(k);
    }
    if let Some(v) = m.payload() {
        rec = rec.payload(v);
    }
    if let Some(ts) = m.timestamp().to_millis() {
        rec = rec.timestamp(ts);
    }
    send(p, rec);
}

/// A bare relay: IN → OUT, partition for partition, with the client settings
/// dedupd's group consumers and producers use (src/kafka/clients.rs).
fn relay(broker: &str, input: &str, output: &str, partitions: i32, seconds: u64) {
    let c = daemon_consumer(broker, &format!("bench-relay-{}", std::process::id()));
    let p = daemon_producer(broker, AckTimes::default());
    let mut tpl = TopicPartitionList::new();
    for part in 0..partitions {
        tpl.add_partition_offset(input, part, Offset::End).unwrap();
    }
    c.assign(&tpl).unwrap();
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut n = 0u64;
    while Instant::now() < end {
        let Some(Ok(m)) = c.poll(Duration::from_millis(100)) else { continue };
        relay_one(&p, output, &m);
        n += 1;
    }
    p.flush(Duration::from_secs(30)).expect("flush");
    println!("relay records={n}");
}

/// The records a relay's producer has had acknowledged.
#[derive(Default)]
struct Acked(std::sync::atomic::AtomicU64);

impl ClientContext for Acked {}

impl ProducerContext for Acked {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            // The idempotent producer retries on its own: what reaches here is fatal, and a
            // relay that lost a record has nothing to measure.
            Err((e, _)) => {
                eprintln!("relay-group: a record was not written: {e}");
                std::process::exit(1)
            }
        }
    }
}

/// `relay-group`: the bench's bare relay (`scripts/bench_peer.sh`, system `relay`). Joins
/// `group`, reads `input` from the start (a group with no committed offsets), copies every
/// record to the same partition of `output` (key, payload, timestamp unchanged) with dedupd's
/// client settings, and never commits. Every 10 ms it writes the number of records
/// acknowledged so far to `progress_file` (`daemon_bench wait file:PATH`): a record counts once
/// it is in the output, so once the count shows them all the relay can be stopped. Runs until
/// it is killed.
fn relay_group(broker: &str, input: &str, output: &str, group: &str, progress_file: &str) {
    use std::os::unix::fs::FileExt;
    let c = daemon_consumer(broker, group);
    let p = daemon_producer(broker, Acked::default());
    c.subscribe(&[input]).expect("subscribe");
    let file = std::fs::File::create(progress_file).unwrap_or_else(|e| panic!("create {progress_file}: {e}"));
    let watched = p.context().clone();
    std::thread::spawn(move || {
        let mut shown = 0;
        loop {
            std::thread::sleep(Duration::from_millis(10));
            let acked = watched.0.load(std::sync::atomic::Ordering::Relaxed);
            if acked != shown {
                // Fixed width, in place: a reader never sees a shorter, older count's tail.
                file.write_at(format!("{acked:019}\n").as_bytes(), 0).expect("write the progress file");
                shown = acked;
            }
        }
    });
    loop {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => relay_one(&p, output, &m),
            // librdkafka retries what it reports here (e.g. a dropped connection).
            Some(Err(e)) => eprintln!("relay-group: reading {input}: {e}"),
            None => {}
        }
    }
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

/// Where `wait` reads how many records a system has judged.
enum Progress {
    /// A dedupd admin port: the verdicts in `/v1/slices`.
    Admin(u16),
    /// A file holding a count that the system rewrites as it goes
    /// (`scripts/quix_dedup.py --progress-file`).
    File(PathBuf),
}

impl Progress {
    fn parse(arg: &str) -> Progress {
        match arg.strip_prefix("file:") {
            Some(path) => Progress::File(path.into()),
            None => Progress::Admin(arg.parse().expect("PROGRESS: an admin port or file:PATH")),
        }
    }

    fn judged(&self) -> Option<u64> {
        match self {
            Progress::Admin(port) => judged(*port),
            Progress::File(path) => std::fs::read_to_string(path).ok()?.trim().parse().ok(),
        }
    }
}

/// A `/proc/PID/status` field in KiB (VmRSS, VmHWM).
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// Whether a process is running (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

/// What a process and all its descendants have used so far: CPU seconds (user + system,
/// with their reaped children's) and the sum of their peak resident memory (VmHWM), KiB.
fn tree_usage(root: u32) -> (f64, u64) {
    // pid → (parent, CPU clock ticks), from /proc/*/stat (the fields after the command
    // name, which may hold spaces, end at the last ')').
    let mut procs: HashMap<u32, (u32, u64)> = HashMap::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let f: Vec<u64> = rest.split_whitespace().skip(1).map(|x| x.parse().unwrap_or(0)).collect();
        // After the state: ppid, …, utime (index 10 here), stime, cutime, cstime.
        if f.len() > 13 {
            procs.insert(pid, (f[0] as u32, f[10] + f[11] + f[12] + f[13]));
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(procs.iter().filter(|(_, (pp, _))| *pp == parent).map(|(pid, _)| *pid));
        i += 1;
    }
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ticks: u64 = tree.iter().filter_map(|pid| procs.get(pid)).map(|(_, t)| t).sum();
    let hwm = tree.iter().filter_map(|pid| status_kib(*pid, "VmHWM:")).sum();
    (ticks as f64 / hz, hwm)
}

/// How long `wait` sleeps before its next reading. A reading costs the
/// system measured something (a dedupd admin request takes about a quarter
/// of a millisecond of its CPU; a profile of a 1 M-record run had the admin
/// thread at 2.4% of the process when it was read every 10 ms throughout), so
/// it is read every 10 ms only where a reading's moment matters: until the
/// first progress, and once the rate so far says the end is under 300 ms
/// away; every 100 ms in between.
fn poll_pause(first: Option<(Instant, u64)>, done: u64, n: u64) -> Duration {
    const NEAR: Duration = Duration::from_millis(10);
    let Some((at, judged_at_first)) = first.filter(|&(_, d)| done > d) else { return NEAR };
    let rate = (done - judged_at_first) as f64 / at.elapsed().as_secs_f64();
    let left = n.saturating_sub(done) as f64 / rate;
    if left > 0.3 { Duration::from_millis(100) } else { NEAR }
}

/// Records/s between the first reading that shows progress and the first that shows `n` judged:
/// the records judged in between over the time in between. A system publishes its count in
/// steps (dedupd every 200 ms, `quix_dedup.py` every 1000 records), so both ends are moments
/// at which the count was exact, to within one poll (10 ms); counting from 0 at the first
/// reading would add up to a step to a run of a second or two. With `pid`, the CPU of its
/// process tree over the same interval, per 1 M of those records.
fn wait(progress: &Progress, n: u64, label: &str, pid: Option<u32>) {
    // (when, judged, CPU seconds of the tree) at the first reading with progress.
    let mut first: Option<(Instant, u64, f64)> = None;
    let deadline = Instant::now() + Duration::from_secs(1800);
    // Resident memory when 0, 25, 50, 75 and 100% of the records are judged.
    let mut rss: [Option<u64>; 5] = [None; 5];
    // … and at every tenth.
    let mut tenths: [Option<u64>; 11] = [None; 11];
    let mut peak = 0;
    let (end, done, usage) = loop {
        let done = progress.judged().unwrap_or(0);
        if done > 0 && first.is_none() {
            first = Some((Instant::now(), done, pid.map_or(0.0, |p| tree_usage(p).0)));
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
            break (Instant::now(), done, pid.map(tree_usage));
        }
        assert!(Instant::now() < deadline, "{label}: only {done} of {n} judged after 30 minutes");
        if let Some(pid) = pid {
            assert!(alive(pid), "{label}: process {pid} ended after {done} of {n} records judged");
        }
        std::thread::sleep(poll_pause(first.map(|(at, d, _)| (at, d)), done, n));
    };
    let (at, judged_at_first, cpu_at_first) = first.expect("some progress");
    let (s, judged) = ((end - at).as_secs_f64(), done - judged_at_first);
    // A run that ends within one step of its count has no interval to measure: NaN.
    let per_record = |x: f64| if judged > 0 { x / judged as f64 } else { f64::NAN };
    println!(
        "{label} records={n} judged_in_interval={judged} seconds={s:.2} records_per_second={:.0}",
        1.0 / per_record(s)
    );
    if let Some((cpu, hwm)) = usage {
        let cpu = cpu - cpu_at_first;
        println!(
            "{label} process_tree cpu_seconds={cpu:.2} cpu_seconds_per_million={:.2} peak_rss_mib={:.0}",
            per_record(cpu) * 1e6,
            hwm as f64 / 1024.0
        );
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
        Some("produce-text") => produce_text(&a[2], &a[3], a[4].parse().unwrap(), &a[5]),
        Some("produce-zipf") => produce_zipf(&a[2], &a[3], a[4].parse().unwrap(), &a[5], a[6].parse().unwrap()),
        Some("consume") => consume(&a[2], &a[3], a[4].parse().unwrap()),
        Some("consume-live") => {
            consume_live(&a[2], &a[3], a[4].parse().unwrap(), a[5].parse().unwrap(), a.get(6).map(String::as_str))
        }
        Some("check") => check(&a[2], &a[3], &a[4], &a[5]),
        Some("paired") => paired(&a[2], &a[3]),
        Some("relay") => relay(&a[2], &a[3], &a[4], a[5].parse().unwrap(), a[6].parse().unwrap()),
        Some("relay-group") => relay_group(&a[2], &a[3], &a[4], &a[5], &a[6]),
        Some("wait") => {
            wait(&Progress::parse(&a[2]), a[3].parse().unwrap(), &a[4], a.get(5).map(|p| p.parse().unwrap()))
        }
        Some("latency") => latency(a[2].parse().unwrap(), a[3].parse().unwrap(), &a[4]),
        _ => {
            eprintln!(
                "usage: daemon_bench produce BROKER TOPIC N PARTITIONS [RATE] | produce-text BROKER TOPIC N TRUTH_FILE \
                 | produce-zipf BROKER TOPIC N TRUTH_FILE ALPHA | consume BROKER TOPIC PARTITIONS | consume-live BROKER TOPIC PARTITIONS SECONDS \
                 | relay BROKER IN OUT PARTITIONS SECONDS | relay-group BROKER IN OUT GROUP PROGRESS_FILE | wait ADMIN_PORT|file:PATH N LABEL [PID] \
                 | check BROKER TOPIC TRUTH_FILE LABEL | latency ADMIN_PORT SECONDS LABEL"
            );
            std::process::exit(2);
        }
    }
}
