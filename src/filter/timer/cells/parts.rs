//! The parts of a cell array that vertical slicing's owners hold: cells
//! `start..end` of an array, borrowed mutably, split at [`PART_ALIGN`] so
//! no two parts share a byte or a word of storage.

use bitvec::prelude::*;

use super::{CellArray, nibble_get, nibble_set};

/// Cells are split between owners ([`CellArray::split_mut`]) only at
/// multiples of this many: 64 cells of any width are whole bytes and whole
/// 64-bit words (4-bit cells share bytes, odd widths share words), so two
/// parts never share a byte or a word of storage.
pub(crate) const PART_ALIGN: usize = 64;

/// Cells `start..end` of an array on their own, borrowed mutably: the part
/// one owner reads and writes while other threads hold the other parts
/// (see [`crate::filter::timer::vertical`]). Cells are addressed by their index in the
/// whole array.
pub(crate) struct CellsPart<'a> {
    start: usize,
    end: usize,
    cells: PartCells<'a>,
}

/// The storage of a [`CellsPart`], from its first cell.
enum PartCells<'a> {
    Nibble(&'a mut [u8]),
    Byte(&'a mut [u8]),
    Half(&'a mut [u16]),
    Word(&'a mut [u32]),
    /// The 64-bit words of bit-packed cells, and the width.
    Packed(&'a mut [u64], usize),
}

impl CellsPart<'_> {
    /// Whether cell `i` (of the whole array) is in this part.
    #[inline(always)]
    pub(crate) fn holds(&self, i: usize) -> bool {
        (self.start..self.end).contains(&i)
    }

    /// Cell `i` (of the whole array; in this part).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> u32 {
        debug_assert!(self.holds(i));
        let j = i - self.start;
        match &self.cells {
            PartCells::Nibble(b) => nibble_get(b, j),
            PartCells::Byte(c) => u32::from(c[j]),
            PartCells::Half(c) => u32::from(c[j]),
            PartCells::Word(c) => c[j],
            PartCells::Packed(words, w) => BitSlice::<u64, Lsb0>::from_slice(words)[j * w..(j + 1) * w].load_le(),
        }
    }

    /// Sets cell `i` (of the whole array; in this part).
    #[inline]
    pub(crate) fn set(&mut self, i: usize, v: u32) {
        debug_assert!(self.holds(i));
        let j = i - self.start;
        match &mut self.cells {
            PartCells::Nibble(b) => nibble_set(b, j, v),
            PartCells::Byte(c) => c[j] = v as u8,
            PartCells::Half(c) => c[j] = v as u16,
            PartCells::Word(c) => c[j] = v,
            PartCells::Packed(words, w) => {
                BitSlice::<u64, Lsb0>::from_slice_mut(words)[j * *w..(j + 1) * *w].store_le::<u32>(v)
            }
        }
    }

    /// The address of the byte holding cell `i` (in this part), to prefetch.
    #[inline]
    pub(crate) fn cell_addr(&self, i: usize) -> *const u8 {
        let j = i - self.start;
        match &self.cells {
            PartCells::Nibble(b) => b.as_ptr().wrapping_add(j >> 1),
            PartCells::Byte(c) => c.as_ptr().wrapping_add(j),
            PartCells::Half(c) => c.as_ptr().wrapping_add(j).cast(),
            PartCells::Word(c) => c.as_ptr().wrapping_add(j).cast(),
            PartCells::Packed(words, w) => words.as_ptr().cast::<u8>().wrapping_add(j * w / 8),
        }
    }
}

impl CellArray {
    /// Splits the array of `m` cells into parts ending at `ends` (ascending,
    /// the last `m`, every other a multiple of [`PART_ALIGN`]); part n holds
    /// cells `ends[n-1]..ends[n]` (from 0 for the first).
    pub(crate) fn split_mut(&mut self, m: usize, ends: &[usize]) -> Vec<CellsPart<'_>> {
        debug_assert_eq!(ends.last(), Some(&m));
        debug_assert!(ends.windows(2).all(|w| w[0] <= w[1]));
        debug_assert!(ends[..ends.len() - 1].iter().all(|e| e % PART_ALIGN == 0));
        match self {
            CellArray::Nibble(c) => split_storage(&mut c.0, ends, |i| i / 2, PartCells::Nibble),
            CellArray::Byte(c) => split_storage(c, ends, |i| i, PartCells::Byte),
            CellArray::Half(c) => split_storage(c, ends, |i| i, PartCells::Half),
            CellArray::Word(c) => split_storage(c, ends, |i| i, PartCells::Word),
            CellArray::Packed(c) => {
                let w = c.width;
                split_storage(c.bits.as_raw_mut_slice(), ends, |i| i * w / 64, |words| PartCells::Packed(words, w))
            }
        }
    }
}

/// [`CellArray::split_mut`] over one kind of storage: `at(i)` is the
/// element where cell `i` (a multiple of [`PART_ALIGN`]) starts; the last
/// part takes the rest of the storage.
fn split_storage<'a, T>(
    storage: &'a mut [T],
    ends: &[usize],
    at: impl Fn(usize) -> usize,
    wrap: impl Fn(&'a mut [T]) -> PartCells<'a>,
) -> Vec<CellsPart<'a>> {
    let (mut rest, mut taken, mut start) = (storage, 0, 0);
    let mut parts = Vec::with_capacity(ends.len());
    for (n, &end) in ends.iter().enumerate() {
        let here = if n + 1 == ends.len() {
            std::mem::take(&mut rest)
        } else {
            let (here, tail) = std::mem::take(&mut rest).split_at_mut(at(end) - taken);
            (rest, taken) = (tail, at(end));
            here
        };
        parts.push(CellsPart { start, end, cells: wrap(here) });
        start = end;
    }
    parts
}
