//! Copying a slice's filter while it goes on judging events (copy-on-write).
//!
//! A checkpoint needs the state at one moment. Copying ~1 GiB of cells in
//! one go stops the slice for as long as the copy takes, and on cores shared
//! with other busy threads that is whenever the scheduler lets it finish
//! (tens to hundreds of ms for a copy of a few ms of CPU). A [`FilterCopy`]
//! instead lays out the filter's snapshot encoding at once, all but the
//! cells (counters, clock, generation headers: bytes), in a buffer the
//! caller reuses from one snapshot to the next, then copies the cells into
//! it in chunks of [`CHUNK_BYTES`]: a little at a time when the caller
//! says so ([`FilterCopy::advance`]), and — the copy-on-write part — any
//! chunk whose cells are about to change, before they change. The filter
//! tells the copy of every cell write through `CellWrites` (an insert's k
//! cells, a sweep's run, a clear, a dropped generation), so every chunk is
//! copied as it was when the copy began, and the finished buffer is the
//! snapshot of the filter at that moment, byte for byte.
//!
//! The copy goes straight into the encoding: no second copy of the filter
//! is kept, and the buffer is the one thing the snapshot needs besides the
//! live state. The ordinary path ([`SlidingFilter::observe`]) tells no one:
//! it runs with `Untold`, whose calls compile to nothing.

use std::ops::Range;

use super::generation::{CellWrites, Generation};
use super::sliding::{DeleteRefusal, SlidingFilter, Verdict};
use super::snapshot::Skeleton;
use crate::filter::hash::KeyHash;

/// Bytes of cell storage copied as one piece: small enough that copying
/// one is a pause of microseconds, large enough that the bookkeeping (a
/// bit per chunk) stays small (2 000 chunks for 123 MiB). A multiple of 8,
/// so that chunks hold whole cell words.
pub const CHUNK_BYTES: usize = 64 << 10;

/// A filter's snapshot encoding as the filter was when the copy began,
/// filled in while the filter goes on (see the module documentation).
/// While it is in progress, every event of the filter must go through
/// [`SlidingFilter::observe_copying`] with it.
#[derive(Debug)]
pub struct FilterCopy {
    /// The buffer (possibly longer than needed: see [`FilterCopy::begin`]):
    /// the encoding in `encoding`, all in place but the cells (and its
    /// checksum) from the start; generation i's cells as `parts[i]` says.
    image: Vec<u8>,
    /// Where the filter's encoding lies in `image`.
    encoding: Range<usize>,
    parts: Vec<Part>,
    /// Bytes per chunk.
    chunk: usize,
}

/// The progress of one generation's cells.
#[derive(Debug)]
struct Part {
    /// Which of the filter's generations this is: the address of its cell
    /// storage, which stays put for the generation's life (never
    /// dereferenced). 0 once the generation is gone (all of it copied), so
    /// that a later generation at the same address is not taken for it.
    source: usize,
    /// Where its cells go in the image (as long as its storage).
    target: Range<usize>,
    /// A bit per chunk: copied.
    copied: Vec<u64>,
    /// Chunks not copied yet.
    left: usize,
    /// Every chunk below this one has been copied.
    cursor: usize,
}

impl Part {
    fn is(&self, g: &Generation) -> bool {
        let storage = g.cells.storage();
        self.source == storage.as_ptr() as usize && self.target.len() == storage.len()
    }

    fn chunks(&self, chunk: usize) -> usize {
        self.target.len().div_ceil(chunk)
    }

    /// Copies chunk `c` of `g`'s cells into `image` unless it was copied before.
    fn save(&mut self, c: usize, chunk: usize, g: &Generation, image: &mut [u8]) {
        let (word, bit) = (c / 64, 1u64 << (c % 64));
        if self.copied[word] & bit != 0 {
            return;
        }
        self.copied[word] |= bit;
        self.left -= 1;
        let from = c * chunk..((c + 1) * chunk).min(self.target.len());
        let to = self.target.start + from.start..self.target.start + from.end;
        g.cells.write_le(from, &mut image[to]);
    }

