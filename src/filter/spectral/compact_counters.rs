//! Compact counters: the Spectral Bloom Filter's variable-length counter
//! store (Cohen and Matias, §4 "string-array index"; our extraction of the
//! paper stops before §4, so the layout below follows what §1.3 states — m
//! variable-length strings of N bits in all, an index of o(N) + O(m) bits,
//! any string reached in O(1) — and is ours in its details).
//!
//! Counter `i` is a string of bits whose length follows its value, and the m
//! strings are concatenated into one bit string. Each string is
//! self-delimiting (`0` for zero; for `v > 0` with `l` significant bits: `l`
//! ones, a zero, then the `l - 1` low bits of `v` — `2l` bits, the top bit
//! being implicit), so a counter of value v costs about `2·log2 v` bits and a
//! zero counter one bit: most counters of a skewed multiset are small.
//!
//! The index has the paper's levels:
//! 1. **Coarse offsets**: counters form groups of [`GROUP`] (64); the bit
//!    offset of each group's region is kept (`u64`, one bit per counter).
//! 2. **Sub-group offsets**: each group is [`SUBGROUPS`] (4) sub-groups of
//!    [`SUB`] (16) counters; each sub-group's offset relative to its group is
//!    kept (`u16`).
//! 3. **Within a sub-group**: the paper looks offsets up in a table indexed
//!    by the sub-group's contents; we skip at most 15 self-delimiting codes,
//!    one `trailing_ones` each. Access is bounded by that constant: O(1).
//!
//! **Updates (slack, relocation, rebuild).** Each group's region has slack
//! beyond the bits it uses (`used/16 + 16` bits at a rebuild). A counter whose
//! code grows shifts the rest of its group's used bits (at most a few words)
//! into the slack and moves the later sub-group offsets; nothing outside the
//! group changes. A group whose slack runs out is relocated to the end of the
//! bit string with room to grow (`used/8 + 32` bits); its old region becomes a
//! hole. When holes exceed a quarter of the bit string, the whole store is
//! rebuilt densely (O(N + m)). Cost: O(1) per operation (plus the group's tail shift,
//! bounded by a group's size) and O(group) per relocation; a rebuild happens
//! only after relocations have left hole bits of a third of the live bits,
//! each relocation having been preceded by growth using up its group's
//! slack, so a rebuild is O(1) amortised per bit of growth.
//!
//! Semantics are those of the fixed-width store ([`super::Counters`]):
//! counters saturate at `2^bits - 1`, a saturated counter is never
//! decremented, union adds (saturating). Pure: no I/O.

/// Counters per group (level 1 of the index).
pub const GROUP: usize = 64;
/// Counters per sub-group (level 2).
pub const SUB: usize = 16;
/// Sub-groups per group.
pub const SUBGROUPS: usize = GROUP / SUB;

/// Level-2 index and bookkeeping of one group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct GroupMeta {
    /// Bits of the group's region (used + slack).
    cap: u16,
    /// Bits its codes use.
    used: u16,
    /// Offsets of sub-groups 1..SUBGROUPS from the group's start (sub-group 0
    /// starts at 0).
    sub: [u16; SUBGROUPS - 1],
}

/// `len` saturating counters of variable length (see the module docs).
#[derive(Clone, Debug)]
pub struct CompactCounters {
    bits: u8,
    len: usize,
    /// The bit string (LSB first), with one spare word at the end so a
    /// 64-bit window may be read at any used position.
    words: Vec<u64>,
    /// Bits of `words` in regions (live or holes); new regions go here.
    end: u64,
    /// Bits of regions left behind by relocated groups.
    holes: u64,
    /// Level 1: each group's start bit.
    starts: Vec<u64>,
    meta: Vec<GroupMeta>,
}

/// Counter values are equal: the layout (where slack and holes fall) is not
/// part of the value.
impl PartialEq for CompactCounters {
    fn eq(&self, other: &Self) -> bool {
        self.bits == other.bits && self.len == other.len && (0..self.len).all(|i| self.get(i) == other.get(i))
    }
}

