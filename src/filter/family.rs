//! The filter kinds a slice judges with, as one closed family: the
//! sliding-window timer filter (`filter.kind = "timer"`, [`super::timer`]),
//! the cuckoo table filter (`cuckoo`, [`super::cuckoo`]), the decaying kinds
//! (`rsbf`, `stable`, [`super::decaying`]) and `passthrough` (no filter).
//! Closed enums, not trait objects: the record path matches on them, with
//! no dynamic call.
//!
//! A kind is one arm in each layer of the family, and each arm hands over
//! to the kind's folder (its `kind.rs` for what is not judging):
//!
//! - [`KindName`]: the kind as `filter.kind` and `dedupd filter --kind` name it;
//! - [`KindSpec`]: its settings from `[filter]`, and its memory plan;
//! - [`FilterChoice`]: its parameters, chosen at start-up, and the checks of
//!   a snapshot against them;
//! - [`FilterKind`]: one slice's filter ([`SliceFilter`], in
//!   [`super::slice_filter`]): judged, copied, looked up, reported.
//!
//! No other part of the crate names a kind: the settings, the memory plan,
//! pipe mode, the merge of slices and the admin lookups go through these.

use super::cuckoo::{self, CuckooFilter, CuckooParams, CuckooSpec};
use super::decaying::{self, DecayingKind, DecayingSpec};
use super::envelope::{SnapshotError, TIMER_MAGIC};
use super::kind_parts::{Footprint, Sizing, UniteError};
use super::param_error::ParamError;
use super::slice_filter::{FilterKind, SliceFilter};
use super::timer::kind as timer_kind;
use super::timer::params::{FilterParams, FilterSpec};
use super::timer::sliding::SlidingFilter;
use super::timer::snapshot as timer_snapshot;

/// A kind as `filter.kind` and `dedupd filter --kind` name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindName {
    Timer,
    /// No filter: records are read as for the timer kind, and every
    /// readable one is distinct (what dedup costs is the difference).
    Passthrough,
    Decaying(DecayingKind),
    Cuckoo,
}

impl KindName {
    /// Every kind, in the order `dedupd filter --help` lists them.
    pub const ALL: [KindName; 5] = [
        KindName::Timer,
        KindName::Passthrough,
        KindName::Decaying(DecayingKind::Rsbf),
        KindName::Decaying(DecayingKind::Stable),
        KindName::Cuckoo,
    ];

    /// What `filter.kind` takes, as its error says.
    pub const EXPECTED: &str = "timer, cuckoo, passthrough, rsbf or stable";

    /// The help of `dedupd filter --kind`: what each kind takes of the flags.
    pub const PIPE_FLAG_HELP: &str = "`timer` (deduplicate within --window), `cuckoo` (the same with the cuckoo \
         table filter: --window, --fpr, --expected, --headroom, --slices, --lateness and --max-generations apply), \
         `passthrough` (read and write every readable record, no filter: to measure what dedup costs), or the \
         decaying `rsbf` and `stable` (no window: fixed --memory for the whole stream, records judged in arrival \
         order; --window, --expected, --growth, --slices and the timer flags do not apply)";

    /// The help of pipe mode's `--expected`.
    pub const EXPECTED_FLAG_HELP: &str = "Distinct keys expected per window, all slices together (sizes the filter; \
         growth covers underestimates); `none`: the cuckoo kind sizes itself from what it sees (the timer kind \
         needs a number)";

    /// Why `filter.expected_keys` may not be left empty.
    pub const ESTIMATE_RULE: &str = "the timer kind needs an estimate of the distinct keys per window (the cuckoo kind \
                                     sizes itself without one)";

    /// Which kinds' slices unite (`dedupd checkpoint merge`).
    pub const UNITING: &str = "only the timer kind's generations and the cuckoo kind's tables unite";

