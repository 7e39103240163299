//! Slice snapshots in the compacted checkpoint topic, partition = slice.
//!
//! A snapshot is written as chunks (any filter size fits under the broker's
//! message size limit) under keys `<slice>/<seq>.<attempt>/<i>`, then a
//! manifest under `<slice>/manifest` naming the offset, the chunks, their
//! total size and checksum, the partition offset of its first chunk, the
//! flush log offset a restore from it reads from, the attempt and the format
//! version. The manifest goes last: a snapshot exists once its manifest
//! does, and a crash mid-write leaves the previous manifest in force. Chunks
//! of the previous snapshot are tombstoned only once the new manifest is
//! acknowledged, so compaction can drop them.
//!
//! The attempt is drawn afresh for every write, so no two writes share a
//! chunk key: not a write and its retry, and not an old and a new owner of
//! the slice writing at once (a member that has not yet learnt it lost the
//! slice). Whichever manifest is newest names chunks only its own write
//! wrote. A write is also fenced ([`Fence`]): the worker drops it, before
//! its chunks and again before its manifest, once the slice is released.
//! Manifests of format 1 (keys `<slice>/<seq>/<i>`, no attempt) are read as
//! before.
//!
//! Restore reads the partition from its tail: it searches backwards for the
//! newest manifest, then reads from the snapshot's first chunk up to that
//! manifest. An uncompacted partition (Tansu never compacts) holds every
//! snapshot ever written, and reading them all made a restore's time grow with
//! the number of snapshots. Whenever the tail read finds something it does not
//! expect, restore scans the whole partition as it always did, so a corrupt
//! snapshot is reported exactly as before.
//!
//! Files of this folder, from the bottom up: `manifest.rs` (the records'
//! format), `producer.rs` (the checkpoint producer), `store.rs`
//! ([`CheckpointStore`] and its writes), `read.rs` (its reads, and
//! [`read_partition`], which other readers of a partition use too).

mod manifest;
mod producer;
mod read;
mod store;

pub use manifest::{MANIFEST_VERSION, Manifest, ReadError, ReadStats, Rejection};
pub use read::{ReadFrom, read_partition, read_partition_range};
pub use store::{CheckpointStore, Fence, WriteOutcome};
