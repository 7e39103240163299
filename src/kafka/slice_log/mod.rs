//! How a slice-log record holds its input record ([`Holds`]): the router's
//! frame, the record itself, a read order naming input records
//! ([`read_order`]), or a batch of the router's copies ([`batch`]). Read by
//! the slice worker and by the restore's replay.

pub mod batch;
pub mod batch_parts;
pub mod read_order;

use rdkafka::message::{Headers, Message};

use crate::kafka::consumed::Consumed;

use super::headers;
use super::out_record::OutHeaders;
use crate::config::{SliceLogFormat, SlicingMode};
use crate::engine::slice::{
    FRAME_MAGIC, FRAME_MAGIC_NULL, FRAME_MAGIC_READ, FRAME_MAGIC_READ_NULL, MAX_TOPIC_BYTES, Unframed, unframe,
};
use crate::engine::{InvalidReason, InvalidRecord, SourceRef};

/// What the slice log holds, as the slicing mode decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// The router's framed copy of each input record (repartition mode).
    Copies,
    /// The input records themselves: the slice log is the input
    /// (input-partitions mode).
    Input,
    /// Read-order records naming input records, which the slice re-reads
    /// from the input (shared mode, [`read_order`]).
    ReadOrders,
    /// Batches of the router's copies, one per router turn and slice
    /// (repartition mode with `slicing.log_format = "batches"`, [`batch`]).
    Batches,
}

impl Holds {
    pub fn of(slicing: SlicingMode, format: SliceLogFormat) -> Self {
        match slicing {
            SlicingMode::Repartition if format == SliceLogFormat::Batches => Holds::Batches,
            SlicingMode::Repartition => Holds::Copies,
            SlicingMode::InputPartitions => Holds::Input,
            SlicingMode::Shared => Holds::ReadOrders,
        }
    }

    /// The slice offset of the slice-log record at `log_offset` that is not
    /// a read-order record or a batch: with read orders or batches, its
    /// virtual position ([`read_order::position`]), else the offset itself.
    pub fn slice_position(self, log_offset: u64) -> u64 {
        match self {
            Holds::ReadOrders | Holds::Batches => read_order::position(log_offset, 0),
            Holds::Copies | Holds::Input => log_offset,
        }
    }

    /// Where in the slice log a slice at slice offset `offset` goes on from
    /// (the inverse of [`Self::slice_position`]; with read orders the one
    /// that names `offset`, whose records before it are passed over).
    pub fn log_position(self, offset: u64) -> u64 {
        match self {
            Holds::ReadOrders | Holds::Batches => read_order::log_offset(offset),
            Holds::Copies | Holds::Input => offset,
        }
    }

    /// The slice-log offset after the records a slice at slice offset
    /// `offset` has taken in, whole or in part: what its lag counts from.
    /// With read orders or batches a record taken in whole leaves the slice
    /// at a position inside it (the one after its last entry; after a
    /// control record, index 1), which [`Self::log_position`] maps to the
    /// record itself: counted from there, an idle slice would lag by one.
    pub fn log_end(self, offset: u64) -> u64 {
        match self {
            Holds::ReadOrders | Holds::Batches => {
                read_order::log_offset(offset) + u64::from(offset & (read_order::MAX_RECORDS - 1) != 0)
            }
            Holds::Copies | Holds::Input => offset,
        }
    }
}

/// A slice-log record's input position, the router's reading and the
/// input record's payload: in repartition mode from the router's frame
/// ([`unframe`]); in input-partitions mode the slice log is the input.
pub fn parts<M: Message>(holds: Holds, msg: &M) -> Unframed<'_> {
    let source_header = match holds {
        Holds::Input | Holds::ReadOrders | Holds::Batches => None,
        Holds::Copies => msg.headers().and_then(|h| h.iter().find(|h| h.key == headers::SOURCE)).and_then(|h| h.value),
    };
    parts_with(holds, msg.payload(), source_header)
}

