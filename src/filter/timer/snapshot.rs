//! The binary snapshot of one slice's filter: versioned, checksummed, and
//! refused with a precise error when it does not fit the configured filter.
//!
//! Layout (version 1, little-endian):
//!
//! ```text
//! magic "DEDUPDSS" | version u16
//! parameters: seed u64, cells u64, hashes u32, timer_bits u8 (+ 0x80 in the
//!             blocked layout), tick_ms u64, window_ms u64
//! clock: present u8, clock_ms u64
//! counters: events, distinct, duplicates, late_events, generations_created,
//!           generations_dropped, saturated_inserts (u64 each), generations_max u32,
//!           equal-timer counts (u32 n, n × u64)
//! generations: u32 n, then per generation:
//!           level u8, m u64, inserted u64, sweep_cursor u64, sweep_debt u64,
//!           cell bytes (u64 len, bytes)
//! checksum: XXH3-64 of everything above, u64
//! ```
//!
//! Version 2 is written by deletable filters only (`filter.deletable`):
//! the same, with each generation's counting cells after its timer cells
//! (u64 len = m, then one byte per cell). A non-deletable filter writes
//! version 1 byte for byte as before, and both versions are read.
//!
//! The layout flag in the top bit of the timer width keeps the bytes of a
//! standard-layout snapshot exactly what they were before layouts existed
//! (and a build without layouts refuses a blocked snapshot, on its width).
//!
//! The parameters are the ones the cell contents depend on; a snapshot taken
//! with any other value of them cannot be read correctly and is refused. The
//! policy settings (fpr, growth, equal timers, generation cap) may change
//! between runs: the restored generations keep their size and new ones
//! follow the new settings. Histograms and live counts are not stored; they
//! are rebuilt from the cells, so a snapshot cannot carry inconsistent ones.

use super::cells::CellArray;
use super::clock::Now;
use super::generation::{Generation, StoredGeneration};
use super::sliding::{FilterCounters, SlidingFilter};
use crate::filter::envelope::{SnapshotError, begin, check, open_any, put_u32, put_u64, seal_in_place};
use crate::filter::timer::params::{FilterParams, Layout, MAX_LEVEL};

/// The first bytes of every slice snapshot.
pub const MAGIC: [u8; 8] = crate::filter::envelope::TIMER_MAGIC;
/// The format version of a filter without counting cells.
pub const VERSION: u16 = 1;
/// The format version of a deletable filter (counting cells per generation).
pub const VERSION_COUNTING: u16 = 2;

/// Encodes a slice's complete state.
pub fn encode(filter: &SlidingFilter) -> Vec<u8> {
    let skeleton = Skeleton::of(filter);
    let mut out = vec![0; skeleton.len()];
    skeleton.write(filter, &mut out);
    seal_in_place(&mut out);
    out
}

/// A filter's encoding but for its cells: every other byte, and where each
/// generation's cells go. A checkpoint lays it out in a buffer it reuses,
/// then copies the cells in while the slice goes on ([`super::copy`]).
pub(crate) struct Skeleton {
    /// The encoding without the cells, the checksum left as zeros.
    head: Vec<u8>,
    /// Generation i's cells go at `head` position `cells[i].0`, `cells[i].1` bytes long.
    cells: Vec<(usize, usize)>,
}

impl Skeleton {
    pub(crate) fn of(filter: &SlidingFilter) -> Skeleton {
        let p = &filter.params;
        let version = if p.deletable { VERSION_COUNTING } else { VERSION };
        let mut w = begin(MAGIC, version, 256);
        put_u64(&mut w, p.seed);
        put_u64(&mut w, p.cells);
        put_u32(&mut w, p.hashes);
        w.push(p.timer_bits | layout_flag(p.layout));
        put_u64(&mut w, p.tick_ms);
        put_u64(&mut w, p.window_ms);

        w.push(u8::from(filter.clock_ms.is_some()));
        put_u64(&mut w, filter.clock_ms.unwrap_or(0));

        let c = &filter.counters;
        for v in [
            c.events,
            c.distinct,
            c.duplicates,
            c.late_events,
            c.generations_created,
            c.generations_dropped,
            c.saturated_inserts,
        ] {
            put_u64(&mut w, v);
        }
        put_u32(&mut w, c.generations_max);
        put_u32(&mut w, c.equal_timer_counts.len() as u32);
        for &v in &c.equal_timer_counts {
            put_u64(&mut w, v);
        }

        put_u32(&mut w, filter.generations.len() as u32);
        let mut cells = Vec::with_capacity(filter.generations.len());
        for g in &filter.generations {
            w.push(g.level);
            for v in [g.m, g.inserted, g.sweep_cursor, g.sweep_debt] {
                put_u64(&mut w, v);
            }
            let bytes = g.cells.storage().len();
            put_u64(&mut w, bytes as u64);
            cells.push((w.len(), bytes));
            // The counting cells are copied now, with the rest of the
            // head: a copy in progress is the state when it began.
            if let Some(counts) = &g.counts {
                put_u64(&mut w, counts.len() as u64);
                w.extend_from_slice(counts);
            }
        }
        put_u64(&mut w, 0); // the checksum, once the cells are in
        Skeleton { head: w, cells }
    }