impl Eq for CompactCounters {}

/// Slack given to a group of `used` bits at a rebuild.
#[inline]
fn rebuild_cap(used: u64) -> u64 {
    used + used / 16 + 16
}

/// Room given to a relocated group that needs `need` bits.
#[inline]
fn relocate_cap(need: u64) -> u64 {
    need + need / 8 + 32
}

#[inline]
fn mask(len: u64) -> u64 {
    if len >= 64 { u64::MAX } else { (1u64 << len) - 1 }
}

/// Reads `len <= 64` bits at bit `pos`.
#[inline]
fn read(words: &[u64], pos: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let (w, s) = ((pos / 64) as usize, pos % 64);
    let mut v = words[w] >> s;
    if s + len > 64 {
        v |= words[w + 1] << (64 - s);
    }
    v & mask(len)
}

/// Writes the low `len <= 64` bits of `val` at bit `pos`.
#[inline]
fn write(words: &mut [u64], pos: u64, len: u64, val: u64) {
    if len == 0 {
        return;
    }
    let (w, s) = ((pos / 64) as usize, pos % 64);
    let m = mask(len);
    let val = val & m;
    words[w] = (words[w] & !(m << s)) | (val << s);
    if s + len > 64 {
        let hi = s + len - 64;
        words[w + 1] = (words[w + 1] & !mask(hi)) | (val >> (64 - s));
    }
}

/// Moves `len` bits from `from` to `to` (the ranges may overlap).
fn move_bits(words: &mut [u64], from: u64, to: u64, len: u64) {
    if from == to || len == 0 {
        return;
    }
    if to > from {
        // Right: highest chunk first, so no chunk is overwritten unread.
        let mut left = len;
        while left > 0 {
            let n = left.min(64);
            left -= n;
            let v = read(words, from + left, n);
            write(words, to + left, n, v);
        }
    } else {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(64);
            let v = read(words, from + done, n);
            write(words, to + done, n, v);
            done += n;
        }
    }
}

/// The code of `v` (LSB first) and its length.
#[inline]
fn encode(v: u64) -> (u64, u64) {
    if v == 0 {
        return (0, 1);
    }
    let l = u64::from(64 - v.leading_zeros());
    (mask(l) | ((v & mask(l - 1)) << (l + 1)), 2 * l)
}

/// The value and length of the code at `pos`.
#[inline]
fn decode(words: &[u64], pos: u64) -> (u64, u64) {
    let l = u64::from(read(words, pos, 64).trailing_ones());
    if l == 0 {
        return (0, 1);
    }
    ((1 << (l - 1)) | read(words, pos + l + 1, l - 1), 2 * l)
}

/// The length of the code at `pos`.
#[inline]
fn skip(words: &[u64], pos: u64) -> u64 {
    let l = u64::from(read(words, pos, 64).trailing_ones());
    if l == 0 { 1 } else { 2 * l }
}

impl CompactCounters {
    /// `len` counters of `bits` (4, 8, 16 or 32) bits' range, all zero.
    pub fn new(len: usize, bits: u8) -> Self {
        Self::from_values(len, bits, std::iter::repeat(0))
    }

