//! What the tests, the examples and the lab (`lab/`, the `dedupd-lab`
//! binary) share: deterministic inputs and the exact answer to compare the
//! filters with. Nothing in the daemon's record path uses it.
//!
//! - [`workload`]: deterministic uniform, Zipf and recurring streams.
//! - [`clicks`]: the demo's click stream and its exact answer.
//! - [`oracle`]: exact sliding-window dedup and the confusion counts.
//! - [`text`]: real text (the Brown Corpus's sentences) for keys.

pub mod clicks;
pub mod oracle;
pub mod text;
pub mod workload;
