//! The counting stage in a slice (`[limit]`, `[flag]`; see
//! [`crate::filter::counting`] for the policies): what a slice needs besides the
//! stage itself to run it on its records in judgment order.
//!
//! Two ways to count, as in pipe mode:
//! - by the dedup key (`limit.count_key` empty): the stage *replaces* the
//!   timer filter — a limit of N is "N copies per window";
//! - by another key (count by IP, dedup by click id): the timer filter
//!   judges first; replays of a dedup key are duplicates and are not
//!   counted; the survivors are counted by the count key. The count key is
//!   read when the record arrives (an unreadable one is a dead letter, like
//!   an unreadable dedup key) and its hash waits with the record for the
//!   watermark, in [`SliceCounting::pending`]. A restored slice re-derives
//!   those hashes from the held records it re-reads, so they are not in the
//!   snapshot.

use std::any::Any;
use std::collections::HashMap;

use crate::engine::record::{Extractor, InvalidRecord, KeySpec, RecordView, TimeSpec};
use crate::engine::slice::stage::{Arrival, Judging, SectionTag, Stage, StageNotes, StageRule, StageSetup};
use crate::engine::slice::stages::StageSetups;
use crate::filter::counting::{self, CountingSpec, CountingStage};
use crate::filter::{KeyHash, SnapshotError, Verdict};

/// The counting stage's section tag (`engine/slice/stage.rs` lists them).
pub const COUNTING_TAG: SectionTag = SectionTag(2);

/// The counting stage's settings (from `[limit]` and `[flag]`).
#[derive(Clone, Debug, PartialEq)]
pub struct CountingSetup {
    pub spec: CountingSpec,
    /// What records are counted by; `None`: the dedup key.
    pub count_key: Option<KeySpec>,
    /// `input.max_record_bytes`: the count key is read within the same bound.
    pub max_record_bytes: usize,
}

impl CountingSetup {
    /// Bytes one slice's counting stage holds at its planned size: a first
    /// filter per sub-window and the one filling. (A sub-window that
    /// receives more keys than planned grows a chain past this.)
    pub fn planned_bytes(&self) -> u64 {
        self.spec.params.memory_bytes().saturating_mul(u64::from(self.spec.subwindows) + 1)
    }

    /// What the slice's snapshot fingerprint adds: every parameter the
    /// stage's state depends on, so a snapshot taken with other ones is
    /// refused as a whole (as for the filter's parameters).
    pub fn fingerprint(&self) -> String {
        let s = &self.spec;
        format!(
            ",counting=estimator:{}/counters:{}/hashes:{}/bits:{}/window:{}/subwindows:{}/max:{}/flag:{}/key:{}",
            s.params.estimator.as_str(),
            s.params.counters,
            s.params.hashes,
            s.params.counter_bits,
            s.window_ms,
            s.subwindows,
            s.max_per_window.unwrap_or(0),
            s.flag_threshold.unwrap_or(0),
            self.count_key.as_ref().map_or_else(|| "dedup".to_string(), |k| format!("{k:?}")),
        )
    }

    /// The stage of a fresh slice, and the count key's extractor.
    pub fn start(&self) -> SliceCounting {
        SliceCounting {
            stage: self.spec.build().expect("counting settings validated at start-up"),
            key: self.extractor(),
            pending: HashMap::new(),
        }
    }

    /// A stage restored from its snapshot section.
    pub fn restore(&self, bytes: &[u8]) -> Result<SliceCounting, SnapshotError> {
        Ok(SliceCounting {
            stage: counting::decode(bytes, &self.spec)?,
            key: self.extractor(),
            pending: HashMap::new(),
        })
    }

    /// The count key's extractor (`None`: the dedup key). Only its key is
    /// read: the time is the dedup extractor's.
    fn extractor(&self) -> Option<Extractor> {
        let max_record_bytes = self.max_record_bytes;
        self.count_key.clone().map(|key| Extractor { key, time: TimeSpec::Arrival, max_record_bytes })
    }
}

/// A slice's counting stage and the count keys of its held records.
#[derive(Clone, Debug)]
pub struct SliceCounting {
    pub stage: CountingStage,
    /// The count key's extractor (a setting); `None`: the dedup key, and the
    /// stage replaces the timer filter.
    pub key: Option<Extractor>,
    /// With a separate count key: the count key hashes of the records
    /// waiting for the watermark, by slice offset.
    pub pending: HashMap<u64, KeyHash>,
}