    /// Counters holding `values` (clamped to the maximum); the layout is a
    /// fresh dense one (every group at its rebuild slack).
    pub fn from_values(len: usize, bits: u8, values: impl IntoIterator<Item = u64>) -> Self {
        assert!(matches!(bits, 4 | 8 | 16 | 32), "counter width {bits}");
        let max = mask(u64::from(bits));
        let mut values = values.into_iter();
        let groups = len.div_ceil(GROUP);
        let mut c = CompactCounters {
            bits,
            len,
            words: Vec::new(),
            end: 0,
            holes: 0,
            starts: Vec::with_capacity(groups),
            meta: Vec::with_capacity(groups),
        };
        let mut codes: Vec<(u64, u64)> = Vec::with_capacity(GROUP);
        for g in 0..groups {
            codes.clear();
            let n = GROUP.min(len - g * GROUP);
            codes.extend(values.by_ref().take(n).map(|v| encode(v.min(max))));
            codes.resize(n, encode(0));
            let used: u64 = codes.iter().map(|&(_, l)| l).sum();
            let cap = rebuild_cap(used);
            let start = c.end;
            c.reserve_to(start + cap);
            let mut meta = GroupMeta { cap: cap as u16, used: used as u16, ..GroupMeta::default() };
            let mut at = 0;
            for (j, &(code, l)) in codes.iter().enumerate() {
                if j > 0 && j % SUB == 0 {
                    meta.sub[j / SUB - 1] = at as u16;
                }
                write(&mut c.words, start + at, l, code);
                at += l;
            }
            // A short last group: its empty sub-groups start at its end.
            for s in n.div_ceil(SUB).max(1)..SUBGROUPS {
                meta.sub[s - 1] = at as u16;
            }
            c.starts.push(start);
            c.meta.push(meta);
            c.end = start + cap;
        }
        c.words.shrink_to_fit();
        c
    }

