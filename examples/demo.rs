//! The demo's driver: `produce` writes a click stream with realistic
//! duplicates into the input topic; `check` waits for a running `dedupd run`
//! to judge all of it and compares its output with the exact answer (the
//! stream is deterministic, so `check` regenerates it).
//!
//! Run by `scripts/demo.sh`; by hand:
//! `cargo run --release --example demo -- produce|check BROKER INPUT OUTPUT ADMIN_PORT [CLICKS] [WINDOW_MS]`

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use dedupd::testkit::clicks::{Click, clicks, confusion, truth};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

fn http_json(port: u16, path: &str) -> Option<serde_json::Value> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    serde_json::from_str(text.split_once("\r\n\r\n")?.1).ok()
}

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    if args.len() < 6 || !["produce", "check"].contains(&args[1].as_str()) {
        eprintln!("usage: demo produce|check BROKER INPUT OUTPUT ADMIN_PORT [CLICKS] [WINDOW_MS]");
        std::process::exit(2);
    }
    let mode = args.remove(1);
    let (broker, input, output) = (&args[1], &args[2], &args[3]);
    let admin_port: u16 = args[4].parse().expect("admin port");
    let n: u64 = args.get(5).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let window_ms: u64 = args.get(6).and_then(|a| a.parse().ok()).unwrap_or(60_000);

    let stream = clicks(n, 42);
    let truth = truth(&stream, window_ms);
    let true_distinct = truth.iter().filter(|d| !**d).count();
    if mode == "produce" {
        println!(
            "demo: {} records: {n} real clicks (a 3x burst in the middle third) plus double-clicks, retries and \
             late replays; {} distinct in a {} s window",
            stream.len(),
            true_distinct,
            window_ms / 1000
        );
        produce(broker, input, &stream);
    } else {
        check(broker, output, admin_port, &stream, &truth);
    }
}

fn produce(broker: &str, input: &str, stream: &[Click]) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .create()
        .expect("producer");
    let started = Instant::now();
    for (i, c) in stream.iter().enumerate() {
        let payload = c.payload();
        let mut rec =
            BaseRecord::<[u8], [u8]>::to(input).payload(payload.as_bytes()).timestamp(c.ts).partition((i % 3) as i32);
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    rec = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        if (i + 1) % 50_000 == 0 {
            println!("demo: produced {} / {}", i + 1, stream.len());
        }
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
    println!("demo: produced {} records in {:.1} s", stream.len(), started.elapsed().as_secs_f64());
}

fn check(broker: &str, output: &str, admin_port: u16, stream: &[Click], truth: &[bool]) {
    let true_distinct = truth.iter().filter(|d| !**d).count();
    // Wait for dedupd: every record judged. Throughput counts from the first verdict.
    let mut started = Instant::now();
    let mut first_seen = false;
    let mut last_print = Instant::now();
    // The densities' prediction, at its highest while the stream went through.
    let mut peak_fpr = 0.0f64;
    let (processed, estimated_fpr) = loop {
        let slices = http_json(admin_port, "/v1/slices").and_then(|v| v.as_array().cloned()).unwrap_or_default();
        let sum = |f: &str| slices.iter().map(|s| s[f].as_u64().unwrap_or(0)).sum::<u64>();
        let done = sum("distinct") + sum("duplicates") + sum("invalid") + sum("resends");
        if done > 0 && !first_seen {
            first_seen = true;
            started = Instant::now();
        }
        let fpr =
            slices.iter().map(|s| s["estimated_fpr"].as_f64().unwrap_or(0.0)).sum::<f64>() / slices.len().max(1) as f64;
        peak_fpr = peak_fpr.max(fpr);
        if done >= stream.len() as u64 {
            break (done, peak_fpr);
        }
        if last_print.elapsed() > Duration::from_secs(2) {
            println!("demo: dedupd has judged {done} / {}", stream.len());
            last_print = Instant::now();
        }
        assert!(last_print.elapsed() < Duration::from_secs(600), "dedupd made no progress in 10 minutes");
        std::thread::sleep(Duration::from_millis(250));
    };
    let elapsed = started.elapsed().as_secs_f64();

    // Read the output back and compare with the truth.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", format!("demo-reader-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let md = consumer.fetch_metadata(Some(output), Duration::from_secs(10)).expect("metadata");
    let mut tpl = TopicPartitionList::new();
    for p in 0..md.topics()[0].partitions().len() as i32 {
        tpl.add_partition_offset(output, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).expect("assign");
    let mut delivered = HashSet::new();
    let mut quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(3) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            quiet = Instant::now();
            let v: serde_json::Value = serde_json::from_slice(m.payload().unwrap_or_default()).expect("json output");
            delivered.insert(v["seq"].as_u64().expect("seq"));
        }
    }
    let c = confusion(stream, truth, |seq| delivered.contains(&seq));
    println!();
    println!("  records in                 {:>10}", stream.len());
    println!("  distinct out               {:>10}   (exact answer: {true_distinct})", delivered.len());
    println!("  duplicates removed         {:>10}", stream.len() - delivered.len());
    println!("  judged by dedupd           {processed:>10}");
    println!("  false-positive rate        {:>10.5}   measured against the exact answer (target 0.01)", c.fpr());
    println!("  false-negative rate        {:>10.5}", c.fnr());
    println!("  estimated FPR (densities)  {estimated_fpr:>10.5}   peak of the mean over slices in /v1/slices");
    println!(
        "  throughput                 {:>10.0}   records/s, first to last verdict (router + slice workers)",
        stream.len() as f64 / elapsed
    );
}
