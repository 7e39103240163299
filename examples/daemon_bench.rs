//! Broker limits for the daemon benchmark (`scripts/bench_daemon.sh`):
//! `produce` writes N small JSON records (half of them copies of a recent
//! record) into a topic and reports records/s; `consume` reads a topic to its
//! end and reports records/s; `wait` polls a dedupd admin endpoint until N
//! records are judged and reports records/s from the first verdict.
//!
//! `cargo run --release --example daemon_bench -- produce|consume|wait ...`

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use dedupd::bench::workload::Rng;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

fn produce(broker: &str, topic: &str, n: u64, partitions: i32) {
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .create()
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
        let ts = base + (i / 10) as i64; // 10 000 records per second of event time
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
    println!("produce_only records={n} seconds={s:.2} records_per_second={:.0}", n as f64 / s);
}

fn consume(broker: &str, topic: &str, partitions: i32) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", format!("bench-{}", std::process::id()))
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "20")
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

fn judged(port: u16) -> Option<u64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(s, "GET /v1/slices HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let v: serde_json::Value = serde_json::from_str(text.split_once("\r\n\r\n")?.1).ok()?;
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

fn wait(port: u16, n: u64, label: &str) {
    let mut first: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let done = judged(port).unwrap_or(0);
        if done > 0 && first.is_none() {
            first = Some(Instant::now());
        }
        if done >= n {
            break;
        }
        assert!(Instant::now() < deadline, "{label}: only {done} of {n} judged after 30 minutes");
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = first.expect("some progress").elapsed().as_secs_f64();
    println!("{label} records={n} seconds={s:.2} records_per_second={:.0}", n as f64 / s);
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(String::as_str) {
        Some("produce") => produce(&a[2], &a[3], a[4].parse().unwrap(), a[5].parse().unwrap()),
        Some("consume") => consume(&a[2], &a[3], a[4].parse().unwrap()),
        Some("wait") => wait(a[2].parse().unwrap(), a[3].parse().unwrap(), &a[4]),
        _ => {
            eprintln!(
                "usage: daemon_bench produce BROKER TOPIC N PARTITIONS | consume BROKER TOPIC PARTITIONS | wait ADMIN_PORT N LABEL"
            );
            std::process::exit(2);
        }
    }
}