/// [`parts`] of a record with value `payload` and `dedupd.source` header
/// `source_header` (a caller that has the header list at hand).
pub(crate) fn parts_with<'a>(holds: Holds, payload: Option<&'a [u8]>, source_header: Option<&'a [u8]>) -> Unframed<'a> {
    match (holds, payload) {
        // With read orders, a record held is the input record itself (its
        // own topic, partition and offset are its source), a slice-log
        // record a control record.
        // With batches, a record is a batch or a control record.
        (Holds::Input | Holds::ReadOrders | Holds::Batches, payload) => {
            Unframed { source: None, payload, reading: None }
        }
        (Holds::Copies, Some(value)) => unframe(source_header, value),
        (Holds::Copies, None) => {
            Unframed { source: source_header.and_then(SourceRef::parse), payload: None, reading: None }
        }
    }
}

/// What a slice-log record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An input record (repartition mode: the router's copy of one).
    Input,
    /// A router's progress record ([`crate::engine::Progress`]).
    Progress,
    /// A delete request written by the admin endpoint ([`crate::features::deletes::requests`]).
    Delete,
    /// A batch of the router's copies ([`batch`]).
    Batch,
    /// With read orders or batches, a record dedupd does not write (there
    /// the slice log holds only read-order records or batches, progress and
    /// delete requests); skipped.
    Foreign,
}

/// A slice-log record read once, where the worker takes it: its kind, its
/// headers and its input parts ([`parts`]).
pub struct LogRecord<'m> {
    pub kind: Kind,
    /// As the extractors read them.
    pub headers: Vec<(&'m str, &'m [u8])>,
    /// As the record's copies carry them: librdkafka parses a record's
    /// headers each time they are asked for (allocating, also for a record
    /// without any), so the record path asks once, here.
    pub out_headers: OutHeaders<'m>,
    pub framed: Unframed<'m>,
}

impl<'m> LogRecord<'m> {
    /// Reads `msg`. Control records (progress, delete requests) are written
    /// by dedupd itself into the slice log without a router stamp, while
    /// every record the router copies has one — so an input record that
    /// carries such a header of its own is the input record it is (and the
    /// router removes `dedupd.*` headers from input records anyway). In
    /// input-partitions mode the slice log is the input: every record is one.
    pub fn read(holds: Holds, msg: &Consumed<'m>) -> Self {
        let out_headers = OutHeaders::of(msg);
        let headers = out_headers.pairs();
        let source_header = headers.iter().find(|(k, _)| *k == headers::SOURCE).map(|(_, v)| *v);
        let framed = parts_with(holds, msg.payload(), source_header);
        let control =
            |name: &str| holds != Holds::Input && framed.source.is_none() && headers.iter().any(|(k, _)| *k == name);
        let kind = if control(headers::PROGRESS) {
            Kind::Progress
        } else if control(headers::DELETE) {
            Kind::Delete
        } else if holds == Holds::Batches && headers.iter().any(|(k, _)| *k == headers::BATCH) {
            Kind::Batch
        } else if matches!(holds, Holds::ReadOrders | Holds::Batches) {
            Kind::Foreign
        } else {
            Kind::Input
        };
        LogRecord { kind, headers, out_headers, framed }
    }
}

/// Why a repartition-mode slice-log record that carries the router's frame
/// magic, or its `dedupd.source` header, does not read as the router's copy
/// (`framed`, from [`parts`]): a stamp naming a topic longer than Kafka
/// allows, a cut frame. Only another writer of the slice log (or damage)
/// puts one there; it is refused with this reason rather than judged by the
/// bytes of its frame. `None` for anything else.
pub fn broken_frame(
    holds: Holds,
    value: Option<&[u8]>,
    source_header: Option<&[u8]>,
    framed: &Unframed<'_>,
) -> Option<InvalidRecord> {
    if holds != Holds::Copies || framed.source.is_some() {
        return None;
    }
    let bad = |detail: String| Some(InvalidRecord { reason: InvalidReason::BadFrame, detail });
    if let Some(stamp) = source_header {
        return bad(format!("its {} header is no stamp: {}", headers::SOURCE, what_stamp(stamp)));
    }
    let (magic, rest) = value?.split_first_chunk::<4>()?;
    if ![FRAME_MAGIC, FRAME_MAGIC_NULL, FRAME_MAGIC_READ, FRAME_MAGIC_READ_NULL].contains(magic) {
        return None;
    }
    let stamp = rest.split_first_chunk::<2>().and_then(|(len, rest)| rest.get(..usize::from(u16::from_be_bytes(*len))));
    bad(match stamp {
        Some(stamp) if SourceRef::parse(stamp).is_some() => {
            "a slice-log frame cut short or with bytes after a null value".into()
        }
        Some(stamp) => format!("a slice-log frame whose stamp is no stamp: {}", what_stamp(stamp)),
        None => "a slice-log frame cut short in its stamp".into(),
    })
}

