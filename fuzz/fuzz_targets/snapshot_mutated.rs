//! Real slice snapshots with bytes changed, truncated or extended, then the
//! checksums recomputed: the checksum no longer stops the damage, so the
//! decoder's own checks must. A typed error or a state that works, never a
//! panic.
#![no_main]

use dedupd::engine::slice;
use dedupd_fuzz::{Mutation, exercise};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|m: Mutation| {
    let (s, bytes) = m.apply();
    if let Ok(state) = slice::decode(&bytes, s.slice, &s.params.clone().into(), s.order) {
        exercise(state, &s.params, s.order);
    }
});
