//! Prints a synthetic news-feed stream as JSON lines: ~1000 events/s, ~45%
//! new headlines and the rest copies arriving 100 ms to 90 s later (~27k
//! distinct headlines per minute, ~55% duplicates).
//!
//! `cargo run --release --example headlines -- [SECONDS] [SEED]`

use std::io::{BufWriter, Write};

use dedupd::testkit::workload::{KeyDist, RateProfile, Stream, headline};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(300);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2026);
    let dist = KeyDist::Recurring { p_new: 0.415, min_gap_ms: 100, max_gap_ms: 90_000 };
    let mut out = BufWriter::new(std::io::stdout().lock());
    for (seq, (id, t)) in Stream::new(seed, dist, RateProfile::steady(1000, 1000), seconds).enumerate() {
        let line = serde_json::json!({"seq": seq, "id": headline(id), "ts": 1_700_000_000_000u64 + t, "src": "feed"});
        if let Err(e) = writeln!(out, "{line}") {
            // A closed pipe (e.g. `| head`) is a normal end.
            return if e.kind() == std::io::ErrorKind::BrokenPipe { Ok(()) } else { Err(e) };
        }
    }
    out.flush()
}
