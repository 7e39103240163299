//! A setting that cannot be used, and what the rules of several sections
//! share: every section's validation (here and in `crate::features`) builds
//! its errors with [`invalid`].

use std::fmt;

/// A setting that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid setting {setting} = {value}: {rule}")]
    Invalid { setting: String, value: String, rule: String },
    #[error("cannot read the settings: {0}")]
    Load(String),
}

/// The rule for a header read from input records (`header:NAME`).
pub(crate) const RESERVED_HEADER_RULE: &str =
    "a header whose name does not start with \"dedupd.\" (dedupd removes those from input records)";

/// Whether `name` is a header dedupd reserves (`dedupd.*`, removed from
/// input records), so that no setting may read it from input records.
pub(crate) fn is_reserved_header(name: &str) -> bool {
    crate::kafka::headers::is_reserved(name)
}

/// The error naming `setting`, its `value` and the `rule` it breaks.
pub(crate) fn invalid(setting: &str, value: impl fmt::Display, rule: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { setting: setting.to_string(), value: value.to_string(), rule: rule.into() }
}
