//! Shared mode's handoff (`slicing.mode = "shared"`, docs/shared-mode.md):
//! the records a router names in a read-order record, handed in memory to
//! the slice of the same process, so that the slice does not fetch them
//! from the input a second time.
//!
//! It is a shortcut and nothing more: the read-order record stays what the
//! slice judges by (its place in the slice log, its virtual positions, its
//! replay). The router copies the records it names into a *page* (a
//! slice-log batch, [`BatchBuilder`], kept in memory) and hands it over
//! before it writes the read-order record; the slice takes the page by the
//! read-order record's checksum and uses it only if it holds exactly the
//! records that record names, in its order. Any other read-order record (a
//! router of another process, a replay, a page not taken in time) is read
//! from the input as before.
//!
//! Pages are made only while the slice is this process's: the slice worker
//! attaches the handoff when the group assigns it the slice and detaches it
//! when the slice goes (or when the group gives this process no slice).
//! Until the worker's group has answered, the router waits (at most
//! [`UNDECIDED_FOR`]): a router that started first would otherwise name a
//! backlog's first records with no page, and the slice read them all from
//! the input again.
//!
//! The pages count against the shared input reader's prefetch, which they
//! stand in for: half of it is theirs ([`Handoff::for_prefetch`]). While
//! they fill that half, the router takes no more records from its consumer
//! (librdkafka's prefetch fills and stops fetching: nothing fetched is
//! dropped, as a pause would drop it), so that a router ahead of the slice
//! waits for it rather than sending it back to the input. A page not taken
//! within [`STALE_AFTER`] goes (the slice passed its read-order record, or
//! is busy replaying older ones), so a router never waits longer than that.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::config::{Resolved, SlicingMode};
use crate::engine::{Reading, SourceRef};
use crate::kafka::consumed::Consumed;
use crate::kafka::out_record::OutHeaders;
use crate::kafka::slice_log::batch::{BatchBuilder, BatchEntry, BatchParts};

/// A page not taken this long after it came is dropped (the slice passed
/// its read-order record, or the record was never written; or the slice is
/// replaying older records and reads those from the input anyway).
pub const STALE_AFTER: Duration = Duration::from_secs(10);

/// How long the router waits for the slice worker of its process to learn
/// whether the slice is its own, at most: past it, the router routes
/// without pages until the worker knows.
pub const UNDECIDED_FOR: Duration = Duration::from_secs(10);

/// A waiting router goes on once the pages leave this share of their part
/// free (1/4).
const ROOM_TO_GO_ON: usize = 4;

/// What the router is to do about pages, asked once per turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handing {
    /// The slice is not this process's: make no page.
    Off,
    /// Make a page of what is named, of at most this many bytes (what the
    /// pages handed over leave of their part).
    Room(usize),
    /// Take and route nothing for now: the pages fill their part of the
    /// budget, or the worker does not know yet whether the slice is its own.
    Wait,
}

/// Whether the slice is this process's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holder {
    /// Not known yet: since when.
    Undecided(Instant),
    Here,
    Elsewhere,
}

/// The pages in flight between a process's router and its slice.
pub struct Handoff {
    pages: Mutex<Pages>,
    /// Told when pages are taken or the holder changes (a waiting router goes on).
    changed: Condvar,
    /// The bytes the pages may take together.
    capacity: usize,
}

struct Pages {
    /// In the order the router handed them over.
    queue: VecDeque<Page>,
    bytes: usize,
    holder: Holder,
}

/// A read-order record's records, copied (a slice-log batch's parts, not
/// encoded: it stays in the process).
struct Page {
    /// The read-order record's checksum (its last eight bytes).
    key: u64,
    batch: BatchParts,
    came: Instant,
}

/// The handoff of a process in shared mode (its router and its slice
/// share it), sized from the budget's prefetch of a consumer.
pub fn of(cfg: &Resolved) -> Option<Arc<Handoff>> {
    (cfg.slicing == SlicingMode::Shared).then(|| Arc::new(Handoff::for_prefetch(cfg.budget.consumer_queue)))
}

