//! dedupd removes duplicate events from streams with sliding-window timer
//! Bloom filters ("One is Enough", Koloniari et al., CIKM 2011).
//!
//! The crate follows the data, each layer using only those above it
//! (docs/architecture.md draws where a record goes and where each feature
//! lives; docs/design.md holds the invariants):
//!
//! - [`filter`]: the pure filters — hashing, timer cells, sliding
//!   generations, the decaying kinds and the family a slice judges with
//!   ([`filter::SliceFilter`]), their snapshots. No I/O, no clock.
//! - [`engine`]: records in, judgments out — key and time extraction,
//!   event-time order, one slice's deterministic state and its snapshot.
//! - [`kafka`]: I/O and the exactly-once protocol — the router, the slice
//!   workers, checkpoints, restore and the replay bounds.
//! - [`features`]: one folder per feature (limits and flags, provenance,
//!   availability, deletes, tiers, shared mode), each with its settings and
//!   their validation, its stage and its Kafka part. Within a folder the
//!   layers hold: the settings file imports only `config`'s shared files
//!   (`config/error.rs`, `config/values.rs`, the sections it checks
//!   against); the stage imports only `filter` and `engine` (deterministic,
//!   no Kafka) and the engine may call it; the Kafka part imports `kafka`.
//!   No file imports in a circle (`scripts/import_cycles.py`).
//! - [`admin`]: the admin endpoint (health, status, key lookups, deletes).
//! - [`memory`]: the filters' worst case against `filter.max_memory` and
//!   the container's memory limit, decided at start-up.
//! - [`metrics`]: the Prometheus metrics.
//! - [`config`]: the settings, validated once at start-up (the core
//!   sections; each feature's section is in its folder, re-exported here).
//! - [`cli`]: the `dedupd` command line (`main.rs` only calls it).
//! - `testkit`: synthetic workloads, real text and the exact oracle, shared
//!   by the tests, the examples and the lab (`lab/`, the accuracy experiments);
//!   built for the unit tests and with the `testkit` feature, not into the
//!   daemon binary.
//! - [`units`]: parsing of durations such as `10m`.
//! - [`url`]: percent-encoding of URL path segments for the HTTP clients.

pub mod admin;
pub mod cli;
pub mod config;
pub mod engine;
pub mod features;
pub mod filter;
pub mod kafka;
pub mod memory;
pub mod metrics;
pub mod schema_registry;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod units;
pub mod url;
