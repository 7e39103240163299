//! The stages' sections of a slice snapshot: what a stage keeps beside the
//! filter — which sources delivered which keys (provenance), the counting
//! stage's counts, the input partitions' progress.
//!
//! Version 6 tags each section (tag, whether a reader that does not know
//! the tag must refuse the snapshot, length), so a new stage adds a tag, not
//! an envelope version. Versions 3 to 5 hold these three at fixed places;
//! a slice whose sections all have such a place is still written that way,
//! so a release before version 6 restores it (a rollback).

use std::collections::BTreeMap;

use super::frame::InputProgress;
use super::stage::{PROGRESS_TAG, SectionTag};
use super::stages::Section;
use super::state::SliceState;
use crate::filter::SnapshotError;
use crate::filter::envelope::{Reader, put_u32, put_u64};

/// Version 2: no sections (event-time order; the base every later version extends).
pub(super) const VERSION_BASE: u16 = 2;
/// Version 3: the provenance section, behind a flag byte.
pub(super) const VERSION_PROVENANCE: u16 = 3;
/// Version 4: the counting stage's section after it, behind a flag byte.
pub(super) const VERSION_COUNTING: u16 = 4;
/// Version 5: the held-records overflow count and the progress after that.
pub(super) const VERSION_PROGRESS: u16 = 5;
/// Version 6: tagged sections.
pub(super) const VERSION_TAGGED: u16 = 6;
/// Version 7: version 6 and the form of the slice log the positions are in
/// ([`super::LogForm`]), after the sections. Written only for the batch
/// form: a records-form slice keeps the older versions, which read as
/// records (a release before version 7 restores it; none restores a
/// batch-form one as records).
pub(super) const VERSION_LOG_FORM: u16 = 7;

/// The sections versions 3 and 4 hold at fixed places, after a flag byte:
/// the stages tagged 1 (provenance, not required) and 2 (the counting
/// stage, required), with the version that added each place.
const POSITIONAL: [(SectionTag, u16, bool); 2] =
    [(SectionTag(1), VERSION_PROVENANCE, false), (SectionTag(2), VERSION_COUNTING, true)];

/// The first positional version that has a place for the section `tag`
/// (`None`: only a tagged snapshot holds it).
fn positional(tag: SectionTag) -> Option<u16> {
    if tag == PROGRESS_TAG {
        return Some(VERSION_PROGRESS);
    }
    POSITIONAL.iter().find(|(t, ..)| *t == tag).map(|(_, since, _)| *since)
}

/// A section of a state, encoded: its tag, whether a reader that does not
/// know it must refuse the snapshot, its bytes.
type Encoded = (SectionTag, bool, Vec<u8>);

/// The sections of a state, each encoded, in tag order.
pub(super) struct Sections(Vec<Encoded>);

impl Sections {
    pub(super) fn of(state: &SliceState) -> Sections {
        let mut sections = state.stages.sections();
        if !state.progress.is_empty() {
            // Progress may not be dropped: the watermark would be wrong.
            sections.push((PROGRESS_TAG, true, encode_progress(&state.progress)));
            sections.sort_by_key(|(tag, ..)| *tag);
        }
        Sections(sections)
    }

    /// The oldest version that holds these sections.
    pub(super) fn version(&self) -> u16 {
        let positional = self.0.iter().map(|(tag, ..)| positional(*tag)).try_fold(VERSION_BASE, |v, p| Some(v.max(p?)));
        positional.unwrap_or(VERSION_TAGGED)
    }

    fn get(&self, tag: SectionTag) -> Option<&[u8]> {
        self.0.iter().find(|(t, ..)| *t == tag).map(|(_, _, bytes)| bytes.as_slice())
    }

