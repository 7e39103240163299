//! What the fuzz targets share: real snapshots to start from (the seed
//! corpus, and the bases the mutating target edits), and a check that a
//! restored slice can be used, not only decoded.

use std::ops::Range;
use std::sync::OnceLock;

use dedupd::engine::slice::{self, SliceState};
use dedupd::engine::{Extractor, Judgment, OrderSettings, RecordView, SliceRecord, SliceVerdict, SourceRef};
use dedupd::filter::envelope::seal_in_place;
use dedupd::filter::{FilterParams, FilterSpec, KeyHash, Layout, SlidingFilter};
use libfuzzer_sys::arbitrary::{self, Arbitrary};

/// A real slice snapshot and what it was taken with.
pub struct Sample {
    pub name: &'static str,
    pub bytes: Vec<u8>,
    pub slice: u32,
    pub params: FilterParams,
    pub order: OrderSettings,
    /// Where the filter's own envelope lies in `bytes` (it has its own
    /// checksum, inside the slice's).
    pub filter: Range<usize>,
}

/// Keys from the record key, times from the record timestamp: what the
/// samples and the replay check feed.
pub fn record_key_extractor() -> Extractor {
    Extractor {
        key: "record-key".parse().expect("key spec"),
        time: "record-timestamp".parse().expect("time spec"),
        max_record_bytes: 1 << 16,
    }
}

fn params(timer_bits: u8, layout: Layout, lateness_ms: u64) -> FilterParams {
    FilterSpec {
        window_ms: 2_000,
        expected_keys: 150,
        timer_bits,
        layout,
        lateness_ms: Some(lateness_ms),
        ..FilterSpec::default()
    }
    .resolve()
    .expect("sample filter settings are valid")
}

/// Feeds `n` records to `state`: keys cycling over `keys` distinct values,
/// times advancing 7 ms per record with some disorder, from three input
/// partitions (so the snapshot has re-send marks); the last record is far
/// in the future, so it is held as a time-jump suspect.
fn feed(state: &mut SliceState, n: u64, keys: u64) {
    let ex = record_key_extractor();
    let mut out = Vec::new();
    for i in 0..n {
        let key = format!("k{}", (i * 7919) % keys);
        let jitter = (i * 31) % 40;
        let ts = if i + 1 == n { 10_000_000 } else { 1_000 + i as i64 * 7 - jitter as i64 };
        let rec = SliceRecord {
            offset: i,
            record: RecordView {
                key: Some(key.as_bytes()),
                payload: b"p",
                timestamp_ms: Some(ts),
                ..Default::default()
            },
            source: Some(SourceRef { topic: "clicks", partition: (i % 3) as i32, offset: (i / 3) as i64 }),
            reading: None,
        };
        state.process(&rec, &ex, &mut out);
    }
}

fn sample(name: &'static str, slice: u32, params: FilterParams, order: OrderSettings, records: u64) -> Sample {
    let mut state = SliceState::new(slice, params.clone(), 0, order);
    feed(&mut state, records, 400);
    let bytes = slice::encode(&state);
    let start = bytes.windows(8).position(|w| w == b"DEDUPDSS").expect("a slice snapshot holds a filter snapshot");
    Sample { name, filter: start..bytes.len() - 8, bytes, slice, params, order }
}

/// The samples, built once: an empty slice, a busy one (several
/// generations, held records, a suspect, re-send marks), and the other
/// timer widths and the blocked layout.
pub fn samples() -> &'static [Sample] {
    static SAMPLES: OnceLock<Vec<Sample>> = OnceLock::new();
    SAMPLES.get_or_init(|| {
        let order = |lateness_ms| OrderSettings { lateness_ms, max_clock_jump_ms: 5_000, jump_confirmations: 3 };
        vec![
            sample("empty", 0, params(8, Layout::Standard, 0), order(0), 0),
            sample("busy", 3, params(8, Layout::Standard, 50), order(50), 3_000),
            sample("wide", 1, params(32, Layout::Standard, 50), order(50), 800),
            sample("narrow", 2, params(4, Layout::Standard, 0), order(0), 800),
            sample("blocked", 5, params(16, Layout::Blocked, 50), order(50), 800),
        ]
    })
}

