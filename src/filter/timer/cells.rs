//! Timer cell arrays: `m` cells of `b` bits each (4 ≤ b ≤ 32).
//!
//! A cell holds 0 (empty) or the compact time it was last set (see
//! [`super::clock`]). Narrow cells are what make a timer filter
//! smaller than an exact table, so they are first-class: 4-bit cells are
//! packed two per byte, 8/16/32-bit cells use plain vectors, and every other
//! width is bit-packed with `bitvec`.

use bitvec::prelude::*;

use super::clock::Now;

/// Cell access used by the generic hot path.
pub(crate) trait TimerCells {
    fn get(&self, i: usize) -> u32;
    fn set(&mut self, i: usize, v: u32);

    /// The address of the byte holding cell `i` (`i` < the number of cells),
    /// for prefetching; never dereferenced.
    fn cell_addr(&self, i: usize) -> *const u8;

    /// [`TimerCells::get`] without the bounds check, for the probe loops.
    ///
    /// # Safety
    /// `i` must be less than the number of cells the array was created with
    /// (a [`crate::filter::hash::Probe`] over that many cells yields only such
    /// positions).
    #[inline(always)]
    unsafe fn get_unchecked(&self, i: usize) -> u32 {
        self.get(i)
    }

    /// [`TimerCells::set`] without the bounds check.
    ///
    /// # Safety
    /// As for [`TimerCells::get_unchecked`].
    #[inline(always)]
    unsafe fn set_unchecked(&mut self, i: usize, v: u32) {
        self.set(i, v)
    }

    /// Empties the cells `start..start + n` that have expired at `now`.
    #[inline]
    fn clear_dead(&mut self, start: usize, n: usize, now: &Now) {
        clear_dead_each(self, start..start + n, now);
    }
}

/// Empties the expired cells of `range` one cell at a time.
#[inline]
fn clear_dead_each<C: TimerCells + ?Sized>(cells: &mut C, range: std::ops::Range<usize>, now: &Now) {
    for i in range {
        if now.is_dead(cells.get(i)) {
            cells.set(i, 0);
        }
    }
}

/// A plain cell type whose expiry test runs in its own width (16 or 64
/// lanes per vector instead of 4 for `u32` arithmetic).
trait Lane: Copy + Eq + Ord {
    const ZERO: Self;
    fn from_u32(v: u32) -> Self;
    fn wrapping_sub(self, other: Self) -> Self;
    fn wrapping_add(self, other: Self) -> Self;
}

