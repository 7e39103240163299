//! The filter engine: pure data structures, no I/O, no async.
//!
//! Files from the bottom up (a file imports only files above it; no circle).
//! The kinds live in their folders; what they share is here:
//!
//! - [`hash`]: one XXH3-128 per key; slice and probe positions from its halves.
//! - [`param_error`]: the error a setting's check gives.
//! - [`envelope`]: the magic, version and checksum every snapshot is written in.
//! - [`random`]: the seeded PRNG of the decaying kinds (and of the tests' workloads).
//! - `event`: an event, the verdict on it, the timer filter's counters.
//! - [`kind_parts`]: what each kind hands the family besides its verdicts
//!   (its worst-case memory, sizing, pipe-mode figures, why slices do not unite).
//! - [`timer`]: the sliding-window timer filter (`timer`): its settings,
//!   cells, generations, slices, its snapshot and its copy-on-write copy.
//! - [`decaying`]: the kinds that forget old keys at random, with no window
//!   (`rsbf`, `stable`): the reservoir-sampling and Stable Bloom filters.
//! - [`cuckoo`]: the cuckoo table filter (`cuckoo`): one slot per key in
//!   the window, in tables that grow as the timer filter's generations do.
//! - [`slice_filter`]: the filter a slice judges with, of whichever kind
//!   ([`SliceFilter`]), which owns its snapshot copy.
//! - [`family`]: the kinds by name ([`KindName`]), their settings
//!   ([`KindSpec`]) and the kind chosen at start-up ([`FilterChoice`]):
//!   where a kind plugs in.
//! - [`spectral`]: Spectral Bloom Filters (counts per key, MS/MI/RM) and
//!   windowed counts.
//! - [`counting`]: frequency limits and flags over windowed counts (the
//!   `[limit]` and `[flag]` policies, in pipe mode and in a slice).
//! - [`provenance`]: which sources may have delivered a key (Bloofi, Flat-Bloofi).

pub mod counting;
pub mod cuckoo;
pub mod decaying;
pub mod envelope;
mod event;
pub mod family;
pub mod hash;
pub mod kind_parts;
pub mod param_error;
pub mod provenance;
pub mod random;
pub mod slice_filter;
pub mod spectral;
pub mod timer;

pub use decaying::{DecayingFilter, DecayingKind, DecayingSize, DecayingSpec, DecayingStats};
pub use envelope::SnapshotError;
pub use event::{Event, FilterCounters, Verdict};
pub use family::{FilterChoice, KindName, KindSpec};
pub use hash::KeyHash;
pub use kind_parts::{FilterFigures, Footprint, PipeFigures, Sizing, UniteError};
pub use param_error::ParamError;
pub use slice_filter::{FilterKind, SliceFilter};
pub use timer::cells::advise_huge_pages;
pub use timer::params::{FilterParams, FilterSpec, Growth, Layout};
pub use timer::{DeleteRefusal, FilterCopy, Generation, Lookup, SlicedFilter, SlidingFilter};
#[cfg(feature = "vertical")]
pub use timer::{PipelineStats, VerticalFilter};
