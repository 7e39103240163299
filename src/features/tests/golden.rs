//! Golden slice snapshots: one snapshot file per envelope version a
//! deployment may hold (2: timer filter or a decaying kind; 3: provenance;
//! 4: the counting stage; 5: the input partitions' progress; 6: the same
//! sections tagged; 7: the slice-log form, batches), written by the codec of the release that introduced
//! it and kept in `tests/snapshots/`. Each must restore and then judge the rest of its
//! stream exactly as the slice that was never stopped, and a slice in the
//! same state must still encode to the same bytes (a rollback to an older
//! release restores it). A change of the format shows here first.
//!
//! `DEDUPD_BLESS_SNAPSHOTS=1 cargo test --lib golden` rewrites the files: only
//! for a new case, never to make a changed encoding pass.

use std::path::PathBuf;

use super::{extractor, order};
use crate::engine::slice::stages::StageSetups;
use crate::engine::slice::{
    Judgment, LogForm, Progress, SliceRecord, SliceState, SliceVerdict, SourceRef, decode_full, encode, encode_tagged,
};
use crate::engine::{KeySpec, RecordView};
use crate::features::limits::stage::CountingSetup;
use crate::features::provenance::stage::{ProvenanceSetup, SourceSpec};
use crate::filter::counting::CountingSpec;
use crate::filter::provenance::{IndexChoice, ProvenanceSpec};
use crate::filter::spectral::{CounterKind, Estimator, SpectralParams};
use crate::filter::{DecayingKind, DecayingSpec, FilterChoice, FilterSpec, SnapshotError};

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

    /// The file of the case's snapshot with its sections tagged (version 6).
    fn tagged_file(self) -> Option<&'static str> {
        matches!(self, Case::Progress).then_some("slice-v6-tagged.bin")
    }

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

    fn filter(self) -> FilterChoice {
        let decaying = match self {
            Case::Rsbf => Some(DecayingSpec::new(DecayingKind::Rsbf, 3 * 1024, 0.1)),
            Case::Stable => Some(DecayingSpec::new(DecayingKind::Stable, 3 * 1024, 0.1)),
            _ => None,
        };
        let expected_keys = if decaying.is_some() { 1 } else { 150 };
        let params = FilterSpec { window_ms: 2_000, expected_keys, ..FilterSpec::default() }.resolve().unwrap();
        match decaying {
            Some(spec) => FilterChoice::Decaying(params, spec),
            None => FilterChoice::Timer(params),
        }
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
            max_record_bytes: 100,
        })
    }

    fn fresh(self) -> SliceState {
        let mut s = SliceState::new(4, self.filter(), 0, order(300));
        s.set_stages(&self.stages());
        s
    }

    fn stages(self) -> StageSetups {
        super::stage_setups(self.counting(), self.provenance())
    }

    fn decode(self, bytes: &[u8]) -> Result<SliceState, SnapshotError> {
        decode_full(bytes, 4, &self.filter(), order(300), &self.stages())
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
                assert!(s.refill_stages(o, record), "record {o}'s count key");
                let (t, h) = s.held_entry(record, &ex).unwrap();
                reread.push((o, t, h));
            });
        }
        s.refill(reread).unwrap();
    }
}

fn fixture(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(file)
}

/// The golden bytes of `file`, first written from `bytes` when blessing.
fn golden(file: &str, bytes: &[u8]) -> Vec<u8> {
    if std::env::var_os("DEDUPD_BLESS_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(fixture(file).parent().unwrap()).unwrap();
        std::fs::write(fixture(file), bytes).unwrap();
    }
    std::fs::read(fixture(file)).unwrap_or_else(|e| panic!("{}: {e}", fixture(file).display()))
}

#[test]
fn snapshots_of_every_version_restore_and_judge_on() {
    for case in Case::ALL {
        let log = Log::new(case);
        let mut whole = case.fresh();
        let expected = log.feed(&mut whole, 0..RECORDS);
        let mut first = case.fresh();
        let mut got = log.feed(&mut first, 0..CUT);
        let bytes = encode(&first);
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), case.version(), "{case:?}");
        let golden_bytes = golden(case.file(), &bytes);
        assert!(bytes == golden_bytes, "{case:?}: a slice in the same state encodes differently from {}", case.file());
        let tagged = encode_tagged(&first);
        assert_eq!(u16::from_le_bytes([tagged[8], tagged[9]]), 6);
        if let Some(file) = case.tagged_file() {
            assert!(tagged == golden(file, &tagged), "{case:?}: the tagged encoding differs from {file}");
        }
        for snapshot in [golden_bytes, tagged] {
            let mut restored = case.decode(&snapshot).unwrap_or_else(|e| panic!("{case:?}: {e}"));
            assert!(!restored.unfilled.is_empty(), "{case:?}: the snapshot holds records for the watermark");
            log.refill(&mut restored);
            assert_eq!(restored, first, "{case:?}: restored state");
            let mut judged = got.clone();
            judged.extend(log.feed(&mut restored, CUT..RECORDS));
            assert_eq!(judged, expected, "{case:?}: verdicts after the restore");
            assert_eq!(restored, whole, "{case:?}: final state");
        }
        got.clear();
        let duplicates = expected.iter().filter(|j| matches!(j.verdict, SliceVerdict::Duplicate { .. })).count();
        assert!(duplicates > 100, "{case:?}: {duplicates} duplicates (the stream must repeat keys)");
        if case.counting().is_some() {
            assert!(expected.iter().any(|j| j.notes.rule.is_some()), "{case:?}: nothing limited");
        }
    }
}

