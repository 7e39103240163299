//! The deletes' setting is `filter.deletable` (in `[filter]`: it adds
//! counting cells beside the timers); this is the rule it has of its own.
//! The filter kind's rule on it is in `config/validate.rs`, the counting
//! stage's in `features/limits/settings.rs`.

use crate::config::error::{ConfigError, invalid};
use crate::config::filter::FilterSettings;
use crate::config::sections::SlicingMode;

/// `filter.deletable` against the slicing mode.
pub(crate) fn validate(filter: &FilterSettings, slicing: SlicingMode) -> Result<(), ConfigError> {
    // Deletes travel as control records in the slice log, which in
    // input-partitions mode is the input topic: dedupd cannot write them
    // there, and the counting cells would double the memory for nothing.
    if filter.deletable && slicing == SlicingMode::InputPartitions {
        return Err(invalid(
            "filter.deletable",
            true,
            "deletes need slicing.mode = \"repartition\" or \"shared\" (with input-partitions the slice log is the input topic, \
             which dedupd does not write to)",
        ));
    }
    Ok(())
}
