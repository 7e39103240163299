//! Batched deduplication of records: extract, hash, then test the batch.
//!
//! The batch is the unit of work because the daemon receives batches from
//! Kafka, and because hashing a whole batch before touching the filter lets
//! the memory accesses of one batch overlap (prefetching, a later step).
//! Processing is deterministic: the same records in the same order give the
//! same verdicts.

use super::record::{Extractor, InvalidRecord, RecordView};
use crate::filter::{Event, KeyHash, SlicedFilter, Verdict};

/// What became of one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Distinct,
    Duplicate { equal_timers: u8 },
    Invalid(InvalidRecord),
}

/// Records in, outcomes out, over a sliced filter.
pub struct Deduplicator {
    filter: SlicedFilter,
    extractor: Extractor,
    seed: u64,
    passthrough: bool,
    events: Vec<Event>,
    verdicts: Vec<Verdict>,
}

impl Deduplicator {
    pub fn new(filter: SlicedFilter, extractor: Extractor) -> Self {
        let seed = filter.params().seed;
        Deduplicator { filter, extractor, seed, passthrough: false, events: Vec::new(), verdicts: Vec::new() }
    }

    /// With `on`, records are read (key and time extracted, unreadable ones
    /// reported) exactly as otherwise, but not hashed or filtered: every
    /// readable record is distinct. What dedup costs is the difference.
    pub fn with_passthrough(mut self, on: bool) -> Self {
        self.passthrough = on;
        self
    }

    pub fn filter(&self) -> &SlicedFilter {
        &self.filter
    }

    /// Judges a batch; `out` receives one outcome per record, in order.
    pub fn process_batch(&mut self, records: &[RecordView<'_>], arrival_ms: u64, out: &mut Vec<Outcome>) {
        out.clear();
        self.events.clear();
        if self.passthrough {
            out.extend(records.iter().map(|rec| match self.extractor.extract(rec, arrival_ms) {
                Ok(_) => Outcome::Distinct,
                Err(e) => Outcome::Invalid(e),
            }));
            return;
        }
        for rec in records {
            match self.extractor.extract(rec, arrival_ms) {
                Ok(x) => {
                    self.events.push(Event { hash: KeyHash::of(self.seed, &x.key), time_ms: x.time_ms });
                    out.push(Outcome::Distinct); // placeholder, replaced below
                }
                Err(e) => out.push(Outcome::Invalid(e)),
            }
        }
        self.verdicts.clear();
        self.filter.observe_batch(&self.events, &mut self.verdicts);
        let mut verdicts = self.verdicts.iter();
        for o in out.iter_mut().filter(|o| !matches!(o, Outcome::Invalid(_))) {
            *o = match verdicts.next().expect("one verdict per readable record") {
                Verdict::Distinct => Outcome::Distinct,
                Verdict::Duplicate { equal_timers } => Outcome::Duplicate { equal_timers: *equal_timers },
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::FilterSpec;

    #[test]
    fn outcomes_in_input_order() {
        let spec = FilterSpec { window_ms: 1000, expected_keys: 100, slices: 4, ..FilterSpec::default() };
        let extractor =
            Extractor { key: "json:/k".parse().unwrap(), time: "json:/t".parse().unwrap(), max_record_bytes: 1 << 20 };
        let mut d = Deduplicator::new(SlicedFilter::new(&spec).unwrap(), extractor);
        let lines = [r#"{"k":"a","t":1}"#, "oops", r#"{"k":"b","t":2}"#, r#"{"k":"a","t":3}"#, r#"{"k":"a","t":2000}"#];
        let recs: Vec<RecordView> =
            lines.iter().map(|l| RecordView { payload: l.as_bytes(), ..Default::default() }).collect();
        let mut out = Vec::new();
        d.process_batch(&recs, 0, &mut out);
        assert_eq!(out[0], Outcome::Distinct);
        assert!(matches!(out[1], Outcome::Invalid(_)));
        assert_eq!(out[2], Outcome::Distinct);
        assert!(matches!(out[3], Outcome::Duplicate { .. }));
        assert_eq!(out[4], Outcome::Distinct);

        let mut p = Deduplicator::new(SlicedFilter::new(&spec).unwrap(), d.extractor.clone()).with_passthrough(true);
        p.process_batch(&recs, 0, &mut out);
        assert_eq!(out[0], Outcome::Distinct);
        assert!(matches!(out[1], Outcome::Invalid(_)));
        assert_eq!(&out[2..], &[Outcome::Distinct, Outcome::Distinct, Outcome::Distinct]);
        assert_eq!(p.filter().stats().events, 0);
    }
}