/// Version 7: a slice of the batched slice log records its form, so that a
/// restore configured with the records form does not take its positions
/// for offsets. (The stream's positions are plain offsets here: the codec
/// only carries the form, the restore decides what to do with it.) The
/// golden file restores to the same state, form included, and judges on as
/// the slice never stopped; the same state in the records form is written
/// as before (version 5, a rollback restores it) and reads as records.
#[test]
fn a_batch_form_snapshot_records_its_form() {
    let case = Case::Progress;
    let log = Log::new(case);
    let mut whole = case.fresh();
    whole.log_form = LogForm::Batches;
    let expected = log.feed(&mut whole, 0..RECORDS);
    let mut first = case.fresh();
    first.log_form = LogForm::Batches;
    let mut judged = log.feed(&mut first, 0..CUT);
    let bytes = encode(&first);
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 7);
    assert!(bytes == golden("slice-v7-batches.bin", &bytes), "the batch form encodes differently");
    assert_eq!(encode_tagged(&first), bytes, "version 7 tags its sections");
    let mut restored = case.decode(&bytes).unwrap();
    assert_eq!(restored.log_form, LogForm::Batches);
    log.refill(&mut restored);
    assert_eq!(restored, first, "restored state");
    judged.extend(log.feed(&mut restored, CUT..RECORDS));
    assert_eq!((judged, &restored), (expected, &whole), "verdicts and state after the restore");

    first.log_form = LogForm::Records;
    let older = encode(&first);
    assert_eq!(u16::from_le_bytes([older[8], older[9]]), 5);
    assert_eq!(case.decode(&older).unwrap().log_form, LogForm::Records);
    assert_ne!(case.decode(&bytes).unwrap(), case.decode(&older).unwrap(), "the form is part of the state");
}

/// A tagged section this release does not know: skipped when a reader may
/// restore without it, refused when it may not; a section twice or out of
/// order is malformed.
#[test]
fn tagged_sections_unknown_to_a_release() {
    let case = Case::Progress;
    let mut s = case.fresh();
    Log::new(case).feed(&mut s, 0..CUT);
    let tagged = encode_tagged(&s);
    let at = sections_at(&tagged);
    // The snapshot with one more section, first in the list.
    let with = |tag: u16, required: u8, content: &[u8]| {
        let mut b = tagged[..tagged.len() - 8].to_vec();
        let count = u16::from_le_bytes([b[at], b[at + 1]]) + 1;
        b[at..at + 2].copy_from_slice(&count.to_le_bytes());
        let mut extra = tag.to_le_bytes().to_vec();
        extra.push(required);
        extra.extend_from_slice(&(content.len() as u64).to_le_bytes());
        extra.extend_from_slice(content);
        b.splice(at + 2..at + 2, extra);
        b.extend_from_slice(&[0; 8]);
        crate::filter::envelope::seal_in_place(&mut b);
        b
    };
    // Tag 0 sorts before every known tag.
    assert_eq!(case.decode(&with(0, 0, b"abc")).unwrap(), case.decode(&tagged).unwrap());
    let e = case.decode(&with(0, 1, b"abc")).unwrap_err();
    assert!(e.to_string().contains("section 0 is not known to this release"), "{e}");
    // The progress section (3, no entries) before provenance (1) and again after.
    let e = case.decode(&with(3, 1, &0u32.to_le_bytes())).unwrap_err();
    assert!(e.to_string().contains("out of order or twice"), "{e}");
}

/// Where the sections' count of a version 6 snapshot lies: after the core
/// (what version 2 writes before its filter length) and the overflow count.
fn sections_at(tagged: &[u8]) -> usize {
    let u64_at = |at: usize| u64::from_le_bytes(tagged[at..at + 8].try_into().unwrap()) as usize;
    // Magic, version, slice, next offset, 5 counters, 2 marks, the flush log position.
    let mut at = 8 + 2 + 4 + 8 + 5 * 8 + 2 * 8 + 8;
    at += 8 + u64_at(at) * 9; // held offsets
    let marks = u32::from_le_bytes(tagged[at..at + 4].try_into().unwrap());
    at += 4;
    for _ in 0..marks {
        let len = usize::from(u16::from_le_bytes([tagged[at], tagged[at + 1]]));
        at += 2 + len + 4 + 8;
    }
    at + 8
}
