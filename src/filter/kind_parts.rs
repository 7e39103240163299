//! What each kind hands the family besides its verdicts, in terms every
//! kind shares: its figures for the metrics and the status
//! ([`FilterFigures`]), its worst-case memory for the start-up plan
//! ([`Footprint`]), its size for `dedupd check-config` ([`Sizing`]), its
//! figures for pipe mode's stats ([`PipeFigures`]) and why slices of it do
//! not unite ([`UniteError`]). Below the kinds' folders, so that each kind
//! fills them in without knowing the family.

/// What a slice's filter reports of itself, of whichever kind (for the
/// metrics and the status).
pub struct FilterFigures {
    /// Parts (generations, tables) created and dropped, and the inserts
    /// that saturated or forgot a key to make room; 0 for a kind without parts.
    pub counters: [u64; 3],
    /// How full the newest part is (or what stands for it).
    pub density: f64,
    pub estimated_fpr: f64,
    pub memory_bytes: usize,
    /// Parts alive.
    pub generations: usize,
    /// The largest event time seen, for a kind with a clock.
    pub clock_ms: Option<u64>,
}

/// The most bytes one slice's filter holds with a given count of its
/// growing parts (the timer filter's generations, another kind's tables),
/// for the memory plan
/// ([`crate::memory::plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// The count the settings ask for (`filter.max_generations`; 1 for a
    /// kind that does not grow).
    pub configured: u32,
    /// Bytes with one first-size part: all a slice holds when it cannot grow.
    pub first_bytes: u64,
    /// Bytes the parts share whatever their count.
    pub shared_bytes: u64,
    /// Bytes of each part at the top level (the largest a new one can
    /// start at); `None` when the filter does not grow.
    pub top_part_bytes: Option<u64>,
}

impl Footprint {
    /// A filter of a fixed size.
    pub fn fixed(bytes: u64) -> Footprint {
        Footprint { configured: 1, first_bytes: bytes, shared_bytes: 0, top_part_bytes: None }
    }

    /// Bytes one slice holds at most with `parts` parts: one first-size
    /// part when it cannot grow, else each part at the top level plus what
    /// they share.
    pub fn worst_case(&self, parts: u32) -> u64 {
        match self.top_part_bytes {
            Some(each) if parts > 1 => each.saturating_mul(u64::from(parts)).saturating_add(self.shared_bytes),
            _ => self.first_bytes,
        }
    }
}

/// What one slice's filter is made of, for the sizing line of
/// `dedupd check-config` and the start-up log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// Cells (RSBF: bits of its arrays; a table: its slots).
    pub cells: u64,
    /// Bits of memory per cell.
    pub cell_bits: u32,
    /// Hashes (positions) per key.
    pub hashes: u32,
    /// The filter's tick in ms, for a kind with a window.
    pub tick_ms: Option<u64>,
    /// Bytes of one slice's filter (a growing kind: while its keys fit one part).
    pub bytes: u64,
    /// Parts a growing kind may grow to as its load rises.
    pub max_parts: Option<u32>,
}

/// A kind's filters over all slices, in the timer filter's terms, for
/// the stats of `dedupd filter` (pipe mode): they replace the idle timer
/// filter's.
#[derive(Clone, Debug, PartialEq)]
pub struct PipeFigures {
    pub memory_bytes: u64,
    pub estimated_fpr: f64,
    /// Generations (or the kind's own growing parts) alive, created,
    /// dropped; the inserts that saturated or forgot a key to make room.
    pub generations_live: u64,
    pub generations_created: u64,
    pub generations_dropped: u64,
    pub saturated_inserts: u64,
    pub cells_per_slice: u64,
    pub hashes: u32,
    pub timer_bits: u8,
    pub tick_ms: u64,
    pub window_ms: u64,
    /// A decaying kind: the fraction of ones (rsbf) or of non-zero cells
    /// (stable), and where it settles.
    pub ones_fraction: Option<f64>,
    pub expected_ones_fraction: Option<f64>,
    /// A decaying kind: the seed of its PRNG.
    pub seed: Option<u64>,
}

/// Why filters of one kind do not unite into one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UniteError {
    /// A parameter they depend on differs.
    Parameters { parameter: &'static str, left: String, right: String },
    /// The union would hold more parts than a filter restores.
    TooManyParts { parts: usize, most: usize },
    /// The kind's slices do not unite (they have no parts to put side by side).
    NotUnitable { kind: &'static str },
}