/// What is wrong with a stamp [`SourceRef::parse`] refuses, for a dead letter's detail.
fn what_stamp(stamp: &[u8]) -> String {
    let topic = stamp.rsplitn(3, |b| *b == b'/').nth(2).unwrap_or_default();
    if topic.len() > MAX_TOPIC_BYTES {
        format!("it names a topic of {} bytes, longer than Kafka allows ({MAX_TOPIC_BYTES})", topic.len())
    } else {
        format!("{} bytes, not topic/partition/offset", stamp.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::slice::frame_into;

    /// An idle slice that has taken in a whole batch or control record lags by nothing.
    #[test]
    fn a_slice_past_a_whole_record_is_past_it_in_the_log() {
        let at = read_order::position;
        for holds in [Holds::Batches, Holds::ReadOrders] {
            assert_eq!(holds.log_end(at(7, 0)), 7, "nothing of offset 7 taken in");
            assert_eq!(holds.log_end(at(7, 1)), 8, "a control record at 7, or a batch's first entry");
            assert_eq!(holds.log_end(at(7, 4095)), 8);
            assert_eq!(holds.log_position(at(7, 4095)), 7, "a restore reads offset 7 again");
        }
        assert_eq!(Holds::Copies.log_end(7), 7);
        assert_eq!(Holds::Input.log_end(7), 7);
    }

    /// A frame naming a topic longer than Kafka allows, as only a writer
    /// other than the router can put it into the slice log, and other
    /// broken frames: refused with the reason `bad_frame`, never a panic.
    /// Frames the router writes, and records without its magic, are not.
    #[test]
    fn a_forged_frame_with_a_long_topic_name_is_a_bad_frame() {
        let refused = |value: &[u8], header: Option<&[u8]>| {
            let framed = parts_with(Holds::Copies, Some(value), header);
            broken_frame(Holds::Copies, Some(value), header, &framed)
        };
        for len in [250, 300, 1000, 65_000] {
            let stamp = format!("{}/0/5", "t".repeat(len));
            let mut forged = FRAME_MAGIC.to_vec();
            forged.extend_from_slice(&(stamp.len() as u16).to_be_bytes());
            forged.extend_from_slice(stamp.as_bytes());
            forged.extend_from_slice(b"{}");
            let why = refused(&forged, None).expect("refused");
            assert_eq!(why.reason, InvalidReason::BadFrame);
            let want = format!("names a topic of {len} bytes, longer than Kafka allows (249)");
            assert!(why.detail.contains(&want), "{why}");
            // An earlier release's stamp header naming one.
            let why = refused(b"{}", Some(stamp.as_bytes())).expect("refused");
            assert!(why.detail.contains(&want), "{why}");
            // Not in the other modes: there the slice log is (or names) the input.
            for mode in [Holds::Input, Holds::ReadOrders] {
                assert_eq!(broken_frame(mode, Some(&forged), None, &parts_with(mode, Some(&forged), None)), None);
            }
        }
        let mut frame = Vec::new();
        frame_into(&mut frame, "clicks", 2, 41, None, Some(b"{}")).unwrap();
        assert_eq!(refused(&frame, None), None, "the router's frame");
        assert_eq!(refused(b"{\"id\":1}", None), None, "no frame");
        assert_eq!(refused(&frame[..5], None).map(|w| w.reason), Some(InvalidReason::BadFrame), "cut in the stamp");
        let mut null = Vec::new();
        frame_into(&mut null, "clicks", 2, 41, None, None).unwrap();
        null.push(b'x');
        assert!(refused(&null, None).is_some_and(|w| w.detail.contains("after a null value")));
    }
}
