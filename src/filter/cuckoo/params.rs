//! What a user asks of a cuckoo table ([`CuckooSpec`]) and the resolved
//! per-slice parameters it runs with ([`CuckooParams`]).

use crate::filter::hash::DEFAULT_SEED;
use crate::filter::param_error::{ParamError, check_window_sizing};

/// Bits of one slot's entry: a fingerprint and a coarse stamp share 17
/// bits, of which a semi-sorted bucket stores 16 per slot
/// ([`super::bucket`]).
pub const SLOT_BITS: u32 = super::bucket::ENTRY_BITS;
/// Bits of memory per slot: a bucket of 4 slots is one `u64`.
pub const MEMORY_BITS_PER_SLOT: u32 = 16;
/// Slots per bucket (b in the formulas): Fan et al.'s choice, 95% load.
pub const BUCKET_SLOTS: usize = 4;
/// The load a table is sized for (and the one the FPR is derived at):
/// with 4-slot buckets, partial-key cuckoo hashing fills to about 95%
/// before an insert fails.
pub const DESIGN_LOAD: f64 = 0.95;
/// Fewest bits of the stamp: 15 stamp values, of which the window,
/// the lateness, one tick of rounding and the sweep share 14.
pub const MIN_CLOCK_BITS: u32 = 4;
/// Most bits of the stamp (so fingerprints have at least the 4 bits of
/// their nibble): a sweep looks stamps up in a table of 2^13 entries.
pub const MAX_CLOCK_BITS: u32 = 13;
/// Largest table level: level ℓ has `buckets · 4^ℓ` buckets.
pub const MAX_LEVEL: u8 = 6;
/// Fewest buckets of a level-0 table.
pub const MIN_BUCKETS: u64 = 16;
/// Buckets of a slice's first table without an estimate (8 KiB): growth
/// sizes the next one from the keys it sees.
pub const START_BUCKETS: u64 = 1024;

/// What a user asks of the table, for all slices together.
#[derive(Clone, Debug, PartialEq)]
pub struct CuckooSpec {
    /// Sliding window length in milliseconds.
    pub window_ms: u64,
    /// Target false-positive rate.
    pub fpr: f64,
    /// Distinct keys per window, all slices together; `None`: the filter
    /// starts small ([`START_BUCKETS`]) and sizes itself from what it sees.
    pub expected_keys: Option<u64>,
    /// Extra capacity of the first table, as a fraction of `expected_keys`.
    pub headroom: f64,
    /// Slices the keys are spread over.
    pub slices: u32,
    /// As the timer filter's: `Some(L)` judges an event behind the clock
    /// at its own time against slots kept for the window plus L.
    pub lateness_ms: Option<u64>,
    /// Seed of the key hash.
    pub seed: u64,
    /// Most tables alive at once per slice.
    pub max_tables: u32,
}

impl Default for CuckooSpec {
    fn default() -> Self {
        CuckooSpec {
            window_ms: 600_000,
            fpr: 0.01,
            expected_keys: Some(1_000_000),
            headroom: 0.2,
            slices: 1,
            lateness_ms: None,
            seed: DEFAULT_SEED,
            max_tables: 12,
        }
    }
}

/// Resolved parameters of one slice's table; everything its state layout
/// depends on (written into every snapshot).
#[derive(Clone, Debug, PartialEq)]
pub struct CuckooParams {
    pub seed: u64,
    pub fpr: f64,
    pub window_ms: u64,
    pub lateness_ms: Option<u64>,
    /// Buckets of a level-0 table.
    pub buckets: u64,
    /// f: bits of a fingerprint.
    pub fingerprint_bits: u32,
    /// c = 17 − f: bits of the stamp; it stores `tick mod R + 1` (0: empty).
    pub clock_bits: u32,
    pub tick_ms: u64,
    /// W = ⌈window / tick⌉: a slot stamped at tick t is alive through
    /// t + W, so the window is kept for at least its length, at most one
    /// tick more (expiry rounds towards keeping a key).
    pub window_ticks: u32,
    /// Lt = ⌈lateness / tick⌉ (0 without lateness): slots are kept W + Lt ticks.
    pub lateness_ticks: u32,
    /// R = 2^c − 1 stamp values.
    pub period: u32,
    /// S = R − 1 − W − Lt: every bucket is swept once every S ticks, so a
    /// slot is cleared before its stamp can wrap round and look young.
    pub sweep_ticks: u32,
    pub max_tables: u32,
}

