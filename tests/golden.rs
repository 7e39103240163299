//! Golden verdicts and snapshots: fixed streams through the filter in every
//! cell layout give exactly the verdicts and the snapshot bytes that the
//! engine gave before its hot path was optimised (issue #5). A change of
//! either is a change of semantics (restored snapshots would continue
//! differently), so these digests may only change with a new snapshot version.

use dedupd::filter::timer::snapshot;
use dedupd::filter::{Event, FilterSpec, Growth, KeyHash, SlidingFilter, Verdict};
use dedupd::testkit::workload::Rng;
use twox_hash::XxHash3_64;

/// XXH3-64 of the verdicts and of the final snapshot of one stream: keys
/// from a universe twice the expected population (so about half recur), a
/// clock that mostly advances and sometimes goes back (late events), and
/// bursts that overfill the filter (growth and retirement).
fn digest(spec: &FilterSpec, events: usize, batched: bool) -> (u64, u64, dedupd::filter::FilterCounters) {
    let mut f = SlidingFilter::new(spec.resolve().unwrap());
    let mut rng = Rng::new(42);
    let mut now = 1_000_000u64;
    let mut verdicts = Vec::new();
    let mut batch = Vec::new();
    for i in 0..events {
        // Mostly small steps (often 0: same tick), sometimes a jump.
        now += if rng.below(1000) < 2 { spec.window_ms / 3 } else { rng.below(4) };
        let late = rng.below(50) == 0;
        let t = if late { now.saturating_sub(rng.below(spec.window_ms / 2 + 1)) } else { now };
        let burst = (i / 2_000) % 3 == 2;
        let universe = if burst { spec.expected_keys * 20 } else { spec.expected_keys * 2 };
        let key = rng.below(universe);
        let hash = KeyHash::of(spec.seed, &key.to_le_bytes());
        if batched {
            batch.push(Event { hash, time_ms: t });
            if batch.len() == 97 {
                f.observe_batch(&batch, &mut verdicts);
                batch.clear();
            }
        } else {
            verdicts.push(f.observe(&hash, t));
        }
    }
    f.observe_batch(&batch, &mut verdicts);
    let bytes: Vec<u8> = verdicts
        .iter()
        .map(|v| match v {
            Verdict::Distinct => 0xFF,
            Verdict::Duplicate { equal_timers } => *equal_timers,
        })
        .collect();
    (XxHash3_64::oneshot(&bytes), XxHash3_64::oneshot(&snapshot::encode(&f)), f.counters().clone())
}

fn specs() -> Vec<(&'static str, FilterSpec)> {
    let base = FilterSpec { window_ms: 3_000, expected_keys: 800, ..FilterSpec::default() };
    vec![
        ("4bit", FilterSpec { timer_bits: 4, ..base.clone() }),
        ("6bit", FilterSpec { timer_bits: 6, ..base.clone() }),
        ("8bit", base.clone()),
        ("8bit-equal3", FilterSpec { equal_timers: 3, ..base.clone() }),
        ("8bit-cardinality", FilterSpec { growth: Growth::Cardinality, ..base.clone() }),
        ("8bit-nogrowth-k4", FilterSpec { growth: Growth::None, hashes: Some(4), ..base.clone() }),
        ("12bit", FilterSpec { timer_bits: 12, ..base.clone() }),
        ("16bit-tick7", FilterSpec { timer_bits: 16, tick_ms: Some(7), ..base.clone() }),
        ("32bit", FilterSpec { timer_bits: 32, ..base.clone() }),
        // Large enough (3 MB of cells) for observe_batch to prefetch.
        ("8bit-3MB", FilterSpec { total_cells: Some(3_000_000), growth: Growth::None, ..base.clone() }),
    ]
}

/// Digests recorded with the engine of commit 5c4b2bf (before the hot-path
/// work), one-at-a-time and batched.
const GOLDEN: [(&str, u64, u64); 10] = [
    ("4bit", 0x2d3e2da0e939d80e, 0x37cca78b74b74dfa),
    ("6bit", 0x3cbc1d71017c51e1, 0xc446ef2a4190ba58),
    ("8bit", 0x64c76de271ef485f, 0xf8773b4764fa2f4b),
    ("8bit-equal3", 0x19a9f4225325e93a, 0x40ba37b0f638d389),
    ("8bit-cardinality", 0x0cbe1bbf648109b9, 0x1f0e34e113a29c75),
    ("8bit-nogrowth-k4", 0x3ec9fd626c257d60, 0x9663bfabea725af0),
    ("12bit", 0x866917e03bd37524, 0x14502dc131f0e99d),
    ("16bit-tick7", 0x053bce9cdcf2077d, 0x7411f3ea5101e805),
    ("32bit", 0x866917e03bd37524, 0x4276eb436f5f493d),
    ("8bit-3MB", 0xab9fd683fec04a57, 0xa4398d60b27a2a9e),
];

#[test]
fn verdicts_and_snapshots_match_the_golden_digests() {
    let mut got = Vec::new();
    for (name, spec) in specs() {
        let one = digest(&spec, 12_000, false);
        let batched = digest(&spec, 12_000, true);
        assert_eq!(one, batched, "{name}: observe and observe_batch disagree");
        // The streams exercise what the digests are meant to pin down.
        let c = &one.2;
        assert!(c.duplicates > 1_000 && c.distinct > 1_000 && c.late_events > 100, "{name}: {c:?}");
        if spec.growth != Growth::None {
            assert!(c.generations_created > 2 && c.generations_dropped > 0, "{name}: {c:?}");
        }
        got.push((name, one.0, one.1));
    }
    let text: Vec<String> = got.iter().map(|(n, v, s)| format!("    (\"{n}\", {v:#018x}, {s:#018x}),")).collect();
    assert_eq!(got, GOLDEN.to_vec(), "digests now:\n{}", text.join("\n"));
}
