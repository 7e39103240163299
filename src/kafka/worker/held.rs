//! The records a slice holds for the watermark, by slice offset, with
//! their bytes: what `slicing.max_held_bytes` bounds.

use std::collections::HashMap;

use rdkafka::message::OwnedMessage;

/// Held records and the bytes of their keys, values and headers.
#[derive(Default)]
pub(super) struct HeldRecords {
    records: HashMap<u64, OwnedMessage>,
    bytes: usize,
}

use crate::kafka::record_bytes;

impl HeldRecords {
    pub(super) fn insert(&mut self, offset: u64, msg: OwnedMessage) {
        self.bytes += record_bytes(&msg);
        if let Some(old) = self.records.insert(offset, msg) {
            self.bytes -= record_bytes(&old);
        }
    }

    pub(super) fn remove(&mut self, offset: &u64) -> Option<OwnedMessage> {
        let msg = self.records.remove(offset)?;
        self.bytes -= record_bytes(&msg);
        Some(msg)
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

impl FromIterator<(u64, OwnedMessage)> for HeldRecords {
    fn from_iter<I: IntoIterator<Item = (u64, OwnedMessage)>>(iter: I) -> Self {
        let mut held = HeldRecords::default();
        for (offset, msg) in iter {
            held.insert(offset, msg);
        }
        held
    }
}
