//! A record of the slice log and what a slice makes of it: judgments,
//! their release positions and the slice's verdict counts.

use std::fmt;

use super::super::record::{InvalidRecord, RecordView};
use super::frame::{Reading, SourceRef};
use super::stage::StageNotes;

/// A record of the slice log.
#[derive(Clone, Copy, Debug)]
pub struct SliceRecord<'a> {
    /// Offset in the slice log.
    pub offset: u64,
    pub record: RecordView<'a>,
    /// The router's stamp (repartition mode only).
    pub source: Option<SourceRef<'a>>,
    /// The router's reading of the record (repartition mode, this
    /// release's routers): judged by it when its seed is the slice's.
    pub reading: Option<Reading>,
}

/// Where a judgment comes in the order a slice makes them: released by the
/// arrival of the record at offset `after` (or, with `flush`, by an idle
/// flush right after it), as the `rank`-th judgment of that release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReleasePos {
    pub after: u64,
    pub flush: bool,
    pub rank: u32,
}

impl ReleasePos {
    /// Every judgment released by the arrival of `offset` or before it.
    pub fn through_arrival(offset: u64) -> Self {
        ReleasePos { after: offset, flush: false, rank: u32::MAX }
    }

    /// Parses the header form, `after/rank` or `after/flush/rank`.
    pub fn parse(text: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(text).ok()?;
        let mut parts = text.split('/');
        let after = parts.next()?.parse().ok()?;
        let (flush, rank) = match (parts.next()?, parts.next()) {
            ("flush", Some(rank)) => (true, rank),
            (rank, None) => (false, rank),
            _ => return None,
        };
        let rank = rank.parse().ok()?;
        parts.next().is_none().then_some(ReleasePos { after, flush, rank })
    }
}

/// Room for a [`ReleasePos`] in its header form (`u64/flush/u32`: at most 37 bytes).
pub const RELEASE_TEXT_BYTES: usize = 48;

impl ReleasePos {
    /// The header form, as `Display` writes it, into `buf`, without
    /// `core::fmt`: it is written on every output record.
    pub fn text_into<'b>(&self, buf: &'b mut [u8; RELEASE_TEXT_BYTES]) -> &'b [u8] {
        let mut after = itoa::Buffer::new();
        let mut rank = itoa::Buffer::new();
        let sep: &[u8] = if self.flush { b"/flush/" } else { b"/" };
        let mut n = 0;
        for part in [after.format(self.after).as_bytes(), sep, rank.format(self.rank).as_bytes()] {
            buf[n..n + part.len()].copy_from_slice(part);
            n += part.len();
        }
        &buf[..n]
    }
}

impl fmt::Display for ReleasePos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.flush {
            write!(f, "{}/flush/{}", self.after, self.rank)
        } else {
            write!(f, "{}/{}", self.after, self.rank)
        }
    }
}

/// One judgment of a slice, in the order they are made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgment {
    /// The slice offset of the record judged.
    pub offset: u64,
    pub verdict: SliceVerdict,
    /// For a record that arrived more than the lateness behind the largest
    /// time seen: by how much it missed the watermark, in ms.
    pub late_by_ms: Option<u64>,
    /// What the stages add for the outputs (empty with no stage on).
    pub notes: StageNotes,
}

/// What became of a slice record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SliceVerdict {
    Distinct,
    Duplicate {
        equal_timers: u8,
    },
    /// A record the router sent again after a restart: caught exactly by its
    /// input offset, not by the filter.
    Resend,
    Invalid(InvalidRecord),
}

/// Verdict counts of one slice (part of its state and snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceCounters {
    pub distinct: u64,
    pub duplicates: u64,
    pub resends: u64,
    /// Unreadable records and rejected time jumps.
    pub invalid: u64,
    /// Records judged after arriving behind the watermark.
    pub late: u64,
}

impl SliceCounters {
    /// Adds `other`'s counts (slices merged into one).
    pub fn add(&mut self, other: &SliceCounters) {
        self.distinct += other.distinct;
        self.duplicates += other.duplicates;
        self.resends += other.resends;
        self.invalid += other.invalid;
        self.late += other.late;
    }
}