impl Handoff {
    /// A handoff whose pages take at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        let pages = Pages { queue: VecDeque::new(), bytes: 0, holder: Holder::Undecided(Instant::now()) };
        Handoff { pages: Mutex::new(pages), changed: Condvar::new(), capacity }
    }

    /// The handoff of a shared input reader whose prefetch is
    /// `prefetch_bytes` (`queued.max.messages.kbytes`, from the budget):
    /// half of it, the reader keeping the other half.
    pub fn for_prefetch(prefetch_bytes: u64) -> Self {
        Self::new(usize::try_from(prefetch_bytes / 2).unwrap_or(usize::MAX))
    }

    /// The prefetch the shared input reader keeps beside the handoff of
    /// [`Self::for_prefetch`].
    pub fn reader_prefetch(prefetch_bytes: u64) -> u64 {
        prefetch_bytes - prefetch_bytes / 2
    }

    /// The most bytes the pages take together.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// What the router is to do now (see [`Handing`]); drops the pages a
    /// slice will not take.
    pub fn handing(&self, now: Instant) -> Handing {
        let mut pages = self.pages.lock().expect("handoff lock");
        match pages.holder {
            Holder::Undecided(since) if now.saturating_duration_since(since) < UNDECIDED_FOR => Handing::Wait,
            Holder::Undecided(_) | Holder::Elsewhere => Handing::Off,
            Holder::Here if self.capacity == 0 => Handing::Off,
            Holder::Here => {
                pages.drop_stale(now);
                // Not for a sliver of room: a page of a record or two is
                // no cheaper to make than a larger one, and the record that
                // does not fit would be read from the input again.
                match self.capacity.saturating_sub(pages.bytes) {
                    room if room < self.capacity / ROOM_TO_GO_ON => Handing::Wait,
                    room => Handing::Room(room),
                }
            }
        }
    }

    /// Waits up to `timeout` for pages to be taken or the holder to change
    /// (a router told [`Handing::Wait`]).
    pub fn wait(&self, timeout: Duration) {
        let pages = self.pages.lock().expect("handoff lock");
        drop(self.changed.wait_timeout(pages, timeout).expect("handoff lock"));
    }

    /// Hands over `page` for the read-order record `encoded` (the router
    /// calls this before it writes the record). Dropped if the slice is no
    /// longer this process's or the page does not fit.
    pub fn hand_over(&self, encoded: &[u8], page: BatchParts, now: Instant) {
        let Some(key) = key_of(encoded) else { return };
        let mut pages = self.pages.lock().expect("handoff lock");
        if pages.holder != Holder::Here || pages.bytes + page.bytes() > self.capacity {
            return;
        }
        pages.bytes += page.bytes();
        pages.queue.push_back(Page { key, batch: page, came: now });
    }

    /// The page of the read-order record `encoded`, if the router of this
    /// process handed one over: a slice-log batch of its records, to be
    /// checked against the record before use. The pages handed over before
    /// it go (the slice reads the slice log in order, so it has passed
    /// their records).
    pub fn take(&self, encoded: &[u8]) -> Option<BatchParts> {
        let key = key_of(encoded)?;
        let mut pages = self.pages.lock().expect("handoff lock");
        let at = pages.queue.iter().position(|p| p.key == key)?;
        let older: usize = pages.queue.drain(..at).map(|p| p.batch.bytes()).sum();
        let page = pages.queue.pop_front().expect("found above");
        pages.bytes -= older + page.batch.bytes();
        self.changed.notify_all();
        Some(page.batch)
    }

    /// The slice is this process's from now on: the router makes pages.
    pub fn attach(&self) {
        self.set_holder(Holder::Here);
    }

    /// The slice is not this process's (any more): the pages go, and no
    /// more are made.
    pub fn detach(&self) {
        self.set_holder(Holder::Elsewhere);
    }

    fn set_holder(&self, holder: Holder) {
        let mut pages = self.pages.lock().expect("handoff lock");
        pages.holder = holder;
        if holder != Holder::Here {
            pages.queue.clear();
            pages.bytes = 0;
        }
        self.changed.notify_all();
    }

    /// Bytes the pages take now.
    pub fn bytes(&self) -> usize {
        self.pages.lock().expect("handoff lock").bytes
    }
}

