//! Measuring the filter: synthetic workloads, the exact oracle, and the
//! accuracy experiments run by `dedupd bench accuracy`.
//!
//! - [`workload`]: deterministic uniform, Zipf and recurring streams.
//! - [`clicks`]: the demo's click stream and its exact answer.
//! - [`oracle`]: exact sliding-window dedup and the confusion counts.
//! - [`text`]: real text (the Brown Corpus's sentences) for keys.
//! - [`accuracy`]: the experiments (slicing, equal timers, growth under
//!   bursts, undersized filters, timer widths) written as CSV and markdown.
//! - [`bloofi`]: the provenance indexes (naive, Bloofi, Flat-Bloofi) in the
//!   Bloofi paper's setting (`dedupd bench bloofi`, docs/provenance.md).
//! - [`stream_kinds`]: RSBF vs SBF vs the timer filter at equal memory on
//!   unbounded uniform streams (`dedupd bench stream-kinds`).

pub mod accuracy;
pub mod bloofi;
pub mod clicks;
pub mod oracle;
pub mod stream_kinds;
pub mod text;
pub mod workload;
