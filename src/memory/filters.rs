//! Memory bounded in bytes: the filters' worst case against a cap
//! (`filter.max_memory`) and the process's memory limit, decided once at
//! start-up from the settings alone.
//!
//! A slice's timer filter grows by generations (another kind by its own
//! parts, planned the same way: [`Footprint`]); at its largest it holds `filter.max_generations`
//! generations of the top level. When that worst case, for all slices
//! together, exceeds the cap, the generation count is lowered until it
//! fits: the filter then saturates (its false-positive rate rises,
//! `dedupd_filter_saturated_inserts_total` counts it) instead of growing
//! past the cap. The count is a setting's value, so the verdicts
//! still follow from the settings and the log alone (docs/design.md, invariant 1).
//! When even one first-size generation per slice does not fit, start-up is
//! refused.

use std::fmt;

use super::limit::MemoryLimit;
use crate::filter::{FilterSpec, Footprint, KindSpec};
use crate::units::format_bytes;

/// The share of the memory limit the filters get by default: the rest
/// is for held and buffered records, the client queues and the snapshot
/// buffer (docs/capacity.md).
pub const DEFAULT_CAP_PERCENT: u64 = 50;

/// The cap when `filter.max_memory` is empty: a share of the memory limit.
pub fn default_cap(limit: u64) -> u64 {
    (u128::from(limit) * u128::from(DEFAULT_CAP_PERCENT) / 100) as u64
}

/// Where the cap came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CapSource {
    /// `filter.max_memory` was set.
    Setting,
    /// [`DEFAULT_CAP_PERCENT`] of the memory limit.
    Limit,
    /// No setting and no memory limit: the filters are not capped.
    None,
}

/// What the filters may take, decided at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// The cap on all slices' filters together, in bytes.
    pub cap: Option<u64>,
    pub cap_source: CapSource,
    /// `memory.limit` or the container's.
    pub limit: Option<MemoryLimit>,
    pub slices: u32,
    /// `filter.max_generations` as configured.
    pub configured_generations: u32,
    /// The generations a slice may hold under the cap.
    pub max_generations: u32,
    /// All slices at their largest under the cap.
    pub worst_case: u64,
    /// All slices at their largest with `configured_generations`.
    pub configured_worst_case: u64,
}

impl MemoryPlan {
    /// Whether the cap lowered the generation count.
    pub fn capped(&self) -> bool {
        self.max_generations < self.configured_generations
    }
}

/// One line for `dedupd check-config` and the start-up log: the worst
/// case, the cap and where it came from, the memory limit, and
/// whether the cap lowered the generation count.
impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "filter memory: worst case {} bytes ({}) with {} slices of at most {} generations",
            self.worst_case,
            format_bytes(self.worst_case),
            self.slices,
            self.max_generations
        )?;
        match (self.cap, &self.cap_source) {
            (Some(cap), CapSource::Setting) => {
                write!(f, "; cap {cap} bytes ({}, filter.max_memory)", format_bytes(cap))?
            }
            (Some(cap), _) => write!(
                f,
                "; cap {cap} bytes ({}, the default: {DEFAULT_CAP_PERCENT}% of the memory limit)",
                format_bytes(cap)
            )?,
            (None, _) => f.write_str("; no cap (filter.max_memory is empty and there is no memory limit)")?,
        }
        if let Some(limit) = &self.limit {
            write!(f, "; memory limit {limit}")?;
        }
        if self.capped() {
            write!(
                f,
                "; filter.max_generations lowered from {} to {} to fit the cap ({} bytes, {}, with {}): past it the \
                 filters saturate instead of growing",
                self.configured_generations,
                self.max_generations,
                self.configured_worst_case,
                format_bytes(self.configured_worst_case),
                self.configured_generations
            )?;
        }
        Ok(())
    }
}

/// A plan that cannot hold: the setting to change, its value and the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryError {
    pub setting: &'static str,
    pub value: String,
    pub rule: String,
}

