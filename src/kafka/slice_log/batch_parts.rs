//! A slice-log batch's records kept in memory, not encoded: what shared
//! mode's router hands its own slice (`features/shared/handoff.rs`). Its
//! own module so that the read orders' reader of named records can name it
//! without the batch format, which builds on the read orders' positions.

/// A batch's records as a [`super::batch::BatchBuilder`] gathered them, not encoded: a
/// batch that never leaves the process (shared mode's handed-over page)
/// needs no envelope, no copy into one and no checksum.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BatchParts {
    pub(super) topics: Vec<String>,
    pub(super) body: Vec<u8>,
    pub(super) count: u32,
}

impl BatchParts {
    /// Bytes it holds in memory (the room made for its records, and its
    /// topic names): what a handoff counts against its budget.
    pub fn bytes(&self) -> usize {
        self.body.capacity() + self.topics.iter().map(String::len).sum::<usize>()
    }

    /// Gives back the room made for records that never came, when the
    /// room is over twice what its records take: a page is reserved at its
    /// first record for a full read order, and a quiet stream fills it
    /// with a few.
    pub fn fit(&mut self) {
        if self.body.capacity() > 2 * self.body.len() {
            self.body.shrink_to_fit();
        }
    }

    /// Parts of `body` alone, `count` records (a test's stand-in for a page).
    #[cfg(test)]
    pub fn raw(body: Vec<u8>, count: u32) -> Self {
        BatchParts { topics: Vec::new(), body, count }
    }
}
