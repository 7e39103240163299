//! Shared mode: one slice judges every input partition with no copy of the
//! records; the routers write only the order they read records in, and the
//! slice re-reads the records that order names (docs/shared-mode.md).
//!
//! - Settings: `slicing.mode = "shared"` (`[slicing]`,
//!   `config/sections.rs`); what shared mode asks of the other settings is
//!   in [`settings`] (its rule on `availability.policy` is with that
//!   policy's).
//! - Stage (engine layer, deterministic): [`read_order`] — the read-order
//!   records and the virtual positions they give.
//! - Kafka part: [`reader`] — the slice's reader of the input records the
//!   read order names.
//! - Where the core calls it: `kafka/router/route.rs` (writes the read
//!   order), `kafka/worker/records.rs` and `kafka/worker/setup.rs` (read
//!   it), `kafka/restore/restorer.rs` (replays it).

pub mod feature;
pub mod read_order;
pub mod reader;
pub mod settings;
