//! The filter engine: pure data structures, no I/O, no async.
//!
//! Files from the bottom up (a file imports only files above it; no circle):
//!
//! - [`hash`]: one XXH3-128 per key; slice and probe positions from its halves.
//! - [`param_error`]: the error a setting's check gives.
//! - [`envelope`]: the magic, version and checksum every snapshot is written in.
//! - [`rsbf`], [`stable`] and [`count`]: the count-based kinds (no window),
//!   the reservoir-sampling and Stable Bloom filters; [`random`]: their seeded PRNG.
//! - [`params`] and [`sizing`]: settings, validation and the papers' formulas.
//! - `clock`: the slice clock as the cells see it.
//! - [`cells`]: timer cell arrays, 4 to 32 bits per cell.
//! - `event`: an event, the verdict on it, the filter's counters.
//! - [`generation`]: one sliding timer Bloom filter with an exact live count.
//! - [`sliding`]: a slice's list of generations, growth and verdicts.
//! - [`sliced`]: S independent slices chosen by `H_S(key)` (horizontal slicing).
//! - [`vertical`]: one slice's filter split into S vertical slices of its
//!   cells, owned by T threads: parallel and pipelined testing with the
//!   sequential verdicts.
//! - [`snapshot`]: the versioned, checksummed binary state of one timer filter.
//! - [`copy`]: copying a slice filter while it goes on (copy-on-write), for checkpoints.
//! - [`family`]: the filter kinds a slice judges with, as one closed family
//!   ([`SliceFilter`]) that owns its snapshot copy.
//! - [`spectral`]: Spectral Bloom Filters (counts per key, MS/MI/RM) and
//!   windowed counts for frequency limits.
//! - [`provenance`]: which sources may have delivered a key (Bloofi, Flat-Bloofi).

pub(crate) mod cells;
mod clock;
pub mod compact_counters;
pub mod copy;
pub mod count;
pub mod envelope;
mod event;
pub mod family;
pub use cells::advise_huge_pages;
pub mod generation;
pub mod hash;
pub mod param_error;
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
pub use envelope::SnapshotError;
pub use family::{FilterFigures, FilterKind, SliceFilter};
pub use generation::Generation;
pub use hash::KeyHash;
pub use param_error::ParamError;
pub use params::{FilterParams, FilterSpec, Growth, Layout};
pub use sliced::SlicedFilter;
pub use sliding::{DeleteRefusal, Event, FilterCounters, Lookup, SlidingFilter, Verdict};
#[cfg(feature = "vertical")]
pub use vertical::{PipelineStats, VerticalFilter};