    /// Writes the sections as `version` lays them out; `overflows` (the
    /// held records the order buffer could not hold) goes with them from
    /// version 5 on.
    pub(super) fn write(&self, version: u16, overflows: u64, w: &mut Vec<u8>) {
        if version >= VERSION_TAGGED {
            put_u64(w, overflows);
            w.extend_from_slice(&(self.0.len() as u16).to_le_bytes());
            for (tag, required, bytes) in &self.0 {
                w.extend_from_slice(&tag.0.to_le_bytes());
                w.push(u8::from(*required));
                put_u64(w, bytes.len() as u64);
                w.extend_from_slice(bytes);
            }
            return;
        }
        // Positional: a flag byte and a length for each stage section that
        // has a place (3 on), then the overflows and progress (5).
        for (tag, since, _) in POSITIONAL {
            if version < since {
                continue;
            }
            match self.get(tag) {
                None => w.push(0),
                Some(bytes) => {
                    w.push(1);
                    put_u64(w, bytes.len() as u64);
                    w.extend_from_slice(bytes);
                }
            }
        }
        if version >= VERSION_PROGRESS {
            put_u64(w, overflows);
            match self.get(PROGRESS_TAG) {
                Some(bytes) => w.extend_from_slice(bytes),
                None => put_u32(w, 0),
            }
        }
    }
}

/// The sections of a snapshot as read, still encoded (the caller restores
/// each with its stage's settings).
#[derive(Default)]
pub(super) struct Found<'a> {
    /// The stages' sections.
    pub stages: Vec<Section<'a>>,
    pub progress: BTreeMap<(String, i32), InputProgress>,
    pub overflows: u64,
}

/// Reads the sections of a version `version` snapshot.
pub(super) fn read<'a>(r: &mut Reader<'a>, version: u16) -> Result<Found<'a>, SnapshotError> {
    let mut found = Found::default();
    if version >= VERSION_TAGGED {
        found.overflows = r.u64()?;
        let mut last = None;
        for _ in 0..r.u16()? {
            let (tag, required, len) = (r.u16()?, r.u8()?, r.u64()?);
            let bytes = r.take(usize::try_from(len).unwrap_or(usize::MAX))?;
            if last.is_some_and(|l| l >= tag) {
                return Err(malformed(format!("section {tag} out of order or twice")));
            }
            last = Some(tag);
            if SectionTag(tag) == PROGRESS_TAG {
                let mut sub = Reader::over(bytes);
                found.progress = read_progress(&mut sub)?;
                sub.finish()?;
            } else {
                found.stages.push(Section { tag: SectionTag(tag), required: required != 0, bytes });
            }
        }
        return Ok(found);
    }
    for (tag, since, required) in POSITIONAL {
        if version < since {
            continue;
        }
        match r.u8()? {
            0 => {}
            1 => {
                let len = r.u64()?;
                let bytes = r.take(usize::try_from(len).unwrap_or(usize::MAX))?;
                found.stages.push(Section { tag, required, bytes });
            }
            other => return Err(malformed(format!("section flag {other} (version {version})"))),
        }
    }
    if version >= VERSION_PROGRESS {
        found.overflows = r.u64()?;
        found.progress = read_progress(r)?;
    }
    Ok(found)
}

fn encode_progress(progress: &BTreeMap<(String, i32), InputProgress>) -> Vec<u8> {
    let mut w = Vec::new();
    put_u32(&mut w, progress.len() as u32);
    for ((topic, partition), p) in progress {
        w.extend_from_slice(&(topic.len() as u16).to_le_bytes());
        w.extend_from_slice(topic.as_bytes());
        put_u32(&mut w, *partition as u32);
        put_u64(&mut w, p.time_ms);
        w.push(u8::from(p.idle));
    }
    w
}

fn read_progress(r: &mut Reader<'_>) -> Result<BTreeMap<(String, i32), InputProgress>, SnapshotError> {
    let mut progress = BTreeMap::new();
    for _ in 0..r.u32()? {
        let len = usize::from(r.u16()?);
        let topic =
            String::from_utf8(r.take(len)?.to_vec()).map_err(|_| malformed("a topic name is not UTF-8".to_string()))?;
        let partition = r.u32()? as i32;
        let time_ms = r.u64()?;
        let idle = match r.u8()? {
            0 => false,
            1 => true,
            other => return Err(malformed(format!("idle flag {other}"))),
        };
        progress.insert((topic, partition), InputProgress { time_ms, idle });
    }
    Ok(progress)
}

fn malformed(what: String) -> SnapshotError {
    SnapshotError::Malformed(format!("slice snapshot: {what}"))
}
