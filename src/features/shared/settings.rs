//! What shared mode (`slicing.mode = "shared"`) asks of the other
//! settings. (Its rule on `availability.policy` is with that policy's, in
//! `features/availability/settings.rs`.)

use crate::config::error::{ConfigError, invalid};
use crate::config::filter::FilterSettings;
use crate::config::sections::SlicingMode;

/// `filter.slices` against the slicing mode.
pub(crate) fn validate(slicing: SlicingMode, filter: &FilterSettings) -> Result<(), ConfigError> {
    // Shared mode judges every input partition in one slice: its
    // positions are those of one log, and its outputs one partition.
    if slicing == SlicingMode::Shared && filter.slices != 1 {
        return Err(invalid(
            "filter.slices",
            filter.slices,
            "exactly 1 with slicing.mode = \"shared\" (one slice judges every input partition; \
             docs/shared-mode.md)",
        ));
    }
    Ok(())
}