    /// Writes `filter`'s whole encoding but the checksum to `out`
    /// ([`Self::len`] bytes).
    pub(crate) fn write(&self, filter: &SlidingFilter, out: &mut [u8]) {
        for (g, range) in filter.generations.iter().zip(self.place(out)) {
            g.cells.write_le(0..range.len(), &mut out[range]);
        }
    }

    /// Bytes of the whole encoding.
    pub(crate) fn len(&self) -> usize {
        self.head.len() + self.cells.iter().map(|&(_, n)| n).sum::<usize>()
    }

    /// Writes every byte of the encoding but the cells' (and the checksum)
    /// to `out`, which is [`Self::len`] bytes long; returns where in `out`
    /// each generation's cells go. The cells' bytes are left as they were
    /// (a reused buffer is not cleared: they are all overwritten later).
    pub(crate) fn place(&self, out: &mut [u8]) -> Vec<std::ops::Range<usize>> {
        debug_assert_eq!(out.len(), self.len());
        let (mut from, mut to) = (0, 0);
        let mut ranges = Vec::with_capacity(self.cells.len());
        for &(at, bytes) in &self.cells {
            out[to..to + at - from].copy_from_slice(&self.head[from..at]);
            to += at - from;
            ranges.push(to..to + bytes);
            (from, to) = (at, to + bytes);
        }
        out[to..].copy_from_slice(&self.head[from..]);
        ranges
    }
}