    /// The kind's settings name.
    pub fn as_str(self) -> &'static str {
        match self {
            KindName::Timer => timer_kind::NAME,
            KindName::Passthrough => "passthrough",
            KindName::Decaying(kind) => kind.as_str(),
            KindName::Cuckoo => cuckoo::kind::NAME,
        }
    }

    /// The kind of a settings name.
    pub fn parse(name: &str) -> Option<KindName> {
        KindName::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The line `dedupd filter --help` shows for the kind.
    pub fn pipe_help(self) -> &'static str {
        match self {
            KindName::Timer => timer_kind::PIPE_HELP,
            KindName::Passthrough => {
                "Read records exactly as `timer` does (keys and times extracted, unreadable records reported) but \
                 filter nothing: every readable record is written. The difference in speed is what dedup costs"
            }
            KindName::Decaying(kind) => kind.pipe_help(),
            KindName::Cuckoo => cuckoo::kind::PIPE_HELP,
        }
    }

    /// The decaying kind, for `rsbf` and `stable`.
    /// Whether it sizes itself from `filter.expected_keys` and cannot go
    /// without one (the other kinds size themselves or need none).
    pub fn needs_estimate(self) -> bool {
        matches!(self, KindName::Timer)
    }

    pub fn decaying(self) -> Option<DecayingKind> {
        match self {
            KindName::Decaying(kind) => Some(kind),
            KindName::Timer | KindName::Passthrough | KindName::Cuckoo => None,
        }
    }

    /// The kind's settings from `[filter]`: `timer` is the timer filter's
    /// (validated), `memory` and `rng_seed` the decaying kinds'. A kind
    /// that judges instead of the timer filter gets the timer filter back
    /// at its smallest ([`FilterSpec::idle`]). Errors name the setting as
    /// `[filter]` spells it (`expected` for `expected_keys`).
    pub fn settings_spec(
        self,
        timer: FilterSpec,
        expected_keys: Option<u64>,
        memory: u64,
        rng_seed: u64,
    ) -> Result<(FilterSpec, KindSpec), ParamError> {
        Ok(match self {
            KindName::Timer => (timer, KindSpec::Timer),
            KindName::Passthrough => (timer, KindSpec::Passthrough),
            KindName::Decaying(kind) => {
                let spec = decaying::kind::settings_spec(kind, &timer, memory, rng_seed)?;
                (timer.idle(), KindSpec::Decaying(spec))
            }
            KindName::Cuckoo => {
                let spec = cuckoo::kind::settings_spec(&timer, expected_keys)?;
                (timer.idle(), KindSpec::Cuckoo(spec))
            }
        })
    }

    /// For pipe mode, the filters of a windowed kind other than the timer
    /// filter, one per slice, sized from the timer filter's settings
    /// (`None` for the other kinds). Errors name the setting as the flag.
    pub fn windowed_filters(
        self,
        timer: &FilterSpec,
        expected_keys: Option<u64>,
    ) -> Result<Option<Vec<SliceFilter>>, ParamError> {
        Ok(match self {
            KindName::Timer | KindName::Passthrough | KindName::Decaying(_) => None,
            KindName::Cuckoo => {
                let params = CuckooSpec::from_timer(timer, expected_keys).resolve()?;
                let one = SliceFilter::from(FilterKind::Cuckoo(CuckooFilter::new(params)));
                Some(vec![one; timer.slices as usize])
            }
        })
    }
}

/// A kind's settings as `[filter]` gives them, beside the timer filter's
/// ([`FilterSpec`], which a kind judging instead keeps at its smallest).
#[derive(Clone, Debug, PartialEq)]
pub enum KindSpec {
    Timer,
    Passthrough,
    /// One decaying filter per slice with an equal share of `filter.memory`.
    Decaying(DecayingSpec),
    /// One cuckoo table filter per slice, sized as the timer filter would be.
    Cuckoo(CuckooSpec),
}

impl KindSpec {
    /// The kind's name.
    pub fn name(&self) -> KindName {
        match self {
            KindSpec::Timer => KindName::Timer,
            KindSpec::Passthrough => KindName::Passthrough,
            KindSpec::Decaying(spec) => KindName::Decaying(spec.kind),
            KindSpec::Cuckoo(_) => KindName::Cuckoo,
        }
    }

