//! Header names dedupd writes. They are part of the output contract.

/// On output (and duplicates) records: the slice-log offset of the source
/// record, decimal. Restore reads it from the last output record.
pub const SLICE_OFFSET: &str = "dedupd.slice.offset";
/// On slice records (and passed on): `topic/partition/offset` of the input
/// record the router read.
pub const SOURCE: &str = "dedupd.source";
/// On duplicates: which rule matched (`filter;equal_timers=N` or `resend`).
pub const RULE: &str = "dedupd.rule";
/// On dead letters: the stable reason code (`bad_json`, `missing_key`, …).
pub const REASON: &str = "dedupd.reason";
/// On dead letters: a human explanation.
pub const DETAIL: &str = "dedupd.detail";