/// Restores a slice from `bytes`, checking it against the configured `params`.
pub fn decode(bytes: &[u8], params: &FilterParams) -> Result<SlidingFilter, SnapshotError> {
    let (mut r, version) = open_any(bytes, MAGIC, VERSION..=VERSION_COUNTING)?;
    check(version == VERSION_COUNTING, params.deletable, "deletable")?;
    check(r.u64()?, params.seed, "seed")?;
    check(r.u64()?, params.cells, "cells")?;
    check(r.u32()?, params.hashes, "hashes")?;
    let width = r.u8()?;
    let layout = match width & LAYOUT_FLAGS {
        0 => Layout::Standard.as_str(),
        BLOCKED_FLAG => Layout::Blocked.as_str(),
        // Blocks of one 64-byte line (dedupd before blocks of 256 cells).
        _ => "blocked in 64-byte lines (an earlier dedupd: start without this snapshot)",
    };
    check(layout, params.layout.as_str(), "layout")?;
    check(width & !LAYOUT_FLAGS, params.timer_bits, "timer_bits")?;
    check(r.u64()?, params.tick_ms, "tick_ms")?;
    check(r.u64()?, params.window_ms, "window_ms")?;

    let has_clock = r.u8()? != 0;
    let clock = r.u64()?;
    let clock_ms = has_clock.then_some(clock);
    let now = clock_ms.map(|c| Now::at(c / params.tick_ms, params));

    let mut counters = FilterCounters {
        events: r.u64()?,
        distinct: r.u64()?,
        duplicates: r.u64()?,
        late_events: r.u64()?,
        generations_created: r.u64()?,
        generations_dropped: r.u64()?,
        saturated_inserts: r.u64()?,
        generations_max: r.u32()?,
        equal_timer_counts: Vec::new(),
    };
    let n = r.u32()? as usize;
    if n != params.hashes as usize + 1 {
        return Err(SnapshotError::Malformed(format!("{n} equal-timer counts for k = {}", params.hashes)));
    }
    counters.equal_timer_counts = (0..n).map(|_| r.u64()).collect::<Result<_, _>>()?;

    let count = r.u32()? as usize;
    if count == 0 || count > 64 {
        return Err(SnapshotError::Malformed(format!("{count} generations (expected 1 to 64)")));
    }
    let mut generations = Vec::with_capacity(count);
    for _ in 0..count {
        let level = r.u8()?;
        let (m, inserted, sweep_cursor, sweep_debt) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        if level > MAX_LEVEL || m < 2 || sweep_cursor >= m || sweep_debt >= u64::from(params.sweep_ticks) {
            return Err(SnapshotError::Malformed(format!(
                "generation level {level}, {m} cells, sweep at {sweep_cursor} owing {sweep_debt}"
            )));
        }
        let len = r.u64()? as usize;
        let raw = r.take(len)?;
        let cells = CellArray::from_le_bytes(params.timer_bits, m as usize, raw).ok_or_else(|| {
            SnapshotError::Malformed(format!("{len} bytes of cells for {m} cells of {} bits", params.timer_bits))
        })?;
        // The hot loops index tables of R + 1 entries by cell value unchecked.
        let max = cells.max_value(m as usize);
        if max > params.period {
            return Err(SnapshotError::Malformed(format!(
                "a cell holds the time value {max}, above the timer period {}",
                params.period
            )));
        }
        // Without a clock nothing was ever inserted; set cells would be
        // left out of the live count now and come alive once a clock is
        // set, so the restored filter would not be the one snapshotted.
        if clock_ms.is_none() && max > 0 {
            return Err(SnapshotError::Malformed(format!(
                "a cell holds the time value {max} but the filter has no clock (it never saw an event)"
            )));
        }
        let counts = match version {
            VERSION_COUNTING => {
                let n = r.u64()?;
                if n != m {
                    return Err(SnapshotError::Malformed(format!("{n} counting cells for {m} cells")));
                }
                Some(r.take(n as usize)?.to_vec())
            }
            _ => None,
        };
        let stored = StoredGeneration { level, m, cells, inserted, sweep_cursor, sweep_debt, counts };
        if let Some((at, value, why)) =
            now.as_ref().and_then(|now| stored.first_impossible_cell(now, params.sweep_ticks))
        {
            return Err(SnapshotError::Malformed(format!(
                "cell {at} holds the time value {value}, which {why} (dedupd never leaves such a cell)"
            )));
        }
        generations.push(Generation::restore(stored, now, params));
    }
    r.finish()?;
    Ok(SlidingFilter::from_parts(params.clone(), clock_ms, generations, counters))
}

/// Set in the timer-width byte of a blocked-layout snapshot (widths are at
/// most 32). 0x80 marked the blocked layout of one 64-byte line per block,
/// whose snapshots are refused.
const BLOCKED_FLAG: u8 = 0x40;
const LAYOUT_FLAGS: u8 = 0xC0;

