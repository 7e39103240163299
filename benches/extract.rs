//! What reading a record's key and time costs: `engine::pointer::find` with
//! the pointers `/id` and `/ts`, against `serde_json::from_slice::<Value>`
//! followed by `Value::pointer` (what a hand-rolled consumer does), on three
//! payloads: the short record of the side-by-side bench
//! (`scripts/bench_peer.sh`), the same with a sentence for its key (as
//! most of that bench's keys are), and an event of about 700 bytes with nested
//! objects, an array and escapes, the key and time in the middle.
//!
//! `cargo bench --bench extract` (under a minute); `DEDUPD_BENCH_QUICK=1`
//! for short samples. Compare the figures of one run as ratios.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dedupd::engine::pointer;

/// The side-by-side bench's record (`daemon_bench produce-text`).
const SHORT: &str = r#"{"id":"the jury","seq":184467,"ts":1780000123456}"#;

/// The side-by-side bench's record with a longer key: a sentence of its
/// text corpus, quotes and all.
const SENTENCE: &str = r#"{"id":"The jury further said in term-end presentments that the City Executive Committee, which had over-all charge of the election, \"deserves the praise and thanks of the City of Atlanta\" for the manner in which the election was conducted.","seq":184467,"ts":1780000123456}"#;

/// A click-stream event as a tracker might send it.
const EVENT: &str = r#"{"event":"ad_click","campaign":{"id":"cmp-20931","name":"Winter \"Sale\" \u00e9t\u00e9","tags":["retail","eu-west","mobile"]},"user":{"anon_id":"9f0c2a6e-3b1d-4c55-9a7e-1f2b3c4d5e6f","agent":"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36","geo":{"country":"DE","region":"BE","lat":52.52,"lon":13.405}},"id":"clk-7f3e9a1c0b2d4e6f","ts":1780000123456,"placement":{"site":"news.example.com","slot":"top-banner","size":[728,90],"position":1},"price":{"currency":"EUR","cpc":0.42,"bid":0.55},"referrer":"https://news.example.com/world/europe/2026/12/some-long-article-title?utm_source=feed&utm_medium=rss","consent":{"gdpr":true,"tcf":"CPXxRfAPXxRfAAfKABENB-CgAAAAAAAAAAYgAAAAAAAA"},"debug":null}"#;

fn bench_extract(c: &mut Criterion) {
    for (name, doc) in [("short", SHORT), ("sentence", SENTENCE), ("event", EVENT)] {
        let mut group = c.benchmark_group(format!("extract/{name}"));
        group.throughput(Throughput::Bytes(doc.len() as u64));
        group.bench_function("pointer-find", |b| {
            b.iter(|| pointer::find(black_box(doc.as_bytes()), [Some("/id"), Some("/ts")]).expect("valid JSON"))
        });
        group.bench_function("value-pointer", |b| {
            b.iter(|| {
                let v: serde_json::Value = serde_json::from_slice(black_box(doc.as_bytes())).expect("valid JSON");
                (v.pointer("/id").cloned(), v.pointer("/ts").cloned())
            })
        });
        group.finish();
    }
}

fn config() -> Criterion {
    let c = Criterion::default();
    if std::env::var_os("DEDUPD_BENCH_QUICK").is_some_and(|v| v == "1") {
        c.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1))
    } else {
        c
    }
}

criterion_group! { name = benches; config = config(); targets = bench_extract }
criterion_main!(benches);
