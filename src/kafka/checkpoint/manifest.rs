//! The checkpoint topic's records: the manifest that makes a snapshot
//! exist, the chunk keys, and why a stored snapshot is refused.

use serde::{Deserialize, Serialize};

use crate::filter::SnapshotError;
use crate::kafka::KafkaLayerError;

/// The checkpoint manifest format version written.
///
/// Version 2 names its write attempt ([`Manifest::attempt`]), whose chunk
/// keys an earlier build would not find: it refuses the manifest by its
/// version instead. `first_chunk_offset` was added without a new version:
/// it is optional, and a manifest without it is still read (see
/// [`super::CheckpointStore::read_latest`]).
pub const MANIFEST_VERSION: u16 = 2;

/// Whether this build reads manifests of format `format`: version 1 (chunk
/// keys without an attempt) and the current one.
pub(super) fn readable_format(format: u16) -> bool {
    (1..=MANIFEST_VERSION).contains(&format)
}

/// What a snapshot consists of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u16,
    pub slice: u32,
    pub seq: u64,
    /// The slice offset the snapshot was taken at: it reflects every record below.
    pub offset: u64,
    pub chunks: u32,
    pub bytes: u64,
    /// XXH3-64 of the concatenated chunks.
    pub checksum: u64,
    /// Milliseconds since the epoch when written (for checkpoint age).
    pub written_at_ms: u64,
    /// The filter parameters the snapshot was taken with ([`crate::filter::FilterParams::fingerprint`]).
    pub params: String,
    /// The checkpoint partition offset of chunk 0 (from the producer's delivery
    /// report), so that restore reads just this snapshot. Manifests written
    /// before this field existed lack it; restore then assumes the chunks lie
    /// right before their manifest, which the write order makes true, and
    /// checks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_chunk_offset: Option<u64>,
    /// The `app.id` of the application that wrote the snapshot: restore
    /// refuses another application's ([`super::CheckpointStore::check_owner`]).
    /// Manifests written before this field existed lack it, and are taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// The offset of the slice's flush log from which a restore from this
    /// snapshot reads it: every idle flush and policy range logged below it
    /// is in the snapshot or behind its offset. Manifests written before
    /// this field existed lack it; restore then reads the flush log from
    /// its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_log_offset: Option<u64>,
    /// The write attempt, drawn afresh for each write, that the chunk keys
    /// carry (`<slice>/<seq>.<attempt>/<i>`): two owners of a slice, or a
    /// write and its retry, never write the same chunk keys, so no manifest
    /// can point at chunks another write replaced. `None` in version 1
    /// manifests, whose chunks are `<slice>/<seq>/<i>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u64>,
}

impl Manifest {
    /// Which snapshot's chunks this manifest names.
    pub(super) fn id(&self) -> SnapshotId {
        SnapshotId { seq: self.seq, attempt: self.attempt }
    }

    /// The key of its chunk `i`.
    pub fn chunk_key(&self, i: u32) -> String {
        self.id().chunk_key(self.slice, i)
    }
}

/// What the chunk keys of one snapshot write share: the sequence number and
/// the write attempt (none in keys of version 1 manifests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct SnapshotId {
    pub(super) seq: u64,
    pub(super) attempt: Option<u64>,
}

impl SnapshotId {
    /// `<slice>/<seq>.<attempt>/<i>`, or `<slice>/<seq>/<i>` without an attempt.
    pub(super) fn chunk_key(self, slice: u32, i: u32) -> String {
        match self.attempt {
            Some(attempt) => format!("{slice}/{}.{attempt}/{i}", self.seq),
            None => format!("{slice}/{}/{i}", self.seq),
        }
    }

    fn parse(text: &str) -> Option<SnapshotId> {
        match text.split_once('.') {
            Some((seq, attempt)) => Some(SnapshotId { seq: seq.parse().ok()?, attempt: Some(attempt.parse().ok()?) }),
            None => Some(SnapshotId { seq: text.parse().ok()?, attempt: None }),
        }
    }
}

/// Why a stored snapshot could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Kafka(#[from] KafkaLayerError),
    #[error("corrupt checkpoint: {1}")]
    Corrupt(Rejection, String),
}

