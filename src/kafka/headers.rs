//! Header names dedupd writes. They are part of the output contract.
//!
//! Every name starts with [`PREFIX`], and a header of that prefix on an
//! input record is removed where the record enters (the router's copy into
//! the slice log, and every copy to an output, [`super::producer::produce_with`]):
//! what dedupd reads back from its own topics at restore steers the
//! protocol, so nothing a producer of the input writes may look like it.

/// The prefix of every header dedupd writes, reserved to it.
pub const PREFIX: &str = "dedupd.";

/// Whether `name` is reserved to dedupd ([`PREFIX`]).
pub fn is_reserved(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// On output (and duplicates) records: the slice-log offset of the source
/// record, decimal. Restore reads it from the last output record.
pub const SLICE_OFFSET: &str = "dedupd.slice.offset";
/// On every dead letter: `topic/partition/offset` of the input record (the
/// one the router read, in repartition mode). Slice-log records carry the
/// same stamp in front of their value ([`crate::engine::slice::FRAME_MAGIC`]);
/// older slice-log records carry it in this header instead (still read).
pub const SOURCE: &str = "dedupd.source";
/// On duplicates: which rule matched (`filter;equal_timers=N` or `resend`).
pub const RULE: &str = "dedupd.rule";
/// On dead letters: the stable reason code (`bad_json`, `missing_key`, …).
pub const REASON: &str = "dedupd.reason";
/// On dead letters: a human explanation.
pub const DETAIL: &str = "dedupd.detail";
/// On dead letters too large for the dead-letter topic: what was left out
/// of the copy (its value; or its value, key and headers) and why.
pub const VALUE_DROPPED: &str = "dedupd.value_dropped";
/// On output, duplicates and dead-letter records written by a slice: the
/// judgment's release position, `after/rank` or `after/flush/rank` (the
/// slice offset whose arrival, or the idle flush right after it, released
/// the record, and its rank in that release). Restore reads it from the last
/// output record: the judgments up to it are replayed silently.
pub const RELEASE: &str = "dedupd.release";
/// On every record a slice writes to its topics (output, duplicates, dead
/// letters, late copies, flags, availability decisions) and on the router's
/// dead letters: the `app.id` of the application that wrote it. Restore
/// takes its replay bounds only from its own application's records and
/// reads past other applications' (several may write one topic on purpose:
/// docs/design.md, invariant 8).
pub const APP: &str = "dedupd.app";
/// On late-topic records: how far behind the watermark the record arrived, in ms.
pub const LATE_BY: &str = "dedupd.late_by_ms";
/// On slice-log records written by `DELETE /v1/keys/{key}`: the record is a
/// request to forget its record key (the dedup key), applied by the slice
/// at its place in the log, not an input record. The value is empty.
pub const DELETE: &str = "dedupd.delete";
/// On flag records (`flag.topic`): the count key's estimated count in the
/// window when the record reached `flag.threshold`, decimal (never below
/// the true count with the `mi` and `ms` estimators).
pub const COUNT: &str = "dedupd.count";
/// On slice-log records a router writes to announce its progress (see
/// `crate::engine::Progress`): the payload lists, per input partition it
/// owns, the largest event time routed and whether it is idle. Such a record
/// has no `dedupd.source` stamp, which every routed input record has, so an
/// input record that carries this header of its own is judged as the record
/// it is. The value is empty.
pub const PROGRESS: &str = "dedupd.progress";
/// On outputs (and duplicates) of records decided by `availability.policy`
/// while their slice was being restored: `deliver` or `drop`
/// (docs/availability.md).
pub const POLICY: &str = "dedupd.policy";
/// On the same records: the release position of the slice's last output
/// before the policy decided (empty: none), which restore reads from such a
/// record at the tail: judgments up to it are replayed silently.
pub const POLICY_AFTER: &str = "dedupd.policy.after";
/// On slice-log records a router writes in `slicing.mode = "shared"`: the
/// payload is a read-order record ([`crate::kafka::slice_log::read_order`]) naming
/// the input records, in the order the slice is to judge them, that the
/// router read since its last one. The value of the header is empty.
pub const READ_ORDER: &str = "dedupd.read_order";

/// On a slice-log record with `slicing.log_format = "batches"`: its payload
/// is a batch of the router's copies of input records
/// ([`crate::kafka::slice_log::batch`]). The value of the header is empty.
pub const BATCH: &str = "dedupd.batch";

/// A record's headers as (name, value) pairs, as the extractors read them
/// (a header without a value reads as empty).
pub fn pairs<M: rdkafka::message::Message>(msg: &M) -> Vec<(&str, &[u8])> {
    use rdkafka::message::Headers;
    msg.headers().map(|h| h.iter().map(|h| (h.key, h.value.unwrap_or_default())).collect()).unwrap_or_default()
}
