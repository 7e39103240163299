//! The lab: measurements of dedupd's filters, kept out of the daemon.
//!
//! - [`accuracy`]: the real filter engine against the exact oracle
//!   (`dedupd-lab accuracy`; CI runs its `--quick` form).
//! - [`stream_kinds`]: RSBF vs SBF vs the timer filter at equal memory
//!   (`dedupd-lab stream-kinds`).
//! - [`sim`] and [`design_space`]: the paper's design space on a simulator
//!   (`dedupd-lab design-space`).
//! - [`spectral`]: the Spectral Bloom Filter's error rates against the
//!   paper's formulas (`dedupd-lab spectral`).
//! - [`cuckoo`]: the cuckoo table filter beside the timer filter on real
//!   text (`dedupd-lab cuckoo`).
//! - [`bloofi`]: the provenance indexes against the naive scan
//!   (`dedupd-lab bloofi`).
//! - [`dynamic`]: the Dynamic Bloom Filter, the paper's reference model for
//!   the deletable timer generations.
//!
//! The inputs and the exact answers come from `dedupd::testkit`, which the
//! library's own tests use too.

pub mod accuracy;
pub mod bloofi;
pub mod cuckoo;
pub mod design_space;
pub mod dynamic;
pub mod sim;
pub mod spectral;
pub mod stream_kinds;
