//! The records a slice holds for the watermark, by slice offset, with
//! their bytes: what `slicing.max_held_bytes` bounds.

use std::collections::HashMap;

use crate::kafka::held_record::HeldRecord;

/// Held records and the bytes of their keys, values and headers.
#[derive(Default)]
pub(super) struct HeldRecords {
    records: HashMap<u64, HeldRecord>,
    bytes: usize,
}

impl HeldRecords {
    pub(super) fn insert(&mut self, offset: u64, record: HeldRecord) {
        self.bytes += record.counted();
        if let Some(old) = self.records.insert(offset, record) {
            self.bytes -= old.counted();
        }
    }

    pub(super) fn remove(&mut self, offset: &u64) -> Option<HeldRecord> {
        let record = self.records.remove(offset)?;
        self.bytes -= record.counted();
        Some(record)
    }

    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Gives back room a backlog left (see [`crate::engine::shrink_target`]).
    pub(super) fn shrink(&mut self) {
        if let Some(to) = crate::engine::shrink_target(self.records.len(), self.records.capacity()) {
            self.records.shrink_to(to);
        }
    }
}

impl FromIterator<(u64, HeldRecord)> for HeldRecords {
    fn from_iter<I: IntoIterator<Item = (u64, HeldRecord)>>(iter: I) -> Self {
        let mut held = HeldRecords::default();
        for (offset, record) in iter {
            held.insert(offset, record);
        }
        held
    }
}
