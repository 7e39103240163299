//! How the cuckoo table filter plugs into the family of kinds
//! ([`crate::filter::family`]): its settings name, its spec from the timer
//! filter's settings, its worst-case memory, its size, its figures, the
//! union of its slices and its answer to a key lookup.

use super::filter::CuckooFilter;
use super::params::{BUCKET_SLOTS, CuckooParams, CuckooSpec, MAX_LEVEL, MEMORY_BITS_PER_SLOT};
use crate::filter::hash::KeyHash;
use crate::filter::kind_parts::{FilterFigures, Footprint, PipeFigures, Sizing, UniteError};
use crate::filter::param_error::ParamError;
use crate::filter::timer::params::{FilterParams, FilterSpec};

/// The settings name of the kind (`filter.kind`, `--kind`).
pub const NAME: &str = "cuckoo";

/// The line `dedupd filter --help` shows for `--kind cuckoo`.
pub const PIPE_HELP: &str = "Deduplicate within --window with the cuckoo table filter: one 16-bit (fingerprint, stamp) slot per key (see \
     docs/cuckoo.md)";

impl CuckooSpec {
    /// The tables sized from the timer filter's settings: the same window,
    /// target, headroom, slices, lateness and seed, its tables capped as its
    /// generations are (`filter.max_generations`); `expected_keys` as set
    /// (`None`: the tables size themselves from what they see).
    pub fn from_timer(timer: &FilterSpec, expected_keys: Option<u64>) -> CuckooSpec {
        CuckooSpec {
            window_ms: timer.window_ms,
            fpr: timer.fpr,
            expected_keys,
            headroom: timer.headroom,
            slices: timer.slices,
            lateness_ms: timer.lateness_ms,
            seed: timer.seed,
            max_tables: timer.max_generations,
        }
    }
}

/// The kind's spec from the `[filter]` settings (the timer filter's,
/// validated), validated: an error names the setting as the timer
/// filter's would, its rule followed by the kind.
pub fn settings_spec(timer: &FilterSpec, expected_keys: Option<u64>) -> Result<CuckooSpec, ParamError> {
    let spec = CuckooSpec::from_timer(timer, expected_keys);
    spec.resolve().map_err(|e| ParamError { rule: format!("{} (filter.kind = {NAME})", e.rule), ..e })?;
    Ok(spec)
}

/// One slice's worst case: the idle timer filter beside one first table
/// when they cannot grow, else each table at the top level (the largest a
/// new one can be), as for the timer filter's generations.
pub fn footprint(spec: &CuckooSpec, idle: &FilterParams) -> Result<Footprint, ParamError> {
    let tables = spec.resolve()?;
    let idle_bytes = idle.memory_bytes();
    Ok(Footprint {
        configured: spec.max_tables,
        first_bytes: idle_bytes.saturating_add(tables.table_bytes(0)),
        shared_bytes: idle_bytes,
        top_part_bytes: Some(tables.table_bytes(MAX_LEVEL)),
    })
}

/// One slice's first table: a slot is a cell of 16 bits of memory (a
/// semi-sorted bucket of 4 slots is one u64); a key has 2 candidate buckets.
pub fn sizing(p: &CuckooParams) -> Sizing {
    let slots = p.buckets * BUCKET_SLOTS as u64;
    Sizing {
        cells: slots,
        cell_bits: MEMORY_BITS_PER_SLOT,
        hashes: 2,
        tick_ms: Some(p.tick_ms),
        bytes: slots * u64::from(MEMORY_BITS_PER_SLOT / 8),
        max_parts: Some(p.max_tables),
    }
}

/// The filter's figures: tables for generations (created, dropped, and
/// the forced evictions for the saturated inserts), the newest table's
/// load for the density.
pub fn figures(f: &CuckooFilter) -> FilterFigures {
    let c = f.counters();
    FilterFigures {
        counters: [c.tables_created, c.tables_dropped, c.forced_evictions],
        density: f.load(),
        estimated_fpr: f.estimated_fpr(),
        memory_bytes: f.memory_bytes(),
        generations: f.tables().len(),
        clock_ms: f.clock_ms(),
    }
}

/// The figures of all slices' tables in the timer filter's terms: a
/// "generation" is a table, cells are slots, the timer width is the stamp's.
pub fn pipe_figures(all: &[&CuckooFilter]) -> Option<PipeFigures> {
    let first = all.first()?;
    let p = first.params();
    let counters = all.iter().map(|f| f.counters());
    Some(PipeFigures {
        memory_bytes: all.iter().map(|f| f.memory_bytes() as u64).sum(),
        estimated_fpr: all.iter().map(|f| f.estimated_fpr()).sum::<f64>() / all.len() as f64,
        generations_live: all.iter().map(|f| f.tables().len() as u64).sum(),
        generations_created: counters.clone().map(|c| c.tables_created).sum(),
        generations_dropped: counters.clone().map(|c| c.tables_dropped).sum(),
        saturated_inserts: counters.map(|c| c.forced_evictions).sum(),
        cells_per_slice: p.buckets * BUCKET_SLOTS as u64,
        hashes: 2,
        timer_bits: p.clock_bits as u8,
        tick_ms: p.tick_ms,
        window_ms: p.window_ms,
        ones_fraction: None,
        expected_ones_fraction: None,
        seed: None,
    })
}

/// The union of slices' tables under `params`, at most `max_tables` of them.
pub fn unite(filters: Vec<CuckooFilter>, params: &CuckooParams) -> Result<CuckooFilter, UniteError> {
    let united = CuckooFilter::unite(filters, params).map_err(|d| UniteError::Parameters {
        parameter: d.parameter,
        left: d.left,
        right: d.right,
    })?;
    let (parts, most) = (united.tables().len(), params.max_tables as usize);
    if parts > most {
        return Err(UniteError::TooManyParts { parts, most });
    }
    Ok(united)
}

/// What a key lookup answers: the tables' test without its update.
pub fn lookup(filter: &CuckooFilter, hash: &KeyHash) -> serde_json::Value {
    serde_json::json!({
        "duplicate": filter.contains(hash),
        "kind": NAME,
        "tables": filter.tables().len(),
        "clock_ms": filter.clock_ms(),
    })
}
