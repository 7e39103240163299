//! How a slice's tables follow its load: where an insert goes, how large a
//! new table is, and when a table is dropped or handed over. Every decision
//! reads only what a snapshot restores (the tables' slots and the clock),
//! so a restored slice grows and shrinks as an uninterrupted one would.
//!
//! - **Where an insert goes.** The largest table with room takes it: a key
//!   in a table of S slots adds 1/S to the summed load Σα that the FPR
//!   follows (8·Σα/2^f), so the largest table costs the least per key. A
//!   table past [`LOAD_CAP`] is tried only after the others, and an older
//!   table oversized for the live keys ([`SHRINK_AT`]) only after the newest
//!   (it is draining after a handover).
//! - **Growth.** When no table takes the key, a new one brings the
//!   capacity to the keys a window is predicted to hold, times
//!   [`GROW_HEADROOM`]: the kept slots, scaled up when the oldest of them is
//!   younger than the window (the filter has not seen a whole window yet:
//!   at most [`MAX_EXTRAPOLATION`]×). The old tables keep taking keys as
//!   their slots expire, so a load 1.5× the first table's adds a table of
//!   about half its size, not one 4× larger.
//! - **Hysteresis.** An emptied table is dropped only while the others hold
//!   the live keys [`KEEP_EMPTY`] times over, so a load that comes back
//!   (bursts) finds its table still there. A lone table whose capacity
//!   passes [`SHRINK_AT`] times the live keys hands over to one sized for
//!   them with [`GROW_HEADROOM`] and drains within W + Lt + S ticks. With
//!   GROW_HEADROOM < KEEP_EMPTY... < SHRINK_AT, a steady stream settles.

use super::params::{BUCKET_SLOTS, CuckooParams, DESIGN_LOAD, MAX_LEVEL};
use super::table::Table;

/// A new table brings the capacity (at the design load) to the predicted
/// keys times this.
pub const GROW_HEADROOM: f64 = 1.5;
/// A table whose occupied slots pass this share is tried after the others
/// (kicks grow long near the design load).
pub const LOAD_CAP: f64 = 0.92;
/// An emptied table is kept while the other tables' capacity is under the
/// live keys times this.
pub const KEEP_EMPTY: f64 = 1.5;
/// A table whose capacity passes the live keys times this is oversized: a
/// lone one hands over to a smaller table, an older one takes keys last.
pub const SHRINK_AT: f64 = 3.0;
/// The most a growth scales up the kept slots for a window not yet seen whole.
pub const MAX_EXTRAPOLATION: f64 = 16.0;
/// A new table adds at least this share of the capacity there is.
pub const MIN_STEP: f64 = 0.25;

/// Keys a table holds at the design load (in slots).
pub fn capacity(t: &Table) -> f64 {
    (t.buckets() * BUCKET_SLOTS as u64) as f64 * DESIGN_LOAD
}

/// Whether `t` is oversized for `live` kept slots.
pub fn oversized(t: &Table, live: u64) -> bool {
    capacity(t) > SHRINK_AT * live as f64
}

/// The order in which the tables are offered a distinct key: those with
/// room first, largest first (newest first among equals); an older
/// oversized table next; tables past [`LOAD_CAP`] last. Writes the indices
/// into `out` and returns how many.
pub fn insert_order(tables: &[Table], live: u64, out: &mut [u8; 64]) -> usize {
    let newest = tables.len() - 1;
    let class = |i: usize, t: &Table| {
        if t.occupied() as f64 > LOAD_CAP * (t.buckets() * BUCKET_SLOTS as u64) as f64 {
            2
        } else if i != newest && oversized(t, live) {
            1
        } else {
            0
        }
    };
    let n = tables.len().min(out.len());
    for (i, slot) in out.iter_mut().enumerate().take(n) {
        *slot = i as u8;
    }
    out[..n].sort_by_key(|&i| {
        let t = &tables[i as usize];
        (class(i as usize, t), std::cmp::Reverse(t.buckets()), std::cmp::Reverse(i))
    });
    n
}

/// Buckets of the table a growth adds: capacity for the predicted keys
/// times [`GROW_HEADROOM`], less what the tables have; `kept` slots were
/// kept at the clock, the oldest `oldest_age` ticks old.
pub fn grown_buckets(p: &CuckooParams, kept: u64, oldest_age: u32, total_slots: u64) -> u64 {
    let seen = f64::from(oldest_age + 1);
    let whole = f64::from(p.retain_ticks() + 1);
    let predicted = kept as f64 * (whole / seen).clamp(1.0, MAX_EXTRAPOLATION);
    let need = predicted * GROW_HEADROOM / DESIGN_LOAD;
    let slots = (need - total_slots as f64).max(total_slots as f64 * MIN_STEP);
    buckets_for(p, slots)
}

/// The last quarter of what a table keeps, in ticks: a handover sizes its
/// table from the keys stored then (the load is falling: the older ones
/// overstate it).
pub fn recent_ticks(p: &CuckooParams) -> u32 {
    p.retain_ticks() / 4
}

/// Buckets of the table a lone oversized table hands over to: room for the
/// keys of a whole window at the rate of the `recent` slots (those of the
/// last [`recent_ticks`]) times [`GROW_HEADROOM`], never below the first
/// table's.
pub fn handover_buckets(p: &CuckooParams, recent: u64) -> u64 {
    let whole = f64::from(p.retain_ticks() + 1) / f64::from(recent_ticks(p) + 1);
    let slots = recent as f64 * whole * GROW_HEADROOM / DESIGN_LOAD;
    buckets_for(p, slots).max(p.buckets.min(p.level_buckets(MAX_LEVEL)))
}

fn buckets_for(p: &CuckooParams, slots: f64) -> u64 {
    ((slots / BUCKET_SLOTS as f64).ceil() as u64).clamp(super::params::MIN_BUCKETS, p.level_buckets(MAX_LEVEL))
}

/// The size class of a table of `buckets`: the smallest level whose
/// tables are at least as large (what the snapshot's level byte holds).
pub fn level_of(p: &CuckooParams, buckets: u64) -> u8 {
    (0..MAX_LEVEL).find(|&l| p.level_buckets(l) >= buckets).unwrap_or(MAX_LEVEL)
}

/// Which emptied tables (never the newest) to drop: one is dropped while
/// the tables left hold the live keys [`KEEP_EMPTY`] times over, or when it
/// is too small to matter (under [`MIN_STEP`] of the capacity left).
/// Smallest first.
pub fn droppable(tables: &[Table], live: u64) -> Vec<usize> {
    let newest = tables.len() - 1;
    let mut empty: Vec<usize> = (0..newest).filter(|&i| tables[i].occupied() == 0).collect();
    empty.sort_by_key(|&i| tables[i].buckets());
    let mut left: f64 = tables.iter().map(capacity).sum();
    let mut out = Vec::new();
    for i in empty {
        let without = left - capacity(&tables[i]);
        if without >= KEEP_EMPTY * live as f64 || capacity(&tables[i]) < MIN_STEP * without {
            left = without;
            out.push(i);
        }
    }
    out
}
