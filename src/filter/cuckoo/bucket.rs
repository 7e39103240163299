//! The semi-sorted bucket (Fan et al., CoNEXT 2014, §5.2): four slots in
//! one `u64`.
//!
//! A slot's entry is 17 bits: its fingerprint's top 4 bits (the nibble)
//! above a 13-bit field, which holds the fingerprint's other f − 4 bits and
//! the c-bit stamp (f + c = 17). The four nibbles of a bucket are kept in
//! order, so only their multiset is stored: there are C(19, 4) = 3 876
//! multisets of four 4-bit values, numbered in 12 bits by the combinatorial
//! number system. A bucket is that 12-bit code (bits 52..64) above the four
//! fields, slot i's at bits 13·i: 64 bits for four 17-bit entries.
//!
//! An empty slot's field is 0 (stamp 0); its nibble is whatever it was, as
//! no lookup matches an empty slot. Clearing a slot (the sweep, a delete)
//! therefore leaves the code alone. Writing a slot re-sorts the entries by
//! nibble, stably (slots of one nibble keep their order), and re-encodes,
//! so a slot's position can change on a write, never on a clear.

/// Bits of a field: the fingerprint below its nibble, and the stamp.
pub const FIELD_BITS: u32 = 13;
/// Bits of an entry: the nibble and the field.
pub const ENTRY_BITS: u32 = FIELD_BITS + 4;
/// Multisets of four nibbles: the prefix codes `0..CODES`.
pub const CODES: u16 = 3_876;

/// A field's bits, at bit 0.
pub const FIELD_MASK: u32 = (1 << FIELD_BITS) - 1;
const FIELD_MASK64: u64 = FIELD_MASK as u64;
const CODE_SHIFT: u32 = 4 * FIELD_BITS;

/// A bucket's four entries (`nibble << 13 | field`), nibbles non-decreasing.
pub type Entries = [u32; 4];

/// C(n, k) for n < 19, k ≤ 4.
const BINOM: [[u16; 5]; 19] = binomials();
/// The nibbles of each code, slot i's at bits 4·i; 4 096 entries (8 KiB),
/// so that any 12 bits index it without a bounds check (the codes past
/// the last read as 0; a restored word is checked with [`is_valid`]).
static DECODE: [u16; 1 << 12] = decode_table();

const fn binomials() -> [[u16; 5]; 19] {
    let mut t = [[0u16; 5]; 19];
    let mut n = 0;
    while n < 19 {
        t[n][0] = 1;
        let mut k = 1;
        while k < 5 && n > 0 {
            t[n][k] = t[n - 1][k - 1] + t[n - 1][k];
            k += 1;
        }
        n += 1;
    }
    t
}

/// The code of sorted nibbles a ≤ b ≤ c ≤ d: a + 1, b + 2, c + 3, d + 4
/// are distinct, so the rank of that 4-subset of 1..=19 in colex order,
/// C(a, 1) + C(b + 1, 2) + C(c + 2, 3) + C(d + 3, 4), is in `0..CODES`.
#[inline]
const fn rank(n: [u32; 4]) -> u16 {
    let (a, b, c, d) = ((n[0] & 0xF) as usize, (n[1] & 0xF) as usize, (n[2] & 0xF) as usize, (n[3] & 0xF) as usize);
    BINOM[a][1] + BINOM[b + 1][2] + BINOM[c + 2][3] + BINOM[d + 3][4]
}

const fn decode_table() -> [u16; 1 << 12] {
    let mut t = [0u16; 1 << 12];
    let mut d = 0;
    while d < 16 {
        let mut c = 0;
        while c <= d {
            let mut b = 0;
            while b <= c {
                let mut a = 0;
                while a <= b {
                    t[rank([a, b, c, d]) as usize] = (a | b << 4 | c << 8 | d << 12) as u16;
                    a += 1;
                }
                b += 1;
            }
            c += 1;
        }
        d += 1;
    }
    t
}

/// Whether a word is a bucket: its code is one of the [`CODES`].
pub fn is_valid(word: u64) -> bool {
    word >> CODE_SHIFT < u64::from(CODES)
}

/// A bucket's entries, in slot order.
#[inline]
pub fn decode(word: u64) -> Entries {
    let nibbles = u32::from(DECODE[(word >> CODE_SHIFT) as usize & 0xFFF]);
    std::array::from_fn(|i| (nibbles >> (4 * i) & 0xF) << FIELD_BITS | field(word, i))
}

/// The bucket of `entries`: sorted by nibble (stably), then coded.
#[inline]
pub fn encode(entries: Entries) -> u64 {
    let sorted = sort_by_nibble(entries);
    let code = rank(sorted.map(|e| e >> FIELD_BITS));
    let fields = (0..4).fold(0, |w, i| w | (u64::from(sorted[i] & FIELD_MASK)) << (FIELD_BITS * i as u32));
    u64::from(code) << CODE_SHIFT | fields
}

/// A stable sort by nibble without branches: each entry is keyed by its
/// nibble and then its position (above its field), and a five-comparator
/// network sorts the keys.
#[inline]
fn sort_by_nibble(entries: Entries) -> Entries {
    let mut k: [u32; 4] = std::array::from_fn(|i| {
        (entries[i] >> FIELD_BITS) << (FIELD_BITS + 2) | (i as u32) << FIELD_BITS | entries[i] & FIELD_MASK
    });
    for (a, b) in [(0, 1), (2, 3), (0, 2), (1, 3), (1, 2)] {
        let (lo, hi) = (k[a].min(k[b]), k[a].max(k[b]));
        (k[a], k[b]) = (lo, hi);
    }
    k.map(|x| (x >> (FIELD_BITS + 2)) << FIELD_BITS | x & FIELD_MASK)
}

/// Slot i's nibble (the top 4 bits of its fingerprint).
#[inline]
pub fn nibble(word: u64, i: usize) -> u32 {
    u32::from(DECODE[(word >> CODE_SHIFT) as usize & 0xFFF]) >> (4 * i) & 0xF
}

/// Slot i's field (0: empty).
#[inline]
pub fn field(word: u64, i: usize) -> u32 {
    (word >> (FIELD_BITS * i as u32) & FIELD_MASK64) as u32
}

/// The bucket with slot i emptied (its nibble, and the code, kept).
#[inline]
pub fn clear_field(word: u64, i: usize) -> u64 {
    word & !(FIELD_MASK64 << (FIELD_BITS * i as u32))
}

/// Empties the slots whose stamp (`field & stamp_mask`) `expired` marks;
/// returns how many. The code is left alone: no re-sort.
#[inline]
pub fn clear_expired(word: &mut u64, expired: &[bool], stamp_mask: u32) -> u64 {
    let mut cleared = 0;
    for i in 0..4 {
        let dead = u64::from(expired[(field(*word, i) & stamp_mask) as usize]);
        cleared += dead;
        *word &= !((FIELD_MASK64 * dead) << (FIELD_BITS * i as u32));
    }
    cleared
}

/// Occupied slots of a bucket (fields not 0).
#[inline]
pub fn occupied(word: u64) -> u32 {
    (0..4).map(|i| u32::from(field(word, i) != 0)).sum()
}