    /// Copies the next chunks not copied yet, at most `budget`; returns how
    /// many it copied.
    fn advance(&mut self, budget: usize, chunk: usize, g: &Generation, image: &mut [u8]) -> usize {
        let mut done = 0;
        while done < budget && self.left > 0 && self.cursor < self.chunks(chunk) {
            let before = self.left;
            self.save(self.cursor, chunk, g, image);
            done += before - self.left;
            self.cursor += 1;
        }
        done
    }
}

impl SlidingFilter {
    /// Starts a copy of this filter's snapshot encoding into `buffer`
    /// (cleared first; its memory is reused: a checkpoint keeps one buffer,
    /// so that copying writes into pages already mapped); see [`FilterCopy`].
    pub fn begin_copy(&self, buffer: Vec<u8>) -> FilterCopy {
        FilterCopy::begin(self, buffer, 0, 0, CHUNK_BYTES)
    }

    /// [`SlidingFilter::observe`] while `copy` (begun on this filter) is in
    /// progress: the same verdict and state, and the cells it writes are
    /// saved to the copy first.
    pub fn observe_copying(&mut self, hash: &KeyHash, time_ms: u64, copy: &mut FilterCopy) -> Verdict {
        self.observe_telling(hash, time_ms, copy)
    }

    /// [`SlidingFilter::delete`] while `copy` is in progress, as
    /// [`Self::observe_copying`].
    pub fn delete_copying(&mut self, hash: &KeyHash, copy: &mut FilterCopy) -> Result<(), DeleteRefusal> {
        self.delete_telling(hash, copy)
    }
}

impl FilterCopy {
    /// Lays out `source`'s encoding in `buffer` after its first `at` bytes
    /// (kept: the caller's own header), followed by `trailer` bytes for the
    /// caller; cells copied in chunks of `chunk` bytes.
    pub(crate) fn begin(
        source: &SlidingFilter,
        mut buffer: Vec<u8>,
        at: usize,
        trailer: usize,
        chunk: usize,
    ) -> FilterCopy {
        debug_assert!(chunk % 8 == 0 && buffer.len() >= at);
        let skeleton = Skeleton::of(source);
        let end = at + skeleton.len();
        // The buffer is never shortened (a shorter snapshot leaves stale
        // bytes beyond its end), so a reused one is never cleared: every
        // byte of the encoding is overwritten by the copy, and clearing a
        // gigabyte would be a pause for nothing. A buffer too small is
        // replaced by a fresh zeroed allocation, which the kernel maps
        // lazily: its pages are faulted in by the chunk copies, a few at a
        // time, not all at once here.
        if buffer.len() < end + trailer {
            let mut fresh = vec![0; end + trailer];
            fresh[..at].copy_from_slice(&buffer[..at]);
            buffer = fresh;
        }
        let targets = skeleton.place(&mut buffer[at..end]);
        let parts = source
            .generations
            .iter()
            .zip(targets)
            .map(|(g, t)| {
                let target = at + t.start..at + t.end;
                let chunks = target.len().div_ceil(chunk);
                Part {
                    source: g.cells.storage().as_ptr() as usize,
                    target,
                    copied: vec![0; chunks.div_ceil(64)],
                    left: chunks,
                    cursor: 0,
                }
            })
            .collect();
        FilterCopy { image: buffer, encoding: at..end, parts, chunk }
    }

    /// Whether every cell has been copied.
    pub fn is_complete(&self) -> bool {
        self.parts.iter().all(|p| p.left == 0)
    }

    /// Bytes of cells still to copy.
    pub fn bytes_left(&self) -> usize {
        self.parts.iter().map(|p| p.left * self.chunk).sum()
    }

