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

const FIELD_MASK: u64 = (1 << FIELD_BITS) - 1;
const CODE_SHIFT: u32 = 4 * FIELD_BITS;

/// A bucket's four entries (`nibble << 13 | field`), nibbles non-decreasing.
pub type Entries = [u32; 4];

/// C(n, k) for n < 19, k ≤ 4.
const BINOM: [[u16; 5]; 19] = binomials();
/// The nibbles of each code, slot i's at bits 4·i (7.6 KiB).
static DECODE: [u16; CODES as usize] = decode_table();

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
    BINOM[n[0] as usize][1] + BINOM[n[1] as usize + 1][2] + BINOM[n[2] as usize + 2][3] + BINOM[n[3] as usize + 3][4]
}

const fn decode_table() -> [u16; CODES as usize] {
    let mut t = [0u16; CODES as usize];
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
    let nibbles = u32::from(DECODE[(word >> CODE_SHIFT) as usize]);
    std::array::from_fn(|i| (nibbles >> (4 * i) & 0xF) << FIELD_BITS | field(word, i))
}

/// The bucket of `entries`: sorted by nibble (stably), then coded.
#[inline]
pub fn encode(mut entries: Entries) -> u64 {
    for i in 1..4 {
        let mut j = i;
        while j > 0 && entries[j - 1] >> FIELD_BITS > entries[j] >> FIELD_BITS {
            entries.swap(j - 1, j);
            j -= 1;
        }
    }
    let code = rank(entries.map(|e| e >> FIELD_BITS));
    let fields = (0..4).fold(0, |w, i| w | (u64::from(entries[i]) & FIELD_MASK) << (FIELD_BITS * i as u32));
    u64::from(code) << CODE_SHIFT | fields
}

/// Slot i's field (0: empty).
#[inline]
pub fn field(word: u64, i: usize) -> u32 {
    (word >> (FIELD_BITS * i as u32) & FIELD_MASK) as u32
}

/// The bucket with slot i emptied (its nibble, and the code, kept).
#[inline]
pub fn clear_field(word: u64, i: usize) -> u64 {
    word & !(FIELD_MASK << (FIELD_BITS * i as u32))
}

/// Empties the slots whose stamp (`field & stamp_mask`) `expired` marks;
/// returns how many. The code is left alone: no re-sort.
#[inline]
pub fn clear_expired(word: &mut u64, expired: &[bool], stamp_mask: u32) -> u64 {
    let mut cleared = 0;
    for i in 0..4 {
        let dead = u64::from(expired[(field(*word, i) & stamp_mask) as usize]);
        cleared += dead;
        *word &= !((FIELD_MASK * dead) << (FIELD_BITS * i as u32));
    }
    cleared
}

/// Occupied slots of a bucket (fields not 0).
#[inline]
pub fn occupied(word: u64) -> u32 {
    (0..4).map(|i| u32::from(field(word, i) != 0)).sum()
}
