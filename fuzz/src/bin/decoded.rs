//! Writes the snapshot bytes a `snapshot_mutated` input decodes, and names
//! its sample, so that a crash becomes a regression test of the ordinary
//! suite (tests/fuzz_regressions.rs). Usage: `decoded ARTIFACT OUT`.

use dedupd_fuzz::Mutation;
use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (input, out) = (args.next().expect("usage: decoded ARTIFACT OUT"), args.next().expect("usage"));
    let data = std::fs::read(input)?;
    // As fuzz_target! reads its typed input.
    let m = Mutation::arbitrary_take_rest(Unstructured::new(&data)).expect("a Mutation");
    let (s, bytes) = m.apply();
    std::fs::write(&out, bytes)?;
    println!("sample {} (slice {}): {m:?}", s.name, s.slice);
    Ok(())
}
