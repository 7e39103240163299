//! The records a slice holds for the watermark, by slice offset, with
//! their bytes: what `slicing.max_held_bytes` bounds.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::kafka::held_record::HeldRecord;

/// Held records and the bytes of their keys, values and headers.
#[derive(Default)]
pub(super) struct HeldRecords {
    records: HashMap<u64, HeldRecord, BuildHasherDefault<PositionHasher>>,
    bytes: usize,
}

/// Hashes a slice position (an offset, or a virtual position of a read
/// order's or batch's record) with one multiplication: positions are
/// numbered by the broker and the router, not chosen by whoever writes a
/// record, so the default hasher's defence against chosen keys (SipHash,
/// a visible share of the per-record path, where every record is held and
/// removed once) buys nothing here. The product's high half folded into
/// its low one (where the table picks a bucket) spreads positions that
/// differ only in their high bits: the same index in different batches.
#[derive(Default)]
pub(super) struct PositionHasher(u64);

impl Hasher for PositionHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
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