impl Pages {
    fn drop_stale(&mut self, now: Instant) {
        while let Some(page) = self.queue.front()
            && now.saturating_duration_since(page.came) >= STALE_AFTER
        {
            self.bytes -= page.batch.bytes();
            self.queue.pop_front();
        }
    }
}

/// A read-order record's checksum: its last eight bytes (the envelope's
/// seal), which tell it from any other the slice meets.
fn key_of(encoded: &[u8]) -> Option<u64> {
    let tail = encoded.len().checked_sub(8).map(|at| &encoded[at..])?;
    Some(u64::from_le_bytes(tail.try_into().ok()?))
}

/// What a page's record takes beside its key, value and headers: its
/// stamp (14 bytes), reading (32), timestamp, lengths and a header's length
/// fields (a few), at least.
const ENTRY_BYTES: usize = 96;

/// Room a page makes for its records at its first, at most (a page of
/// 4 096 records of a few hundred bytes takes one or two megabytes).
const RESERVE_AT_MOST: usize = 4 << 20;

/// A page being filled by the router, alongside its read-order record: the
/// records it names, as they are (headers included), with the router's
/// readings of them (key hash and event time), which the read-order record
/// then leaves out: a slice that reads those records from the input instead
/// reads their key and time itself, as it does a version 1 record's.
pub struct PageBuilder {
    batch: BatchBuilder,
    /// What its records take, as [`Self::fits`] counts them.
    counted: usize,
    max_bytes: usize,
    /// Records it is expected to hold, at most.
    records: usize,
    /// A record could not be copied: the page cannot stand for its
    /// read-order record, which the slice then reads from the input.
    broken: bool,
}

impl PageBuilder {
    /// A page of about `max_bytes` at most ([`Handing::Room`]), of about
    /// `records` records (room for them is made at the first, by its size).
    pub fn new(max_bytes: usize, records: usize) -> Self {
        let batch = BatchBuilder::new(u32::MAX, usize::MAX);
        PageBuilder { batch, counted: 0, max_bytes, records, broken: false }
    }

    /// Whether a record whose key, value and headers take `record_bytes`
    /// still fits (an empty page takes any: one too large for the handoff
    /// is not kept).
    pub fn fits(&self, record_bytes: usize) -> bool {
        self.batch.is_empty() || self.counted + record_bytes + ENTRY_BYTES <= self.max_bytes
    }

    /// Copies the next record named, `msg` of `topic` with its headers, its
    /// key, value and headers taking `record_bytes`, read as `reading`.
    pub fn push(
        &mut self,
        msg: &Consumed<'_>,
        topic: &str,
        headers: OutHeaders<'_>,
        record_bytes: usize,
        reading: Reading,
    ) {
        let entry = BatchEntry {
            source: SourceRef { topic, partition: msg.partition(), offset: msg.offset() },
            reading: Some(reading),
            timestamp_ms: msg.timestamp().to_millis(),
            key: msg.key(),
            headers,
            payload: msg.payload(),
        };
        if self.batch.is_empty() {
            // Grown by doubling, a page of a megabyte was copied over and
            // over. Not more than RESERVE_AT_MOST on a guess from one
            // record; room left unfilled is given back at `finish`.
            let expected = (record_bytes + ENTRY_BYTES).saturating_mul(self.records);
            self.batch.reserve(expected.min(self.max_bytes).min(RESERVE_AT_MOST));
        }
        self.counted += record_bytes + ENTRY_BYTES;
        self.broken |= self.batch.push(&entry, |_| true).is_none();
    }