    /// One slice's worst case, beside the timer filter of `timer` (for a
    /// kind judging instead: its idle one), for the memory plan.
    pub fn footprint(&self, timer: &FilterParams) -> Result<Footprint, ParamError> {
        match self {
            KindSpec::Timer | KindSpec::Passthrough => Ok(timer_kind::footprint(timer)),
            KindSpec::Decaying(spec) => Ok(match spec.size() {
                Ok(size) => Footprint::fixed(size.bytes.saturating_add(timer.memory_bytes())),
                Err(_) => timer_kind::footprint(timer),
            }),
            KindSpec::Cuckoo(spec) => cuckoo::kind::footprint(spec, timer),
        }
    }

    /// The settings with at most `most` growing parts per slice (the
    /// memory plan's count): the timer filter's generations, or the kind's own.
    pub fn capped(self, timer: FilterSpec, most: u32) -> (FilterSpec, KindSpec) {
        match self {
            KindSpec::Timer | KindSpec::Passthrough => (FilterSpec { max_generations: most, ..timer }, self),
            KindSpec::Decaying(_) => (timer, self),
            KindSpec::Cuckoo(spec) => (timer, KindSpec::Cuckoo(CuckooSpec { max_tables: most, ..spec })),
        }
    }

    /// The kind the slices judge with, beside the timer filter of `timer`.
    pub fn choose(&self, timer: FilterParams) -> Result<FilterChoice, ParamError> {
        Ok(match self {
            KindSpec::Timer | KindSpec::Passthrough => FilterChoice::Timer(timer),
            KindSpec::Decaying(spec) => FilterChoice::Decaying(timer, spec.clone()),
            KindSpec::Cuckoo(spec) => FilterChoice::Cuckoo(timer, spec.resolve()?),
        })
    }
}

/// The kind the slices judge with, chosen at start-up, and its settings.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterChoice {
    /// The sliding-window timer filter.
    Timer(FilterParams),
    /// A decaying kind, one filter per slice (its memory is per slice). The
    /// timer parameters beside it are the settings' idle timer filter (the
    /// daemon makes it the smallest there is): its lateness decides which
    /// records a snapshot holds, as for timers.
    Decaying(FilterParams, DecayingSpec),
    /// The cuckoo table filter, one per slice. The timer parameters beside
    /// it are the settings' idle timer filter, as for a decaying kind.
    Cuckoo(FilterParams, CuckooParams),
}

/// A timer filter's parameters choose the timer filter.
impl From<FilterParams> for FilterChoice {
    fn from(params: FilterParams) -> Self {
        FilterChoice::Timer(params)
    }
}

impl FilterChoice {
    /// The timer parameters (of the idle timer filter for a decaying kind).
    pub fn params(&self) -> &FilterParams {
        match self {
            FilterChoice::Timer(params) | FilterChoice::Decaying(params, _) | FilterChoice::Cuckoo(params, _) => params,
        }
    }

    /// The decaying kind's settings, if this is one.
    pub fn decaying(&self) -> Option<&DecayingSpec> {
        match self {
            FilterChoice::Timer(_) | FilterChoice::Cuckoo(..) => None,
            FilterChoice::Decaying(_, spec) => Some(spec),
        }
    }

