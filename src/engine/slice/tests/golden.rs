//! Golden slice snapshots: one snapshot file per envelope version a
//! deployment may hold (2: timer filter or a decaying kind; 3: provenance;
//! 4: the counting stage; 5: the input partitions' progress), written by the
//! codec of the release that introduced it and kept in
//! `tests/snapshots/`. Each must restore and then judge the rest of its
//! stream exactly as the slice that was never stopped, and a slice in the
//! same state must still encode to the same bytes (a rollback to an older
//! release restores it). A change of the format shows here first.
//!
//! `DEDUPD_BLESS_SNAPSHOTS=1 cargo test --lib golden` rewrites the files: only
//! for a new case, never to make a changed encoding pass.

use std::path::PathBuf;

use super::*;
use crate::engine::limits::CountingSetup;
use crate::engine::provenance::{ProvenanceSetup, SourceSpec};
use crate::engine::{CountingSpec, KeySpec};
use crate::filter::provenance::{IndexChoice, ProvenanceSpec};
use crate::filter::spectral::{CounterKind, Estimator, SpectralParams};
use crate::filter::{CountKind, CountSpec};

/// Records in the stream; the snapshot is taken after `CUT` of them.
const RECORDS: usize = 1_500;
const CUT: usize = 900;
/// In the progress case, the slice-log entry at this offset is a router's
/// progress record instead of an input record.
const ANNOUNCE_AT: usize = 400;

#[derive(Clone, Copy, Debug)]
enum Case {
    Timer,
    Rsbf,
    Stable,
    Provenance,
    Counting,
    Progress,
}

impl Case {
    const ALL: [Case; 6] = [Case::Timer, Case::Rsbf, Case::Stable, Case::Provenance, Case::Counting, Case::Progress];

    fn file(self) -> &'static str {
        match self {
            Case::Timer => "slice-v2-timer.bin",
            Case::Rsbf => "slice-v2-rsbf.bin",
            Case::Stable => "slice-v2-stable.bin",
            Case::Provenance => "slice-v3-provenance.bin",
            Case::Counting => "slice-v4-counting.bin",
            Case::Progress => "slice-v5-progress.bin",
        }
    }

    fn version(self) -> u16 {
        match self {
            Case::Timer | Case::Rsbf | Case::Stable => 2,
            Case::Provenance => 3,
            Case::Counting => 4,
            Case::Progress => 5,
        }
    }

    fn params(self) -> FilterParams {
        let count = match self {
            Case::Rsbf => Some(CountSpec::new(CountKind::Rsbf, 3 * 1024, 0.1)),
            Case::Stable => Some(CountSpec::new(CountKind::Stable, 3 * 1024, 0.1)),
            _ => None,
        };
        let expected_keys = if count.is_some() { 1 } else { 150 };
        FilterSpec { window_ms: 2_000, expected_keys, count, ..FilterSpec::default() }.resolve().unwrap()
    }

    fn provenance(self) -> Option<ProvenanceSetup> {
        matches!(self, Case::Provenance | Case::Counting | Case::Progress).then(|| ProvenanceSetup {
            source: SourceSpec::Header("src".into()),
            spec: ProvenanceSpec {
                bits: 2_048,
                hashes: 4,
                generation_ms: 1_000,
                keep_ms: 1_300,
                max_sources: 16,
                index: IndexChoice::Tree,
                tree_order: 2,
            },
            input_topic: "in".into(),
        })
    }

    fn counting(self) -> Option<CountingSetup> {
        matches!(self, Case::Counting | Case::Progress).then(|| CountingSetup {
            spec: CountingSpec {
                params: SpectralParams {
                    estimator: Estimator::Mi,
                    counters: 1_024,
                    hashes: 4,
                    counter_bits: 8,
                    store: CounterKind::Compact,
                },
                window_ms: 2_000,
                subwindows: 8,
                max_per_window: Some(3),
                flag_threshold: Some(5),
            },
            count_key: Some("header:ip".parse::<KeySpec>().unwrap()),
        })
    }

    fn fresh(self) -> SliceState {
        let mut s = SliceState::new(4, self.params(), 0, order(300));
        s.set_provenance(self.provenance().as_ref());
        s.set_counting(self.counting().as_ref(), &extractor());
        s
    }

    fn decode(self, bytes: &[u8]) -> Result<SliceState, SnapshotError> {
        let (provenance, counting, ex) = (self.provenance(), self.counting(), extractor());
        decode_full(bytes, 4, &self.params(), order(300), provenance.as_ref(), counting.as_ref().map(|c| (c, &ex)))
    }
}

