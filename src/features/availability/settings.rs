//! `[availability]`: what the records of a slice being restored get, and
//! the rules of `availability.policy`.

use serde::Deserialize;

use crate::config::error::{ConfigError, invalid};
use crate::config::sections::{OutputSettings, SlicingMode};

/// A slice that is not available yet (being restored after a rebalance),
/// paper §3.2 (docs/availability.md).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AvailabilitySettings {
    /// What the records of a slice being restored get: `wait` (held until
    /// the restore ends, exact), `deliver` (sent to the output at once as
    /// distinct: possible duplicates) or `drop` (sent to the duplicates
    /// topic at once: possible misses; needs `output.duplicates_topic`).
    /// Decisions are logged before their outputs, so restarts replay them.
    pub policy: String,
}

/// The section's defaults, when the settings file and the environment
/// leave a setting out.
impl Default for AvailabilitySettings {
    fn default() -> Self {
        AvailabilitySettings { policy: "wait".into() }
    }
}

/// `availability.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvailabilityPolicy {
    /// Records of a slice being restored wait for it (exact).
    Wait,
    /// They are delivered at once, as distinct.
    Deliver,
    /// They go to the duplicates topic at once.
    Drop,
}

impl AvailabilityPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            AvailabilityPolicy::Wait => "wait",
            AvailabilityPolicy::Deliver => "deliver",
            AvailabilityPolicy::Drop => "drop",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "wait" => Some(AvailabilityPolicy::Wait),
            "deliver" => Some(AvailabilityPolicy::Deliver),
            "drop" => Some(AvailabilityPolicy::Drop),
            _ => None,
        }
    }
}

impl AvailabilitySettings {
    /// `availability.policy`, checked against the slicing mode and the
    /// output topics.
    pub(crate) fn validate(
        &self,
        slicing: SlicingMode,
        output: &OutputSettings,
    ) -> Result<AvailabilityPolicy, ConfigError> {
        let availability = AvailabilityPolicy::parse(&self.policy)
            .ok_or_else(|| invalid("availability.policy", &self.policy, "expected wait, deliver or drop"))?;
        // A shared slice has no other slices to go on with while it is
        // restored, and its standby takes over all of the input at once.
        if availability != AvailabilityPolicy::Wait && slicing == SlicingMode::Shared {
            return Err(invalid(
                "availability.policy",
                availability.as_str(),
                "wait with slicing.mode = \"shared\" (deliver and drop decide by slice-log offsets, which shared \
                 mode does not have per record)",
            ));
        }
        if availability == AvailabilityPolicy::Drop && output.duplicates_topic.is_empty() {
            return Err(invalid(
                "availability.policy",
                "drop",
                "needs a non-empty output.duplicates_topic: the records it drops go there (nothing is lost silently)",
            ));
        }
        Ok(availability)
    }
}

impl AvailabilityPolicy {
    /// `deliver` and `drop` need the counting stage off (`counting`: it is on).
    pub(crate) fn check_counting(self, counting: bool) -> Result<(), ConfigError> {
        if self != AvailabilityPolicy::Wait && counting {
            return Err(invalid(
                "availability.policy",
                self.as_str(),
                "deliver and drop need the counting stage off ([limit] and [flag] unset): its counts are not kept \
                 for records decided by the policy",
            ));
        }
        Ok(())
    }
}