/// Checks the filters' worst case against `cap` (`filter.max_memory`, or
/// [`DEFAULT_CAP_PERCENT`] of `limit`) and lowers the generation count
/// until it fits; refuses what cannot fit even without growth, and a cap
/// above the memory limit.
pub fn plan(
    footprint: Footprint,
    slices: u32,
    cap: Option<u64>,
    limit: Option<MemoryLimit>,
) -> Result<MemoryPlan, MemoryError> {
    let all = |per_slice: u64| per_slice.saturating_mul(u64::from(slices));
    if let (Some(c), Some(limit)) = (cap, &limit)
        && c > limit.bytes
    {
        return Err(MemoryError {
            setting: "filter.max_memory",
            value: format!("{c}B"),
            rule: format!(
                "at most the memory limit {limit}: the process would be killed before the filters reach their cap; \
                 lower filter.max_memory or raise the limit"
            ),
        });
    }
    let (cap, cap_source) = match (cap, &limit) {
        (Some(c), _) => (Some(c), CapSource::Setting),
        (None, Some(l)) => (Some(default_cap(l.bytes)), CapSource::Limit),
        (None, None) => (None, CapSource::None),
    };
    let configured = footprint.configured;
    let smallest = all(footprint.worst_case(1));
    let worst_with = |parts: u32| all(footprint.worst_case(parts));
    let configured_worst_case = worst_with(configured);
    let Some(cap_bytes) = cap else {
        return Ok(MemoryPlan {
            cap,
            cap_source,
            limit,
            slices,
            configured_generations: configured,
            max_generations: configured,
            worst_case: configured_worst_case,
            configured_worst_case,
        });
    };
    if smallest > cap_bytes {
        let value = match cap_source {
            CapSource::Limit => format!(
                "{cap_bytes}B (the default: {DEFAULT_CAP_PERCENT}% of the memory limit {})",
                limit.as_ref().expect("a default cap has a limit")
            ),
            _ => format!("{cap_bytes}B"),
        };
        return Err(MemoryError {
            setting: "filter.max_memory",
            value,
            rule: format!(
                "the filters of {slices} slices need {smallest}B ({}) before they grow, more than the cap; \
                 raise filter.max_memory (and the memory limit) to at least {smallest}B, or lower \
                 filter.expected_keys, raise filter.fpr, or use narrower filter.timer_bits (or, for rsbf and \
                 stable, a smaller filter.memory)",
                format_bytes(smallest)
            ),
        });
    }
    // The largest count that fits: the worst case grows with the count.
    let max_generations = (1..=configured).rev().find(|&g| worst_with(g) <= cap_bytes).unwrap_or(1);
    Ok(MemoryPlan {
        cap,
        cap_source,
        limit,
        slices,
        configured_generations: configured,
        max_generations,
        worst_case: worst_with(max_generations),
        configured_worst_case,
    })
}

