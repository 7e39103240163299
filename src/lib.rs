//! dedupd removes duplicate events from streams with sliding-window timer
//! Bloom filters ("One is Enough", Koloniari et al., CIKM 2011).
//!
//! The crate follows the data:
//!
//! - [`filter`]: the pure filter engine — hashing, timer cells, sliding
//!   generations with density- or cardinality-based growth, horizontal
//!   slicing, sizing formulas and the snapshot codec. No I/O, no async.
//! - [`engine`]: records in, verdicts out — key and time extraction from
//!   records and batched, deterministic processing over the filter.
//! - [`testkit`]: synthetic workloads, real text and the exact oracle, shared
//!   by the tests, the examples and the lab (`lab/`, the accuracy experiments).
//! - [`cli`]: the `dedupd` command line (`main.rs` only calls it).
//! - [`units`]: parsing of durations such as `10m`.

pub mod admin;
pub mod cli;
pub mod config;
pub mod engine;
pub mod filter;
pub mod kafka;
pub mod metrics;
pub mod testkit;
pub mod units;