impl SliceCounting {
    /// The count key's hash of `record`, `None` when counting by the dedup key.
    pub fn count_hash(&self, record: &RecordView<'_>, seed: u64) -> Result<Option<KeyHash>, InvalidRecord> {
        let Some(extractor) = &self.key else { return Ok(None) };
        match extractor.extract(record, 0) {
            Ok(x) => Ok(Some(KeyHash::of(seed, &x.key))),
            Err(mut why) => {
                why.detail = format!("count key: {}", why.detail);
                Err(why)
            }
        }
    }
}

impl Stage for SliceCounting {
    /// Reads the count key of an arriving record (a separate count key
    /// only) and keeps its hash until the record is judged.
    fn arrived(&mut self, arrival: &Arrival<'_>) -> Result<(), InvalidRecord> {
        if let Some(hash) = self.count_hash(arrival.record, arrival.seed)? {
            self.pending.insert(arrival.offset, hash);
        }
        Ok(())
    }

    /// Counting by the dedup key, the stage judges instead of the timer filter.
    fn judges_instead(&self) -> bool {
        self.key.is_none()
    }

    /// Counts a record the filter let through (replays of a dedup key are
    /// not counted, as in pipe mode); one over the limit becomes a duplicate.
    fn judged(&mut self, record: Judging<'_>, verdict: &mut Verdict, notes: &mut StageNotes) {
        let hash = match self.key {
            None => *record.hash,
            Some(_) => match self.pending.remove(&record.position) {
                Some(hash) => hash,
                None => return,
            },
        };
        if *verdict != Verdict::Distinct {
            return;
        }
        let mark = self.stage.judge(&hash, record.time_ms);
        if mark.limited {
            *verdict = Verdict::Duplicate { equal_timers: 0 };
            notes.rule = Some(StageRule { name: "limit", count: mark.estimate });
        }
        if mark.flagged {
            notes.copy_count = Some(mark.estimate);
        }
    }

    /// Counting by the dedup key replaces the timer filter: the next copy
    /// is a duplicate once the estimate reaches the limit.
    fn lookup(&self, hash: &KeyHash) -> Option<serde_json::Value> {
        self.key.is_none().then(|| {
            let estimate = self.stage.estimate(hash);
            serde_json::json!({
                "duplicate": self.stage.spec().max_per_window.is_some_and(|n| estimate >= n),
                "kind": "counting",
                "estimate": estimate,
            })
        })
    }

    /// A held record was refused (a time jump): its count key is dropped.
    fn refused(&mut self, position: u64) {
        self.pending.remove(&position);
    }

    /// Puts back the count key of a held record re-read from the log.
    fn refill(&mut self, arrival: &Arrival<'_>) -> bool {
        self.arrived(arrival).is_ok()
    }

    fn encode(&self, w: &mut Vec<u8>) {
        w.extend_from_slice(&counting::encode(&self.stage));
    }

    fn tag(&self) -> SectionTag {
        COUNTING_TAG
    }

    fn boxed_clone(&self) -> Box<dyn Stage> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The counting stage's settings in `stages`, if it is on.
pub fn counting(stages: &StageSetups) -> Option<&CountingSetup> {
    stages.get::<Option<CountingSetup>>()?.as_ref()
}

/// The counting stage in the slices' list: on with its settings, or off.
impl StageSetup for Option<CountingSetup> {
    fn tag(&self) -> SectionTag {
        COUNTING_TAG
    }

    fn on(&self) -> bool {
        self.is_some()
    }

    /// Counting by the dedup key, the stage judges instead of the filter.
    fn judges_instead(&self) -> bool {
        self.as_ref().is_some_and(|c| c.count_key.is_none())
    }

