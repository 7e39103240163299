//! How the decaying kinds plug into the family of kinds
//! ([`crate::filter::family`]): their settings names, their spec from the
//! `[filter]` settings, their size, their figures and their answer to a
//! key lookup. They have no window and do not unite.

use super::{DecayingFilter, DecayingKind, DecayingSpec};
use crate::filter::hash::KeyHash;
use crate::filter::kind_parts::{FilterFigures, PipeFigures, Sizing};
use crate::filter::param_error::ParamError;
use crate::filter::timer::params::FilterSpec;

/// The largest share of `filter.memory` a slice may get: a share is
/// allocated at start-up, and one no machine has would abort the process
/// instead of stopping it with a message.
const MAX_SHARE: u64 = 1 << 40;

impl DecayingKind {
    /// The line `dedupd filter --help` shows for the kind.
    pub fn pipe_help(self) -> &'static str {
        match self {
            DecayingKind::Rsbf => {
                "The reservoir-sampling Bloom filter: fixed memory (`--memory`), no window; remembers a sample of \
                 the whole stream"
            }
            DecayingKind::Stable => {
                "The Stable Bloom Filter: fixed memory (`--memory`), no window; forgets at random at a rate set by \
                 `--fpr`"
            }
        }
    }
}

/// The kind's spec from the `[filter]` settings: one filter per slice with
/// an equal share of `memory` bytes, seeded with `rng_seed`, at the target
/// of the timer filter's settings (validated: 1 to 65536 slices).
/// Errors name the setting (`memory` in bytes, as it is written).
pub fn settings_spec(
    kind: DecayingKind,
    timer: &FilterSpec,
    memory: u64,
    rng_seed: u64,
) -> Result<DecayingSpec, ParamError> {
    // Deleting needs the timer filter's counting cells; a decaying kind
    // forgets by itself.
    if timer.deletable {
        return Err(ParamError::new(
            "deletable",
            true,
            format!("only the timer kind can delete keys, not filter.kind = {}", kind.as_str()),
        ));
    }
    let slices = u64::from(timer.slices);
    let share = memory / slices;
    if share > MAX_SHARE {
        return Err(ParamError::new(
            "memory",
            format!("{memory}B"),
            format!("at most 1TiB per slice ({slices} slices get {share}B each)"),
        ));
    }
    let spec = DecayingSpec { seed: rng_seed, ..DecayingSpec::new(kind, share.saturating_mul(8), timer.fpr) };
    spec.fingerprint().map_err(|e| match e.setting {
        "memory" => ParamError::new(
            "memory",
            format!("{memory}B"),
            format!(
                "each of the {slices} slices gets {share}B ({} bits), which {} (with filter.fpr = {})",
                share.saturating_mul(8),
                e.rule,
                timer.fpr
            ),
        ),
        _ => e,
    })?;
    Ok(spec)
}

/// One slice's filter (validated settings: they size).
pub fn sizing(spec: &DecayingSpec) -> Sizing {
    let size = spec.size().expect("validated at load");
    Sizing {
        cells: size.cells,
        cell_bits: u32::from(size.cell_bits),
        hashes: size.hashes,
        tick_ms: None,
        bytes: size.bytes,
        max_parts: None,
    }
}

/// The filter's figures: no parts and no clock; the fraction of ones
/// (rsbf) or of non-zero cells (stable) stands for the density, the design
/// FPR for the estimate.
pub fn figures(c: &DecayingFilter) -> FilterFigures {
    let st = c.stats();
    FilterFigures {
        counters: [0; 3],
        density: st.ones_fraction,
        estimated_fpr: st.design_fpr,
        memory_bytes: st.memory_bytes as usize,
        generations: 0,
        clock_ms: None,
    }
}

/// The filter's figures in the timer filter's terms: it has no window, no
/// generations and no timers; its design FPR stands for the estimate.
pub fn pipe_figures(filter: &DecayingFilter) -> PipeFigures {
    let c = filter.stats();
    PipeFigures {
        memory_bytes: c.memory_bytes,
        estimated_fpr: c.design_fpr,
        generations_live: 0,
        generations_created: 0,
        generations_dropped: 0,
        saturated_inserts: 0,
        cells_per_slice: 0,
        hashes: c.hashes,
        timer_bits: 0,
        tick_ms: 0,
        window_ms: 0,
        ones_fraction: Some(c.ones_fraction),
        expected_ones_fraction: Some(c.expected_ones_fraction),
        seed: Some(match filter {
            DecayingFilter::Rsbf(f) => f.params().seed,
            DecayingFilter::Stable(f) => f.params().seed,
        }),
    }
}

/// What a key lookup answers: the filter's own test, without its update.
pub fn lookup(filter: &DecayingFilter, hash: &KeyHash) -> serde_json::Value {
    serde_json::json!({
        "duplicate": filter.contains(hash),
        "kind": filter.kind().as_str(),
        "hashes": filter.stats().hashes,
    })
}
