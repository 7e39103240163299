//! How a slice-log record holds its input record: the router's frame in
//! repartition mode, the record itself otherwise. Read by the slice worker
//! and by the restore's replay.

use rdkafka::message::{Headers, Message};

use super::headers;
use crate::config::SlicingMode;
use crate::engine::SourceRef;
use crate::engine::slice::{Unframed, unframe};

/// A slice-log record's input position, the router's reading and the
/// input record's payload: in repartition mode from the router's frame
/// ([`unframe`]); in input-partitions mode the slice log is the input.
pub fn parts<M: Message>(slicing: SlicingMode, msg: &M) -> Unframed<'_> {
    let source_header = match slicing {
        SlicingMode::InputPartitions | SlicingMode::Shared => None,
        SlicingMode::Repartition => {
            msg.headers().and_then(|h| h.iter().find(|h| h.key == headers::SOURCE)).and_then(|h| h.value)
        }
    };
    parts_with(slicing, msg.payload(), source_header)
}

/// [`parts`] of a record with value `payload` and `dedupd.source` header
/// `source_header` (a caller that has the header list at hand).
pub(crate) fn parts_with<'a>(
    slicing: SlicingMode,
    payload: Option<&'a [u8]>,
    source_header: Option<&'a [u8]>,
) -> Unframed<'a> {
    match (slicing, payload) {
        // Shared mode: a record held is the input record itself (its own
        // topic, partition and offset are its source), a slice-log record a
        // control record.
        (SlicingMode::InputPartitions | SlicingMode::Shared, payload) => {
            Unframed { source: None, payload, reading: None }
        }
        (SlicingMode::Repartition, Some(value)) => unframe(source_header, value),
        (SlicingMode::Repartition, None) => {
            Unframed { source: source_header.and_then(SourceRef::parse), payload: None, reading: None }
        }
    }
}