/// What was wrong with a snapshot restore refused: the `reason` label of
/// `dedupd_checkpoint_rejected_total`, so that an operator can tell damage
/// in the topic from a change of settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rejection {
    /// The newest manifest is not JSON, or of a manifest format this build does not read.
    Manifest,
    /// A chunk the manifest names is not in the topic.
    MissingChunk,
    /// The chunks' bytes do not match the manifest's size and checksum, or
    /// the snapshot's own checksum (a flipped byte, a truncated chunk).
    Checksum,
    /// A snapshot format version this build does not read.
    Version,
    /// Taken with other filter parameters (or for another slice).
    Parameters,
    /// Checksums right but the content impossible (bad magic, fields out of range).
    Malformed,
    /// A record the snapshot held for the watermark can no longer be read from the slice log.
    HeldRecord,
    /// Written by another application (its manifest names another `app.id`):
    /// never restored, whatever `checkpoint.on_corrupt` says.
    Application,
}

impl Rejection {
    pub const ALL: [Rejection; 8] = [
        Rejection::Manifest,
        Rejection::MissingChunk,
        Rejection::Checksum,
        Rejection::Version,
        Rejection::Parameters,
        Rejection::Malformed,
        Rejection::HeldRecord,
        Rejection::Application,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::Manifest => "manifest",
            Rejection::MissingChunk => "missing_chunk",
            Rejection::Checksum => "checksum",
            Rejection::Version => "version",
            Rejection::Parameters => "parameters",
            Rejection::Malformed => "malformed",
            Rejection::HeldRecord => "held_record",
            Rejection::Application => "application",
        }
    }
}

impl From<&SnapshotError> for Rejection {
    fn from(e: &SnapshotError) -> Self {
        match e {
            SnapshotError::UnsupportedVersion { .. } => Rejection::Version,
            SnapshotError::ChecksumMismatch { .. } => Rejection::Checksum,
            SnapshotError::ParameterMismatch { .. } => Rejection::Parameters,
            SnapshotError::BadMagic { .. } | SnapshotError::Truncated { .. } | SnapshotError::Malformed(_) => {
                Rejection::Malformed
            }
        }
    }
}

/// What reading a slice's newest snapshot cost: restore time is mostly this
/// read, and it must not grow with the number of snapshots the partition keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Records handed to the reader (chunks, manifests, tombstones), counting
    /// a record again each time it is read.
    pub records: u64,
    /// Their key and value bytes.
    pub bytes: u64,
    /// Why the tail read was not enough and the whole partition was scanned.
    pub full_scan: Option<String>,
}

impl ReadStats {
    pub(super) fn count(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.records += 1;
        self.bytes += (key.len() + value.map_or(0, <[u8]>::len)) as u64;
    }
}

