//! How the timer filter plugs into the family of kinds
//! ([`crate::filter::family`]): its worst-case memory, its size, the union
//! of its slices and its answer to a key lookup.

use super::params::{FilterParams, Growth, MAX_LEVEL};
use super::sliding::SlidingFilter;
use crate::filter::event::FilterCounters;
use crate::filter::hash::KeyHash;
use crate::filter::kind_parts::{FilterFigures, Footprint, Sizing, UniteError};

/// The settings name of the kind (`filter.kind`, `--kind`).
pub const NAME: &str = "timer";

/// The line `dedupd filter --help` shows for `--kind timer`.
pub const PIPE_HELP: &str = "Deduplicate with the sliding timer Bloom filter";

/// The most generations a united filter holds (a snapshot restores no more).
const MAX_UNITED_GENERATIONS: usize = 64;

/// One slice's worst case: one first-size generation when it cannot grow,
/// else each generation at the top level (the largest a new one can start
/// at), plus the alive table the generations share.
pub fn footprint(p: &FilterParams) -> Footprint {
    let alive = u64::from(p.period) + 1;
    let top = FilterParams { cells: p.level_cells(MAX_LEVEL), ..p.clone() };
    let grows = p.growth != Growth::None;
    Footprint {
        configured: p.max_generations,
        first_bytes: p.memory_bytes(),
        shared_bytes: alive,
        top_part_bytes: grows.then(|| top.memory_bytes().saturating_sub(alive)),
    }
}

/// One slice's filter: its first generation's cells.
pub fn sizing(p: &FilterParams) -> Sizing {
    Sizing {
        cells: p.cells,
        cell_bits: u32::from(p.timer_bits),
        hashes: p.hashes,
        tick_ms: Some(p.tick_ms),
        bytes: p.memory_bytes(),
        max_parts: Some(p.max_generations),
    }
}

/// The filter's figures: the newest generation's density.
pub fn figures(f: &SlidingFilter) -> FilterFigures {
    let c = f.counters();
    FilterFigures {
        counters: [c.generations_created, c.generations_dropped, c.saturated_inserts],
        density: f.generations().last().map_or(0.0, |g| g.density()),
        estimated_fpr: f.estimated_fpr(),
        memory_bytes: f.memory_bytes(),
        generations: f.generations().len(),
        clock_ms: f.clock_ms(),
    }
}

/// What a key lookup answers: the filter's test without its update.
pub fn lookup(filter: &SlidingFilter, hash: &KeyHash) -> serde_json::Value {
    let l = filter.lookup(hash);
    serde_json::json!({
        "duplicate": l.duplicate,
        "alive_cells": l.alive_cells,
        "hashes": filter.params().hashes,
        "equal_timers": l.equal_timers,
        "clock_ms": filter.clock_ms(),
    })
}

/// The parameters the cells depend on must agree (the cell count of a
/// level-0 generation may differ: each generation keeps its own size).
fn check_params(a: &FilterParams, b: &FilterParams) -> Result<(), UniteError> {
    let fields: [(&'static str, String, String); 7] = [
        ("seed", format!("{:#x}", a.seed), format!("{:#x}", b.seed)),
        ("hashes", a.hashes.to_string(), b.hashes.to_string()),
        ("timer_bits", a.timer_bits.to_string(), b.timer_bits.to_string()),
        ("tick_ms", a.tick_ms.to_string(), b.tick_ms.to_string()),
        ("window_ms", a.window_ms.to_string(), b.window_ms.to_string()),
        (
            "layout and lateness",
            format!("{:?} {:?}", a.layout, a.lateness_ms),
            format!("{:?} {:?}", b.layout, b.lateness_ms),
        ),
        ("deletable", a.deletable.to_string(), b.deletable.to_string()),
    ];
    match fields.into_iter().find(|(_, l, r)| l != r) {
        Some((parameter, left, right)) => Err(UniteError::Parameters { parameter, left, right }),
        None => Ok(()),
    }
}

/// The union of `filters` under `params`: every filter moved to the latest
/// clock among them (their own steps and sweeps, so every cell is where an
/// uninterrupted filter would have it), then their generations, older ones
/// first and the newest of each last.
pub fn unite(filters: Vec<SlidingFilter>, params: &FilterParams) -> Result<SlidingFilter, UniteError> {
    let clock = filters.iter().filter_map(SlidingFilter::clock_ms).max();
    let (mut older, mut newest) = (Vec::new(), Vec::new());
    let mut counters = FilterCounters { equal_timer_counts: vec![0; params.hashes as usize + 1], ..Default::default() };
    for mut f in filters {
        check_params(&f.params, params)?;
        counters.add(&f.counters);
        let Some(clock) = clock.filter(|_| f.clock_ms.is_some()) else {
            continue; // never saw an event: nothing to unite
        };
        f.advance(clock);
        let last = f.generations.pop();
        older.append(&mut f.generations);
        newest.extend(last);
    }
    older.append(&mut newest);
    if older.is_empty() {
        return Ok(SlidingFilter::new(params.clone()));
    }
    if older.len() > MAX_UNITED_GENERATIONS {
        return Err(UniteError::TooManyParts { parts: older.len(), most: MAX_UNITED_GENERATIONS });
    }
    counters.generations_max = older.len() as u32;
    Ok(SlidingFilter::from_parts(params.clone(), clock, older, counters))
}