    fn planned_bytes(&self) -> u64 {
        self.as_ref().map_or(0, CountingSetup::planned_bytes)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn fingerprint(&self) -> String {
        self.as_ref().map_or_else(String::new, CountingSetup::fingerprint)
    }

    fn start(&self) -> Option<Box<dyn Stage>> {
        self.as_ref().map(|s| Box::new(s.start()) as Box<dyn Stage>)
    }

    /// A counting stage on in the snapshot and off here, or the other way
    /// round, is refused: counts cannot be made up or dropped silently (the
    /// manifest's fingerprint refuses it first).
    fn restore(&self, section: Option<&[u8]>, _slice: u32) -> Result<Option<Box<dyn Stage>>, SnapshotError> {
        let mismatch = |snapshot: &str, configured: &str| SnapshotError::ParameterMismatch {
            parameter: "counting",
            snapshot: snapshot.to_string(),
            configured: configured.to_string(),
        };
        match (section, self) {
            (Some(bytes), Some(setup)) => Ok(Some(Box::new(setup.restore(bytes)?))),
            (Some(_), None) => Err(mismatch("on", "off")),
            (None, Some(_)) => Err(mismatch("off", "on")),
            (None, None) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::order::OrderSettings;
    use crate::engine::slice::stages::StageSetups;
    use crate::engine::slice::{self, Judgment, SliceRecord, SliceState, SliceVerdict};
    use crate::filter::spectral::{Estimator, SpectralParams};
    use crate::filter::{FilterChoice, FilterSpec};

    fn params() -> FilterChoice {
        FilterSpec { window_ms: 1000, expected_keys: 2_000, ..FilterSpec::default() }.resolve().unwrap().into()
    }

    fn setup(count_key: Option<KeySpec>) -> CountingSetup {
        CountingSetup {
            spec: CountingSpec {
                params: SpectralParams {
                    estimator: Estimator::Mi,
                    counters: 4096,
                    hashes: 5,
                    counter_bits: 8,
                    store: crate::filter::spectral::CounterKind::Compact,
                },
                window_ms: 1000,
                subwindows: 16,
                max_per_window: Some(3),
                flag_threshold: Some(5),
            },
            count_key,
            max_record_bytes: 100,
        }
    }

    fn extractor() -> Extractor {
        Extractor {
            key: "record-key".parse().unwrap(),
            time: "record-timestamp".parse().unwrap(),
            max_record_bytes: 100,
        }
    }

    fn order() -> OrderSettings {
        OrderSettings { lateness_ms: 200, max_clock_jump_ms: 100_000, jump_confirmations: 3 }
    }

    /// Record `i`: click id `i % 250` (a replay 750 ms later), IP header
    /// `i % 40`, or none for every 97th record; times jitter within the lateness.
    struct Log {
        keys: Vec<[u8; 8]>,
        ips: Vec<String>,
        times: Vec<i64>,
    }

    impl Log {
        fn new(n: u64) -> Self {
            let mut rng = crate::filter::random::Rng::new(11);
            Log {
                keys: (0..n).map(|i| (i % 250).to_le_bytes()).collect(),
                ips: (0..n).map(|i| if i % 97 == 5 { String::new() } else { format!("10.0.0.{}", i % 40) }).collect(),
                times: (0..n as i64).map(|i| 10_000 + i * 3 + rng.below(150) as i64).collect(),
            }
        }

        fn with<R>(&self, i: usize, f: impl FnOnce(&SliceRecord<'_>) -> R) -> R {
            let headers = [("ip", self.ips[i].as_bytes())];
            let n = if self.ips[i].is_empty() { 0 } else { 1 };
            let record = crate::engine::RecordView {
                key: Some(&self.keys[i]),
                headers: &headers[..n],
                timestamp_ms: Some(self.times[i]),
                ..Default::default()
            };
            f(&SliceRecord { offset: i as u64, record, source: None, reading: None })
        }

        fn feed(&self, s: &mut SliceState, range: std::ops::Range<usize>) -> Vec<Judgment> {
            let mut out = Vec::new();
            for i in range {
                self.with(i, |r| s.process(r, &extractor(), &mut out));
            }
            out
        }
    }

    fn stages(setup: &CountingSetup) -> StageSetups {
        crate::features::tests::stage_setups(Some(setup.clone()), None)
    }

    fn fresh(setup: &CountingSetup) -> SliceState {
        let mut s = SliceState::new(0, params(), 0, order());
        s.set_stages(&stages(setup));
        s
    }

    /// A slice counting by a separate key, snapshotted with records held
    /// for the watermark (their count keys re-read from the log), judges
    /// and flags the rest exactly as the uninterrupted slice; a record
    /// without the count key is a dead letter; the snapshot is version 4
    /// and is refused without the stage (and the other way round).
    #[test]
    fn counting_by_another_key_survives_a_snapshot() {
        let setup = setup(Some("header:ip".parse().unwrap()));
        let log = Log::new(4_000);
        let mut whole = fresh(&setup);
        let expected = log.feed(&mut whole, 0..4_000);
        let limited = expected.iter().filter(|j| j.notes.rule.is_some()).count();
        let flagged = expected.iter().filter(|j| j.notes.copy_count.is_some()).count();
        let missing = expected
            .iter()
            .filter(|j| matches!(&j.verdict, SliceVerdict::Invalid(w) if w.detail.starts_with("count key")))
            .count();
        assert!(limited > 100 && flagged > 10, "{limited} limited, {flagged} flagged");
        assert_eq!(missing, (0..4_000).filter(|i| i % 97 == 5).count());
        // Replays of a click id are dropped by the timer filter, not the limit.
        assert!(expected.iter().any(|j| matches!(j.verdict, SliceVerdict::Duplicate { .. }) && j.notes.rule.is_none()));

        let mut first = fresh(&setup);
        let mut got = log.feed(&mut first, 0..2_345);
        let bytes = slice::encode(&first);
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 4);
        let mut restored = slice::decode_full(&bytes, 0, &params(), order(), &stages(&setup)).unwrap();
        assert!(!restored.unfilled.is_empty(), "some records are held");
        let reread: Vec<_> = restored
            .unfilled
            .clone()
            .iter()
            .map(|&(o, _)| {
                log.with(o as usize, |r| {
                    assert!(restored.refill_stages(o, &r.record));
                    let (t, h) = restored.held_entry(&r.record, &extractor()).unwrap();
                    (o, t, h)
                })
            })
            .collect();
        restored.refill(reread).unwrap();
        assert_eq!(restored, first);
        got.extend(log.feed(&mut restored, 2_345..4_000));
        assert_eq!(got, expected);
        assert_eq!(restored, whole);

        let off = crate::features::tests::stage_setups(None, None);
        let e = slice::decode_full(&bytes, 0, &params(), order(), &off).unwrap_err();
        assert!(e.to_string().contains("counting"), "{e}");
        let e = slice::decode(&bytes, 0, &params(), order()).unwrap_err();
        assert!(e.to_string().contains("section 2"), "{e}");
        let plain = slice::encode(&SliceState::new(0, params(), 0, order()));
        assert_eq!(u16::from_le_bytes([plain[8], plain[9]]), 2, "without the stage: version 2");
        let e = slice::decode_full(&plain, 0, &params(), order(), &stages(&setup)).unwrap_err();
        assert!(e.to_string().contains("counting"), "{e}");
        let other = CountingSetup { spec: CountingSpec { subwindows: 32, ..setup.spec.clone() }, ..setup.clone() };
        let e = slice::decode_full(&bytes, 0, &params(), order(), &stages(&other)).unwrap_err();
        assert!(e.to_string().contains("subwindows"), "{e}");
        assert_ne!(setup.fingerprint(), other.fingerprint());
    }

    /// Counting by the dedup key, the stage replaces the timer filter: a
    /// key is let through 3 times per window, the 5th copy is flagged.
    #[test]
    fn counting_by_the_dedup_key_replaces_the_filter() {
        let setup = setup(None);
        let mut s = SliceState::new(
            0,
            params(),
            0,
            OrderSettings { lateness_ms: 0, max_clock_jump_ms: 100_000, jump_confirmations: 1 },
        );
        s.set_stages(&stages(&setup));
        let mut out = Vec::new();
        for i in 0..8u64 {
            let record =
                crate::engine::RecordView { key: Some(b"k"), timestamp_ms: Some(100 + i as i64), ..Default::default() };
            s.process(&SliceRecord { offset: i, record, source: None, reading: None }, &extractor(), &mut out);
        }
        let distinct: Vec<bool> = out.iter().map(|j| j.verdict == SliceVerdict::Distinct).collect();
        assert_eq!(distinct, [true, true, true, false, false, false, false, false]);
        let flagged: Vec<u64> = out.iter().filter(|j| j.notes.copy_count.is_some()).map(|j| j.offset).collect();
        assert_eq!(flagged, [4]);
        assert_eq!(s.filter.as_timer().expect("a timer filter").counters().events, 0, "the timer filter judged");
    }
}
