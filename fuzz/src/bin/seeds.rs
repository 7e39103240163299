//! Writes the seed corpora of the snapshot targets: the real encodings of
//! the samples (slice snapshots and their filter snapshots). Usage:
//! `seeds <corpus directory of snapshot_bytes>`.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).expect("usage: seeds DIR"));
    std::fs::create_dir_all(&dir)?;
    for s in dedupd_fuzz::samples() {
        std::fs::write(dir.join(format!("slice-{}", s.name)), &s.bytes)?;
        std::fs::write(dir.join(format!("filter-{}", s.name)), &s.bytes[s.filter.clone()])?;
    }
    Ok(())
}