    /// The kind's name, as in `filter.kind`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            FilterChoice::Timer(_) => timer_kind::NAME,
            FilterChoice::Decaying(_, spec) => spec.kind.as_str(),
            FilterChoice::Cuckoo(..) => cuckoo::kind::NAME,
        }
    }

    /// The filter of the chosen kind in a snapshot's `bytes`, checked
    /// against the settings (a snapshot of another kind is refused, naming
    /// `kind` and both kinds).
    pub fn decode(&self, bytes: &[u8]) -> Result<SliceFilter, SnapshotError> {
        let written = snapshot_kind(bytes);
        if let Some(written) = written
            && written != self.kind_name()
        {
            return Err(SnapshotError::ParameterMismatch {
                parameter: "kind",
                snapshot: written.to_string(),
                configured: self.kind_name().to_string(),
            });
        }
        let kind = match self {
            FilterChoice::Timer(params) => FilterKind::Timer(timer_snapshot::decode(bytes, params)?),
            FilterChoice::Decaying(_, spec) => {
                let configured =
                    spec.build().map_err(|e| SnapshotError::Malformed(format!("count filter settings: {e}")))?;
                FilterKind::Decaying(decaying::decode(bytes, &configured)?)
            }
            FilterChoice::Cuckoo(_, params) => FilterKind::Cuckoo(cuckoo::snapshot::decode(bytes, params)?),
        };
        Ok(kind.into())
    }

    /// The parameters a snapshot's filter depends on, as text: equal
    /// fingerprints mean a snapshot can be restored.
    pub fn fingerprint(&self) -> String {
        match self {
            FilterChoice::Timer(params) => params.fingerprint(),
            FilterChoice::Decaying(params, spec) => {
                // A decaying kind's state is its own filter's (the idle timer
                // filter's is empty by construction), validated at start-up.
                // The lateness decides which records a snapshot holds, as for timers.
                let own = spec.fingerprint().unwrap_or_else(|e| format!("kind={},{e}", spec.kind.as_str()));
                match params.lateness_ms {
                    None => own,
                    Some(l) => format!("{own},lateness_ms={l}"),
                }
            }
            FilterChoice::Cuckoo(_, params) => params.fingerprint(),
        }
    }

    /// What one slice's filter is made of (a kind judging instead: its
    /// own filter, not the idle timer filter).
    pub fn sizing(&self) -> Sizing {
        match self {
            FilterChoice::Timer(params) => timer_kind::sizing(params),
            FilterChoice::Decaying(_, spec) => decaying::kind::sizing(spec),
            FilterChoice::Cuckoo(_, params) => cuckoo::kind::sizing(params),
        }
    }

    /// The union of `parts` (slices' filters, all of this kind) under
    /// these parameters, for `dedupd checkpoint merge`.
    pub fn unite(&self, parts: &[&SliceFilter]) -> Result<SliceFilter, UniteError> {
        let other_kind = |f: &SliceFilter| UniteError::Parameters {
            parameter: "kind",
            left: f.kind_name().to_string(),
            right: self.kind_name().to_string(),
        };
        let kind = match self {
            FilterChoice::Timer(params) => {
                let timers = parts.iter().map(|f| f.as_timer().cloned().ok_or_else(|| other_kind(f)));
                FilterKind::Timer(timer_kind::unite(timers.collect::<Result<_, _>>()?, params)?)
            }
            FilterChoice::Cuckoo(_, params) => {
                let tables = parts.iter().map(|f| f.as_cuckoo().cloned().ok_or_else(|| other_kind(f)));
                FilterKind::Cuckoo(cuckoo::kind::unite(tables.collect::<Result<_, _>>()?, params)?)
            }
            FilterChoice::Decaying(_, spec) => return Err(UniteError::NotUnitable { kind: spec.kind.as_str() }),
        };
        Ok(kind.into())
    }
}

/// The kind a snapshot's filter part was written by, from its magic (read
/// before its checksum: for naming it when it is refused).
fn snapshot_kind(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(&TIMER_MAGIC) {
        return Some(timer_kind::NAME);
    }
    if bytes.starts_with(&cuckoo::snapshot::MAGIC) {
        return Some(cuckoo::kind::NAME);
    }
    decaying::kind_of(bytes).map(|k| k.as_str())
}

