//! Tests of the cell arrays: every width and layout, the sweeps, the split into parts.

use super::*;

/// What a snapshot's cell bytes are checked against before allocating
/// is what an array of that many cells takes; an absurd count is refused
/// without an allocation (a fuzzed snapshot claimed 2^62 cells).
#[test]
fn the_size_check_matches_the_arrays() {
    for width in 4u8..=32 {
        for m in [2, 3, 63, 64, 65, 1000, 4097] {
            let cells = CellArray::new(width, m);
            assert_eq!(CellArray::bytes_for(width, m), Some(cells.memory_bytes()), "{width} bits, {m} cells");
        }
        assert!(CellArray::from_le_bytes(width, 1 << 62, &[0; 64]).is_none());
    }
}

#[test]
fn every_width_stores_its_full_range() {
    for width in 4u8..=32 {
        let m = 37;
        let mut cells = CellArray::new(width, m);
        let max = if width == 32 { u32::MAX } else { (1u32 << width) - 1 };
        with_cells!(&mut cells, c => {
            for i in 0..m {
                c.set(i, (i as u32).wrapping_mul(2_654_435_761) & max);
            }
            c.set(5, max);
            for i in 0..m {
                let want = if i == 5 { max } else { (i as u32).wrapping_mul(2_654_435_761) & max };
                assert_eq!(c.get(i), want, "width {width} cell {i}");
            }
        });
        let bytes = cells.to_le_bytes();
        assert_eq!(CellArray::from_le_bytes(width, m, &bytes).as_ref(), Some(&cells));
        assert!(CellArray::from_le_bytes(width, m + 64, &bytes).is_none());
    }
}

#[test]
fn plain_cells_start_on_a_cache_line() {
    for width in [4u8, 8, 16, 32] {
        for m in [64, 1000, 1 << 20] {
            let cells = CellArray::new(width, m);
            with_cells!(&cells, c => assert_eq!(c.cell_addr(0) as usize % 64, 0, "width {width}, {m} cells"));
        }
    }
    let empty = Lines::<u16>::zeroed(0);
    assert!(empty.is_empty());
    let mut a = Lines::<u32>::zeroed(100);
    a[99] = 7;
    let b = a.clone();
    assert_eq!(b[99], 7);
    assert_eq!(b.as_ptr() as usize % 64, 0);
}

/// The vectorised sweeps (plain lanes, nibble pairs) clear exactly the
/// cells [`Now::is_dead`] names, over ranges of every alignment.
#[test]
fn sweeps_clear_exactly_the_dead_cells() {
    use crate::filter::timer::params::FilterSpec;
    for width in [4u8, 5, 8, 16, 32] {
        let p = FilterSpec { timer_bits: width, window_ms: 60_000, ..FilterSpec::default() }.resolve().unwrap();
        let m = 301;
        let mut state = u64::from(width);
        let mut next = move || {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as u32
        };
        for tick in [0u64, 1, u64::from(p.window_ticks), u64::from(p.period) - 1, 3 * u64::from(p.period) + 5] {
            let now = Now::at(tick, &p);
            for (start, n) in [(0, m), (1, m - 1), (3, 200), (7, 0), (100, 1), (m - 2, 2)] {
                let mut cells = CellArray::new(width, m);
                let values: Vec<u32> = (0..m).map(|_| next() % (p.period + 1)).collect();
                with_cells!(&mut cells, c => {
                    for (i, v) in values.iter().enumerate() {
                        c.set(i, *v);
                    }
                    c.clear_dead(start, n, &now);
                    for (i, v) in values.iter().enumerate() {
                        let want = if (start..start + n).contains(&i) && now.is_dead(*v) { 0 } else { *v };
                        assert_eq!(c.get(i), want, "width {width}, tick {tick}, range {start}+{n}, cell {i}");
                    }
                });
            }
        }
    }
}

#[cfg(feature = "vertical")]
/// Parts of a split array read and write exactly the array's cells,
/// for every storage (nibbles, plain, bit-packed), with parts of every
/// size down to empty, and the last part's end not a multiple of 64.
#[test]
fn split_parts_are_the_array() {
    for width in [4u8, 5, 8, 12, 16, 31, 32] {
        let m = 64 * 9 + 37;
        let ends = [64, 64, 256, 512, m];
        let (mut whole, mut split) = (CellArray::new(width, m), CellArray::new(width, m));
        let max = if width == 32 { u32::MAX } else { (1u32 << width) - 1 };
        let mut parts = split.split_mut(m, &ends);
        assert_eq!(parts.len(), ends.len());
        for i in 0..m {
            let v = (i as u32).wrapping_mul(2_654_435_761) & max;
            with_cells!(&mut whole, c => c.set(i, v));
            let owner = parts.iter_mut().find(|p| p.holds(i)).expect("every cell has a part");
            owner.set(i, v);
            assert_eq!(owner.get(i), v);
            assert_eq!(parts.iter().filter(|p| p.holds(i)).count(), 1);
        }
        drop(parts);
        assert_eq!(whole, split, "{width}-bit");
    }
}

#[test]
fn narrow_cells_are_packed() {
    assert_eq!(CellArray::new(4, 1000).memory_bytes(), 500);
    assert_eq!(CellArray::new(6, 1024).memory_bytes(), 768);
    assert_eq!(CellArray::new(8, 1000).memory_bytes(), 1000);
    assert_eq!(CellArray::new(16, 1000).memory_bytes(), 2000);
}
