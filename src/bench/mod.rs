//! Measuring the filter: synthetic workloads, the exact oracle, and the
//! accuracy experiments run by `dedupd bench accuracy`.
//!
//! - [`workload`]: deterministic uniform, Zipf and recurring streams.
//! - [`clicks`]: the demo's click stream and its exact answer.
//! - [`oracle`]: exact sliding-window dedup and the confusion counts.
//! - [`text`]: real text (the Brown Corpus's sentences) for keys.
//! - [`accuracy`]: the experiments (slicing, equal timers, growth under
//!   bursts, undersized filters, timer widths) written as CSV and markdown.
//! - [`sim`]: the paper's design space simulated (horizontal and vertical
//!   slices, failures, pipelining, Bloom trees), for `dedupd bench design-space`.
//! - [`design_space`]: the paper's §7 experiments on the simulator
//!   (`dedupd bench design-space`, docs/paper-reproduction.md).
//! - [`bloofi`]: the provenance indexes (naive, Bloofi, Flat-Bloofi) in the
//!   Bloofi paper's setting (`dedupd bench bloofi`, docs/provenance.md).
//! - [`stream_kinds`]: RSBF vs SBF vs the timer filter at equal memory on
//!   unbounded uniform streams (`dedupd bench stream-kinds`).
//! - [`spectral`]: the Spectral Bloom Filter's error rates against the
//!   paper's formulas, and windowed counts against exact ones (`dedupd bench spectral`).

pub mod accuracy;
pub mod bloofi;
pub mod clicks;
pub mod design_space;
pub mod oracle;
pub mod sim;
pub mod spectral;
pub mod stream_kinds;
pub mod text;
pub mod workload;
