//! The error every filter setting's check gives: the setting, the value
//! given and the rule it breaks.

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
