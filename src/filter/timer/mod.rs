//! The sliding-window timer filter (`filter.kind = "timer"`): records
//! expire after the window.
//!
//! Files from the bottom up (a file imports only files above it, and the
//! shared files of [`crate::filter`]):
//!
//! - [`sizing`]: the papers' formulas (optimal size, thresholds, rates).
//! - [`params`]: the settings ([`params::FilterSpec`]) and their validation
//!   into the parameters the filter runs with, sized with `sizing`.
//! - `clock`: the slice clock as the cells see it.
//! - `cells`: timer cell arrays, 4 to 32 bits per cell.
//! - [`generation`]: one sliding timer Bloom filter with an exact live count.
//! - [`sliding`]: a slice's list of generations, growth and verdicts.
//! - [`sliced`]: S independent slices chosen by `H_S(key)` (horizontal slicing).
//! - `vertical`: one slice's filter split into S vertical slices of its
//!   cells, owned by T threads: parallel and pipelined testing with the
//!   sequential verdicts (the `vertical` feature).
//! - [`snapshot`]: the versioned, checksummed binary state of one timer filter.
//! - [`copy`]: copying a slice filter while it goes on (copy-on-write), for checkpoints.
//! - [`kind`]: how the kind plugs into the family of kinds (its memory plan,
//!   sizing, union of slices and lookups).

pub(crate) mod cells;
mod clock;
pub mod copy;
pub mod generation;
mod growth;
pub mod kind;
pub mod params;
pub mod sizing;
pub mod sliced;
pub mod sliding;
pub mod snapshot;
#[cfg(feature = "vertical")]
pub mod vertical;

pub use copy::FilterCopy;
pub use generation::Generation;
pub use sliced::SlicedFilter;
pub use sliding::{DeleteRefusal, Lookup, SlidingFilter};
#[cfg(feature = "vertical")]
pub use vertical::{PipelineStats, VerticalFilter};
