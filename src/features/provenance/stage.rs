//! Provenance in a slice: which configured *source* (a JSON field, a header
//! or the input topic) delivered each record, kept per slice in a
//! [`Provenance`] so that `/v1/provenance` can list, for a key, every source
//! that delivered it inside the window, and a duplicate can name the source
//! of the first copy when only one source may have sent the key before.
//!
//! A record's source is read when it arrives and recorded when it is
//! judged (in event-time order, like the filter), so the state follows from
//! the log alone (design invariant 1); the sources of records still waiting
//! for the watermark are in the snapshot with them.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use serde_json::Value;

use crate::engine::record::RecordView;
use crate::filter::envelope::{Reader, put_u32, put_u64};
use crate::filter::provenance::{Provenance, ProvenanceSpec};
use crate::filter::{KeyHash, SnapshotError};

/// Where a record's source comes from (`provenance.source`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceSpec {
    /// A field of a JSON payload, by JSON pointer, e.g. `/publisher_id`.
    Json(String),
    /// A record header by name.
    Header(String),
    /// The input topic the record was read from.
    Topic,
}

impl FromStr for SourceSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "topic" => Ok(SourceSpec::Topic),
            _ if s.starts_with("json:/") => Ok(SourceSpec::Json(s[5..].to_string())),
            _ if s.starts_with("header:") && s.len() > 7 => Ok(SourceSpec::Header(s[7..].to_string())),
            _ => Err(format!("unknown provenance source `{s}`: expected json:/pointer, header:NAME or topic")),
        }
    }
}

/// Longest source name kept; longer ones are cut (at a character boundary):
/// names are held in memory per live source and written into snapshots.
pub const MAX_SOURCE_BYTES: usize = 256;

impl SourceSpec {
    /// The record's source, if it has one. `topic` is the input topic it was
    /// read from.
    pub fn of(&self, record: &RecordView<'_>, topic: &str) -> Option<String> {
        let mut name = match self {
            SourceSpec::Topic => topic.to_string(),
            SourceSpec::Header(h) => {
                let (_, v) = record.headers.iter().find(|(n, _)| n == h)?;
                String::from_utf8_lossy(v).into_owned()
            }
            SourceSpec::Json(pointer) => {
                let v: Value = serde_json::from_slice(record.payload).ok()?;
                match v.pointer(pointer)? {
                    Value::Null => return None,
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                }
            }
        };
        if name.len() > MAX_SOURCE_BYTES {
            let cut = (0..=MAX_SOURCE_BYTES).rev().find(|&i| name.is_char_boundary(i)).unwrap_or(0);
            name.truncate(cut);
        }
        (!name.is_empty()).then_some(name)
    }
}

/// The provenance settings a slice runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvenanceSetup {
    pub source: SourceSpec,
    pub spec: ProvenanceSpec,
    /// The input topic when the slice log is the input itself
    /// (input-partitions mode: its records carry no router stamp).
    pub input_topic: String,
}

/// A slice's provenance state.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceProvenance {
    pub setup: ProvenanceSetup,
    pub sources: Provenance,
    /// Sources of the records waiting for the watermark, by slice offset.
    pub pending: BTreeMap<u64, Arc<str>>,
    /// Readable records that had no source (missing field or header).
    pub without_source: u64,
}

impl SliceProvenance {
    pub fn new(setup: &ProvenanceSetup) -> Self {
        SliceProvenance {
            setup: setup.clone(),
            sources: Provenance::new(setup.spec.clone()),
            pending: BTreeMap::new(),
            without_source: 0,
        }
    }

    /// A record arrived: remember its source until it is judged.
    pub fn arrived(&mut self, offset: u64, source: Option<String>) {
        match source {
            Some(s) => {
                self.pending.insert(offset, s.into());
            }
            None => self.without_source += 1,
        }
    }

    /// The record at `offset` is judged: for a duplicate, returns the one
    /// source that may have delivered its key before (for
    /// `dedupd.first_source`); then records the record's own source.
    pub fn judged(&mut self, offset: u64, hash: &KeyHash, time_ms: u64, duplicate: bool) -> Option<Arc<str>> {
        let first = if duplicate { self.sources.only_source(hash) } else { None };
        if let Some(source) = self.pending.remove(&offset) {
            self.sources.record(hash, &source, time_ms);
        }
        first
    }

    /// The record at `offset` was refused after waiting (a time jump).
    pub fn refused(&mut self, offset: u64) {
        self.pending.remove(&offset);
    }

    /// Appends the state to a slice snapshot.
    pub fn encode(&self, w: &mut Vec<u8>) {
        self.sources.encode(w);
        put_u64(w, self.without_source);
        put_u64(w, self.pending.len() as u64);
        for (offset, name) in &self.pending {
            put_u64(w, *offset);
            put_u32(w, name.len() as u32);
            w.extend_from_slice(name.as_bytes());
        }
    }

    /// Reads what [`Self::encode`] wrote, checked against `setup`.
    pub fn decode(r: &mut Reader<'_>, setup: &ProvenanceSetup) -> Result<Self, SnapshotError> {
        let sources = Provenance::decode(r, setup.spec.clone())?;
        let without_source = r.u64()?;
        let mut pending = BTreeMap::new();
        for _ in 0..r.u64()? {
            let offset = r.u64()?;
            let len = r.u32()? as usize;
            let name = std::str::from_utf8(r.take(len)?)
                .map_err(|_| SnapshotError::Malformed("provenance: a pending source is not UTF-8".into()))?;
            pending.insert(offset, Arc::from(name));
        }
        Ok(SliceProvenance { setup: setup.clone(), sources, pending, without_source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_and_read() {
        assert_eq!("topic".parse(), Ok(SourceSpec::Topic));
        assert_eq!("json:/pub/id".parse(), Ok(SourceSpec::Json("/pub/id".into())));
        assert_eq!("header:feed".parse(), Ok(SourceSpec::Header("feed".into())));
        for bad in ["", "json:", "json:pub", "header:", "record-key"] {
            assert!(bad.parse::<SourceSpec>().is_err(), "{bad}");
        }
        let headers = [("feed", &b"rss-7"[..])];
        let r = RecordView { payload: br#"{"pub":{"id":42},"name":"x"}"#, headers: &headers, ..Default::default() };
        assert_eq!(SourceSpec::Json("/pub/id".into()).of(&r, "t").as_deref(), Some("42"));
        assert_eq!(SourceSpec::Json("/name".into()).of(&r, "t").as_deref(), Some("x"));
        assert_eq!(SourceSpec::Json("/none".into()).of(&r, "t"), None);
        assert_eq!(SourceSpec::Header("feed".into()).of(&r, "t").as_deref(), Some("rss-7"));
        assert_eq!(SourceSpec::Header("other".into()).of(&r, "t"), None);
        assert_eq!(SourceSpec::Topic.of(&r, "clicks").as_deref(), Some("clicks"));
        let long = format!(r#"{{"s":"{}"}}"#, "é".repeat(300));
        let r = RecordView { payload: long.as_bytes(), ..Default::default() };
        assert_eq!(SourceSpec::Json("/s".into()).of(&r, "t").unwrap().len(), MAX_SOURCE_BYTES);
    }
}