fn layout_flag(layout: Layout) -> u8 {
    match layout {
        Layout::Standard => 0,
        Layout::Blocked => BLOCKED_FLAG,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::envelope::seal;
    use crate::filter::hash::{DEFAULT_SEED, KeyHash};
    use crate::filter::timer::params::FilterSpec;
    use twox_hash::XxHash3_64;

    fn spec() -> FilterSpec {
        FilterSpec { window_ms: 10_000, expected_keys: 500, ..FilterSpec::default() }
    }

    fn busy_filter() -> SlidingFilter {
        let mut f = SlidingFilter::new(spec().resolve().unwrap());
        for i in 0..3_000u64 {
            f.observe(&KeyHash::of(DEFAULT_SEED, &(i % 1_700).to_le_bytes()), 1_000 + i * 5);
        }
        f
    }

    #[test]
    fn round_trip_is_identical() {
        let f = busy_filter();
        assert!(f.generations().len() > 1);
        let bytes = encode(&f);
        assert_eq!(decode(&bytes, f.params()).unwrap(), f);
        let empty = SlidingFilter::new(spec().resolve().unwrap());
        assert_eq!(decode(&encode(&empty), empty.params()).unwrap(), empty);
    }

    /// A well-formed, correctly checksummed snapshot whose cell holds a time
    /// value above the timer period is refused (the hot loops would index
    /// past their tables).
    #[test]
    fn deletable_filters_round_trip_with_their_counting_cells() {
        let params = FilterSpec { deletable: true, ..spec() }.resolve().unwrap();
        let mut f = SlidingFilter::new(params.clone());
        for i in 0..2_000u64 {
            f.observe(&KeyHash::of(7, &i.to_le_bytes()), 1_000 + i);
        }
        for i in 0..100u64 {
            let _ = f.delete(&KeyHash::of(7, &i.to_le_bytes()));
        }
        let bytes = encode(&f);
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), VERSION_COUNTING);
        let mut back = decode(&bytes, &params).unwrap();
        assert_eq!(back, f);
        // The restored counts work: deleting goes on exactly as in the original.
        for i in 100..200u64 {
            let h = KeyHash::of(7, &i.to_le_bytes());
            assert_eq!(back.delete(&h), f.delete(&h));
        }
        assert_eq!(back, f);
        // Either way round, a change of `deletable` is refused by name.
        let plain = spec().resolve().unwrap();
        let e = decode(&bytes, &plain).unwrap_err();
        assert!(matches!(e, SnapshotError::ParameterMismatch { parameter: "deletable", .. }), "{e}");
        let e = decode(&encode(&SlidingFilter::new(plain)), &params).unwrap_err();
        assert!(matches!(e, SnapshotError::ParameterMismatch { parameter: "deletable", .. }), "{e}");
    }

    #[test]
    fn refuses_a_cell_value_above_the_period() {
        let spec = FilterSpec { timer_bits: 16, ..spec() };
        let mut f = SlidingFilter::new(spec.resolve().unwrap());
        f.observe(&KeyHash::of(DEFAULT_SEED, b"k"), 1_000);
        let period = f.params().period;
        assert!(period < u32::from(u16::MAX));
        let good = encode(&f);
        // The last cell of the last generation: the two bytes before the checksum.
        let mut body = good[..good.len() - 8].to_vec();
        let at = body.len() - 2;
        body[at..].copy_from_slice(&(period as u16 + 1).to_le_bytes());
        let e = decode(&seal(body), f.params()).unwrap_err();
        assert!(e.to_string().contains(&format!("time value {}, above the timer period {period}", period + 1)), "{e}");
        assert!(decode(&good, f.params()).is_ok());
    }

    /// A cell right behind the sweep (the sweep comes back to it in L
    /// ticks) holding a time old enough to come round again before then:
    /// a state the sweep never leaves, refused (the fuzzer's inputs of this
    /// kind are in tests/fuzz_regressions.rs).
    #[test]
    fn refuses_a_cell_the_sweep_would_not_clear_in_time() {
        use crate::filter::timer::cells::{TimerCells, with_cells};
        use crate::filter::timer::clock::Now;
        let mut f = busy_filter();
        let p = f.params().clone();
        f.observe(&KeyHash::of(DEFAULT_SEED, b"later"), 20 * u64::from(p.period) * p.tick_ms);
        assert!(decode(&encode(&f), &p).is_ok());
        let now = Now::at(f.clock_ms().unwrap() / p.tick_ms, &p);
        let g = &mut f.generations[0];
        let behind = (g.sweep_cursor + g.m - 1) % g.m;
        let age = p.period - p.sweep_ticks;
        let value = (now.value + p.period - age - 1) % p.period + 1;
        assert_eq!(now.age(value), age);
        with_cells!(&mut g.cells, c => c.set(behind as usize, value));
        let e = decode(&encode(&f), &p).unwrap_err();
        let want = format!("cell {behind} holds the time value {value}, which would look young again before the sweep");
        assert!(e.to_string().contains(&want), "{e}");
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        let f = busy_filter();
        let bytes = encode(&f);
        let params = f.params();

        let mut flipped = bytes.clone();
        flipped[40] ^= 1;
        assert!(matches!(decode(&flipped, params), Err(SnapshotError::ChecksumMismatch { .. })));

        let mut magic = bytes.clone();
        magic[0] = b'X';
        assert!(matches!(decode(&magic, params), Err(SnapshotError::BadMagic { .. })));

        let mut version = bytes.clone();
        version[8] = 9;
        let e = decode(&version, params).unwrap_err();
        assert_eq!(e, SnapshotError::UnsupportedVersion { expected: VERSION_COUNTING, got: 9 });

        assert!(matches!(decode(&bytes[..5], params), Err(SnapshotError::Truncated { .. })));
        assert!(matches!(decode(&bytes[..bytes.len() - 1], params), Err(SnapshotError::ChecksumMismatch { .. })));

        let other = FilterSpec { hashes: Some(5), ..spec() }.resolve().unwrap();
        let e = decode(&bytes, &other).unwrap_err();
        assert_eq!(
            e,
            SnapshotError::ParameterMismatch { parameter: "hashes", snapshot: "7".into(), configured: "5".into() }
        );
        assert!(e.to_string().contains("hashes = 7 but this filter has hashes = 5"));
        let other = FilterSpec { timer_bits: 16, ..spec() }.resolve().unwrap();
        assert!(matches!(
            decode(&bytes, &other),
            Err(SnapshotError::ParameterMismatch { parameter: "timer_bits", .. })
        ));
        let other = FilterSpec { seed: 7, ..spec() }.resolve().unwrap();
        assert!(matches!(decode(&bytes, &other), Err(SnapshotError::ParameterMismatch { parameter: "seed", .. })));
    }

    fn blocked_spec() -> FilterSpec {
        FilterSpec { layout: crate::filter::Layout::Blocked, ..spec() }
    }

    #[test]
    fn blocked_layout_round_trips_and_is_refused_by_the_other_layout() {
        for bits in [4u8, 8, 16, 32] {
            let blocked = FilterSpec { timer_bits: bits, ..blocked_spec() };
            let mut f = SlidingFilter::new(blocked.resolve().unwrap());
            for i in 0..3_000u64 {
                f.observe(&KeyHash::of(DEFAULT_SEED, &(i % 1_700).to_le_bytes()), 1_000 + i * 5);
            }
            assert!(f.counters().duplicates > 0);
            let bytes = encode(&f);
            let restored = decode(&bytes, f.params()).unwrap();
            assert_eq!(restored, f);
            // The standard filter of the same settings refuses it, saying why.
            let cells = Some(f.params().cells);
            let standard = FilterSpec { timer_bits: bits, total_cells: cells, ..spec() }.resolve().unwrap();
            assert_eq!(standard.cells, f.params().cells);
            let e = decode(&bytes, &standard).unwrap_err();
            assert_eq!(
                e,
                SnapshotError::ParameterMismatch {
                    parameter: "layout",
                    snapshot: "blocked".into(),
                    configured: "standard".into()
                }
            );
            assert!(e.to_string().contains("layout = blocked but this filter has layout = standard"), "{e}");
        }
        // And the other way round.
        let blocked = FilterSpec { total_cells: Some(256 * 23), ..blocked_spec() }.resolve().unwrap();
        let f = SlidingFilter::new(FilterSpec { total_cells: Some(256 * 23), ..spec() }.resolve().unwrap());
        let e = decode(&encode(&f), &blocked).unwrap_err();
        assert!(e.to_string().contains("layout = standard but this filter has layout = blocked"), "{e}");
    }

    #[test]
    fn standard_snapshots_keep_the_plain_timer_width() {
        let f = busy_filter();
        // magic 8, version 2, seed 8, cells 8, hashes 4: the width is byte 30.
        assert_eq!(encode(&f)[30], f.params().timer_bits);
        let b = SlidingFilter::new(blocked_spec().resolve().unwrap());
        assert_eq!(encode(&b)[30], b.params().timer_bits | 0x40);
    }

    #[test]
    fn snapshots_of_the_line_blocked_layout_are_refused() {
        let b = SlidingFilter::new(blocked_spec().resolve().unwrap());
        let mut bytes = encode(&b);
        bytes[30] = b.params().timer_bits | 0x80;
        let body = bytes.len() - 8;
        let sum = XxHash3_64::oneshot(&bytes[..body]);
        bytes[body..].copy_from_slice(&sum.to_le_bytes());
        let e = decode(&bytes, b.params()).unwrap_err();
        assert!(e.to_string().contains("64-byte lines (an earlier dedupd: start without this snapshot)"), "{e}");
    }
}