/// The start-up check of a validated filter spec and the kind's settings:
/// one slice's worst case ([`KindSpec::footprint`]) for `slices` slices
/// against `cap` and the process's memory `limit`. Both come back with the
/// count of growing parts the cap allows ([`KindSpec::capped`]).
pub fn check(
    spec: FilterSpec,
    kind: KindSpec,
    slices: u32,
    cap: Option<u64>,
    limit: Option<MemoryLimit>,
) -> Result<(FilterSpec, KindSpec, MemoryPlan), MemoryError> {
    let invalid = |e: crate::filter::ParamError| MemoryError {
        setting: "filter.expected_keys",
        value: e.value.clone(),
        rule: e.to_string(),
    };
    let params = spec.resolve().map_err(invalid)?;
    let plan = plan(kind.footprint(&params).map_err(invalid)?, slices, cap, limit)?;
    let (spec, kind) = kind.capped(spec, plan.max_generations);
    Ok((spec, kind, plan))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::timer::kind::footprint;
    use crate::filter::{FilterParams, Growth};

    fn params(expected_keys: u64, slices: u32, max_generations: u32) -> FilterParams {
        FilterSpec { expected_keys, slices, max_generations, window_ms: 60_000, ..FilterSpec::default() }
            .resolve()
            .unwrap()
    }

    /// The worst case is what a filter holds at its largest: every
    /// generation of the top level, as a filter sized so reports.
    #[test]
    fn the_worst_case_is_every_generation_at_the_top_level() {
        let p = params(1_000_000, 8, 12);
        assert_eq!(footprint(&p).worst_case(1), p.memory_bytes());
        let top = crate::filter::SlidingFilter::new(FilterParams { cells: p.level_cells(4), ..p.clone() });
        let alive = u64::from(p.period) + 1;
        let generation = top.memory_bytes() as u64 - alive;
        assert_eq!(footprint(&p).worst_case(12), 12 * generation + alive);
        // The default settings: 12 generations of 16× the first size, ~2.1 GB in all.
        let all = 8 * footprint(&p).worst_case(12);
        assert!((2_100_000_000..2_300_000_000).contains(&all), "{all}");
        let none = FilterParams { growth: Growth::None, ..p.clone() };
        assert_eq!(footprint(&none).worst_case(12), p.memory_bytes());
    }

    #[test]
    fn the_cap_lowers_the_generations_until_the_worst_case_fits() {
        let p = params(1_000_000, 8, 12);
        let uncapped = plan(footprint(&p), 8, None, None).unwrap();
        assert_eq!((uncapped.max_generations, uncapped.cap_source.clone()), (12, CapSource::None));
        assert!(!uncapped.capped());
        let capped = plan(footprint(&p), 8, Some(512 << 20), None).unwrap();
        assert!(capped.capped());
        assert!(capped.worst_case <= 512 << 20);
        let one_more = 8 * footprint(&p).worst_case(capped.max_generations + 1);
        assert!(one_more > 512 << 20, "the largest count that fits: {}", capped.max_generations);
        // A cap the old growth fits changes nothing.
        let roomy = plan(footprint(&p), 8, Some(4 << 30), None).unwrap();
        assert_eq!((roomy.max_generations, roomy.worst_case), (12, uncapped.worst_case));
        // Below the top level, a slice keeps its one first-size generation.
        let tight = plan(footprint(&p), 8, Some(8 * p.memory_bytes()), None).unwrap();
        assert_eq!(tight.max_generations, 1);
    }

    #[test]
    fn what_cannot_fit_is_refused_naming_the_setting_and_the_rule() {
        let p = params(1_000_000, 8, 12);
        let e = plan(footprint(&p), 8, Some(4 << 20), None).unwrap_err();
        assert_eq!((e.setting, e.value.as_str()), ("filter.max_memory", "4194304B"));
        assert!(e.rule.contains("the filters of 8 slices need") && e.rule.contains("raise filter.max_memory"), "{e:?}");
        let limit = MemoryLimit { bytes: 1 << 30, source: crate::memory::limit::LimitSource::Setting };
        let e = plan(footprint(&p), 8, Some(2 << 30), Some(limit.clone())).unwrap_err();
        assert!(e.rule.contains("at most the memory limit 1073741824B"), "{e:?}");
        // No setting: half the memory limit.
        let by_default = plan(footprint(&p), 8, None, Some(limit.clone())).unwrap();
        assert_eq!((by_default.cap, by_default.cap_source.clone()), (Some(512 << 20), CapSource::Limit));
        let small = MemoryLimit { bytes: 16 << 20, ..limit };
        let e = plan(footprint(&p), 8, None, Some(small)).unwrap_err();
        assert!(e.value.contains("50% of the memory limit 16777216B"), "{e:?}");
        // A decaying kind is its fixed size.
        assert!(plan(Footprint::fixed(1 << 20), 8, Some(8 << 20), None).is_ok());
        assert!(plan(Footprint::fixed(1 << 20), 8, Some(7 << 20), None).is_err());
    }

    /// A kind's own parts beside what they share (tables beside an idle
    /// timer filter) are planned as the timer's generations:
    /// one first part when they cannot grow, else each at the top level; a
    /// cap lowers the count, and refuses one that not even the first parts fit.
    #[test]
    fn parts_beside_shared_bytes_are_planned_like_generations() {
        let tables =
            |configured| Footprint { configured, first_bytes: 1_100, shared_bytes: 100, top_part_bytes: Some(64_000) };
        let uncapped = plan(tables(12), 4, None, None).unwrap();
        assert_eq!((uncapped.max_generations, uncapped.worst_case), (12, 4 * (100 + 12 * 64_000)));
        let capped = plan(tables(12), 4, Some(4 * (100 + 3 * 64_000)), None).unwrap();
        assert_eq!((capped.max_generations, capped.worst_case), (3, 4 * (100 + 3 * 64_000)));
        let lone = plan(tables(12), 4, Some(4 * 1_100), None).unwrap();
        assert_eq!((lone.max_generations, lone.worst_case), (1, 4 * 1_100), "one part cannot grow");
        let e = plan(tables(12), 4, Some(4 * 1_100 - 1), None).unwrap_err();
        assert_eq!(e.setting, "filter.max_memory");
    }

    /// The settings: `filter.max_memory` lowers the count the filters run
    /// with; the byte budgets take units and must hold one record.
    #[test]
    fn the_settings_are_checked_at_load() {
        // Caps above a small container's limit are refused there: those figures need room.
        if crate::memory::limit::container_limit().is_some_and(|l| l.bytes < 4 << 30) {
            return;
        }
        let load = |env: &[(&str, &str)]| {
            let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
            crate::config::Settings::load_from(None, env)
        };
        let capped = load(&[("DEDUPD__FILTER__MAX_MEMORY", "512MiB")]).unwrap();
        assert_eq!((capped.filter.max_generations, capped.memory.configured_generations), (2, 12));
        assert_eq!(capped.filter.resolve().unwrap().max_generations, 2);
        let roomy = load(&[("DEDUPD__FILTER__MAX_MEMORY", "4GiB")]).unwrap();
        assert_eq!(roomy.filter.max_generations, 12, "a cap the growth fits changes nothing");
        let e = load(&[("DEDUPD__FILTER__MAX_MEMORY", "lots")]).unwrap_err().to_string();
        assert!(e.contains("`lots` is not a memory size"), "{e}");
        let e = load(&[("DEDUPD__SLICING__MAX_HELD_BYTES", "1KiB")]).unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid setting slicing.max_held_bytes = 1024B: between input.max_record_bytes (1048576B: one record \
             must fit) and 1TiB"
        );
        let r = load(&[("DEDUPD__SLICING__MAX_BUFFERED_BYTES", "4MiB")]).unwrap();
        assert_eq!((r.settings.slicing.max_buffered_bytes, r.settings.slicing.max_held_bytes), (Some(4 << 20), None));
        assert_eq!(
            (r.budget.router, r.budget.held_per_slice),
            (4 << 20, 32 << 20),
            "no limit: the held records' own default"
        );
    }
}
