//! Provenance in a slice: which configured *source* (a JSON field, a header
//! or the input topic) delivered each record, kept per slice in a
//! [`Provenance`] so that `/v1/provenance` can list, for a key, every source
//! that delivered it inside the window, and a duplicate can name the source
//! of the first copy when only one source may have sent the key before.
//!
//! A record's source is read when it arrives and recorded when it is
//! judged (in event-time order, like the filter), so the state follows from
//! the log alone (docs/design.md, invariant 1); the sources of records still waiting
//! for the watermark are in the snapshot with them.

use std::any::Any;
use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use serde_json::Value;

use crate::engine::record::{InvalidRecord, RecordView};
use crate::engine::slice::stage::{Arrival, Judging, SectionTag, Stage, StageNotes, StageSetup};
use crate::engine::slice::stages::StageSetups;
use crate::filter::envelope::{Reader, put_u32, put_u64};
use crate::filter::provenance::{IndexChoice, Provenance, ProvenanceSpec};
use crate::filter::{SnapshotError, Verdict};

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

impl ProvenanceSetup {
    /// Bytes one slice's provenance holds at most: `max_sources` filters in
    /// every generation kept (a generation spans the window and is kept for
    /// window + lateness after it), and the index's inner nodes — a Bloofi
    /// tree of order d adds about sources / (d − 1); `auto` may choose it.
    pub fn worst_case_bytes(&self) -> u64 {
        let s = &self.spec;
        let generations = (s.generation_ms + s.keep_ms).div_ceil(s.generation_ms.max(1)) + 1;
        let filter = (s.bits as u64).div_ceil(64) * 8;
        let sources = s.max_sources as u64;
        let inner = match s.index {
            IndexChoice::Flat => 0,
            IndexChoice::Tree | IndexChoice::Auto => sources / (s.tree_order as u64 - 1).max(1),
        };
        (sources + inner).saturating_mul(filter).saturating_mul(generations)
    }
}

/// Provenance's section tag (`engine/slice/stage.rs` lists them).
pub const PROVENANCE_TAG: SectionTag = SectionTag(1);

/// On duplicates: the source of the first delivered copy, when only one
/// source may have delivered the key before.
pub const FIRST_SOURCE: &str = "dedupd.first_source";

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

    /// The slice's provenance from its snapshot section; `None` (it
    /// starts empty) when the snapshot's was sized otherwise: the slice's
    /// verdicts do not depend on it, so the rest of the slice is kept.
    pub fn restore(bytes: &[u8], setup: &ProvenanceSetup, slice: u32) -> Result<Option<Self>, SnapshotError> {
        let mut sub = Reader::over(bytes);
        match Self::decode(&mut sub, setup) {
            Ok(p) => {
                sub.finish()?;
                Ok(Some(p))
            }
            Err(SnapshotError::ParameterMismatch { parameter, snapshot, configured }) => {
                log::warn!(
                    "slice {slice}: the snapshot's provenance has {parameter} = {snapshot}, now {configured}: \
                     provenance starts empty"
                );
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Appends the state to a slice snapshot.
    fn encode_into(&self, w: &mut Vec<u8>) {
        self.sources.encode(w);
        put_u64(w, self.without_source);
        put_u64(w, self.pending.len() as u64);
        for (offset, name) in &self.pending {
            put_u64(w, *offset);
            put_u32(w, name.len() as u32);
            w.extend_from_slice(name.as_bytes());
        }
    }

    /// Reads what `encode_into` wrote, checked against `setup`.
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

impl Stage for SliceProvenance {
    /// Reads the record's source and keeps it until the record is judged.
    fn arrived(&mut self, arrival: &Arrival<'_>) -> Result<(), InvalidRecord> {
        let topic = arrival.topic.unwrap_or(self.setup.input_topic.as_str());
        match self.setup.source.of(arrival.record, topic) {
            Some(s) => {
                self.pending.insert(arrival.offset, s.into());
            }
            None => self.without_source += 1,
        }
        Ok(())
    }

    /// For a duplicate, names the one source that may have delivered its
    /// key before (`dedupd.first_source`); then records the record's own
    /// source.
    fn judged(&mut self, record: Judging<'_>, verdict: &mut Verdict, notes: &mut StageNotes) {
        if matches!(verdict, Verdict::Duplicate { .. }) {
            notes.duplicate_header = self.sources.only_source(record.hash).map(|s| (FIRST_SOURCE, s));
        }
        if let Some(source) = self.pending.remove(&record.position) {
            self.sources.record(record.hash, &source, record.time_ms);
        }
    }

    /// The record waited and was refused (a time jump): its source goes.
    fn refused(&mut self, position: u64) {
        self.pending.remove(&position);
    }

    fn encode(&self, w: &mut Vec<u8>) {
        self.encode_into(w)
    }

    fn tag(&self) -> SectionTag {
        PROVENANCE_TAG
    }

    /// A reader without provenance restores the rest of the slice: its
    /// verdicts do not depend on it.
    fn required(&self) -> bool {
        false
    }

    fn boxed_clone(&self) -> Box<dyn Stage> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Provenance's settings in `stages`, if it is on.
pub fn provenance(stages: &StageSetups) -> Option<&ProvenanceSetup> {
    stages.get::<Option<ProvenanceSetup>>()?.as_ref()
}

/// Provenance in the slices' list: on with its settings, or off.
impl StageSetup for Option<ProvenanceSetup> {
    fn tag(&self) -> SectionTag {
        PROVENANCE_TAG
    }

    fn on(&self) -> bool {
        self.is_some()
    }

    fn planned_bytes(&self) -> u64 {
        self.as_ref().map_or(0, ProvenanceSetup::worst_case_bytes)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn start(&self) -> Option<Box<dyn Stage>> {
        self.as_ref().map(|s| Box::new(SliceProvenance::new(s)) as Box<dyn Stage>)
    }

    /// Off, the section is skipped; resized, or not in the snapshot, it
    /// starts empty.
    fn restore(&self, section: Option<&[u8]>, slice: u32) -> Result<Option<Box<dyn Stage>>, SnapshotError> {
        let (Some(bytes), Some(setup)) = (section, self) else { return Ok(None) };
        Ok(SliceProvenance::restore(bytes, setup, slice)?.map(|p| Box::new(p) as Box<dyn Stage>))
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