/// The filter of a choice.
impl SliceFilter {
    /// An empty filter of the kind chosen (a decaying kind's settings
    /// validated at start-up).
    pub fn new(choice: FilterChoice) -> Self {
        let kind = match choice {
            FilterChoice::Timer(params) => FilterKind::Timer(SlidingFilter::new(params)),
            FilterChoice::Decaying(_, spec) => {
                FilterKind::Decaying(spec.build().expect("count filter settings validated at start-up"))
            }
            FilterChoice::Cuckoo(_, params) => FilterKind::Cuckoo(CuckooFilter::new(params)),
        };
        kind.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{DecayingKind, FilterSpec, KeyHash};

    /// Every kind parses from its name, and the settings' error and
    /// `--kind`'s help name it.
    #[test]
    fn every_kind_is_named_where_users_read_the_kinds() {
        for kind in KindName::ALL {
            assert_eq!(KindName::parse(kind.as_str()), Some(kind));
            assert!(KindName::EXPECTED.contains(kind.as_str()), "{kind:?}");
            assert!(KindName::PIPE_FLAG_HELP.contains(&format!("`{}`", kind.as_str())), "{kind:?}");
            assert!(!kind.pipe_help().is_empty(), "{kind:?}");
        }
        assert_eq!(KindName::parse("bloom"), None);
    }

    /// A decaying kind's fingerprint is its own filter's and the lateness,
    /// as written in the manifests of running deployments: a change here
    /// refuses their snapshots.
    #[test]
    fn decaying_fingerprints_are_the_ones_manifests_hold() {
        let idle = FilterSpec { window_ms: 1000, expected_keys: 8, lateness_ms: Some(2_000), ..FilterSpec::default() };
        let params = idle.resolve().unwrap();
        let rsbf = "kind=rsbf,seed=0x6465647570640001,rng_seed=0x5eed0fded,arrays=6,array_bits=1398080,\
                    p_star=0.03,lateness_ms=2000";
        let stable = "kind=stable,seed=0x6465647570640001,rng_seed=0x5eed0fded,cell_bits=2,cells=4194304,\
                      hashes=4,decrements=29.610367503652288,lateness_ms=2000";
        for (kind, want) in [(DecayingKind::Rsbf, rsbf), (DecayingKind::Stable, stable)] {
            let choice = FilterChoice::Decaying(params.clone(), DecayingSpec::new(kind, 8 << 20, 0.01));
            assert_eq!(choice.fingerprint(), want);
        }
        let timer = FilterChoice::from(params.clone());
        assert_eq!(timer.fingerprint(), params.fingerprint());
        assert_eq!(timer.decaying(), None);
    }

    /// The cuckoo arm: judged, deleted, copied whole while it goes on (the
    /// copy holds the filter as it was when it began), restored by the
    /// choice, and another kind's snapshot refused by name.
    #[test]
    fn a_cuckoo_table_is_one_arm_of_the_family() {
        use crate::filter::cuckoo::CuckooSpec;
        let spec = FilterSpec { window_ms: 1000, expected_keys: 8, ..FilterSpec::default() };
        let params = spec.resolve().unwrap();
        let table =
            CuckooSpec { window_ms: 1000, expected_keys: Some(1000), ..CuckooSpec::default() }.resolve().unwrap();
        let choice = FilterChoice::Cuckoo(params.clone(), table);
        let mut f = SliceFilter::new(choice.clone());
        let seed = f.hash_seed();
        let key = |i: u32| KeyHash::of(seed, &i.to_le_bytes());
        for i in 0..100 {
            assert!(f.observe(&key(i), 10).is_distinct());
        }
        assert!(!f.observe(&key(3), 20).is_distinct());
        assert_eq!(f.delete(&key(3)), Ok(()));
        let before = f.clone();
        let prepared = f.prepare_copy();
        f.begin_copy(prepared, b"head", Vec::new(), 2);
        assert!(f.observe(&key(3), 30).is_distinct(), "deleted");
        let (buffer, at) = f.finish_copy().unwrap();
        assert_eq!(&buffer[..4], b"head");
        let restored = choice.decode(&buffer[at]).unwrap();
        assert_eq!(restored, before);
        assert_eq!(f.figures().generations, 1);

        let timer = SliceFilter::new(FilterChoice::Timer(params));
        let (bytes, at) = timer.encode(timer.prepare_copy(), &[], 0);
        let refused = choice.decode(&bytes[at]).unwrap_err();
        assert!(matches!(refused, SnapshotError::ParameterMismatch { parameter: "kind", .. }), "{refused:?}");
    }
}