macro_rules! lane {
    ($t:ty) => {
        impl Lane for $t {
            const ZERO: Self = 0;
            #[inline(always)]
            fn from_u32(v: u32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn wrapping_sub(self, other: Self) -> Self {
                <$t>::wrapping_sub(self, other)
            }
            #[inline(always)]
            fn wrapping_add(self, other: Self) -> Self {
                <$t>::wrapping_add(self, other)
            }
        }
    };
}
lane!(u8);
lane!(u16);
lane!(u32);

/// [`TimerCells::clear_dead`] over a run of plain cells, in a form the
/// compiler vectorises. [`Now::is_dead`] in the cells' own width: every
/// value involved (now, the period, the window) is below `2^width`, and the
/// age `now - v (+ period)` is in `[0, period)`, so wrapping arithmetic in
/// the width is exact.
#[inline(always)]
fn clear_dead_lanes<T: Lane>(run: &mut [T], now: &Now) {
    let clock = LaneClock::at(now);
    for v in run {
        *v = clock.kept(*v);
    }
}

/// [`Now`] in a lane's width, for the vectorised sweeps.
#[derive(Clone, Copy)]
struct LaneClock<T> {
    value: T,
    period: T,
    /// Cells older than this many ticks are cleared (W + Lt).
    retain: T,
}

impl<T: Lane> LaneClock<T> {
    #[inline(always)]
    fn at(now: &Now) -> Self {
        LaneClock { value: T::from_u32(now.value), period: T::from_u32(now.period), retain: T::from_u32(now.retain) }
    }

    /// `v`, or 0 if it has expired. Branch-free (a select per lane), so a
    /// loop over lanes vectorises.
    #[inline(always)]
    fn kept(self, v: T) -> T {
        let wrap = if v > self.value { self.period } else { T::ZERO };
        let dead = (v != T::ZERO) & (self.value.wrapping_sub(v).wrapping_add(wrap) > self.retain);
        if dead { T::ZERO } else { v }
    }
}

/// The element types plain cell arrays hold: every bit pattern is a value,
/// and their size divides 64.
pub(crate) trait Plain: Copy + Default + 'static {}
impl Plain for u8 {}
impl Plain for u16 {}
impl Plain for u32 {}

/// `len` cells of type `T` starting on a 64-byte boundary (a `Vec` is only
/// aligned to its element): a block of the blocked layout is exactly one
/// cache line. Derefs to `[T]`.
///
/// The bytes are a zeroed `Vec<u8>` with 63 bytes of slack and the cells
/// start at its first 64-byte boundary. (An allocation with 64-byte
/// alignment would be zeroed by writing it, which touches every page before
/// [`advise_huge_pages`] can apply; a large `calloc` returns fresh pages.)
pub(crate) struct Lines<T: Plain> {
    bytes: Vec<u8>,
    offset: usize,
    len: usize,
    _cells: std::marker::PhantomData<T>,
}

impl<T: Plain> Lines<T> {
    /// `len` zero cells.
    pub(crate) fn zeroed(len: usize) -> Self {
        let bytes = vec![0u8; len * std::mem::size_of::<T>() + 63];
        let offset = bytes.as_ptr().align_offset(64);
        Lines { bytes, offset, len, _cells: std::marker::PhantomData }
    }
}

impl<T: Plain> Lines<T> {
    /// The cells' bytes in memory.
    fn storage(&self) -> &[u8] {
        &self.bytes[self.offset..self.offset + self.len * std::mem::size_of::<T>()]
    }
}

impl<T: Plain> std::ops::Deref for Lines<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        debug_assert!(self.offset + self.len * std::mem::size_of::<T>() <= self.bytes.len());
        // SAFETY: the bytes from `offset` hold len · size_of::<T>()
        // initialised bytes, at a 64-byte boundary ≥ align_of::<T>(), and
        // every bit pattern is a T (`Plain`); the borrow of self keeps them
        // alive and unaliased.
        unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().add(self.offset).cast::<T>(), self.len) }
    }
}

impl<T: Plain> std::ops::DerefMut for Lines<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for deref, with the exclusive borrow of self.
        unsafe { std::slice::from_raw_parts_mut(self.bytes.as_mut_ptr().add(self.offset).cast::<T>(), self.len) }
    }
}

impl<T: Plain> Clone for Lines<T> {
    fn clone(&self) -> Self {
        // A new allocation has its own offset to the next line.
        let mut copy = Lines::zeroed(self.len);
        copy.copy_from_slice(self);
        copy
    }
}

impl<T: Plain + PartialEq> PartialEq for Lines<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Plain + Eq> Eq for Lines<T> {}

impl<T: Plain + std::fmt::Debug> std::fmt::Debug for Lines<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lines({} cells)", self.len)
    }
}

/// Two 4-bit cells per byte, low nibble first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NibbleCells(Lines<u8>);

/// Cell `i` of 4-bit cells packed two per byte, low nibble first.
#[inline(always)]
fn nibble_get(bytes: &[u8], i: usize) -> u32 {
    u32::from((bytes[i >> 1] >> ((i & 1) << 2)) & 0x0F)
}

/// Sets cell `i` of 4-bit cells packed two per byte.
#[inline(always)]
fn nibble_set(bytes: &mut [u8], i: usize, v: u32) {
    let shift = (i & 1) << 2;
    let byte = &mut bytes[i >> 1];
    *byte = (*byte & !(0x0F << shift)) | ((v as u8 & 0x0F) << shift);
}

