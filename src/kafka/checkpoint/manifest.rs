//! The checkpoint topic's records: the manifest that makes a snapshot
//! exist, the chunk keys, and why a stored snapshot is refused.

use serde::{Deserialize, Serialize};

use crate::filter::SnapshotError;
use crate::kafka::KafkaLayerError;

/// The checkpoint manifest format version.
///
/// `first_chunk_offset` was added without a new version: it is optional, and a
/// manifest without it is still read (see [`CheckpointStore::read_latest`]).
pub const MANIFEST_VERSION: u16 = 1;

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
    /// refuses another application's ([`CheckpointStore::check_owner`]).
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

/// The sequence number in a chunk key `<slice>/<seq>/<i>`.
pub(super) fn chunk_seq(key: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(key).ok()?;
    let mut parts = text.split('/');
    let (_, seq, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    seq.parse().ok()
}

/// The sequence number and index in a chunk key `<slice>/<seq>/<i>` of `slice`.
pub(super) fn chunk_key(key: &[u8], slice: u32) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(key).ok()?;
    let mut parts = text.split('/');
    let (s, seq, i) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || s.parse::<u32>().ok()? != slice {
        return None;
    }
    Some((seq.parse().ok()?, i.parse().ok()?))
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

    fn manifest(first_chunk_offset: Option<u64>) -> Manifest {
        Manifest {
            format: MANIFEST_VERSION,
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

    #[test]
    fn chunk_keys_of_one_slice() {
        assert_eq!(chunk_key(b"3/9/0", 3), Some((9, 0)));
        assert_eq!(chunk_key(b"3/9/17", 3), Some((9, 17)));
        assert_eq!(chunk_key(b"4/9/17", 3), None);
        assert_eq!(chunk_key(b"3/manifest", 3), None);
        assert_eq!(chunk_key(b"3/9/1/2", 3), None);
        assert_eq!(chunk_key(b"3/x/1", 3), None);
        assert_eq!(chunk_key(b"\xff/9/1", 3), None);
        assert_eq!(chunk_key(b"", 3), None);
    }
}
