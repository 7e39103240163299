//! The filter engine: pure data structures, no I/O, no async.
//!
//! - [`hash`]: one XXH3-128 per key; slice and probe positions from its halves.
//! - [`cells`]: timer cell arrays, 4 to 32 bits per cell.
//! - [`generation`]: one sliding timer Bloom filter with an exact live count.
//! - [`sliding`]: a slice's list of generations, growth and verdicts.
//! - [`sliced`]: S independent slices chosen by `H_S(key)` (horizontal slicing).
//! - [`vertical`]: one slice's filter split into S vertical slices of its
//!   cells, owned by T threads: parallel and pipelined testing with the
//!   sequential verdicts.
//! - [`params`] and [`sizing`]: settings, validation and the papers' formulas.
//! - [`snapshot`]: the versioned, checksummed binary state of one slice.
//! - [`copy`]: copying a slice filter while it goes on (copy-on-write), for checkpoints.
//! - [`rsbf`], [`stable`] and [`count`]: the count-based kinds (no window),
//!   the reservoir-sampling and Stable Bloom filters; [`random`]: their seeded PRNG.
//! - [`spectral`]: Spectral Bloom Filters (counts per key, MS/MI/RM) and
//!   windowed counts for frequency limits.
//! - [`provenance`]: which sources may have delivered a key (Bloofi, Flat-Bloofi).

pub(crate) mod cells;
pub mod compact_counters;
pub mod copy;
pub mod count;
pub mod family;
pub use cells::advise_huge_pages;
pub mod generation;
pub mod hash;
pub mod params;
pub mod provenance;
pub mod random;
pub mod rsbf;
pub mod sizing;
pub mod sliced;
pub mod sliding;
pub mod snapshot;
pub mod spectral;
pub mod stable;
#[cfg(feature = "vertical")]
pub mod vertical;

pub use copy::FilterCopy;
pub use count::{CountFilter, CountKind, CountSize, CountSpec, CountStats};
pub use family::{FilterFigures, FilterKind, SliceFilter};
pub use generation::Generation;
pub use hash::KeyHash;
pub use params::{FilterParams, FilterSpec, Growth, Layout, ParamError};
pub use sliced::SlicedFilter;
pub use sliding::{DeleteRefusal, Event, FilterCounters, Lookup, SlidingFilter, Verdict};
pub use snapshot::SnapshotError;
#[cfg(feature = "vertical")]
pub use vertical::{PipelineStats, VerticalFilter};