impl TimerCells for NibbleCells {
    #[inline]
    fn cell_addr(&self, i: usize) -> *const u8 {
        self.0.as_ptr().wrapping_add(i >> 1)
    }
    #[inline]
    fn get(&self, i: usize) -> u32 {
        nibble_get(&self.0, i)
    }
    #[inline]
    fn set(&mut self, i: usize, v: u32) {
        nibble_set(&mut self.0, i, v)
    }
    /// Whole bytes at a time (the low and the high nibbles in byte lanes);
    /// a cell sharing its byte with one outside the range, one at a time.
    #[inline]
    fn clear_dead(&mut self, start: usize, n: usize, now: &Now) {
        let (end, mut i) = (start + n, start);
        if i % 2 == 1 && i < end {
            clear_dead_each(self, i..i + 1, now);
            i += 1;
        }
        let whole = i + (end - i) / 2 * 2;
        // One pass over the bytes, both nibbles in byte lanes, so the loop
        // vectorises (splitting the nibbles into arrays first made the 4-bit
        // sweep cost 3.6 ns per event at 256 KiB).
        let clock = LaneClock::<u8>::at(now);
        for b in &mut self.0[i / 2..whole / 2] {
            *b = clock.kept(*b & 0x0F) | (clock.kept(*b >> 4) << 4);
        }
        clear_dead_each(self, whole..end, now);
    }
    #[inline(always)]
    unsafe fn get_unchecked(&self, i: usize) -> u32 {
        debug_assert!(i >> 1 < self.0.len());
        // SAFETY: the caller guarantees i < the number of cells, 2·len.
        u32::from((unsafe { *self.0.as_ptr().add(i >> 1) } >> ((i & 1) << 2)) & 0x0F)
    }
    #[inline(always)]
    unsafe fn set_unchecked(&mut self, i: usize, v: u32) {
        debug_assert!(i >> 1 < self.0.len());
        let shift = (i & 1) << 2;
        // SAFETY: the caller guarantees i < the number of cells, 2·len.
        let byte = unsafe { &mut *self.0.as_mut_ptr().add(i >> 1) };
        *byte = (*byte & !(0x0F << shift)) | ((v as u8 & 0x0F) << shift);
    }
}

/// Cells of any width, packed back to back in 64-bit words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PackedCells {
    bits: BitVec<u64, Lsb0>,
    width: usize,
}

impl TimerCells for PackedCells {
    #[inline]
    fn cell_addr(&self, i: usize) -> *const u8 {
        self.bits.as_raw_slice().as_ptr().cast::<u8>().wrapping_add(i * self.width / 8)
    }
    #[inline]
    fn get(&self, i: usize) -> u32 {
        self.bits[i * self.width..(i + 1) * self.width].load_le::<u32>()
    }
    #[inline]
    fn set(&mut self, i: usize, v: u32) {
        self.bits[i * self.width..(i + 1) * self.width].store_le::<u32>(v);
    }
}

macro_rules! plain_cells {
    ($t:ty) => {
        impl TimerCells for Lines<$t> {
            #[inline]
            fn cell_addr(&self, i: usize) -> *const u8 {
                self.as_ptr().wrapping_add(i).cast()
            }
            #[inline]
            fn get(&self, i: usize) -> u32 {
                u32::from(self[i])
            }
            #[inline]
            fn set(&mut self, i: usize, v: u32) {
                self[i] = v as $t;
            }
            #[inline(always)]
            unsafe fn get_unchecked(&self, i: usize) -> u32 {
                debug_assert!(i < self.len());
                // SAFETY: the caller guarantees i < len.
                u32::from(unsafe { *(**self).get_unchecked(i) })
            }
            #[inline(always)]
            unsafe fn set_unchecked(&mut self, i: usize, v: u32) {
                debug_assert!(i < self.len());
                // SAFETY: the caller guarantees i < len.
                unsafe { *(**self).get_unchecked_mut(i) = v as $t };
            }
            #[inline]
            fn clear_dead(&mut self, start: usize, n: usize, now: &Now) {
                clear_dead_lanes(&mut self[start..start + n], now)
            }
        }
    };
}
plain_cells!(u8);
plain_cells!(u16);
plain_cells!(u32);

/// The cell array of one generation, in the layout its width calls for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CellArray {
    Nibble(NibbleCells),
    Byte(Lines<u8>),
    Half(Lines<u16>),
    Word(Lines<u32>),
    Packed(PackedCells),
}

/// Runs `$body` with `$c` bound to the concrete cell array, so generic code
/// is monomorphised per layout and the match happens once per call.
macro_rules! with_cells {
    ($cells:expr, $c:ident => $body:expr) => {
        match $cells {
            $crate::filter::timer::cells::CellArray::Nibble($c) => $body,
            $crate::filter::timer::cells::CellArray::Byte($c) => $body,
            $crate::filter::timer::cells::CellArray::Half($c) => $body,
            $crate::filter::timer::cells::CellArray::Word($c) => $body,
            $crate::filter::timer::cells::CellArray::Packed($c) => $body,
        }
    };
}
pub(crate) use with_cells;