/// The snapshot a chunk key (`<slice>/<seq>.<attempt>/<i>` or
/// `<slice>/<seq>/<i>`) belongs to.
pub(super) fn chunk_seq(key: &[u8]) -> Option<SnapshotId> {
    let text = std::str::from_utf8(key).ok()?;
    let mut parts = text.split('/');
    let (_, id, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    SnapshotId::parse(id)
}

/// The snapshot and index of a chunk key of `slice` (either format).
pub(super) fn chunk_key(key: &[u8], slice: u32) -> Option<(SnapshotId, u64)> {
    let text = std::str::from_utf8(key).ok()?;
    let mut parts = text.split('/');
    let (s, id, i) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || s.parse::<u32>().ok()? != slice {
        return None;
    }
    Some((SnapshotId::parse(id)?, i.parse().ok()?))
}

/// [`CheckpointStore::check_owner`] for application `app` reading `topic`.
pub(super) fn owner_check(topic: &str, app: &str, manifest: &Manifest) -> Result<(), KafkaLayerError> {
    match manifest.app.as_deref() {
        Some(owner) if owner == app => Ok(()),
        Some(owner) => Err(KafkaLayerError::Checkpoint {
            slice: manifest.slice,
            detail: format!(
                "the newest snapshot in {topic} (snapshot {} at slice offset {}) belongs to application {owner:?}, \
                 not to this one, {app:?}: two applications share the checkpoint topic. Give each its own: set \
                 checkpoint.topic (empty, the default, is \"<app.id>.checkpoints\")",
                manifest.seq, manifest.offset
            ),
        }),
        None => {
            log::warn!(
                "slice {}: the snapshot's manifest in {topic} names no application (written by an earlier \
                 release); taken as {app:?}'s. Its next snapshot names it",
                manifest.slice
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version 1 manifest (no attempt).
    fn manifest(first_chunk_offset: Option<u64>) -> Manifest {
        Manifest {
            format: 1,
            slice: 3,
            seq: 9,
            offset: 120,
            chunks: 2,
            bytes: 10,
            checksum: 7,
            written_at_ms: 1,
            params: "p".into(),
            first_chunk_offset,
            app: None,
            flush_log_offset: None,
            attempt: None,
        }
    }

    /// A snapshot of another application is refused with an error naming
    /// both and what to set; one that names none (an earlier release's) is
    /// taken; the application is written into every new manifest.
    #[test]
    fn a_manifest_of_another_application_is_refused() {
        let mut m = manifest(Some(41));
        m.app = Some("fraud-a".into());
        let e = owner_check("shared.checkpoints", "fraud-b", &m).unwrap_err().to_string();
        assert!(e.contains("slice 3") && e.contains("shared.checkpoints"), "{e}");
        assert!(e.contains("\"fraud-a\"") && e.contains("\"fraud-b\""), "{e}");
        assert!(e.contains("set checkpoint.topic"), "{e}");
        assert!(owner_check("shared.checkpoints", "fraud-a", &m).is_ok());
        m.app = None;
        assert!(owner_check("shared.checkpoints", "fraud-b", &m).is_ok());
        let mut named = manifest(Some(41));
        named.app = Some("fraud-a".into());
        let text = serde_json::to_string(&named).unwrap();
        assert!(text.ends_with(r#","first_chunk_offset":41,"app":"fraud-a"}"#), "{text}");
        assert_eq!(serde_json::from_str::<Manifest>(&text).unwrap(), named);
    }

    #[test]
    fn manifests_without_the_first_chunk_offset_stay_readable_and_are_written_as_before() {
        let old = r#"{"format":1,"slice":3,"seq":9,"offset":120,"chunks":2,"bytes":10,"checksum":7,"written_at_ms":1,"params":"p"}"#;
        assert_eq!(serde_json::from_str::<Manifest>(old).unwrap(), manifest(None));
        assert_eq!(serde_json::to_string(&manifest(None)).unwrap(), old);
        let new = serde_json::to_string(&manifest(Some(41))).unwrap();
        assert!(new.ends_with(r#","first_chunk_offset":41}"#), "{new}");
        assert_eq!(serde_json::from_str::<Manifest>(&new).unwrap(), manifest(Some(41)));
    }

    /// A version 2 manifest names its attempt, and its chunk keys carry it.
    #[test]
    fn a_manifest_names_the_attempt_its_chunk_keys_carry() {
        let m = Manifest { format: MANIFEST_VERSION, attempt: Some(77), app: Some("a".into()), ..manifest(Some(41)) };
        let text = serde_json::to_string(&m).unwrap();
        assert!(text.starts_with(r#"{"format":2,"#) && text.ends_with(r#","app":"a","attempt":77}"#), "{text}");
        assert_eq!(serde_json::from_str::<Manifest>(&text).unwrap(), m);
        assert_eq!(m.chunk_key(1), "3/9.77/1");
        assert_eq!(manifest(None).chunk_key(1), "3/9/1");
    }

    #[test]
    fn chunk_keys_of_one_slice() {
        let v1 = |seq| SnapshotId { seq, attempt: None };
        assert_eq!(chunk_key(b"3/9/0", 3), Some((v1(9), 0)));
        assert_eq!(chunk_key(b"3/9/17", 3), Some((v1(9), 17)));
        let v2 = SnapshotId { seq: 9, attempt: Some(18_446_744_073_709_551_615) };
        assert_eq!(chunk_key(b"3/9.18446744073709551615/4", 3), Some((v2, 4)));
        assert_eq!(v2.chunk_key(3, 4), "3/9.18446744073709551615/4");
        assert_eq!(v1(9).chunk_key(3, 4), "3/9/4");
        assert_eq!(chunk_seq(b"3/9.7/4"), Some(SnapshotId { seq: 9, attempt: Some(7) }));
        assert_eq!(chunk_seq(b"3/9/4"), Some(v1(9)));
        assert_eq!(chunk_key(b"3/9./1", 3), None);
        assert_eq!(chunk_key(b"3/.5/1", 3), None);
        assert_eq!(chunk_key(b"3/9.5.5/1", 3), None);
        assert!(!readable_format(0) && readable_format(1) && readable_format(2) && !readable_format(3));
        assert_eq!(chunk_key(b"4/9/17", 3), None);
        assert_eq!(chunk_key(b"3/manifest", 3), None);
        assert_eq!(chunk_key(b"3/9/1/2", 3), None);
        assert_eq!(chunk_key(b"3/x/1", 3), None);
        assert_eq!(chunk_key(b"\xff/9/1", 3), None);
        assert_eq!(chunk_key(b"", 3), None);
    }
}
