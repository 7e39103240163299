//! The error every filter setting's check gives: the setting, the value
//! given and the rule it breaks; and the checks of the settings every
//! windowed kind shares.

use std::fmt;

/// A setting that cannot be used, with the value given and the rule it breaks.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid {setting} = {value}: {rule}")]
pub struct ParamError {
    /// The setting's name as the user wrote it (e.g. `fpr`, `timer_bits`).
    pub setting: &'static str,
    pub value: String,
    pub rule: String,
}

impl ParamError {
    pub(crate) fn new(setting: &'static str, value: impl fmt::Display, rule: impl Into<String>) -> Self {
        ParamError { setting, value: value.to_string(), rule: rule.into() }
    }
}

/// The settings every windowed kind sizes itself by, checked alike: the
/// window, the target false-positive rate, the expected keys, the headroom
/// and the slices.
pub(crate) fn check_window_sizing(
    window_ms: u64,
    fpr: f64,
    expected_keys: u64,
    headroom: f64,
    slices: u32,
) -> Result<(), ParamError> {
    if window_ms == 0 {
        return Err(ParamError::new("window", "0ms", "must be at least 1ms"));
    }
    if !(fpr > 0.0 && fpr < 1.0) {
        return Err(ParamError::new("fpr", fpr, "must be greater than 0 and less than 1"));
    }
    if expected_keys == 0 {
        return Err(ParamError::new("expected", 0, "must be at least 1 distinct key per window"));
    }
    if !(0.0..=10.0).contains(&headroom) {
        return Err(ParamError::new("headroom", headroom, "must be between 0 and 10 (a fraction of expected)"));
    }
    if slices == 0 || slices > 65_536 {
        return Err(ParamError::new("slices", slices, "must be between 1 and 65536"));
    }
    Ok(())
}