impl CuckooSpec {
    /// Validates the spec and resolves a slice's parameters; errors name the
    /// setting, value and rule.
    pub fn resolve(&self) -> Result<CuckooParams, ParamError> {
        check_window_sizing(self.window_ms, self.fpr, self.expected_keys.unwrap_or(1), self.headroom, self.slices)?;
        if self.max_tables == 0 || self.max_tables > 64 {
            return Err(ParamError::new("max_generations", self.max_tables, "must be between 1 and 64"));
        }
        let fingerprint_bits = fingerprint_bits_for(self.fpr);
        let clock_bits = SLOT_BITS - fingerprint_bits;
        if clock_bits < MIN_CLOCK_BITS {
            return Err(ParamError::new(
                "fpr",
                self.fpr,
                format!(
                    "needs {fingerprint_bits}-bit fingerprints, but a slot keeps at most {} beside its \
                     {MIN_CLOCK_BITS}-bit stamp: at least {:.5} with the cuckoo kind (or use the timer kind)",
                    SLOT_BITS - MIN_CLOCK_BITS,
                    table_fpr(SLOT_BITS - MIN_CLOCK_BITS, DESIGN_LOAD)
                ),
            ));
        }
        let period = (1u32 << clock_bits) - 1;
        let lateness_ms = self.lateness_ms.unwrap_or(0);
        // The window and the lateness share R − 1 stamp values with a
        // sixteenth of them (at least 2) for the sweep, and 2 for their rounding up.
        let min_sweep = ((period - 1) / 16).max(2);
        let budget = u64::from(period - 1 - min_sweep - 2);
        let tick_ms = (self.window_ms + lateness_ms).div_ceil(budget).max(1);
        let window_ticks = self.window_ms.div_ceil(tick_ms) as u32;
        let lateness_ticks = lateness_ms.div_ceil(tick_ms) as u32;
        let sweep_ticks = period - 1 - window_ticks - lateness_ticks;
        debug_assert!(sweep_ticks >= min_sweep);

        let buckets = match self.expected_keys {
            Some(expected) => {
                let per_slice = (expected as f64 * (1.0 + self.headroom) / f64::from(self.slices)).ceil();
                // Slots hold the keys of W + Lt + 1 ticks, not W.
                let kept = per_slice * f64::from(window_ticks + lateness_ticks + 1) / f64::from(window_ticks);
                (kept / (DESIGN_LOAD * BUCKET_SLOTS as f64)).ceil()
            }
            None => START_BUCKETS as f64,
        };
        if buckets.is_nan() || buckets > (1u64 << 38) as f64 {
            return Err(ParamError::new(
                "expected",
                self.expected_keys.unwrap_or(0),
                "needs more than 1 TiB of slots per slice",
            ));
        }
        Ok(CuckooParams {
            seed: self.seed,
            fpr: self.fpr,
            window_ms: self.window_ms,
            lateness_ms: self.lateness_ms,
            buckets: (buckets as u64).max(MIN_BUCKETS),
            fingerprint_bits,
            clock_bits,
            tick_ms,
            window_ticks,
            lateness_ticks,
            period,
            sweep_ticks,
            max_tables: self.max_tables,
        })
    }
}

/// f = ⌈log2(2·b·α / ε)⌉: the fewest fingerprint bits whose table at the
/// design load α keeps the FPR at or below ε.
pub fn fingerprint_bits_for(fpr: f64) -> u32 {
    let bits = (2.0 * BUCKET_SLOTS as f64 * DESIGN_LOAD / fpr).log2().ceil();
    bits.clamp(f64::from(SLOT_BITS - MAX_CLOCK_BITS), f64::from(SLOT_BITS)) as u32
}

/// A table's FPR at `load` (alive slots / slots) with `f`-bit
/// fingerprints: a key meets 2·b slots, each alive one matching with
/// probability 2^-f, so 1 − (1 − 2^-f)^(2·b·load) ≈ 2·b·load / 2^f.
pub fn table_fpr(f: u32, load: f64) -> f64 {
    1.0 - (1.0 - (-f64::from(f)).exp2()).powf(2.0 * BUCKET_SLOTS as f64 * load)
}

impl CuckooParams {
    /// Buckets of a table of `level`.
    pub fn level_buckets(&self, level: u8) -> u64 {
        self.buckets << (2 * u32::from(level))
    }

    /// Bytes of a table of `level` (what [`super::table::Table::memory_bytes`] reports).
    pub fn table_bytes(&self, level: u8) -> u64 {
        self.level_buckets(level) * BUCKET_SLOTS as u64 * 2
    }

    /// W + Lt: slots are kept (not reusable) this many ticks.
    pub fn retain_ticks(&self) -> u32 {
        self.window_ticks + self.lateness_ticks
    }

    /// Everything the state layout depends on, as one line (for checkpoint
    /// manifests): equal lines mean a snapshot can be restored.
    pub fn fingerprint(&self) -> String {
        let mut line = format!(
            "kind=cuckoo,seed={:#x},buckets={},fingerprint_bits={},clock_bits={},tick_ms={},window_ticks={},\
             max_tables={}",
            self.seed,
            self.buckets,
            self.fingerprint_bits,
            self.clock_bits,
            self.tick_ms,
            self.window_ticks,
            self.max_tables
        );
        if let Some(l) = self.lateness_ms {
            line.push_str(&format!(",lateness_ms={l}"));
        }
        line
    }
}
