//! Memory bounded in bytes, decided once at start-up from the settings.
//!
//! - [`limit`]: the process's limit — `memory.limit`, or the container's
//!   cgroup (v2 or v1, nested groups included).
//! - [`filters`]: the filters' worst case against their cap, lowering the
//!   generation (or table) count until it fits.
//! - [`budget`]: the limit divided among every buffer that grows with the
//!   input: filters, held records, router lanes, client queues.

pub mod budget;
pub mod filters;
pub mod limit;

pub use budget::{Budget, BudgetError, Part};
pub use filters::*;
pub use limit::{MemoryLimit, container_limit, process_limit};