    /// Copies up to `budget_bytes` more of the cells (at least one chunk)
    /// from `source`, the filter the copy was begun on; returns whether the
    /// copy is complete.
    pub fn advance(&mut self, source: &SlidingFilter, budget_bytes: usize) -> bool {
        let mut budget = budget_bytes.div_ceil(self.chunk).max(1);
        for part in &mut self.parts {
            if budget == 0 {
                break;
            }
            if part.left == 0 {
                continue;
            }
            // A generation the filter no longer has was copied in full when
            // it was dropped (`dropping`).
            let g = source.generations.iter().find(|g| part.is(g)).expect("a generation being copied is alive");
            budget -= part.advance(budget, self.chunk, g, &mut self.image);
        }
        self.is_complete()
    }

    /// Copies whatever is left from `source` (the filter the copy was begun
    /// on) and returns the buffer and where the filter's encoding lies in
    /// it (the buffer may be longer): complete but for its checksum (its last 8 bytes; see
    /// [`crate::filter::envelope::seal_in_place`]), which is left to whoever writes
    /// it out (hashing a gigabyte is not for the thread that judges events).
    pub fn finish(mut self, source: &SlidingFilter) -> (Vec<u8>, Range<usize>) {
        self.advance(source, usize::MAX);
        debug_assert!(self.is_complete());
        (self.image, self.encoding)
    }

    /// Saves the chunks holding storage bytes `first..=last` of `g`.
    fn save(&mut self, g: &Generation, first: usize, last: usize) {
        let Some(part) = self.parts.iter_mut().find(|p| p.is(g)) else {
            return; // a generation made after the copy began
        };
        if part.left == 0 {
            return;
        }
        for c in first / self.chunk..=last / self.chunk {
            part.save(c, self.chunk, g, &mut self.image);
        }
    }
}

impl CellWrites for FilterCopy {
    const ACTIVE: bool = true;

    fn cell(&mut self, g: &Generation, i: usize) {
        let (first, last) = g.cells.storage_span(i);
        self.save(g, first, last);
    }

    fn cells(&mut self, g: &Generation, start: usize, n: usize) {
        if n > 0 {
            let (first, last) = (g.cells.storage_span(start).0, g.cells.storage_span(start + n - 1).1);
            self.save(g, first, last);
        }
    }

    fn all(&mut self, g: &Generation) {
        let bytes = g.cells.storage().len();
        if bytes > 0 {
            self.save(g, 0, bytes - 1);
        }
    }

