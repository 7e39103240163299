//! How values are read from the file and the environment: [`Scalar`], and
//! the serde helpers the sections' duration and byte-size fields name in
//! `deserialize_with`.

use std::fmt;

use serde::{Deserialize, Deserializer};

use crate::units::{parse_bytes, parse_duration_ms};

/// A scalar librdkafka setting as written in the file or the environment.
#[derive(Debug, Clone, Deserialize, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Text(s) => f.write_str(s),
        }
    }
}

pub(crate) fn duration_ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = Scalar::deserialize(d)?.to_string();
    parse_duration_ms(&text).map_err(serde::de::Error::custom)
}

pub(crate) fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = Scalar::deserialize(d)?.to_string();
    parse_bytes(&text).map_err(serde::de::Error::custom)
}

pub(crate) fn optional_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let text = Scalar::deserialize(d)?.to_string();
    if text.trim().is_empty() { Ok(None) } else { parse_bytes(&text).map(Some).map_err(serde::de::Error::custom) }
}

/// A count, or empty for none (`filter.expected_keys`).
pub(crate) fn optional_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let text = Scalar::deserialize(d)?.to_string();
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| serde::de::Error::custom(format!("{text:?} is not a count (or empty)")))
}

pub(crate) fn optional_duration_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let text = Scalar::deserialize(d)?.to_string();
    if text.trim().is_empty() { Ok(None) } else { parse_duration_ms(&text).map(Some).map_err(serde::de::Error::custom) }
}
