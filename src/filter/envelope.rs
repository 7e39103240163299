//! The envelope every dedupd snapshot is written in: magic, format
//! version, fields, and an XXH3-64 checksum of everything before it; and
//! the error a snapshot that cannot be restored gives.

use twox_hash::XxHash3_64;

/// The first bytes of a timer filter's snapshot ([`super::timer::snapshot`]),
/// here so that the other kinds can tell one apart from their own.
pub const TIMER_MAGIC: [u8; 8] = *b"DEDUPDSS";

/// Why a snapshot cannot be restored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SnapshotError {
    #[error("not a dedupd slice snapshot: expected magic {expected:?}, got {got:?}")]
    BadMagic { expected: Vec<u8>, got: Vec<u8> },
    #[error(
        "snapshot format version {got} is not supported (expected {expected}): restore it with the dedupd \
         release that wrote it, or start this slice cold"
    )]
    UnsupportedVersion { expected: u16, got: u16 },
    #[error("snapshot is truncated: expected at least {expected} bytes, got {got}")]
    Truncated { expected: usize, got: usize },
    #[error("snapshot is corrupt: checksum expected {expected:#018x}, got {got:#018x}")]
    ChecksumMismatch { expected: u64, got: u64 },
    #[error(
        "snapshot was taken with {parameter} = {snapshot} but this filter has {parameter} = {configured}: \
         restore with the settings it was taken with, or start this slice cold"
    )]
    ParameterMismatch { parameter: &'static str, snapshot: String, configured: String },
    #[error("snapshot is malformed: {0}")]
    Malformed(String),
}

/// Starts an envelope: magic and format version.
pub fn begin(magic: [u8; 8], version: u16, capacity: usize) -> Vec<u8> {
    let mut w = Vec::with_capacity(capacity + 18);
    w.extend_from_slice(&magic);
    w.extend_from_slice(&version.to_le_bytes());
    w
}

/// Ends an envelope: the XXH3-64 checksum of everything before it.
pub fn seal(mut w: Vec<u8>) -> Vec<u8> {
    put_u64(&mut w, 0);
    seal_in_place(&mut w);
    w
}

/// Ends an envelope whose last 8 bytes are reserved for the checksum: they
/// become the XXH3-64 checksum of everything before them.
pub fn seal_in_place(envelope: &mut [u8]) {
    let body = envelope.len() - 8;
    let checksum = XxHash3_64::oneshot(&envelope[..body]);
    envelope[body..].copy_from_slice(&checksum.to_le_bytes());
}

/// Checks an envelope's magic, version and checksum (in that order, so the
/// error says the most useful thing) and returns a reader over its fields.
pub fn open(bytes: &[u8], magic: [u8; 8], version: u16) -> Result<Reader<'_>, SnapshotError> {
    open_any(bytes, magic, version..=version).map(|(r, _)| r)
}

/// [`open`] for any version in `versions`; returns the version too.
pub fn open_any(
    bytes: &[u8],
    magic: [u8; 8],
    versions: std::ops::RangeInclusive<u16>,
) -> Result<(Reader<'_>, u16), SnapshotError> {
    const HEADER: usize = 8 + 2;
    if bytes.len() < HEADER + 8 {
        return Err(SnapshotError::Truncated { expected: HEADER + 8, got: bytes.len() });
    }
    if bytes[..8] != magic {
        return Err(SnapshotError::BadMagic { expected: magic.to_vec(), got: bytes[..8].to_vec() });
    }
    let got = u16::from_le_bytes([bytes[8], bytes[9]]);
    if !versions.contains(&got) {
        return Err(SnapshotError::UnsupportedVersion { expected: *versions.end(), got });
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 8);
    let stored = u64::from_le_bytes(trailer.try_into().expect("8 bytes"));
    let computed = XxHash3_64::oneshot(body);
    if stored != computed {
        return Err(SnapshotError::ChecksumMismatch { expected: stored, got: computed });
    }
    Ok((Reader { bytes: body, at: HEADER }, got))
}

pub(crate) fn check<T: PartialEq + ToString>(
    snapshot: T,
    configured: T,
    parameter: &'static str,
) -> Result<(), SnapshotError> {
    if snapshot == configured {
        Ok(())
    } else {
        Err(SnapshotError::ParameterMismatch {
            parameter,
            snapshot: snapshot.to_string(),
            configured: configured.to_string(),
        })
    }
}

pub fn put_u64(w: &mut Vec<u8>, v: u64) {
    w.extend_from_slice(&v.to_le_bytes());
}

pub fn put_u32(w: &mut Vec<u8>, v: u32) {
    w.extend_from_slice(&v.to_le_bytes());
}

/// Reads the fields of an opened envelope, refusing to run past its end.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// Reads `bytes` from their start (a section already inside an opened envelope).
    pub fn over(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..]
    }

    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<(), SnapshotError> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(SnapshotError::Malformed(format!("{} unread bytes", self.bytes.len() - self.at)))
        }
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(SnapshotError::Malformed(format!("field at byte {} runs past the end", self.at)));
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, SnapshotError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }

    pub fn u32(&mut self) -> Result<u32, SnapshotError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    pub fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}