impl CellArray {
    /// `m` empty cells of `width` bits. Arrays of 2 MiB or more ask for
    /// transparent huge pages (see [`advise_huge_pages`]).
    pub(crate) fn new(width: u8, m: usize) -> Self {
        let cells = Self::allocate(width, m);
        match &cells {
            CellArray::Nibble(c) => advise_huge_pages(&c.0),
            CellArray::Byte(c) => advise_huge_pages(c),
            CellArray::Half(c) => advise_huge_pages(c),
            CellArray::Word(c) => advise_huge_pages(c),
            CellArray::Packed(c) => advise_huge_pages(c.bits.as_raw_slice()),
        }
        cells
    }

    fn allocate(width: u8, m: usize) -> Self {
        match width {
            4 => CellArray::Nibble(NibbleCells(Lines::zeroed(m.div_ceil(2)))),
            8 => CellArray::Byte(Lines::zeroed(m)),
            16 => CellArray::Half(Lines::zeroed(m)),
            32 => CellArray::Word(Lines::zeroed(m)),
            w => CellArray::Packed(PackedCells {
                bits: bitvec![u64, Lsb0; 0; m * usize::from(w)],
                width: usize::from(w),
            }),
        }
    }

    /// [`Self::memory_bytes`] of an array of `m` cells of `width` bits,
    /// without making one (`None` if it does not fit a `usize`).
    pub(crate) fn bytes_for(width: u8, m: usize) -> Option<usize> {
        super::sizing::cell_bytes(width, m)
    }

    /// Bytes of cell storage.
    pub(crate) fn memory_bytes(&self) -> usize {
        match self {
            CellArray::Nibble(c) => c.0.len(),
            CellArray::Byte(c) => c.len(),
            CellArray::Half(c) => c.len() * 2,
            CellArray::Word(c) => c.len() * 4,
            CellArray::Packed(c) => c.bits.as_raw_slice().len() * 8,
        }
    }

    /// Empties every cell.
    pub(crate) fn clear(&mut self) {
        match self {
            CellArray::Nibble(c) => c.0.fill(0),
            CellArray::Byte(c) => c.fill(0),
            CellArray::Half(c) => c.fill(0),
            CellArray::Word(c) => c.fill(0),
            CellArray::Packed(c) => c.bits.fill(false),
        }
    }

    /// The storage in memory, as bytes (in the machine's byte order, unlike
    /// [`Self::to_le_bytes`]): what a copy in pieces copies.
    pub(crate) fn storage(&self) -> &[u8] {
        match self {
            CellArray::Nibble(c) => c.0.storage(),
            CellArray::Byte(c) => c.storage(),
            CellArray::Half(c) => c.storage(),
            CellArray::Word(c) => c.storage(),
            CellArray::Packed(c) => {
                let words = c.bits.as_raw_slice();
                // SAFETY: the words' bytes, initialised, borrowed with them;
                // u8 has no alignment requirement.
                unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
            }
        }
    }

    /// The first and last byte of [`Self::storage`] that hold cell `i`.
    pub(crate) fn storage_span(&self, i: usize) -> (usize, usize) {
        match self {
            CellArray::Nibble(_) => (i / 2, i / 2),
            CellArray::Byte(_) => (i, i),
            CellArray::Half(_) => (2 * i, 2 * i + 1),
            CellArray::Word(_) => (4 * i, 4 * i + 3),
            // The whole words the cell's bits lie in (which bytes of a word
            // hold which bits depends on the byte order).
            CellArray::Packed(c) => {
                let (first, last) = (i * c.width / 64, ((i + 1) * c.width - 1) / 64);
                (first * 8, last * 8 + 7)
            }
        }
    }

    /// The storage as little-endian bytes (the snapshot encoding).
    #[cfg(test)]
    pub(crate) fn to_le_bytes(&self) -> Vec<u8> {
        let mut bytes = vec![0; self.storage().len()];
        self.write_le(0..bytes.len(), &mut bytes);
        bytes
    }

    /// Writes storage bytes `range` (whole elements: a multiple of 8 bytes
    /// apart from the end of the storage) in little-endian order to `out`,
    /// which is as long: a piece of the snapshot encoding.
    pub(crate) fn write_le(&self, range: std::ops::Range<usize>, out: &mut [u8]) {
        let unit = match self {
            CellArray::Nibble(_) | CellArray::Byte(_) => 1,
            CellArray::Half(_) => 2,
            CellArray::Word(_) => 4,
            CellArray::Packed(_) => 8,
        };
        let from = &self.storage()[range];
        if cfg!(target_endian = "little") || unit == 1 {
            out.copy_from_slice(from);
        } else {
            for (o, f) in out.chunks_exact_mut(unit).zip(from.chunks_exact(unit)) {
                o.copy_from_slice(f);
                o.reverse();
            }
        }
    }