/// The slice log: entry `o` is record `o` (key, source and ip headers, an
/// event time jittered within the lateness, read from input partition
/// `o % 3`), except a progress record at [`ANNOUNCE_AT`] in the progress case.
struct Log {
    keys: Vec<[u8; 8]>,
    sources: Vec<String>,
    ips: Vec<String>,
    times: Vec<i64>,
    case: Case,
}

impl Log {
    fn new(case: Case) -> Self {
        let mut rng = crate::testkit::workload::Rng::new(21);
        Log {
            keys: (0..RECORDS).map(|_| rng.below(260).to_le_bytes()).collect(),
            sources: (0..RECORDS).map(|_| format!("s{}", rng.below(6))).collect(),
            ips: (0..RECORDS).map(|i| format!("10.0.0.{}", i % 40)).collect(),
            times: (0..RECORDS as i64).map(|i| 10_000 + i * 4 + rng.below(250) as i64).collect(),
            case,
        }
    }

    /// Calls `f` with record `o` as the slice reads it.
    fn with<R>(&self, o: usize, f: impl FnOnce(&RecordView<'_>) -> R) -> R {
        let headers = [("src", self.sources[o].as_bytes()), ("ip", self.ips[o].as_bytes())];
        f(&RecordView {
            key: Some(&self.keys[o]),
            headers: &headers,
            timestamp_ms: Some(self.times[o]),
            ..Default::default()
        })
    }

    fn feed(&self, s: &mut SliceState, range: std::ops::Range<usize>) -> Vec<Judgment> {
        let ex = extractor();
        let mut out = Vec::new();
        for o in range {
            if matches!(self.case, Case::Progress) && o == ANNOUNCE_AT {
                let time_ms = self.times[o - 1] as u64;
                let entries: Vec<Progress<'_>> = (0..3)
                    .map(|partition| Progress { topic: "in", partition, time_ms, idle: partition == 2, owned: true })
                    .collect();
                s.announce(o as u64, &entries, &mut out);
                continue;
            }
            let source = Some(SourceRef { topic: "in", partition: (o % 3) as i32, offset: o as i64 });
            self.with(o, |&record| {
                s.process(&SliceRecord { offset: o as u64, record, source, reading: None }, &ex, &mut out)
            });
        }
        out
    }

    /// Puts back a restored slice's held records, re-read from the log.
    fn refill(&self, s: &mut SliceState) {
        let ex = extractor();
        let mut reread = Vec::new();
        for (o, _) in s.unfilled.clone() {
            self.with(o as usize, |record| {
                assert!(s.refill_count_key(o, record), "record {o}'s count key");
                let (t, h) = s.held_entry(record, &ex).unwrap();
                reread.push((o, t, h));
            });
        }
        s.refill(reread).unwrap();
    }
}

fn fixture(case: Case) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(case.file())
}

#[test]
fn snapshots_of_every_version_restore_and_judge_on() {
    let bless = std::env::var_os("DEDUPD_BLESS_SNAPSHOTS").is_some();
    for case in Case::ALL {
        let log = Log::new(case);
        let mut whole = case.fresh();
        let expected = log.feed(&mut whole, 0..RECORDS);
        let mut first = case.fresh();
        let mut got = log.feed(&mut first, 0..CUT);
        let bytes = encode(&first);
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), case.version(), "{case:?}");
        if bless {
            std::fs::create_dir_all(fixture(case).parent().unwrap()).unwrap();
            std::fs::write(fixture(case), &bytes).unwrap();
        }
        let golden = std::fs::read(fixture(case)).unwrap_or_else(|e| panic!("{}: {e}", fixture(case).display()));
        assert!(bytes == golden, "{case:?}: a slice in the same state encodes differently from {}", case.file());

        let mut restored = case.decode(&golden).unwrap_or_else(|e| panic!("{case:?}: {e}"));
        assert!(!restored.unfilled.is_empty(), "{case:?}: the snapshot holds records for the watermark");
        log.refill(&mut restored);
        assert_eq!(restored, first, "{case:?}: restored state");
        got.extend(log.feed(&mut restored, CUT..RECORDS));
        assert_eq!(got, expected, "{case:?}: verdicts after the restore");
        assert_eq!(restored, whole, "{case:?}: final state");
        let duplicates = expected.iter().filter(|j| matches!(j.verdict, SliceVerdict::Duplicate { .. })).count();
        assert!(duplicates > 100, "{case:?}: {duplicates} duplicates (the stream must repeat keys)");
        if case.counting().is_some() {
            assert!(expected.iter().any(|j| j.count.is_some_and(|m| m.limited)), "{case:?}: nothing limited");
        }
    }
}
