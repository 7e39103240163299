//! The cuckoo table filter (`cuckoo`): a sliding-window filter that keeps
//! one (fingerprint, coarse stamp) slot per key in the window, in a cuckoo
//! table (Fan et al., CoNEXT 2014) of buckets of b = 4 slots with two
//! candidate buckets per key (partial-key cuckoo hashing). Same verdicts
//! as the timer filter: first-test-then-set on the record's own event
//! time, the first delivered copy opens the window, late records judged
//! at their own time within the lateness.
//!
//! Named after the structure (as `rsbf` and `stable` are): "fingerprint"
//! already means the settings line a snapshot is checked against
//! ([`crate::filter::FilterChoice::fingerprint`]).
//!
//! # The arithmetic
//!
//! A slot's entry is 17 bits: f fingerprint bits and c = 17 − f stamp
//! bits. Buckets are semi-sorted (Fan et al. §5.2, [`bucket`]): the top 4
//! bits of the four fingerprints are kept in order and stored as one of
//! C(19, 4) = 3 876 multisets in 12 bits instead of 16, so a bucket of four
//! 17-bit entries is one `u64`: 16 bits of memory per slot.
//!
//! - **FPR.** A key meets the 2b = 8 slots of its buckets; each alive one
//!   holds its fingerprint with probability 2^-f, so at a load α of alive
//!   slots, FPR ≈ 2·b·α / 2^f = 8α / 2^f ([`params::table_fpr`]). f is the
//!   fewest bits that keep it under the target at the design load
//!   α = 0.95: f = ⌈log2(8 · 0.95 / ε)⌉, 10 bits for ε = 1% (0.74%).
//!   The bit semi-sorting saves goes to the stamp (c = 7 at 1%), not to the
//!   fingerprint: see the next item.
//! - **Rounding towards keeping.** Stamps count ticks of
//!   ⌈(window + lateness) / 117⌉ ms at c = 7 (513 ms for a 60 s window).
//!   A copy stamped at tick s was delivered before (s + 1)·tick, so it is
//!   alive while (s + 1)·tick > clock − window: kept past its window by
//!   the rest of its own tick, half a tick on average, never less than its
//!   window. That costs false positives on keys that come back just after
//!   their window: r·tick/2 for a key recurring at rate r per ms there, so
//!   FPR ≈ 8α/2^f + r·tick/2 (`rounding_towards_keeping_costs_what_the_formula_says`).
//!   Such a key usually comes back again within the new window, and that
//!   copy is then a false negative against the exact answer; a table false
//!   positive mostly falls on a new key, whose next copy rarely comes within
//!   the window. So a stamp bit (halving r·tick/2) cuts the false negatives
//!   about twice as much as a fingerprint bit (halving 8α/2^f) would, for
//!   about the same FPR.
//!   Slots are kept W + Lt ticks (the lateness) before they can be reused,
//!   so a table is sized for N·(W + Lt + 1)/W keys at α = 0.95.
//! - **Bits per key.** 16 bits per slot over a load α: 16 / 0.95 = 16.8
//!   bits per key at the design load; the first table is sized for the
//!   expected keys plus the headroom (20%): 16 · 1.2 · (W+1)/W / 0.95 (W = 117) ≈
//!   20.4 bits per key in the window when the estimate is right (the timer
//!   filter: k cells of 8 bits, 92 bits per key at its design load).
//! - **Wrap-round.** Stamps are `tick mod R + 1`, R = 2^c − 1 (0: empty).
//!   Every bucket is swept once every S = R − 1 − W − Lt ticks (a 1/S of
//!   the buckets per tick), so an expired slot is emptied before its stamp
//!   comes round again; W + Lt takes R − 1 less a sixteenth (at least 2)
//!   for the sweep and 2 for rounding up.
//!   At c = 7: R = 127, W + Lt ≤ 117, S ≥ 9: the sweep reads 1/S of
//!   the table per tick, about 1.3·W/S slots per event. Expired slots (older than
//!   W + Lt) count as free to an insert before the sweep reaches them. The
//!   sweep empties a slot by zeroing its field: the prefix code stays, no
//!   bucket is re-sorted.
//! - **Other targets.** Each fingerprint bit more is a stamp bit less:
//!   ε = 0.05 gives f = 8, c = 9 (477 ticks per window); ε = 0.001 gives
//!   f = 13, c = 4 (10 ticks per window: the rounding term grows as the
//!   tick, 10% of the window). Below 0.00093, f would pass 13 and leave the
//!   stamp under 4 bits: refused, naming `fpr`.
//!
//! # Growth without forgetting
//!
//! An insert that finds no free slot moves slots to their other buckets
//! (at most 500 moves); if none finds room, every move is undone — so a
//! failed insert forgets nothing — and the next table is tried. Lookups
//! check every table; a distinct key goes to the largest table with room
//! (the least FPR per key). When none has room, a new table is added
//! beside them, sized from the kept slots (extrapolated to a whole window
//! while the filter has not seen one) times 1.5, less what the tables hold
//! ([`growth`]): a load 1.5× the estimate adds a table about half the
//! first one's size, not one 4× larger. No rehash: fingerprints cannot be
//! moved into a table of another size (their buckets came from hash bits
//! the slot does not keep), and need not be. An emptied table is dropped
//! only while the others hold the live keys 1.5 times over (hysteresis: a
//! burst that comes back finds its table); a lone table 3× larger than its
//! keys need hands over to a smaller one and drains. Every decision reads
//! only what a snapshot restores. Without an estimate the first table has
//! [`params::START_BUCKETS`] buckets. At the cap on tables
//! (`filter.max_generations`) an insert with no room takes the slot with
//! the oldest stamp of its buckets, counted as `forced_evictions`: the one
//! way a key in the window can be forgotten.
//!
//! # Deletes
//!
//! A table stores fingerprints, so a delete clears the one slot holding
//! the key's fingerprint in its buckets — refused (`Ambiguous`) when more
//! than one slot of all tables matches, since another key may be what a
//! slot stands for, and `Absent` when none does. Exactly what the timer
//! filter does with `deletable`, with no counting cells.
//!
//! # Snapshot copy
//!
//! The family copies this kind whole when a snapshot begins (the slice
//! stops for one copy of its tables). Chunked copy-on-write as for timer
//! cells would pay off less than there: a slot write is one bucket word and
//! the sweep writes 1/S of the table every tick, so most chunks are dirtied
//! within S ticks anyway; the table is also ~4× smaller than the timer
//! filter's cells for the same keys.
//!
//! Files from the bottom up:
//!
//! - [`params`]: settings and their resolution (f, c, tick, buckets).
//! - [`bucket`]: the semi-sorted bucket's codec (12-bit prefix code and
//!   four 13-bit fields in a `u64`).
//! - `clock`: ticks, stamps, ages; the fingerprint of a hash.
//! - [`table`]: one table, its inserts (kicks with roll-back) and sweep.
//! - [`growth`]: where a key goes, how large a new table is, when one is
//!   dropped or handed over.
//! - [`filter`]: the tables of one slice under its clock.
//! - [`snapshot`]: encode and decode in the envelope.
//! - [`unite`]: the union of several slices' tables (`checkpoint merge`).
//! - [`kind`]: how the kind plugs into the family of kinds (its name, its
//!   spec from the settings, its memory plan, sizing, figures and lookups).

pub mod bucket;
mod clock;
pub mod filter;
pub mod growth;
pub mod kind;
pub mod params;
pub mod snapshot;
pub mod table;
pub mod unite;

pub use filter::{CuckooCounters, CuckooFilter};
pub use params::{CuckooParams, CuckooSpec};
pub use unite::SlotsDiffer;

#[cfg(test)]
mod family_tests;
#[cfg(test)]
mod growth_tests;
#[cfg(test)]
mod tests;
