//! The counting stage in a slice (`[limit]`, `[flag]`; see
//! [`super::counting`] for the policies): what a slice needs besides the
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

use std::collections::HashMap;

use super::counting::{self, CountMark, CountingSpec, CountingStage};
use super::record::{Extractor, InvalidRecord, KeySpec, RecordView, TimeSpec};
use crate::filter::{KeyHash, SnapshotError};

/// The counting stage's settings (from `[limit]` and `[flag]`).
#[derive(Clone, Debug, PartialEq)]
pub struct CountingSetup {
    pub spec: CountingSpec,
    /// What records are counted by; `None`: the dedup key.
    pub count_key: Option<KeySpec>,
}

impl CountingSetup {
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
    pub fn start(&self, dedup: &Extractor) -> SliceCounting {
        SliceCounting {
            stage: self.spec.build().expect("counting settings validated at start-up"),
            key: self.extractor(dedup),
            pending: HashMap::new(),
        }
    }

    /// A stage restored from its snapshot section.
    pub fn restore(&self, bytes: &[u8], dedup: &Extractor) -> Result<SliceCounting, SnapshotError> {
        Ok(SliceCounting { stage: counting::decode(bytes, &self.spec)?, key: self.extractor(dedup), pending: HashMap::new() })
    }

    /// The count key's extractor (`None`: the dedup key). Only its key is
    /// read: the time is the dedup extractor's.
    fn extractor(&self, dedup: &Extractor) -> Option<Extractor> {
        self.count_key.clone().map(|key| Extractor { key, time: TimeSpec::Arrival, ..dedup.clone() })
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
    /// Whether the stage counts by the dedup key (and judges instead of the
    /// timer filter).
    pub fn replaces_filter(&self) -> bool {
        self.key.is_none()
    }

    /// Reads the count key of an arriving record (a separate count key
    /// only) and keeps its hash until the record is judged.
    pub fn arrived(&mut self, offset: u64, record: &RecordView<'_>, seed: u64) -> Result<(), InvalidRecord> {
        if let Some(hash) = self.count_hash(record, seed)? {
            self.pending.insert(offset, hash);
        }
        Ok(())
    }

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

    /// Counts the record at `position` (dedup key hash `dedup`) at
    /// `time_ms`; `delivered` is the timer filter's verdict when the stage
    /// does not replace it. Returns the mark if the record was counted.
    pub fn judge(&mut self, position: u64, dedup: &KeyHash, time_ms: u64, delivered: bool) -> Option<CountMark> {
        let hash = match self.key {
            None => *dedup,
            Some(_) => self.pending.remove(&position)?,
        };
        // Replays of a dedup key are not counted (as in pipe mode).
        delivered.then(|| self.stage.judge(&hash, time_ms))
    }

    /// A held record was refused (a time jump): its count key is dropped.
    pub fn refused(&mut self, position: u64) {
        self.pending.remove(&position);
    }
}
