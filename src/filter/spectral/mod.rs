//! Spectral Bloom Filters (Cohen and Matias, SIGMOD 2003): counters instead
//! of bits, so a filter answers "how many times was x inserted?" with a
//! one-sided error — an estimate is never below the true count.
//!
//! - [`Counters`] (in `counters.rs`): m saturating fixed-width counters
//!   (4, 8, 16 or 32 bits) packed in `u64` words. A saturated counter stays
//!   at its maximum (it is never decremented or wrapped), so it still bounds
//!   every count above.
//! - [`Store`] (in `counters.rs`): the counter vector of a filter, either
//!   those fixed-width counters or compact variable-length ones
//!   ([`CompactCounters`](compact_counters::CompactCounters), the paper's
//!   §4), chosen by [`CounterKind`]; the estimates are the same.
//! - [`Sbf`] (in `sbf.rs`): one counter vector with k positions per key (the
//!   dedup filter's double hashing over one XXH3-128), Minimum Selection (MS)
//!   queries, insert, delete, union.
//! - [`Spectral`] (in `estimators.rs`): MS, Minimal Increase (MI,
//!   "conservative update": only the minimal counters grow; deletion is
//!   refused) or Recurring Minimum (RM: a primary SBF, a secondary SBF of half
//!   its size for keys whose minimum is a single counter, and the flags
//!   filter B_f marking keys moved there).
//! - [`WindowedCounts`] (in `windowed.rs`): counts over a sliding window of
//!   event time, as a ring of sub-windows expired whole (no deletions, so MI
//!   works too), each a chain of filters that grows with what it receives.
//!
//! One-sided error: with no deletes, MS and MI never report less than a
//! key's true count (or report the counter maximum if a counter saturated,
//! which callers treat as "at least that"). RM keeps that bound for every
//! key except one whose B_f bits all get set by other keys after its own
//! inserts (a B_f false positive arriving late, ≈ (1-e^(-γ/5k))^k per key,
//! 3.8·10⁻⁵ at γ = 0.7): the secondary then lacks its earlier copies. In
//! crowded filters it is more: measured on skewed multisets, 1.3–1.5% of
//! keys on average from γ = 2.2 to 2.8 (the worst filter of 4 000: 9.3%;
//! test `recurring_minimum_undercounts_rarely`). Where an undercount must
//! never happen (limits), prefer MI or MS.
//!
//! [`compact_counters`] is the compact store.
//!
//! Pure: no I/O, no clock.

pub mod compact_counters;
mod counters;
mod estimators;
mod sbf;
mod windowed;

pub use counters::{CounterKind, Counters, Store};
pub use estimators::{Estimator, Spectral, SpectralParams};
pub use sbf::{Sbf, Slots, salted};
pub use windowed::{
    DEFAULT_SUBWINDOWS, GROWTH_LEVELS, RING_FALSE_POSITIVE, SUBWINDOWS_MAX, SUBWINDOWS_MIN, WindowedCounts,
};

use super::hash::KeyHash;
use super::param_error::ParamError;

/// The most hash positions a key may have (k).
pub const MAX_HASHES: u32 = 16;

/// Why an operation on a spectral filter was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpectralError {
    /// Minimal Increase cannot delete: it did not raise every counter of the
    /// key, so decrementing them would undercount other keys (false negatives).
    #[error("the minimal-increase estimator cannot delete (it would undercount other keys); use ms or rm")]
    DeleteUnsupported,
    /// Deleting more copies than the filter can hold for the key would
    /// undercount other keys.
    #[error("cannot delete {count} copies of a key whose estimate is {estimate}")]
    NotPresent { estimate: u64, count: u32 },
    /// Filters with different parameters cannot be added.
    #[error("cannot unite spectral filters with different {what}: {left} vs {right}")]
    Mismatch { what: &'static str, left: String, right: String },
}

/// Counters for an expected number of distinct keys at load `gamma = n·k/m`.
pub fn counters_for(distinct: u64, hashes: u32, gamma: f64) -> u64 {
    ((distinct.max(1) as f64 * f64::from(hashes) / gamma).ceil() as u64).max(16)
}

/// The Bloom error `E_b = (1 - e^(-γ))^k`: the probability that all k
/// counters of a key are shared with other keys (Claim 1).
pub fn bloom_error(gamma: f64, k: u32) -> f64 {
    (1.0 - (-gamma).exp()).powi(k as i32)
}

#[cfg(test)]
mod tests;