/// Uses a restored slice as the daemon would: puts back its held records,
/// judges more records, flushes; then its snapshot must decode to the same
/// state. Panics (the fuzzer's finding) if anything does not hold.
pub fn exercise(mut state: SliceState, params: &FilterParams, order: OrderSettings) {
    let slice = state.slice;
    // The daemon re-reads the held records from the log; any time and key do.
    let held: Vec<(u64, u64, KeyHash)> = state
        .unfilled
        .iter()
        .map(|&(offset, _)| (offset, offset.wrapping_mul(13), KeyHash::of(params.seed, &offset.to_le_bytes())))
        .collect();
    state.refill(held).expect("every held record was given");
    let ex = record_key_extractor();
    let mut out: Vec<Judgment> = Vec::new();
    let start = state.next_offset;
    let base = state.order.marks().max_seen_ms.unwrap_or(0);
    for i in 0..64u64 {
        let key = (i % 23).to_le_bytes();
        let ts = base.saturating_add(i * 11) as i64;
        let offset = start.saturating_add(i);
        let rec = SliceRecord {
            offset,
            record: RecordView { key: Some(&key), payload: b"p", timestamp_ms: Some(ts.max(0)), ..Default::default() },
            source: None,
            reading: None,
        };
        state.process(&rec, &ex, &mut out);
    }
    state.flush(&mut out);
    for j in &out {
        if let SliceVerdict::Invalid(e) = &j.verdict {
            assert!(!e.detail.is_empty(), "an invalid verdict without a detail: {j:?}");
        }
    }
    let bytes = slice::encode(&state);
    let mut again =
        slice::decode(&bytes, slice, &params.clone().into(), order).expect("a slice's own snapshot decodes");
    // The held records come back from the log: here, from the slice itself.
    let held = state.order.held().map(|(w, _)| (w.position, w.time_ms, w.item)).collect();
    again.refill(held).expect("every held record was given");
    assert!(again == state, "a snapshot of a restored slice does not restore it");
}

/// Uses a restored filter: observes keys around its clock, then its own
/// snapshot must decode to the same filter.
pub fn exercise_filter(mut filter: SlidingFilter) {
    let params = filter.params().clone();
    let base = filter.clock_ms().unwrap_or(0);
    for i in 0..64u64 {
        let hash = KeyHash::of(params.seed, &(i % 23).to_le_bytes());
        filter.observe(&hash, base.saturating_add(i * 11));
    }
    let _ = filter.estimated_fpr();
    let bytes = dedupd::filter::timer::snapshot::encode(&filter);
    let again = dedupd::filter::timer::snapshot::decode(&bytes, &params).expect("a filter's own snapshot decodes");
    assert!(again == filter, "a snapshot of a restored filter does not restore it");
}

/// The input of the `snapshot_mutated` target: edits to one sample.
#[derive(Arbitrary, Debug)]
pub struct Mutation {
    pub sample: u8,
    /// (position, xor mask) pairs; positions wrap around the snapshot.
    pub edits: Vec<(u32, u8)>,
    /// (position, value) fields overwritten with a little-endian u64, for
    /// counts and lengths that a single byte cannot make interesting.
    pub words: Vec<(u32, u64)>,
    /// Bytes cut from (negative) or added to (positive) the end of the body.
    pub resize: i16,
    /// Whether to recompute the filter envelope's own checksum too.
    pub reseal_filter: bool,
}

impl Mutation {
    /// The sample it edits and the edited snapshot, with its checksums
    /// recomputed: the checksum no longer stops the damage.
    pub fn apply(&self) -> (&'static Sample, Vec<u8>) {
        let all = samples();
        let s = &all[usize::from(self.sample) % all.len()];
        let mut body = s.bytes[..s.bytes.len() - 8].to_vec();
        let n = body.len();
        for &(at, mask) in &self.edits {
            body[at as usize % n] ^= mask;
        }
        for &(at, value) in &self.words {
            let at = at as usize % n.saturating_sub(8).max(1);
            body[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        if self.reseal_filter {
            seal_in_place(&mut body[s.filter.clone()]);
        }
        let resize = isize::from(self.resize);
        if resize < 0 {
            body.truncate(n.saturating_sub(resize.unsigned_abs()));
        } else {
            body.resize(n + resize as usize, 0xA5);
        }
        body.extend_from_slice(&[0; 8]);
        seal_in_place(&mut body);
        (s, body)
    }
}
