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

/// What a slice-log record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An input record (repartition mode: the router's copy of one).
    Input,
    /// A router's progress record ([`crate::engine::Progress`]).
    Progress,
    /// A delete request written by the admin endpoint ([`super::deletes`]).
    Delete,
    /// Shared mode: a record dedupd does not write (there the slice log holds
    /// only read-order records, progress and delete requests); skipped.
    Foreign,
}

/// A slice-log record read once, where the worker takes it: its kind, its
/// headers and its input parts ([`parts`]).
pub struct LogRecord<'m> {
    pub kind: Kind,
    pub headers: Vec<(&'m str, &'m [u8])>,
    pub framed: Unframed<'m>,
}

impl<'m> LogRecord<'m> {
    /// Reads `msg`. Control records (progress, delete requests) are written
    /// by dedupd itself into the slice log without a router stamp, while
    /// every record the router copies has one — so an input record that
    /// carries such a header of its own is the input record it is (and the
    /// router removes `dedupd.*` headers from input records anyway). In
    /// input-partitions mode the slice log is the input: every record is one.
    pub fn read<M: Message>(slicing: SlicingMode, msg: &'m M) -> Self {
        let headers: Vec<(&str, &[u8])> =
            msg.headers().map(|h| h.iter().map(|h| (h.key, h.value.unwrap_or_default())).collect()).unwrap_or_default();
        let source_header = headers.iter().find(|(k, _)| *k == headers::SOURCE).map(|(_, v)| *v);
        let framed = parts_with(slicing, msg.payload(), source_header);
        let control = |name: &str| {
            slicing != SlicingMode::InputPartitions
                && framed.source.is_none()
                && headers.iter().any(|(k, _)| *k == name)
        };
        let kind = if control(headers::PROGRESS) {
            Kind::Progress
        } else if control(headers::DELETE) {
            Kind::Delete
        } else if slicing == SlicingMode::Shared {
            Kind::Foreign
        } else {
            Kind::Input
        };
        LogRecord { kind, headers, framed }
    }
}