    /// The largest value among the first `m` cells (0 when empty).
    pub(crate) fn max_value(&self, m: usize) -> u32 {
        with_cells!(self, c => (0..m).map(|i| c.get(i)).max().unwrap_or(0))
    }

    /// Rebuilds an array from [`CellArray::to_le_bytes`]; `None` if `bytes`
    /// has the wrong length for `m` cells of `width` bits.
    pub(crate) fn from_le_bytes(width: u8, m: usize, bytes: &[u8]) -> Option<Self> {
        // Checked before allocating: `m` comes from the snapshot, and a
        // damaged one must not make us allocate more than it holds.
        if Self::bytes_for(width, m) != Some(bytes.len()) {
            return None;
        }
        let mut cells = CellArray::new(width, m);
        debug_assert_eq!(bytes.len(), cells.memory_bytes());
        match &mut cells {
            CellArray::Nibble(c) => c.0.copy_from_slice(bytes),
            CellArray::Byte(c) => c.copy_from_slice(bytes),
            CellArray::Half(c) => {
                for (v, b) in c.iter_mut().zip(bytes.chunks_exact(2)) {
                    *v = u16::from_le_bytes([b[0], b[1]]);
                }
            }
            CellArray::Word(c) => {
                for (v, b) in c.iter_mut().zip(bytes.chunks_exact(4)) {
                    *v = u32::from_le_bytes(b.try_into().expect("chunk of 4"));
                }
            }
            CellArray::Packed(c) => {
                for (v, b) in c.bits.as_raw_mut_slice().iter_mut().zip(bytes.chunks_exact(8)) {
                    *v = u64::from_le_bytes(b.try_into().expect("chunk of 8"));
                }
            }
        }
        Some(cells)
    }
}

#[cfg(feature = "vertical")]
/// Cells are split between owners ([`CellArray::split_mut`]) only at
/// multiples of this many: 64 cells of any width are whole bytes and whole
/// 64-bit words (4-bit cells share bytes, odd widths share words), so two
/// parts never share a byte or a word of storage.
pub(crate) const PART_ALIGN: usize = 64;

#[cfg(feature = "vertical")]
/// Cells `start..end` of an array on their own, borrowed mutably: the part
/// one owner reads and writes while other threads hold the other parts
/// (see [`super::vertical`]). Cells are addressed by their index in the
/// whole array.
pub(crate) struct CellsPart<'a> {
    start: usize,
    end: usize,
    cells: PartCells<'a>,
}

#[cfg(feature = "vertical")]
/// The storage of a [`CellsPart`], from its first cell.
enum PartCells<'a> {
    Nibble(&'a mut [u8]),
    Byte(&'a mut [u8]),
    Half(&'a mut [u16]),
    Word(&'a mut [u32]),
    /// The 64-bit words of bit-packed cells, and the width.
    Packed(&'a mut [u64], usize),
}

#[cfg(feature = "vertical")]
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

#[cfg(feature = "vertical")]
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

#[cfg(feature = "vertical")]
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

/// Asks the kernel to back `memory` with transparent huge pages (2 MiB on
/// x86-64) where it spans whole ones, if it is at least 2 MiB. The probes of a
/// large filter land on random pages: with 4 KiB pages nearly every probe
/// also misses the TLB and walks the page table (twice over in a VM), which
/// costs as much as the cache miss itself. A hint only: on kernels with
/// transparent huge pages off, or other systems, nothing changes; the
/// contents never do. Best called before the memory is first written (a
/// fresh zeroed allocation of this size is untouched, mapped on demand).
pub fn advise_huge_pages<T>(memory: &[T]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = memory.as_ptr() as usize;
        let end = start + std::mem::size_of_val(memory);
        let (first, last) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        if last > first {
            // SAFETY: madvise with MADV_HUGEPAGE only changes how the kernel
            // backs these pages of our own mapping, not their contents or
            // access rights; an error (e.g. THP unsupported) is harmless.
            unsafe { libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = memory;
}

/// Asks the CPU to bring the cache line holding `addr` into the caches
/// (a hint: it never faults, whatever the address).
#[inline(always)]
pub(crate) fn prefetch(addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is part of SSE, which every x86-64 CPU has; a
    // prefetch does not access memory architecturally and never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

#[cfg(test)]
mod tests {
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
}
