//! Shared mode: one slice judges every input partition with no copy of the
//! records; the routers write only the order they read records in, and the
//! slice re-reads the records that order names (docs/shared-mode.md).
//!
//! - Settings: `slicing.mode = "shared"` (`[slicing]`,
//!   `config/sections.rs`); what shared mode asks of the other settings is
//!   in [`settings`] (its rule on `availability.policy` is with that
//!   policy's).
//! - Kafka part: [`reader`] — the slice's reader of the input records the
//!   read order names ([`feature`] hands it to the slice worker);
//!   [`handoff`] — the copies of them the router of the same process hands
//!   the slice in memory, so that it need not read them again (the router
//!   makes them in `kafka/router/route.rs`, the slice takes them in
//!   `kafka/worker/read_orders.rs`).
//! - The read-order records themselves, and the virtual positions they
//!   give, are a form of the slice log (`kafka/slice_log/read_order.rs`):
//!   the router writes them when the slice log holds read orders
//!   (`kafka/slice_log/mod.rs`, `Holds`), the slice worker and the restore
//!   read them.

pub mod feature;
pub mod handoff;
pub mod reader;
pub mod settings;