    /// Grows the bit string to hold `bits` bits plus the spare word.
    fn reserve_to(&mut self, bits: u64) {
        let need = bits.div_ceil(64) as usize + 1;
        if need > self.words.len() {
            if need > self.words.capacity() {
                // An eighth more than needed: appends (relocations) stay
                // amortised without doubling the memory held.
                self.words.reserve_exact(need - self.words.len() + need / 8);
            }
            self.words.resize(need, 0);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bits(&self) -> u8 {
        self.bits
    }

    /// The saturation value, `2^bits - 1`.
    #[inline]
    pub fn max(&self) -> u32 {
        mask(u64::from(self.bits)) as u32
    }

    /// The bit position of counter `i`'s code.
    #[inline]
    fn locate(&self, i: usize) -> u64 {
        let (g, r) = (i / GROUP, i % GROUP);
        let (s, j) = (r / SUB, r % SUB);
        let mut pos = self.starts[g] + if s == 0 { 0 } else { u64::from(self.meta[g].sub[s - 1]) };
        for _ in 0..j {
            pos += skip(&self.words, pos);
        }
        pos
    }

    #[inline]
    pub fn get(&self, i: usize) -> u32 {
        assert!(i < self.len, "counter {i} of {}", self.len);
        decode(&self.words, self.locate(i)).0 as u32
    }

    /// Sets counter `i` to `v` clamped to the maximum.
    pub fn set(&mut self, i: usize, v: u64) {
        assert!(i < self.len, "counter {i} of {}", self.len);
        let pos = self.locate(i);
        let old = skip(&self.words, pos);
        self.put(i, pos, old, v);
    }

    /// Writes `v` (clamped) as counter `i`, whose `old`-bit code is at `pos`:
    /// one index look-up per update, done by the caller.
    fn put(&mut self, i: usize, pos: u64, old: u64, v: u64) {
        let (code, new) = encode(v.min(u64::from(self.max())));
        let pos = if new == old { pos } else { self.resize_code(i, pos, old, new) };
        write(&mut self.words, pos, new, code);
        // Only now is every code whole again, so a rebuild can read them.
        if self.holes * 4 > self.end {
            self.rebuild();
        }
    }

    /// Makes room for counter `i`'s code to change from `old` to `new` bits:
    /// shifts the rest of its group, relocating the group if its slack is
    /// used up. Returns where the code goes now.
    fn resize_code(&mut self, i: usize, pos: u64, old: u64, new: u64) -> u64 {
        let g = i / GROUP;
        let meta = self.meta[g];
        let start = self.starts[g];
        let used = u64::from(meta.used);
        let need = used + new - old;
        let tail_from = pos + old;
        let tail = start + used - tail_from;
        let pos = if need > u64::from(meta.cap) {
            // Relocate: copy the group to the end with room to grow.
            let cap = relocate_cap(need);
            let to = self.end;
            self.reserve_to(to + cap);
            move_bits(&mut self.words, start, to, used);
            self.holes += u64::from(meta.cap);
            self.starts[g] = to;
            self.meta[g].cap = cap as u16;
            self.end = to + cap;
            let moved = to + (pos - start);
            move_bits(&mut self.words, moved + old, moved + new, tail);
            moved
        } else {
            move_bits(&mut self.words, tail_from, pos + new, tail);
            pos
        };
        let m = &mut self.meta[g];
        m.used = need as u16;
        for s in (i % GROUP) / SUB + 1..SUBGROUPS {
            m.sub[s - 1] = (i64::from(m.sub[s - 1]) + new as i64 - old as i64) as u16;
        }
        pos
    }

    /// Lays the counters out densely again (every group at its rebuild slack).
    fn rebuild(&mut self) {
        // A sequential decode: no index look-ups.
        let values: Vec<u64> = self.values().map(u64::from).collect();
        *self = Self::from_values(self.len, self.bits, values);
    }

    /// Adds `r` (saturating).
    #[inline]
    pub fn add(&mut self, i: usize, r: u32) {
        assert!(i < self.len, "counter {i} of {}", self.len);
        let pos = self.locate(i);
        let (v, old) = decode(&self.words, pos);
        self.put(i, pos, old, v + u64::from(r));
    }

    /// Subtracts `r`, except from a saturated counter (it stays saturated:
    /// its true value is at least the maximum).
    #[inline]
    pub fn sub(&mut self, i: usize, r: u32) {
        assert!(i < self.len, "counter {i} of {}", self.len);
        let pos = self.locate(i);
        let (v, old) = decode(&self.words, pos);
        if v != u64::from(self.max()) {
            self.put(i, pos, old, v.saturating_sub(u64::from(r)));
        }
    }

    pub fn clear(&mut self) {
        *self = Self::new(self.len, self.bits);
    }

    /// Every counter in order (a sequential decode, no index look-ups).
    pub fn values(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.starts.len()).flat_map(move |g| {
            let n = GROUP.min(self.len - g * GROUP);
            let mut pos = self.starts[g];
            (0..n).map(move |_| {
                let (v, l) = decode(&self.words, pos);
                pos += l;
                v as u32
            })
        })
    }

    /// Bytes held: the bit string's allocation and both index levels.
    pub fn memory_bytes(&self) -> u64 {
        (self.words.capacity() * 8
            + self.starts.capacity() * 8
            + self.meta.capacity() * std::mem::size_of::<GroupMeta>()) as u64
    }

    /// Where those bytes go: (codes' bits, slack and hole bits, index bits).
    pub fn breakdown(&self) -> (u64, u64, u64) {
        let used: u64 = self.meta.iter().map(|m| u64::from(m.used)).sum();
        let index = (self.starts.capacity() * 64 + self.meta.capacity() * 8 * std::mem::size_of::<GroupMeta>()) as u64;
        (used, self.words.capacity() as u64 * 64 - used, index)
    }

    /// Counters at their maximum.
    pub fn saturated(&self) -> u64 {
        let max = self.max();
        self.values().filter(|&v| v == max).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn codes_round_trip_at_every_length() {
        let mut words = vec![0u64; 8];
        for v in [0u64, 1, 2, 3, 4, 7, 8, 255, 256, 65_535, u64::from(u32::MAX)] {
            for pos in [0u64, 1, 31, 63, 64, 100, 190] {
                words.fill(u64::MAX);
                let (code, len) = encode(v);
                assert_eq!(len, if v == 0 { 1 } else { 2 * u64::from(64 - v.leading_zeros()) });
                write(&mut words, pos, len, code);
                assert_eq!(decode(&words, pos), (v, len), "v {v} at {pos}");
            }
        }
    }

    #[test]
    fn move_bits_either_way_with_overlap() {
        let mut rng = crate::filter::random::Rng::new(5);
        for _ in 0..200 {
            let words: Vec<u64> = (0..10).map(|_| rng.next_u64()).collect();
            let (from, to, len) = (rng.below(200), rng.below(200), rng.below(300));
            let mut moved = words.clone();
            move_bits(&mut moved, from, to, len);
            for b in 0..len {
                assert_eq!(read(&moved, to + b, 1), read(&words, from + b, 1), "{from}->{to} len {len} bit {b}");
            }
        }
    }

    #[test]
    fn saturates_and_keeps_saturated() {
        for bits in [4u8, 8, 16, 32] {
            let mut c = CompactCounters::new(300, bits);
            let max = c.max();
            c.add(7, 3);
            c.add(8, 5);
            assert_eq!((c.get(6), c.get(7), c.get(8), c.get(9)), (0, 3, 5, 0));
            c.add(7, u32::MAX);
            assert_eq!(c.get(7), max);
            c.sub(7, 1);
            assert_eq!(c.get(7), max, "a saturated counter stays saturated");
            c.sub(8, 9);
            assert_eq!(c.get(8), 0);
            assert_eq!(c.saturated(), 1);
            assert_eq!((c.get(6), c.get(9), c.get(299)), (0, 0, 0));
        }
    }

    /// One group filled to its maximum widths relocates (the slack runs
    /// out) and the store rebuilds once holes pile up; every value survives.
    #[test]
    fn growth_relocates_and_rebuilds() {
        let mut c = CompactCounters::new(1000, 32);
        let fresh = c.end;
        for round in 0..4 {
            for i in (0..1000).step_by(3) {
                c.add(i, 1 << (round * 8));
            }
        }
        assert!(c.end > fresh, "groups moved or the store grew");
        for i in 0..1000 {
            let want = if i % 3 == 0 { 0x0101_0101 } else { 0 };
            assert_eq!(c.get(i), want, "counter {i}");
        }
        let back = CompactCounters::from_values(1000, 32, c.values().map(u64::from));
        assert_eq!(back, c);
        assert!(back.memory_bytes() <= c.memory_bytes() + 64);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(usize, u32),
        Sub(usize, u32),
        Set(usize, u64),
    }

    fn op(len: usize) -> impl Strategy<Value = Op> {
        let small = prop_oneof![4 => 0u32..4, 2 => 0u32..300, 1 => any::<u32>()];
        prop_oneof![
            6 => (0..len, small.clone()).prop_map(|(i, r)| Op::Add(i, r)),
            3 => (0..len, small).prop_map(|(i, r)| Op::Sub(i, r)),
            1 => (0..len, any::<u64>()).prop_map(|(i, v)| Op::Set(i, v >> (v % 64))),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any sequence of adds, subtracts and sets gives the values of a plain
        /// `Vec<u64>` model with the same saturation rules, at every step's
        /// counter and at the end for all counters.
        #[test]
        fn matches_a_plain_vector(
            len in 1usize..400, bits in prop::sample::select(vec![4u8, 8, 16, 32]),
            ops in prop::collection::vec(op(400), 1..1500),
        ) {
            let mut c = CompactCounters::new(len, bits);
            let max = u64::from(c.max());
            let mut model = vec![0u64; len];
            for o in ops {
                let i = match o { Op::Add(i, _) | Op::Sub(i, _) | Op::Set(i, _) => i % len };
                match o {
                    Op::Add(_, r) => { c.add(i, r); model[i] = (model[i] + u64::from(r)).min(max); }
                    Op::Sub(_, r) => { c.sub(i, r); if model[i] != max { model[i] = model[i].saturating_sub(u64::from(r)); } }
                    Op::Set(_, v) => { c.set(i, v); model[i] = v.min(max); }
                }
                prop_assert_eq!(u64::from(c.get(i)), model[i]);
            }
            let all: Vec<u64> = c.values().map(u64::from).collect();
            prop_assert_eq!(&all, &model);
            for (i, &v) in model.iter().enumerate() {
                prop_assert_eq!(u64::from(c.get(i)), v);
            }
            prop_assert_eq!(c.saturated(), model.iter().filter(|&&v| v == max).count() as u64);
        }
    }
}