    /// The page for a read-order record naming `named` records, if it holds them all.
    pub fn finish(&mut self, named: u64) -> Option<BatchParts> {
        let whole = !self.broken && u64::from(self.batch.len()) == named && !self.batch.is_empty();
        let mut page = self.batch.take_parts();
        page.fit();
        self.broken = false;
        self.counted = 0;
        whole.then_some(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(fill: u8, bytes: usize) -> BatchParts {
        BatchParts::raw(vec![fill; bytes], 1)
    }

    fn encoded(key: u64) -> Vec<u8> {
        let mut e = b"read order".to_vec();
        e.extend_from_slice(&key.to_le_bytes());
        e
    }

    #[test]
    fn the_router_waits_until_the_worker_knows_whose_the_slice_is() {
        let h = Handoff::new(100);
        let now = Instant::now();
        assert_eq!(h.handing(now), Handing::Wait, "undecided");
        assert_eq!(h.handing(now + UNDECIDED_FOR), Handing::Off, "undecided for too long: no pages");
        h.hand_over(&encoded(1), page(0, 10), now);
        assert_eq!(h.bytes(), 0, "undecided: no page kept");
        h.detach();
        assert_eq!(h.handing(now), Handing::Off, "another process's slice");
        h.hand_over(&encoded(1), page(0, 10), now);
        assert_eq!((h.bytes(), h.take(&encoded(1))), (0, None));
        h.attach();
        assert_eq!(h.handing(now), Handing::Room(100), "this process's slice");
    }

    #[test]
    fn a_page_is_taken_by_its_record_and_those_before_it_go() {
        let h = Handoff::new(100);
        let now = Instant::now();
        h.attach();
        h.hand_over(&encoded(1), page(1, 10), now);
        h.hand_over(&encoded(2), page(2, 20), now);
        h.hand_over(&encoded(3), page(3, 30), now);
        assert_eq!((h.bytes(), h.handing(now)), (60, Handing::Room(40)));
        assert_eq!(h.take(&encoded(9)), None, "another router's record");
        assert_eq!(h.take(&encoded(2)), Some(page(2, 20)), "its own page");
        assert_eq!(h.bytes(), 30, "the page before it went with it");
        assert_eq!(h.take(&encoded(1)), None);
        assert_eq!(h.take(&encoded(3)), Some(page(3, 30)));
        assert_eq!(h.bytes(), 0);
        assert_eq!(h.take(b"short"), None, "no checksum, no page");
    }

    #[test]
    fn full_pages_hold_the_router_back_until_taken_stale_or_detached() {
        let h = Handoff::new(50);
        let now = Instant::now();
        h.attach();
        h.hand_over(&encoded(1), page(1, 30), now);
        h.hand_over(&encoded(2), page(2, 30), now);
        assert_eq!(h.bytes(), 30, "a page over the capacity is not kept");
        h.hand_over(&encoded(3), page(3, 8), now + STALE_AFTER / 2);
        assert_eq!(h.handing(now), Handing::Room(12), "a quarter free");
        h.hand_over(&encoded(5), page(5, 1), now + STALE_AFTER / 2);
        assert_eq!(h.handing(now), Handing::Wait, "less than a quarter free");
        assert_eq!(h.handing(now + STALE_AFTER), Handing::Room(50 - 9), "the page not taken in time went");
        assert_eq!(h.take(&encoded(3)), Some(page(3, 8)));
        h.hand_over(&encoded(4), page(4, 49), now);
        assert_eq!(h.handing(now), Handing::Wait);
        h.detach();
        assert_eq!((h.handing(now), h.bytes()), (Handing::Off, 0), "detached: the pages went");
        assert_eq!(h.take(&encoded(4)), None);
    }

    #[test]
    fn a_waiting_router_goes_on_when_a_page_is_taken() {
        let h = Arc::new(Handoff::new(10));
        h.attach();
        h.hand_over(&encoded(1), page(1, 10), Instant::now());
        let taker = {
            let h = h.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                h.take(&encoded(1))
            })
        };
        let waited = Instant::now();
        while h.handing(Instant::now()) == Handing::Wait {
            h.wait(Duration::from_secs(10));
        }
        assert!(waited.elapsed() < Duration::from_secs(5), "woken by the take, not the timeout");
        assert_eq!(taker.join().unwrap(), Some(page(1, 10)));
    }

    #[test]
    fn the_prefetch_is_halved_between_the_reader_and_the_pages() {
        let h = Handoff::for_prefetch(16 << 20);
        assert_eq!(h.capacity() as u64 + Handoff::reader_prefetch(16 << 20), 16 << 20);
        assert_eq!(Handoff::reader_prefetch(3), 2);
    }
}