    fn dropping(&mut self, g: &Generation) {
        self.all(g);
        if let Some(part) = self.parts.iter_mut().find(|p| p.is(g)) {
            part.source = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::KeyHash;
    use crate::filter::hash::DEFAULT_SEED;
    use crate::filter::timer::params::{FilterSpec, Growth, Layout};
    use crate::filter::timer::snapshot;
    use crate::testkit::workload::Rng;

    /// Finishes `copy` and seals it: the snapshot bytes, and the buffer.
    fn sealed(copy: FilterCopy, f: &SlidingFilter) -> (Vec<u8>, Vec<u8>) {
        let (mut image, encoding) = copy.finish(f);
        crate::filter::envelope::seal_in_place(&mut image[encoding.clone()]);
        (image[encoding].to_vec(), image)
    }

    fn spec(bits: u8, layout: Layout, growth: Growth) -> FilterSpec {
        FilterSpec {
            window_ms: 20_000,
            expected_keys: 3_000,
            timer_bits: bits,
            // Coarse enough for 4-bit timers, fine enough for many ticks.
            tick_ms: Some(if bits == 4 { 4_000 } else { 500 }),
            growth,
            layout,
            ..FilterSpec::default()
        }
    }

    /// How a test drives a filter.
    #[derive(Clone, Copy)]
    struct Drive {
        events: usize,
        /// Events come 1..=gap ms apart (6: about twice the expected load).
        gap: u64,
        /// A jump of the clock past the window at this event (every cell
        /// expires: cleared, then generations dropped).
        jump_at: Option<usize>,
        /// The copy takes a chunk in the background every this many events
        /// (0: never; only copy-on-write and the final `finish`).
        advance_every: usize,
    }

    /// Drives `f` with `d.events` events, a third of them recent keys, the
    /// rest new ones.
    fn drive(f: &mut SlidingFilter, rng: &mut Rng, clock: &mut u64, d: Drive, mut copy: Option<&mut FilterCopy>) {
        for i in 0..d.events {
            *clock += 1 + rng.below(d.gap);
            if d.jump_at == Some(i) {
                *clock += 25_000;
            }
            let key = if rng.below(3) == 0 { rng.below(2_000) } else { rng.next_u64() };
            let hash = KeyHash::of(DEFAULT_SEED, &key.to_le_bytes());
            match copy.as_deref_mut() {
                Some(c) => {
                    f.observe_copying(&hash, *clock, c);
                    if d.advance_every > 0 && i % d.advance_every == 0 {
                        c.advance(f, 1);
                    }
                }
                None => {
                    f.observe(&hash, *clock);
                }
            }
        }
    }

    /// Whatever happens to the filter while the copy is in progress, the
    /// finished copy is the filter as it was when the copy began: equal,
    /// and encoded to the same bytes. The rounds cover inserts and sweeps
    /// (every round), a clock jump that clears every cell before most of it
    /// is copied (rounds 1 and 3), a tripled load (round 2: generations
    /// added, with growth), and a copy left to copy-on-write alone (rounds 2
    /// and 3). The buffer is new in round 0, then the previous round's,
    /// reused when it is long enough (its stale bytes must all be
    /// overwritten), behind a header of the caller's that must be kept.
    #[test]
    fn a_finished_copy_is_the_filter_when_the_copy_began() {
        let rounds = [
            Drive { events: 15_000, gap: 6, jump_at: None, advance_every: 200 },
            Drive { events: 15_000, gap: 6, jump_at: Some(2), advance_every: 200 },
            Drive { events: 30_000, gap: 2, jump_at: None, advance_every: 0 },
            Drive { events: 15_000, gap: 6, jump_at: Some(2), advance_every: 0 },
        ];
        for bits in [4u8, 8, 12, 16, 32] {
            for layout in [Layout::Standard, Layout::Blocked] {
                for growth in [Growth::None, Growth::Density] {
                    let params = spec(bits, layout, growth).resolve().expect("valid spec");
                    let mut f = SlidingFilter::new(params.clone());
                    let (mut rng, mut clock) = (Rng::new(u64::from(bits)), 1_000_000u64);
                    let warm_up = Drive { events: 20_000, gap: 6, jump_at: None, advance_every: 0 };
                    drive(&mut f, &mut rng, &mut clock, warm_up, None);
                    let mut buffer = Vec::new();
                    for (round, d) in rounds.into_iter().enumerate() {
                        let expected = snapshot::encode(&f);
                        let header = vec![round as u8 + 1; round];
                        buffer[..round].copy_from_slice(&header);
                        // Chunks of 512 bytes: these filters hold 10–200 of them.
                        let mut copy = FilterCopy::begin(&f, buffer, round, 0, 512);
                        drive(&mut f, &mut rng, &mut clock, d, Some(&mut copy));
                        let what = format!("bits {bits} {layout:?} {growth:?} round {round}");
                        assert!(snapshot::encode(&f) != expected, "{what}: the filter should have moved on");
                        let (done, image) = sealed(copy, &f);
                        assert!(done == expected, "{what}: the copy differs from the filter when it began");
                        assert_eq!(image[..round], header, "{what}");
                        buffer = image;
                    }
                }
            }
        }
    }

    /// Deletes while a copy of a deletable filter is in progress: the copy
    /// is still the filter when it began (cells and counting cells).
    #[test]
    fn deletes_during_a_copy_leave_the_copy_as_it_began() {
        for layout in [Layout::Standard, Layout::Blocked] {
            let params = FilterSpec { deletable: true, ..spec(8, layout, Growth::Density) }.resolve().unwrap();
            let mut f = SlidingFilter::new(params);
            let (mut rng, mut clock) = (Rng::new(5), 1_000_000u64);
            drive(
                &mut f,
                &mut rng,
                &mut clock,
                Drive { events: 20_000, gap: 6, jump_at: None, advance_every: 0 },
                None,
            );
            let expected = snapshot::encode(&f);
            let mut copy = FilterCopy::begin(&f, Vec::new(), 0, 0, 512);
            let mut deleted = 0;
            for i in 0..20_000u64 {
                let hash = KeyHash::of(DEFAULT_SEED, &i.to_le_bytes());
                deleted += usize::from(f.delete_copying(&hash, &mut copy).is_ok());
            }
            assert!(deleted > 100, "{layout:?}: {deleted} deleted");
            assert!(snapshot::encode(&f) != expected, "{layout:?}: the deletes changed the filter");
            let (done, _) = sealed(copy, &f);
            assert!(done == expected, "{layout:?}: the copy differs from the filter when it began");
        }
    }

    /// A generation that expires and is dropped while the copy is in
    /// progress, most of its cells not copied yet, is copied in full first.
    #[test]
    fn a_generation_dropped_during_the_copy_is_copied_first() {
        let params = spec(8, Layout::Standard, Growth::Density).resolve().expect("valid spec");
        let mut f = SlidingFilter::new(params.clone());
        let (mut rng, mut clock) = (Rng::new(3), 1_000_000u64);
        let one = Drive { events: 1, gap: 2, jump_at: None, advance_every: 0 };
        // Triple the expected load until a second generation starts.
        for _ in 0..100_000 {
            if f.generations().len() >= 2 {
                break;
            }
            drive(&mut f, &mut rng, &mut clock, one, None);
        }
        assert_eq!(f.generations().len(), 2);
        let expected = snapshot::encode(&f);
        let mut copy = FilterCopy::begin(&f, Vec::new(), 0, 0, 512);
        // The older generation takes no more inserts; only the sweep writes
        // it, a fraction of it per tick, until it expires a window later.
        let dropped = f.counters().generations_dropped;
        let mut left_before_drop = 0;
        for _ in 0..200_000 {
            if f.counters().generations_dropped > dropped {
                break;
            }
            left_before_drop = copy.bytes_left();
            drive(&mut f, &mut rng, &mut clock, one, Some(&mut copy));
        }
        assert!(f.counters().generations_dropped > dropped, "a generation should have been dropped");
        assert!(
            left_before_drop > 4 * 512,
            "the drop should come before most of the copy: {left_before_drop} bytes left"
        );
        assert!(sealed(copy, &f).0 == expected);
    }

    /// Copying only in the background (no writes at all) also completes,
    /// chunk by chunk, and the copy is exact.
    #[test]
    fn advance_alone_completes_the_copy() {
        let params = spec(8, Layout::Standard, Growth::None).resolve().expect("valid spec");
        let mut f = SlidingFilter::new(params.clone());
        let (mut rng, mut clock) = (Rng::new(1), 1_000_000u64);
        drive(&mut f, &mut rng, &mut clock, Drive { events: 5_000, gap: 6, jump_at: None, advance_every: 0 }, None);
        let mut copy = FilterCopy::begin(&f, Vec::new(), 0, 0, 512);
        let chunks = copy.bytes_left().div_ceil(512);
        assert!(chunks >= 10 && !copy.is_complete(), "{chunks} chunks");
        let mut steps = 0;
        while !copy.advance(&f, 1) {
            steps += 1;
        }
        assert_eq!(steps + 1, chunks);
        assert!(sealed(copy, &f).0 == snapshot::encode(&f));
    }
}
